"""A window-bound LAN transfer: the window covers the path's RTT plus serialisation
and the receiver's processing, worked out by hand.

A packet is acknowledged only after it has been serialised onto the link
(wire bytes × 8 / link rate) and the receiver has processed it (its ns per
packet), so a flow-control window W allows W·8 / (RTT + wire·8/link + receiver
ns) on a path whose RTT is a few µs — where those two terms are 10–70 % of the
RTT. The receiver ACKs every packet, so no ACK delay adds to the round trip.
"""

from __future__ import annotations

import pytest

from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.scenario import Scenario

WINDOW_BYTES = 12_000
RECEIVER_NS = 1000.0
BASE_RTT_S = 10e-6
LINK_BPS = 10e9
#: IPv4 + UDP (28 B) and Ethernet's header, FCS, preamble and gap (38 B) per datagram.
WIRE_OVERHEAD_BYTES = 28 + 38

ENGINE = AnalyticEngine(synthetic_registry(synthetic_model(
    "w", sender_ns=100.0, receiver_ns=RECEIVER_NS, ack_every_packets=1.0,
    fc_window_bytes=WINDOW_BYTES, rx_stall_rate_hz=0.0)))


@pytest.mark.parametrize(("mtu", "payload"), [(1500, 1400), (9000, 8972)])
def test_the_window_covers_rtt_serialisation_and_receiver_processing(mtu, payload):
    # 1500: the model's 1400-byte payload; 9000: the path's largest (9000 − 28).
    p = ENGINE.predict(Scenario(server="w", client="w", app="perf", mtu_bytes=mtu,
                                base_rtt_us=BASE_RTT_S * 1e6, link_gbps=LINK_BPS / 1e9))
    serialise_s = (payload + WIRE_OVERHEAD_BYTES) * 8 / LINK_BPS  # 1.17 µs / 7.23 µs
    expected_mbps = WINDOW_BYTES * 8 / (BASE_RTT_S + serialise_s + RECEIVER_NS * 1e-9) / 1e6
    assert p.limit == "flow_control"
    # 8 GiB at ~5–8 Gbit/s: start-up (a few µs of round trips) is below 1e-5 of it.
    assert p.goodput_mbps == pytest.approx(expected_mbps, rel=1e-4)
