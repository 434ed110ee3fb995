"""The analytic engine on synthetic models whose answers can be computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quiclab.errors import ScenarioError
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine, bounds, core
from quiclab.sim.rcvbuf import rcvbuf_drop_fraction
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

NO_STALLS = {"rx_stall_rate_hz": 0.0}


def engine(*models):
    return AnalyticEngine(synthetic_registry(*models))


def test_sender_cpu_bound_goodput_is_payload_over_cost():
    # 1400-byte UDP payload − 40 overhead − h3 framing (4 B per 16 KiB → 1 B) = 1359 B.
    e = engine(synthetic_model("a", sender_ns=4000, receiver_ns=1000,
                               **NO_STALLS))
    p = e.predict(Scenario(server="a", client="a"))
    payload = 1359
    expected = payload * 8 / 4000e-9 / 1e6
    assert p.limit == "sender_cpu"
    assert p.goodput_mbps == pytest.approx(expected, rel=1e-3)
    assert p.server_cpu_util == pytest.approx(1.0, rel=1e-3)
    assert p.client_cpu_util == pytest.approx(0.25, rel=1e-3)


def test_receiver_cpu_bound_and_cpu_scaling_rule():
    e = engine(synthetic_model("a", sender_ns=1000, receiver_ns=5000,
                               **NO_STALLS))
    ref = e.predict(Scenario(server="a", client="a"))
    assert ref.limit == "receiver_cpu"
    # Gold 6312U: 3.6 GHz × IPC 1.22 vs EPYC 7543 3.7 GHz × 1.0 → faster by 1.187.
    fast = e.predict(Scenario(server="a", client="a", cpu="6312U"))
    assert fast.goodput_mbps / ref.goodput_mbps == pytest.approx(3.6 * 1.22 / 3.7, rel=1e-3)
    assert "clock×IPC" in fast.cpu_rule


def test_link_bound_counts_wire_overhead():
    e = engine(synthetic_model("a", sender_ns=100, receiver_ns=100,
                               **NO_STALLS))
    p = e.predict(Scenario(server="a", client="a", link_gbps=1.0))
    wire = 1400 + 28 + 38
    assert p.limit == "link"
    assert p.goodput_mbps == pytest.approx(1000 * 1359 / wire, rel=2e-3)


def test_loss_bound_follows_the_reno_response_at_long_rtt():
    e = engine(synthetic_model("a", sender_ns=100, receiver_ns=100, ack_every_packets=1.0,
                               **NO_STALLS))
    s = Scenario(server="a", client="a", cc="reno", loss_pct=1.0, rtt_ms=50.0)
    # (ack_every_packets=1: no delayed-ACK wait is added to the RTT.)
    p = e.predict(s)
    rtt = 50e-3 + 50e-6
    mathis = math.sqrt(1.5 / 0.01) * 1359 * 8 / rtt / 1e6  # Mathis et al. 1997
    assert p.limit == "cwnd"
    assert p.goodput_mbps == pytest.approx(mathis, rel=0.05)


def test_reno_with_a_gentler_decrease_keeps_a_larger_window():
    """Behaviour.reno_beta (quic-go's Reno keeps 0.7): the AIMD window loss leaves is
    sqrt((1 + β) / (2 (1 − β)) / p), 2.83/p against Mathis' 1.5/p at β = 0.5."""
    common = dict(sender_ns=100, receiver_ns=100, ack_every_packets=1.0, **NO_STALLS)
    e = engine(synthetic_model("half", **common),
               synthetic_model("gentle", reno_beta=0.7, **common))
    lossy = dict(cc="reno", loss_pct=1.0, rtt_ms=50.0)
    half = e.predict(Scenario(server="half", client="half", **lossy)).goodput_mbps
    gentle = e.predict(Scenario(server="gentle", client="gentle", **lossy)).goodput_mbps
    assert gentle / half == pytest.approx(math.sqrt(1.7 / 0.6 / 1.5), rel=0.02)


def test_a_fixed_ack_threshold_waits_for_the_timer_below_it():
    """Behaviour.ack_threshold_fixed: rounds of the Reno sawtooth whose window is
    below the threshold also wait for max_ack_delay (TRANSPORT.md "ACKs"); the
    capped receiver of the same model is not slowed, and without loss nothing
    changes."""
    common = dict(sender_ns=1000, receiver_ns=1000, ack_every_packets=10.0,
                  max_ack_delay_ms=25.0, **NO_STALLS)
    e = engine(synthetic_model("capped", **common),
               synthetic_model("fixed", ack_threshold_fixed=True, **common))
    lossy = dict(cc="reno", loss_pct=1.0, base_rtt_us=100.0)
    capped = e.predict(Scenario(server="capped", client="capped", **lossy))
    fixed = e.predict(Scenario(server="capped", client="fixed", **lossy))
    assert fixed.limit == "cwnd" and fixed.goodput_mbps < 0.1 * capped.goodput_mbps
    # By hand: W = √(1.5/p) = 12.2, W_max = 16.3, from 8.2 up by 1 a round: 1.8
    # of 8.2 rounds are below 10 and wait 25 ms; the others take ~0.1 ms. A cycle
    # carries 8.2 rounds of 12.2 packets (~100, one loss).
    w = math.sqrt(150)
    w_max = 2 * w / 1.5
    rounds, slow = 0.5 * w_max, 10 - 0.5 * w_max
    per_cycle_s = slow * 25e-3 + rounds * 0.12e-3
    assert fixed.goodput_mbps == pytest.approx(w * rounds * 1359 * 8 / per_cycle_s / 1e6,
                                               rel=0.05)
    plain = dict(cc="reno", base_rtt_us=100.0)
    assert e.predict(Scenario(server="capped", client="fixed", **plain)).goodput_mbps == \
        pytest.approx(e.predict(Scenario(server="capped", client="capped", **plain))
                      .goodput_mbps, rel=1e-12)


def test_a_receiver_floor_and_a_time_driven_cubic():
    """Behaviour.ack_threshold_floor_packets: rounds of the average loss cycle below the
    floor wait for the timer as under a fixed threshold of that size; with
    cubic_reno_friendly = "time" the wait itself lifts the window (×1.5 a slow round),
    so fewer rounds wait; without loss neither changes anything."""
    common = dict(sender_ns=1000, receiver_ns=1000, max_ack_delay_ms=25.0, **NO_STALLS)
    e = engine(synthetic_model("fixed10", ack_every_packets=10.0, ack_threshold_fixed=True,
                               **common),
               synthetic_model("floor10", ack_every_packets=40.0,
                               ack_threshold_floor_packets=10.0, **common),
               synthetic_model("floor10t", ack_every_packets=40.0,
                               ack_threshold_floor_packets=10.0, cubic_reno_friendly="time",
                               **common),
               synthetic_model("plain", ack_every_packets=40.0, **common))
    lossy = dict(loss_pct=1.5, base_rtt_us=73.0)

    def rate(name: str, **kw: float) -> float:
        return e.predict(Scenario(server=name, client=name, **kw)).goodput_mbps

    fixed, floor, timed, plain = (rate(n, **lossy) for n in ("fixed10", "floor10",
                                                              "floor10t", "plain"))
    assert floor == pytest.approx(fixed, rel=0.05)
    assert floor < timed < 0.2 * plain
    # The timed model's cycle: from β·W_max up by ×1.5 a slow round to the floor.
    assert rate("floor10t") == pytest.approx(rate("floor10"), rel=1e-12)
    assert rate("floor10t", loss_pct=0.1) > 0.9 * rate("plain", loss_pct=0.1)


def test_flow_control_window_bounds_long_rtt():
    e = engine(synthetic_model("a", sender_ns=100, receiver_ns=100,
                               fc_window_bytes=1_000_000, **NO_STALLS))
    p = e.predict(Scenario(server="a", client="a", rtt_ms=100.0))
    assert p.limit == "flow_control"
    assert p.goodput_mbps == pytest.approx(1e6 * 8 / 100.05e-3 / 1e6, rel=0.05)


def test_gso_amortises_the_system_call():
    m = synthetic_model("g", sender_ns=2000, receiver_ns=100, syscall_ns=2000,
                        supports_gso=True, supports_gro=True, **NO_STALLS)
    e = engine(m)
    off = e.predict(Scenario(server="g", client="g", gso=False))
    on = e.predict(Scenario(server="g", client="g", gso=True))
    segments = 65535 // 1400
    assert on.goodput_mbps / off.goodput_mbps == pytest.approx(4000 / (2000 + 2000 / segments),
                                                               rel=1e-3)


def test_batch_equals_single_and_never_exceeds_the_link():
    e = engine()
    rng = np.random.default_rng(1)
    scenarios = [Scenario(server=str(rng.choice(["fast", "slow"])), client="fast",
                          link_gbps=float(rng.uniform(0.1, 40)), rtt_ms=float(rng.uniform(0, 100)),
                          loss_pct=float(rng.uniform(0, 2)),
                          mtu_bytes=int(rng.choice([1500, 9000])))
                 for _ in range(50)]
    batch = e.predict_batch(scenarios)
    for s, p in zip(scenarios, batch, strict=True):
        single = e.predict(s)
        assert single.goodput_mbps == pytest.approx(p.goodput_mbps, rel=1e-9)
        assert p.goodput_mbps <= p.rates_mbps["link"] * (1 + 1e-9)
        assert p.goodput_mbps <= min(p.rates_mbps.values()) * (1 + 1e-9)
        assert p.goodput_lo_mbps <= p.goodput_mbps <= p.goodput_hi_mbps


def test_receive_buffer_drops_fall_with_the_buffer():
    r = np.array([3e8, 3e8, 3e8])
    b = np.array([1e5, 4e5, 1.6e6])
    p = rcvbuf_drop_fraction(r, b, np.full(3, 200.0), np.full(3, 50e-6), np.full(3, 2.0))
    assert p[0] > p[1] > p[2] > 0
    # α = 2: the drop fraction halves when the buffer doubles twice… i.e. ∝ 1/B.
    assert p[0] / p[1] == pytest.approx(4.0, rel=1e-6)


def test_the_solvers_window_is_cubics_average_or_the_reno_friendly_one():
    """``_cwnd``, the window the solver uses, against RFC 9438's numbers (C = 0.4,
    β = 0.7): CUBIC's average window (C(3+β)/(4(1−β)))^(1/4)·(RTT/p)^(3/4) where it
    is the larger, else the Reno-friendly window it is given; NewReno that window;
    BBR none below 20 % loss events; no window without loss."""
    p = np.array([1e-4, 1e-2, 1e-2, 0.0, 0.1, 0.3])
    rtt = np.array([0.3, 1e-3, 1e-3, 0.01, 0.01, 0.01])
    cc = np.array([0.0, 0.0, 1.0, 0.0, 2.0, 2.0])  # cubic, cubic, reno, cubic, bbr, bbr
    safe = np.maximum(p, 1e-300)
    reno = np.sqrt(1.5 / safe)
    c = np.zeros((core.N_C, len(p)))
    c[core.C_CC] = cc
    with np.errstate(over="ignore"):  # p = 0: no window (inf), as in the solver
        w = core._cwnd(c, slice(None), p, 1.0 / safe, reno, rtt)
    average = (0.4 * 3.7 / (4 * 0.3)) ** 0.25 * (0.3 / 1e-4) ** 0.75
    # 0.01 % loss at 300 ms: the cubic function's 427 packets, not Reno's 122.
    assert w[0] == pytest.approx(average, rel=1e-9)
    assert w[0] == pytest.approx(427.1, rel=1e-3) and reno[0] < 123
    # 1 % at 1 ms: the cubic function would leave 0.19 packets; Reno-friendly 12.2.
    assert w[1] == w[2] == pytest.approx(math.sqrt(150), rel=1e-12)
    assert math.isinf(w[3]) and math.isinf(w[4])
    assert w[5] == pytest.approx(math.sqrt(1.5 / 0.3), rel=1e-12)


def test_cubic_loss_bound_goodput_is_its_average_window_per_rtt():
    """End to end: 0.01 % loss at 300 ms, where CUBIC's own window (427 packets)
    exceeds Reno's (122), gives 427 packets of 1359 B per RTT."""
    e = engine(synthetic_model("a", sender_ns=100, receiver_ns=100, ack_every_packets=1.0,
                               **NO_STALLS))
    p = e.predict(Scenario(server="a", client="a", loss_pct=0.01, rtt_ms=300.0))
    rtt = 300e-3 + 50e-6
    window = (0.4 * 3.7 / (4 * 0.3)) ** 0.25 * (rtt / 1e-4) ** 0.75
    assert p.limit == "cwnd"
    assert p.rates_mbps["cwnd"] == pytest.approx(window * 1359 * 8 / rtt / 1e6, rel=0.01)


def test_a_short_transfer_counts_only_the_slow_start_rounds_it_needs():
    """1.5 RTT until the request reaches the server, then the window doubles from
    10 packets a round; the last round is done when its packets arrive (half an
    RTT): 1 to 10 packets take 2 RTT, 11 to 30 one round more, 31 to 70 two. A
    long transfer still pays every round to its steady window."""
    e = engine(synthetic_model("a", sender_ns=1000, receiver_ns=800, **NO_STALLS))
    base = Scenario(server="a", client="a", rtt_ms=10.0)
    payload = 1359  # stream bytes of a full packet
    rtt = 10.05e-3

    def rtts(transfer_bytes: int) -> float:
        return e.predict(base.with_(transfer_bytes=transfer_bytes)).duration_s / rtt

    assert rtts(1) == pytest.approx(2.0, rel=1e-6)
    assert rtts(10 * payload) == pytest.approx(2.0, rel=1e-6)
    # Whole packets: one byte more is an 11th packet, one round more.
    assert rtts(10 * payload + 1) == pytest.approx(3.0, rel=1e-3)
    assert rtts(30 * payload) == pytest.approx(3.0, rel=1e-3)
    assert rtts(31 * payload) == pytest.approx(4.0, rel=1e-3)
    # 1000 packets: 7 rounds (10 · (2^7 − 1) = 1270 ≥ 1000), the last a half.
    assert rtts(1000 * payload) == pytest.approx(8.0, rel=1e-3)
    # 1 GB: link-bound (9.27 Gbit/s), a steady window w of 8569 packets, reached
    # after log2(w / 10) rounds that carry about 2w packets; the rest at the rate.
    long = e.predict(base.with_(transfer_bytes=10**9))
    g = long.rates_mbps["link"] * 1e6
    w = g * rtt / (payload * 8)
    expected = 1.5 * rtt + math.log2(w / 10) * rtt + (1e9 - 2 * w * payload) * 8 / g
    assert long.duration_s == pytest.approx(expected, rel=1e-3)
    # A worse path (loss, a slow link: a steady window near the initial 10
    # packets) never finishes a short transfer sooner than a clean one.
    for worse in ({"loss_pct": 1.0}, {"loss_pct": 5.0}, {"link_gbps": 0.01}):
        for size in (1, 10 * payload, 30 * payload):
            clean = e.predict(base.with_(transfer_bytes=size)).duration_s
            assert e.predict(base.with_(transfer_bytes=size, **worse)).duration_s >= clean, \
                (worse, size)


def test_notes_name_what_the_analytic_engine_does_not_model():
    """Reordering (DES 3136 / 1445 / 660 Mbit/s at 0 / 1 / 5 %, analytic the same
    at each) and the send buffer are not in the model: the Prediction says so."""
    e = engine(synthetic_model("a", sender_ns=1000, receiver_ns=800, **NO_STALLS))
    base = Scenario(server="a", client="a")
    plain = e.predict(base)
    assert not any("reorder" in n or "sndbuf" in n for n in plain.notes)
    shuffled = e.predict(base.with_(reorder_pct=1.0))
    assert shuffled.goodput_mbps == plain.goodput_mbps
    assert ("reorder_pct=1: reordering is not modelled by the analytic engine (the DES and "
            "ns-3 simulate it)") in shuffled.notes
    big = e.predict(base.with_(sndbuf_bytes=6815744))
    assert ("sndbuf_bytes=6815744: the send buffer is not modelled by the analytic engine "
            "(nor by the others)") in big.notes
    requests = e.predict(base.with_(workload="requests", request_bytes=1000, requests=10,
                                    reorder_pct=5.0, sndbuf_bytes=8192))
    assert any(n.startswith("reorder_pct=5: ") and "request workloads" in n
               for n in requests.notes)
    assert any(n.startswith("sndbuf_bytes=8192: ") for n in requests.notes)


def test_bounds_names_every_resource_and_unknown_names_are_refused():
    reg = synthetic_registry()
    b = bounds(resolve(Scenario(server="fast", client="slow"), reg))
    assert set(b) == {"sender_cpu", "receiver_cpu", "interop", "link", "cwnd", "flow_control"}
    with pytest.raises(ScenarioError, match=r"server='nope'.*one of: fast, slow"):
        AnalyticEngine(reg).predict(Scenario(server="nope"))
    with pytest.raises(ScenarioError, match=r"cpu='EPYC'.*matches"):
        AnalyticEngine(reg).predict(Scenario(server="fast", client="fast", cpu="EPYC"))


def test_a_receiver_that_acks_once_per_receive_call_acks_once_per_gro_batch():
    """Behaviour.ack_per_receive_call: every datagram without GRO, every GRO batch
    with it (64 KiB / 1400 B = 46 segments); the sender's ACK cost follows."""
    percall = synthetic_model("percall", sender_ns=1000, receiver_ns=1000, ack_ns=2000,
                              supports_gso=True, supports_gro=True, ack_every_packets=1.0,
                              ack_per_receive_call=True, **NO_STALLS)
    count = synthetic_model("count", sender_ns=1000, receiver_ns=1000, ack_ns=2000,
                            supports_gso=True, supports_gro=True, ack_every_packets=1.0,
                            **NO_STALLS)
    registry = synthetic_registry(percall, count)
    segments = 65536 // 1400
    gro = resolve(Scenario(server="percall", client="percall"), registry)
    assert gro.receiver.segments_per_call == segments
    assert gro.receiver.ack_every_packets == segments
    assert gro.sender.ack_every_packets == 1.0  # the rule is the receiver's
    no_gro = resolve(Scenario(server="percall", client="percall", gro=False), registry)
    assert no_gro.receiver.ack_every_packets == 1.0
    assert resolve(Scenario(server="count", client="count"), registry).receiver \
        .ack_every_packets == 1.0
    e = AnalyticEngine(registry)
    fast = e.predict(Scenario(server="percall", client="percall"))
    slow = e.predict(Scenario(server="count", client="count"))
    # 2 µs per ACK on each side, once per packet against once per 46: ~3× the goodput.
    assert fast.acks == pytest.approx(slow.acks / segments, rel=0.02)
    assert fast.goodput_mbps > 2.5 * slow.goodput_mbps


def test_a_window_too_small_for_the_packet_threshold_is_flagged():
    """Where RFC 9002's recovery waits decide the goodput (a loss-limited window
    of a few packets at a LAN RTT), the analytic engine says it leaves them out,
    and the DES, which simulates them, is indeed far lower."""
    from quiclab.sim.des import DesEngine

    registry = synthetic_registry(synthetic_model("fast", sender_ns=300.0, receiver_ns=300.0))
    engine = AnalyticEngine(registry)

    def flagged(p) -> bool:
        return any(n.startswith("loss recovery:") for n in p.notes)

    lan = Scenario(server="fast", client="fast", loss_pct=10.0, transfer_bytes=5_000_000)
    noted = engine.predict(lan)
    assert noted.limit == "cwnd" and flagged(noted)
    des = DesEngine(registry).predict(lan)
    assert des.goodput_mbps < 0.5 * noted.goodput_mbps
    assert not flagged(engine.predict(lan.with_(loss_pct=0.5)))
    # At +10 ms the 1 ms floor is below 9/8 RTT: a window of ~4 packets is fine.
    assert not flagged(engine.predict(lan.with_(rtt_ms=10.0, loss_pct=10.0)))
