"""The DES's building blocks on their own: CUBIC, NewReno, RTT estimator, CPU servers,
stalls and the busy-until link (numbers from RFC 9002 / RFC 9438 and by hand)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from quiclab.sim.constants import CUBIC_ALPHA
from quiclab.sim.des.cc import Cubic, NewReno, RttEstimator, congestion_controller
from quiclab.sim.des.host import CpuServers, Stalls
from quiclab.sim.des.link import CAUSE_PATH, CAUSE_QUEUE, ForwardLink, ReverseLink
from quiclab.sim.resolve import Path

MSS = 1400


def test_initial_window_and_slow_start() -> None:
    for cc in (Cubic(MSS), NewReno(MSS)):
        assert cc.cwnd == 10 * MSS  # RFC 9002 §7.2 (TRANSPORT.md: 10 packets)
        cc.on_ack(5 * MSS, 0.1, 0.01)
        assert cc.cwnd == 15 * MSS  # slow start: + acked bytes


def test_reno_decrease_and_linear_increase() -> None:
    cc = NewReno(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion(1.0)
    assert cc.cwnd == 50 * MSS and cc.ssthresh == 50 * MSS  # β = 0.5
    for _ in range(50):  # one window of ACKs, one packet each
        cc.on_ack(MSS, 1.1, 0.01)
    assert cc.cwnd == pytest.approx(51 * MSS, rel=0.01)  # + 1 MSS per RTT


def test_cubic_decrease_k_and_plateau() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 100 * MSS
    cc.on_congestion(10.0)
    assert cc.cwnd == pytest.approx(70 * MSS)  # β_cubic = 0.7
    assert cc.w_max == 100 * MSS
    # RFC 9438 eq. 2: K = ∛(W_max (1 − β) / C) = ∛(30 / 0.4) s.
    assert cc.k_s == pytest.approx((30 / 0.4) ** (1 / 3))
    # Fast convergence: a second loss below W_max lowers W_max to cwnd (1 + β) / 2.
    cc.on_congestion(10.5)
    assert cc.w_max == pytest.approx(70 * MSS * 0.85)


def test_cubic_concave_growth_towards_w_max() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 1000 * MSS
    cc.on_congestion(0.0)
    srtt = 0.1
    t = 0.0
    while t < cc.k_s - srtt:
        cc.on_ack(cc.cwnd / 10, t, srtt)  # ten ACKs per RTT
        t += srtt / 10
    # At t = K − RTT the target W_cubic(t + RTT) = W_max: cwnd approaches it from below.
    assert 0.9 * 1000 * MSS < cc.cwnd <= 1000 * MSS * 1.001


def test_cubic_reno_friendly_region_at_small_windows() -> None:
    cc = Cubic(MSS)
    cc.cwnd = 20 * MSS
    cc.on_congestion(0.0)
    start = cc.cwnd
    srtt = 0.001  # short RTT: the cubic curve is flat, W_est wins (RFC 9438 §4.3)
    t = 0.0
    for _ in range(10):  # ten RTTs of ACKs
        acked = 0.0
        while acked < cc.cwnd:
            cc.on_ack(MSS, t, srtt)
            acked += MSS
        t += srtt
    assert (cc.cwnd - start) / MSS == pytest.approx(10 * CUBIC_ALPHA, rel=0.1)


def test_cubic_time_driven_reno_friendly_estimate() -> None:
    """Behaviour.cubic_reno_friendly = "time" (RFC 8312 §4.2, s2n-quic): W_est follows
    the time since the epoch over the minimum RTT, and an ACK raises cwnd by at most
    half of what it acknowledges — so after a 25 ms wait a 7-packet window acked at
    once grows by 3.5 packets, where RFC 9438's estimate grows by α·7/7 ≈ 0.53."""
    rtt = RttEstimator(40e-6)
    timed, per_ack = Cubic(MSS, rtt), Cubic(MSS)
    for cc in (timed, per_ack):
        cc.cwnd = 10 * MSS
        cc.on_congestion(0.0)
        assert cc.cwnd == pytest.approx(7 * MSS)
        cc.on_ack(7 * MSS, 0.025, 40e-6)
    assert timed.cwnd == pytest.approx(10.5 * MSS)
    assert per_ack.cwnd == pytest.approx((7 + CUBIC_ALPHA) * MSS)
    # Without a wait the estimate moves α per minimum RTT, as RFC 9438's per window.
    cc = Cubic(MSS, rtt)
    cc.cwnd = 20 * MSS
    cc.on_congestion(0.0)
    start, t = cc.cwnd, 0.0
    for _ in range(10):
        t += 40e-6
        cc.on_ack(cc.cwnd, t, 40e-6)
    assert (cc.cwnd - start) / MSS == pytest.approx(10 * CUBIC_ALPHA, rel=0.1)
    assert isinstance(congestion_controller("cubic", MSS, rtt), Cubic)
    # "time-srtt" (quinn): over the smoothed RTT, growth ≤ all of the acked bytes.
    smoothed = RttEstimator(40e-6)
    smoothed.smoothed = 200e-6
    quinn = Cubic(MSS, smoothed, smoothed=True)
    quinn.cwnd = 10 * MSS
    quinn.on_congestion(0.0)
    quinn.on_ack(7 * MSS, 0.025, 200e-6)
    assert quinn.cwnd == pytest.approx(14 * MSS)  # 7 + 7: W_est(25 ms) is far above
    assert congestion_controller("reno", MSS, rtt).cwnd == 10 * MSS  # Reno ignores it


def test_reno_decrease_follows_the_model() -> None:
    """Behaviour.reno_beta: quic-go's Reno keeps 0.7 of the window on a loss."""
    cc = congestion_controller("reno", MSS, reno_beta=0.7)
    cc.cwnd = 100 * MSS
    cc.on_congestion(1.0)
    assert cc.cwnd == pytest.approx(70 * MSS) and cc.ssthresh == pytest.approx(70 * MSS)


def test_persistent_congestion_and_names() -> None:
    for cc in (Cubic(MSS), NewReno(MSS)):
        cc.cwnd = 50 * MSS
        cc.on_persistent_congestion()
        assert cc.cwnd == 2 * MSS  # kMinimumWindow
    assert isinstance(congestion_controller("bbr", MSS), Cubic)
    with pytest.raises(ValueError, match="cc="):
        congestion_controller("vegas", MSS)


def test_rtt_estimator_rfc9002() -> None:
    rtt = RttEstimator(0.1)
    assert (rtt.smoothed, rtt.var, rtt.min) == (0.1, 0.05, 0.1)
    rtt.update(0.2, ack_delay_s=0.0, max_ack_delay_s=0.025)
    assert rtt.smoothed == pytest.approx(0.875 * 0.1 + 0.125 * 0.2)
    assert rtt.var == pytest.approx(0.75 * 0.05 + 0.25 * 0.1)
    # ack_delay is subtracted only down to min_rtt and capped at max_ack_delay.
    rtt.update(0.14, ack_delay_s=1.0, max_ack_delay_s=0.025)
    assert rtt.latest == 0.14
    assert rtt.loss_delay_s() == pytest.approx(9 / 8 * max(rtt.smoothed, 0.14))
    assert rtt.pto_s(0.025) == pytest.approx(rtt.smoothed + 4 * rtt.var + 0.025)
    tiny = RttEstimator(50e-6)
    assert tiny.loss_delay_s() == 0.001  # kGranularity
    assert tiny.pto_s(0.0) == pytest.approx(50e-6 + 0.001)


def test_cpu_servers_round_robin_and_fractional_cores() -> None:
    cpu = CpuServers(1.0)
    assert cpu.run(0.0, 1000) == pytest.approx(1e-6)
    assert cpu.ready_at(0.0) == pytest.approx(1e-6)
    two = CpuServers(1.5)  # two servers at 0.75 speed: capacity 1.5 cores
    assert two.n == 2 and two.slowdown == pytest.approx(2 / 1.5)
    assert two.run(0.0, 1000) == pytest.approx(1e-6 * 2 / 1.5)
    assert two.ready_at(0.0) == 0.0  # the other core is free
    with pytest.raises(ValueError, match="cores"):
        CpuServers(0)


def test_stalls_preempt_work() -> None:
    stalls = Stalls(rate_hz=1000.0, min_s=1e-4, alpha=2.0, rng=np.random.default_rng(1))
    s0, e0 = stalls.start_s, stalls.end_s
    assert e0 - s0 >= 1e-4
    # Work that starts inside a stall waits for its end; work over its start is delayed.
    assert stalls.begin(s0 + 1e-6) == e0
    fresh = Stalls(1000.0, 1e-4, 2.0, np.random.default_rng(1))
    assert fresh.finish(s0 - 1e-6, s0 + 1e-6) == pytest.approx(s0 + 1e-6 + (e0 - s0))
    none = Stalls(0.0, 0.0, 2.0, np.random.default_rng(1))
    assert math.isinf(none.start_s) and none.begin(5.0) == 5.0


def _path(**kw: float) -> Path:
    base: dict[str, Any] = dict(
        link_bps=1e9, mtu_bytes=1500, base_rtt_s=1e-3, added_rtt_s=0.0, loss_prob=0.0,
        reorder_prob=0.0, queue_bytes=3 * 1466, rcvbuf_bytes=212992, sndbuf_bytes=212992)
    base.update(kw)
    return Path(**base)


def test_link_serialisation_queue_and_propagation() -> None:
    rng = np.random.default_rng(0)
    link = ForwardLink(_path(), rng, rng)
    ser = 1466 * 8 / 1e9
    arrival, delivered, cause = link.transmit(0.0, 1, 1466)
    assert (delivered, cause) == (1, 0)
    assert arrival == pytest.approx(ser + 0.5e-3)
    link.transmit(0.0, 1, 1466)
    link.transmit(0.0, 1, 1466)
    # A fourth back-to-back packet does not fit behind three in a 3-packet queue.
    assert link.transmit(0.0, 1, 1466) == (0.0, 0, CAUSE_QUEUE)
    # Batch granularity: a unit is admitted in part.
    later = ForwardLink(_path(), rng, rng)
    _arrival, delivered, cause = later.transmit(0.0, 5, 1466)
    assert (delivered, cause) == (3, CAUSE_QUEUE) and later.queue_drops == 2
    back = ReverseLink(_path())
    assert back.send(0.0) == pytest.approx(116 * 8 / 1e9 + 0.5e-3)


def test_link_random_loss_is_bernoulli() -> None:
    link = ForwardLink(_path(loss_prob=0.1, queue_bytes=10**9), np.random.default_rng(3),
                       np.random.default_rng(4))
    lost = 0
    for k in range(20000):
        _a, delivered, cause = link.transmit(k * 1e-5, 1, 1466)
        lost += delivered == 0
        assert cause in (0, CAUSE_PATH)
    assert lost == link.path_losses
    assert lost == pytest.approx(2000, abs=4 * math.sqrt(2000 * 0.9))


def test_stall_fraction_is_poisson_union() -> None:
    """Poisson starts with overlapping stalls merged cover 1 − exp(−rate · E[τ]) of the time."""
    stalls = Stalls(rate_hz=1000.0, min_s=2e-4, alpha=2.0, rng=np.random.default_rng(0))
    horizon_s = 50.0
    while stalls.start_s < horizon_s:
        stalls._advance()
    # E[τ] = τm · α / (α − 1) = 0.4 ms.
    assert stalls.total_s / horizon_s == pytest.approx(1 - math.exp(-0.4), rel=0.03)


def test_prefix_extrapolation_survives_an_empty_window() -> None:
    """A timeout spanning the measurement window: extrapolate from the whole
    prefix; a prefix that delivered nothing is one clear EngineError."""
    from quiclab.errors import EngineError
    from quiclab.sim.des.connection import RunResult
    from quiclab.sim.des.engine import totals

    start = {"t_s": 1.0, "consumed_bytes": 4000.0, "acks": 10.0}
    end = {"t_s": 2.0, "consumed_bytes": 4000.0, "acks": 12.0}
    run = RunResult(completed=False, end=end, window_start=start, data_start_s=0.0,
                    unit_packets=1)
    t, out = totals(run, 8000.0)
    assert t == pytest.approx(4.0) and out["consumed_bytes"] == 8000.0
    assert out["acks"] == pytest.approx(24.0)
    empty = RunResult(completed=False, end={**end, "consumed_bytes": 0.0},
                      window_start={**start, "consumed_bytes": 0.0}, data_start_s=0.0,
                      unit_packets=1)
    with pytest.raises(EngineError, match="max_units"):
        totals(empty, 8000.0)
