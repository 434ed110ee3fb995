"""The analytic core's loss, ACK and limit rules on synthetic stacks, worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.scenario import Scenario

# 1400-byte UDP payload − 40 overhead − 1 byte of h3 framing = 1359 stream bytes a packet.
PAYLOAD = 1359


def _engine(*models) -> AnalyticEngine:
    return AnalyticEngine(synthetic_registry(*models))


def test_a_sender_resends_what_it_loses_at_its_own_cost() -> None:
    # BBR is not loss-driven below 20 % loss events (no window limit), the link is
    # far faster than the sender, ACKs cost nothing: a sender of 4000 ns per packet
    # sends 1/(1 − p) packets per goodput packet, so 10 % loss leaves 0.9 of
    # 1359·8 bit / 4 µs = 2718 Mbit/s.
    e = _engine(synthetic_model("a", sender_ns=4000, receiver_ns=1000, rx_stall_rate_hz=0.0,
                                ccs=("cubic", "reno", "bbr")))
    full = PAYLOAD * 8 / 4000e-9 / 1e6
    base = Scenario(server="a", client="a", cc="bbr", link_gbps=100.0, transfer_bytes=10**10)
    clean = e.predict(base)
    lossy = e.predict(base.with_(loss_pct=10.0))
    assert clean.limit == lossy.limit == "sender_cpu"
    # The 10 GB transfer's start-up (handshake, slow start over 50 µs) costs < 1e-5.
    assert clean.goodput_mbps == pytest.approx(full, rel=1e-5)
    assert lossy.goodput_mbps == pytest.approx(0.9 * full, rel=1e-5)


def test_a_packet_slower_than_the_ack_delay_is_acked_alone() -> None:
    # 50 ms of sender work per packet: 20 packets/s, one every 50 ms, longer than the
    # 25 ms max_ack_delay (RFC 9000 §13.2.1), so the receiver's timer ACKs each one
    # before a second arrives: as many ACKs as data packets.
    e = _engine(synthetic_model("slow", sender_ns=5e7, receiver_ns=1000, rx_stall_rate_hz=0.0))
    p = e.predict(Scenario(server="slow", client="slow", transfer_bytes=10**6))
    packets = math.ceil(10**6 / PAYLOAD)  # 736
    assert p.server_packets_sent == pytest.approx(packets)
    assert p.acks == pytest.approx(packets)
    assert p.goodput_mbps < PAYLOAD * 8 / 5e7 * 1e3  # under one packet per 50 ms


def test_a_window_limit_from_receive_buffer_drops_is_named_rcvbuf() -> None:
    # 200 stalls/s of ≥ 0.5 ms (Pareto α = 1.5) overflow a 208 KiB buffer at a
    # 5 ms RTT: the loss the window sees is the buffer's, so the limit is "rcvbuf";
    # the same window limit from path loss alone is "cwnd".
    stalls = {"rx_stall_rate_hz": 200.0, "rx_stall_min_us": 500.0, "rx_stall_alpha": 1.5}
    e = _engine(synthetic_model("st", sender_ns=1000, receiver_ns=1000, **stalls),
                synthetic_model("calm", sender_ns=1000, receiver_ns=1000, rx_stall_rate_hz=0.0))
    stalled = e.predict(Scenario(server="st", client="st", rcvbuf_bytes=212992, rtt_ms=5.0,
                                 transfer_bytes=10**9))
    assert stalled.limit == "rcvbuf"
    assert stalled.rcvbuf_drops > 0
    lossy = e.predict(Scenario(server="calm", client="calm", rtt_ms=5.0, loss_pct=1.0,
                               transfer_bytes=10**9))
    assert lossy.limit == "cwnd"
    assert lossy.rcvbuf_drops == 0


@pytest.mark.parametrize(("busy", "sender_ns", "receiver_ns", "limit"), [
    (0.97, 3000.0, 1500.0, "sender_cpu"),    # ≥ 95 % busy: name the slower CPU …
    (0.95, 3000.0, 1500.0, "sender_cpu"),    # (95 % itself included: exp(log 0.95) = 0.95)
    (0.97, 1500.0, 3000.0, "receiver_cpu"),
    (0.90, 3000.0, 1500.0, "interop"),       # … below it, the pair's interplay
])
def test_a_pair_busy_95_percent_of_the_time_is_named_by_its_cpu(busy, sender_ns, receiver_ns,
                                                                 limit) -> None:
    # Kempf et al. 2024 §4.4: "server limited … with a server CPU usage above 95 %".
    # The pair runs at busy × the slower CPU's rate, below either CPU alone.
    from quiclab.models.registry import Interop

    model = synthetic_model("x", sender_ns=sender_ns, receiver_ns=receiver_ns,
                            rx_stall_rate_hz=0.0)
    interop = Interop.for_testbed("qir10g", server_effect={"x": math.log(busy)})
    e = AnalyticEngine(synthetic_registry(model, interop=interop))
    p = e.predict(Scenario(server="x", client="x", link_gbps=100.0, testbed="qir10g",
                           transfer_bytes=10**10))
    assert p.limit == limit
    slower = max(sender_ns, receiver_ns)
    assert p.goodput_mbps == pytest.approx(busy * PAYLOAD * 8 / (slower * 1e-9) / 1e6, rel=1e-4)


@pytest.mark.parametrize(("rate_hz", "min_us"), [(200.0, 500.0), (0.5, 200000.0)])
def test_a_sender_bound_goodput_with_buffer_drops_is_the_fixed_point_of_its_rate(
        rate_hz: float, min_us: float) -> None:
    # With receive-buffer drops p(g) a sender of 1000 ns per packet sends 1/(1 − p) per
    # goodput packet, so its goodput g solves g = 1359·8 bit / 1 µs · (1 − p(g)), where
    # p is the closed-form drop fraction of sim/rcvbuf.py at the arrival rate
    # g / (1359·8) datagrams/s of one skb truesize each. Solved here with brentq; the
    # solver's rates at its answer must agree to 1e-6 (its step tolerance is 1e-5 in
    # log goodput and it answers after the step that meets it).
    from scipy.optimize import brentq

    from quiclab.sim.rcvbuf import rcvbuf_drop_fraction, skb_truesize

    stalls = {"rx_stall_rate_hz": rate_hz, "rx_stall_min_us": min_us, "rx_stall_alpha": 1.5}
    e = _engine(synthetic_model("st", sender_ns=1000, receiver_ns=500, **stalls))
    s = Scenario(server="st", client="st", rcvbuf_bytes=212992, gso=False, gro=False,
                 link_gbps=100.0, transfer_bytes=10**9)
    _, out = e.evaluate([s])
    assert int(out.limit[0]) == 0  # sender_cpu
    truesize = skb_truesize(1400)
    cpu_bps = PAYLOAD * 8 / 1000e-9

    def drops(g: float) -> float:
        arrival = np.array([g / (PAYLOAD * 8) * truesize])
        return float(rcvbuf_drop_fraction(arrival, np.array([212992.0]), np.array([rate_hz]),
                                          np.array([min_us * 1e-6]), np.array([1.5]))[0])

    g = brentq(lambda g: g - cpu_bps * (1.0 - drops(g)), 1e6, cpu_bps, xtol=1e-3, rtol=1e-14)
    # The drops matter (one long stall every 2 s drops ~9 %; 200 short ones ~20 %).
    assert 0.01 < drops(g) < 0.9
    assert out.rates_bps[0, 0] == pytest.approx(g, rel=1e-6)
    assert out.rcvbuf_drop_prob[0] == pytest.approx(drops(g), rel=1e-5)


@pytest.mark.parametrize(("cc", "beta"), [("reno", 0.5), ("cubic", 0.7), ("bbr", None)])
def test_a_queue_smaller_than_the_bdp_leaves_the_link_idle_after_each_decrease(cc, beta):
    # Drop-tail queue Q = BDP/4: the window peaks at W = 1.25 BDP, falls to β·W and
    # climbs back linearly; the link idles while the window is below the BDP, an
    # idle share (BDP − βW)² / (2·BDP·(W − βW)) of the cycle:
    # Reno (β 0.5): 0.375² / (2 · 0.625) = 0.1125; CUBIC (β 0.7): 0.125² / 0.75 = 0.0208.
    # BBR paces at the bottleneck rate and keeps no standing queue: no sawtooth, util 1.
    e = _engine(synthetic_model("a", sender_ns=100, receiver_ns=100, rx_stall_rate_hz=0.0,
                                ccs=("cubic", "reno", "bbr")))
    wire = 1400 + 28 + 38  # UDP/IP headers and the Ethernet frame's overhead
    link_payload_mbps = 1000.0 * PAYLOAD / wire
    if beta is None:
        util = 1.0
    else:
        low = beta * 1.25
        util = 1.0 - (1.0 - low) ** 2 / (2.0 * (1.25 - low))
    p = e.predict(Scenario(server="a", client="a", link_gbps=1.0, cc=cc, queue_bdp=0.25,
                           rtt_ms=10.0, transfer_bytes=10**10))
    assert p.limit == "link"
    # 80 s of transfer: the handshake and slow start cost < 1e-3 of it.
    assert p.goodput_mbps == pytest.approx(util * link_payload_mbps, rel=1e-3)


def test_a_tie_between_the_cpus_names_the_sender() -> None:
    # Equal costs give bit-identical rates: the first smallest rate (np.argmin's
    # order: sender, receiver, pair, link, window, flow control) names the limit.
    e = _engine(synthetic_model("a", sender_ns=3000, receiver_ns=3000, rx_stall_rate_hz=0.0))
    p = e.predict(Scenario(server="a", client="a", link_gbps=100.0))
    assert p.limit == "sender_cpu"
    assert p.server_cpu_util == pytest.approx(p.client_cpu_util, rel=1e-12)


@pytest.mark.parametrize(("cc", "beta", "threshold"), [("reno", 0.5, 10.0), ("cubic", 0.7, 12.0),
                                                      ("cubic", 0.7, 10.0)])
def test_a_fixed_ack_thresholds_loss_cycle_by_hand(cc, beta, threshold) -> None:
    # sim/TRANSPORT.md "ACKs", a fixed threshold of n packets at 1 % loss: the window
    # w = √(1.5/p) = 12.25 packets (Reno's response; CUBIC's Reno-friendly one, its
    # cubic window being far smaller at this RTT) peaks at W = 2w/(1 + β) and climbs
    # from βW by `grow` a round (Reno 1, CUBIC 3(1 − β)/(1 + β)): W(1 − β)/grow rounds
    # a cycle, of which (n − βW)/grow are below n and wait the 25 ms ACK timer; the
    # others take the fast round trip: 100 µs path + 1.17 µs to serialise 1466 wire
    # bytes at 10 Gbit/s + 1 µs of receiver work + the n − 1 packets before the
    # threshold's at the link's payload rate 10 Gbit/s · 1359/1466. A cycle carries
    # w packets a round.
    e = _engine(synthetic_model("f", sender_ns=1000, receiver_ns=1000,
                                ack_every_packets=threshold, ack_threshold_fixed=True,
                                max_ack_delay_ms=25.0, rx_stall_rate_hz=0.0))
    p = e.predict(Scenario(server="f", client="f", cc=cc, loss_pct=1.0, base_rtt_us=100.0))
    assert p.limit == "cwnd"
    w = math.sqrt(1.5 / 0.01)
    w_max = 2.0 * w / (1.0 + beta)
    grow = 1.0 if cc == "reno" else 3.0 * (1.0 - beta) / (1.0 + beta)
    rounds = w_max * (1.0 - beta) / grow
    # (CUBIC at n = 10: βW = 10.09 ≥ n, no round waits and the fast RTT sets the rate.)
    slow = max((threshold - beta * w_max) / grow, 0.0)
    link_payload_bps = 10e9 * PAYLOAD / 1466
    rtt_fast = 100e-6 + 1466 * 8 / 10e9 + 1e-6 + (threshold - 1) * PAYLOAD * 8 / link_payload_bps
    cycle_s = rounds * rtt_fast + slow * 25e-3
    expected_mbps = w * rounds * PAYLOAD * 8 / cycle_s / 1e6
    # The 8 GB transfer's start-up is < 1e-4 of it at 20 Mbit/s … 1.2 Gbit/s.
    assert p.goodput_mbps == pytest.approx(expected_mbps, rel=1e-3)
