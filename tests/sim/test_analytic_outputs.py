"""The analytic engine's Prediction besides goodput, worked out by hand: the goodput
interval of each limit, counts of packets, ACKs and calls, and the recovery note.

The synthetic models state every cost parameter with a ±10 % interval; the one
named "wide" has ±20 % on its receiver's per-packet cost, so that which side's
interval a prediction carries can be told apart.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from quiclab.models.costmodel import Param
from quiclab.models.registry import Interop
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine, bounds, recovery_notes
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

NO_STALLS = {"rx_stall_rate_hz": 0.0}
BITS = 1359 * 8  # goodput bits of a 1400-byte packet with HTTP/3


def _wide(name: str, sender_ns: float, receiver_ns: float):
    m = synthetic_model(name, sender_ns=sender_ns, receiver_ns=receiver_ns, **NO_STALLS)
    wide = Param.point(receiver_ns, "ns", "assumed: test", rel=0.2)
    return replace(m, receiver=replace(m.receiver, ns_per_packet=wide))


REGISTRY = synthetic_registry(
    _wide("snd", 4000.0, 1000.0),  # sender-bound: 1359 × 8 / 4 µs = 2718 Mbit/s
    _wide("rcv", 1000.0, 5000.0),  # receiver-bound: 2174 Mbit/s
    _wide("near", 1200.0, 800.0),  # sender-bound at 9060 Mbit/s, near the link
    _wide("pa", 2000.0, 2500.0),  # a pair whose interplay binds (below)
    _wide("pb", 2500.0, 2000.0),  # the same with the slower side the sender
    interop=Interop.for_testbed("qir10g", pair_effect={"pa|pa": -0.5, "pb|pb": -0.5},
                                pair_sd={"pa|pa": 0.1, "pb|pb": 0.1}))
ENGINE = AnalyticEngine(REGISTRY)


def _predict(name: str, **fields):
    # On the testbed whose pair effects the registry holds (an unseen one has none).
    return ENGINE.predict(Scenario(server=name, client=name, testbed="qir10g", **fields))


def test_a_sender_bound_goodput_carries_the_senders_cost_interval():
    p = _predict("snd")
    g = BITS / 4000e-9 / 1e6
    assert p.limit == "sender_cpu" and p.goodput_mbps == pytest.approx(g, rel=1e-4)
    assert (p.goodput_lo_mbps, p.goodput_hi_mbps) == pytest.approx(
        (p.goodput_mbps / 1.1, p.goodput_mbps / 0.9), rel=1e-12)


def test_a_receiver_bound_goodput_carries_the_receivers_cost_interval():
    p = _predict("rcv")
    assert p.limit == "receiver_cpu"
    assert p.goodput_mbps == pytest.approx(BITS / 5000e-9 / 1e6, rel=1e-4)
    assert (p.goodput_lo_mbps, p.goodput_hi_mbps) == pytest.approx(
        (p.goodput_mbps / 1.2, p.goodput_mbps / 0.8), rel=1e-12)


def test_the_interval_never_passes_the_link():
    """9060 Mbit/s / 0.9 would be 10 067, above what the link carries: 10 Gbit/s ×
    1359 / 1466 wire bytes = 9270 Mbit/s."""
    p = _predict("near")
    assert p.limit == "sender_cpu"
    assert p.goodput_hi_mbps == pytest.approx(10_000 * 1359 / 1466, rel=1e-3)
    assert p.goodput_lo_mbps == pytest.approx(p.goodput_mbps / 1.1, rel=1e-12)


def test_an_interplay_bound_goodput_carries_the_pairs_and_the_sides_intervals():
    """busy = e^−0.5 = 0.607 of the slower side's rate, the receiver's 4349 Mbit/s
    (2.5 µs against the sender's 2 µs); its interval e^(−0.5 ∓ 1.96 · 0.1), times
    that side's own (±20 %)."""
    p = _predict("pa")
    busy, lo, hi = math.exp(-0.5), math.exp(-0.5 - 0.196), math.exp(-0.5 + 0.196)
    g = busy * BITS / 2500e-9 / 1e6
    assert p.limit == "interop" and p.goodput_mbps == pytest.approx(g, rel=1e-4)
    assert p.goodput_lo_mbps == pytest.approx(p.goodput_mbps / 1.2 * lo / busy, rel=1e-9)
    assert p.goodput_hi_mbps == pytest.approx(p.goodput_mbps / 0.8 * hi / busy, rel=1e-9)
    assert "pair interplay: busy 0.61 (fit: pair pa|pa on qir10g)" in p.notes
    # With the sender the slower side, its own interval (±10 %) applies.
    q = _predict("pb")
    assert q.limit == "interop" and q.goodput_mbps == pytest.approx(g, rel=1e-4)
    assert q.goodput_lo_mbps == pytest.approx(q.goodput_mbps / 1.1 * lo / busy, rel=1e-9)
    assert q.goodput_hi_mbps == pytest.approx(q.goodput_mbps / 0.9 * hi / busy, rel=1e-9)


def test_counts_of_a_lossless_transfer():
    """8 GiB in 1359-byte packets, an ACK per 2 packets, no GSO: one call per packet
    and per ACK at each end."""
    p = _predict("snd")
    packets = 8 * 2**30 / 1359
    assert p.server_packets_sent == pytest.approx(packets)
    assert p.acks == p.client_packets_sent == pytest.approx(packets / 2)
    assert p.server_syscalls == p.client_syscalls == pytest.approx(packets * 1.5)
    assert p.losses == p.retransmissions == p.rcvbuf_drops == 0
    assert p.server_cpu_s == pytest.approx(p.server_cpu_util * p.duration_s, rel=1e-12)
    assert p.client_cpu_s == pytest.approx(p.client_cpu_util * p.duration_s, rel=1e-12)


def test_gso_and_gro_batch_the_calls():
    """With GSO and GRO a call moves 65535 // 1400 = 46 datagrams; ACKs are one call each."""
    reg = synthetic_registry(synthetic_model("gso", sender_ns=4000.0, receiver_ns=1000.0,
                                             supports_gso=True, supports_gro=True, **NO_STALLS))
    p = AnalyticEngine(reg).predict(Scenario(server="gso", client="gso"))
    packets = 8 * 2**30 / 1359
    assert p.server_syscalls == pytest.approx(packets / 46 + packets / 2)
    assert p.client_syscalls == pytest.approx(packets / 46 + packets / 2)


def test_a_lossy_path_resends_what_it_loses():
    """1 % loss: sending n goodput packets takes n / 0.99, the difference resent."""
    p = _predict("snd", loss_pct=1.0, transfer_bytes=10**8)
    packets = math.ceil(10**8 / 1359)  # whole packets: the last one carries the remainder
    assert p.server_packets_sent == pytest.approx(packets / 0.99, rel=1e-9)
    assert p.retransmissions == pytest.approx(packets / 0.99 - packets, rel=1e-9)
    assert p.losses == pytest.approx(packets / 0.99 * 0.01, rel=1e-9)


def test_bounds_in_mbit_per_second():
    b = bounds(resolve(Scenario(server="snd", client="snd"), REGISTRY))
    assert b["sender_cpu"] == pytest.approx(BITS / 4000e-9 / 1e6, rel=1e-9)
    assert b["link"] == pytest.approx(10_000 * 1359 / 1466, rel=1e-3)


@pytest.mark.parametrize(("window", "rtt_s", "noted"), [
    (2.5, 10e-3, True),  # fewer than 3 packets: never a packet threshold
    (5.0, 10e-3, False),  # a WAN window of 5 recovers by the packet threshold
    (5.0, 850e-6, True),  # a LAN (9/8 × 0.85 ms < 1 ms): the time threshold waits
    (7.9, 850e-6, True),
    (8.1, 850e-6, False),  # 8 packets are enough on a LAN
    (5.0, 0.95e-3, False),  # 9/8 × 0.95 ms > 1 ms: not a LAN for this rule
    (2.5, 0.7, True),  # a 700 ms satellite path, written in whole µs
])
def test_the_recovery_note_where_rfc9002s_waits_decide(window, rtt_s, noted):
    payload = 1359
    cwnd_bps = window * payload * 8 / rtt_s
    notes = recovery_notes("cwnd", cwnd_bps, rtt_s, payload)
    assert bool(notes) is noted
    if noted:
        assert notes[0].startswith(f"loss recovery: a loss-limited window of {window:.1f} "
                                   f"packets at {rtt_s * 1e6:.0f} µs RTT")
    assert recovery_notes("sender_cpu", cwnd_bps, rtt_s, payload) == []
