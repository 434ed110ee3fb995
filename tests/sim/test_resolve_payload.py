"""Which UDP payload a pair uses on a path, by the rules of RFC 9000 and the seeds.

- RFC 9000 §14: a QUIC datagram carries at least 1200 bytes of UDP payload;
- RFC 9000 §18.2: the receiver's max_udp_payload_size caps the sender's;
- a path above 1500 bytes (jumbo) gets the largest payload the sender is
  configured for (König et al. 2025 §VI-D: 9000-byte packets where supported),
  else the path's (MTU − 28 bytes of IPv4 + UDP); a receiver left at a
  1500-byte-class limit is lifted to the path's, as configured for jumbo frames.
"""

from __future__ import annotations

import pytest

from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

REGISTRY = synthetic_registry(
    synthetic_model("std"),  # 1400-byte payload, no stated maximum
    synthetic_model("capped", max_udp_payload_bytes=4000),
    synthetic_model("small", udp_payload_bytes=1200),
    synthetic_model("rx1350", max_recv_udp_payload_bytes=1350),
    synthetic_model("rx3000", max_recv_udp_payload_bytes=3000),
)


def _payload(server: str, client: str = "std", **fields) -> int:
    return resolve(Scenario(server=server, client=client, app="perf", **fields),
                   REGISTRY).sender.udp_payload_bytes


@pytest.mark.parametrize(("server", "client", "mtu", "payload"), [
    ("std", "std", 1500, 1400),  # the sender's own choice fits
    ("std", "std", 1400, 1372),  # capped by the path: 1400 − 28
    ("std", "std", 1228, 1200),  # the smallest path QUIC allows
    ("small", "std", 1500, 1200),  # a sender at the 1200-byte floor
    ("std", "std", 1501, 1473),  # any path above 1500 is a jumbo path: its largest
    ("std", "std", 9000, 8972),
    ("capped", "std", 9000, 4000),  # the sender's configured maximum
    ("capped", "std", 1500, 1400),  # … which a 1500-byte path does not use
    ("std", "rx1350", 1500, 1350),  # the receiver's limit (RFC 9000 §18.2)
    ("std", "rx1350", 9000, 8972),  # … lifted on a jumbo path
    ("std", "rx3000", 9000, 3000),  # a receiver configured below the path keeps its limit
])
def test_the_payload_follows_sender_path_and_receiver(server, client, mtu, payload):
    assert _payload(server, client, mtu_bytes=mtu) == payload


def test_a_stated_payload_wins():
    assert _payload("std", mtu_bytes=9000, udp_payload_bytes=1300) == 1300


def test_a_cost_of_one_ns_keeps_its_interval():
    """The cost interval is the per-packet parameter's relative one (±10 % in the
    synthetic models), however small the cost; only a zero cost has none."""
    def interval(ns: float) -> tuple[float, float]:
        model = synthetic_model("tiny", sender_ns=ns)
        ep = resolve(Scenario(server="tiny", client="tiny"),
                     synthetic_registry(model)).sender
        return ep.cost_lo, ep.cost_hi

    assert interval(1.0) == pytest.approx((0.9, 1.1))
    assert interval(3000.0) == pytest.approx((0.9, 1.1))
    assert interval(0.0) == (1.0, 1.0)


@pytest.mark.parametrize(("mtu", "segments"), [
    (1500, 46),  # 65535 // 1400 (Linux moves at most 64 KiB and 64 segments a call)
    (9000, 7),  # 65535 // 8972
    (65535, 1),  # one 65507-byte datagram per call
])
def test_gso_batches_at_most_64_kib(mtu, segments):
    registry = synthetic_registry(synthetic_model("gso", supports_gso=True, supports_gro=True))
    r = resolve(Scenario(server="gso", client="gso", mtu_bytes=mtu), registry)
    assert r.sender.segments_per_call == r.receiver.segments_per_call == segments
    off = resolve(Scenario(server="gso", client="gso", mtu_bytes=mtu, gso=False, gro=False),
                  registry)
    assert off.sender.segments_per_call == off.receiver.segments_per_call == 1


def test_the_path_in_si_units():
    """link_gbps, base_rtt_us, rtt_ms, loss_pct and reorder_pct in bit/s, s and
    probabilities."""
    from quiclab.sim.resolve import path_for

    p = path_for(Scenario(link_gbps=2.5, base_rtt_us=40.0, rtt_ms=3.0, loss_pct=1.5,
                          reorder_pct=2.0))
    assert (p.link_bps, p.base_rtt_s, p.added_rtt_s) == pytest.approx((2.5e9, 40e-6, 3e-3))
    assert p.rtt_s == pytest.approx(3.04e-3)
    assert (p.loss_prob, p.reorder_prob) == pytest.approx((0.015, 0.02))


def test_a_bulk_transfer_needs_a_buffer_for_one_datagram_a_request_run_does_not():
    """The skb truesize of an 8972-byte datagram (a jumbo path's; TRANSPORT.md "Receive
    buffer"): 16640 bytes; a smaller buffer receives nothing in bulk; request
    workloads do not model the buffer."""
    from quiclab.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"^rcvbuf_bytes=8192 is impossible: allowed ≥ 16640"):
        resolve(Scenario(server="std", client="std", mtu_bytes=9000, rcvbuf_bytes=8192),
                REGISTRY)
    r = resolve(Scenario(server="std", client="std", mtu_bytes=9000, rcvbuf_bytes=8192,
                         workload="requests", request_bytes=1000, requests=10), REGISTRY)
    assert r.path.rcvbuf_bytes == 8192
