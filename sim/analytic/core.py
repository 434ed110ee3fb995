"""Closed-form bottleneck model, vectorised over scenarios.

One call evaluates any number of scenarios: every input is a 1-D array (or a
scalar that broadcasts). Goodput is the minimum of the rates each resource
allows, the limit is the resource that attains it:

- sender CPU:   cores_s · P·8 / T_s,   T_s = sender ns per goodput packet
- receiver CPU: cores_r · P·8 / T_r
- pair interplay: busy · min(sender CPU, receiver CPU)
- link:         link_bps · P / wire_bytes · util(queue/BDP)
- congestion window (loss): CUBIC response (RFC 9438 §5.1, with its
  Reno-friendly region) or Reno/Mathis 1.22/√p, × P·8 / RTT
- flow control: window · 8 / RTT
- receive buffer: drops from receiver scheduling stalls feed the loss rate
  (:func:`quiclab.sim.rcvbuf.rcvbuf_drop_fraction`) and therefore act through
  the cwnd term and the extra ACKs and retransmissions they cost; if they make the cwnd term the
  minimum, the limit is reported as ``rcvbuf``.

Because loss depends on the rate (faster arrivals overflow a stalled
receiver's buffer sooner) and costs depend on loss (retransmissions, the
receiver's immediate ACK for each gap), goodput is the fixed point g = f(g), solved
per scenario in log goodput until the solver's next step is below TOL_STEP
(``_solve_step``); every output is then evaluated at that solution, so the
answer does not depend on how many steps a scenario took beyond that
tolerance.

The model is written once, element by element (``_prepare``, ``_rates``,
``_solve_start``, ``_solve_step``, ``_finish``), with its elementwise primitives
(``_where``, ``_min``, ``_max``, ``_exp``, ``_log``, ``_sqrt``, ``_abs``, ``_ceil``) as module
globals. Two backends run that one source:

- numpy: the functions called on whole arrays (``_evaluate_numpy``, here): when
  numba cannot be imported, with QUICLAB_ANALYTIC_PURE=1, or with
  ``backend="numpy"``;
- compiled: numba compiles the same functions for one scenario with scalar
  primitives and a driver that solves blocks of scenarios one solver step at a
  time (numba's plumbing is apart, in :mod:`quiclab.sim.analytic.compiled`).
  The machine code is cached on disk: a process pays numba's import and the
  cache load on its first call (~0.5 s), and the first run after the model,
  the kernel or the constants change compiles (~5 s).

Large batches run on a thread per core (either backend).

Each backend gives a scenario the same bits in any batch (so the choice of
backend never depends on the batch size); the two agree to the solver's
tolerance, on realistic scenarios to ~1e-12 relative (see
tests/sim/test_analytic_speed_equivalence.py).
"""

from __future__ import annotations

import contextvars
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

# The RFC 9002 / RFC 9438 constants and the busy-time rule, with their sources.
from quiclab.sim.constants import ACK_WINDOW_FRACTION, BUSY_LIMIT, CUBIC_BETA, CUBIC_C, RENO_BETA

#: Order of the resources in ``Outputs.rates`` columns.
RESOURCES = ("sender_cpu", "receiver_cpu", "interop", "link", "cwnd", "flow_control")
CC_CODES = {"cubic": 0, "reno": 1, "bbr": 2}
#: A slow round of a time-driven CUBIC grows its window by half (over the minimum
#: RTT, s2n-quic) or doubles it (over the smoothed RTT, quinn): see _rates.
LOG_1_5 = math.log(1.5)
LOG_2 = math.log(2.0)
#: Average CUBIC window factor (C·(3+β)/(4·(1−β)))^(1/4), see _cwnd.
CUBIC_K = (CUBIC_C * (3 + CUBIC_BETA) / (4 * (1 - CUBIC_BETA))) ** 0.25

#: The solver stops when its next secant step would move log goodput by less
#: than TOL_STEP and answers at that point: near the root each secant step is
#: far smaller than the one before, so the answer is much closer to the root
#: than TOL_STEP (on the bench's scenarios goodput within 1e-8 and the other
#: rates within 1e-6 of a solve to 1e-13). It also stops when goodput
#: reproduces itself exactly (log f(g) = log g), when the bracket around the
#: root is narrower than TOL_STEP, or after MAX_STEPS evaluations of f (these
#: two at the point with the smallest residual; scenarios whose f jumps across
#: g = f(g) have no fixed point and end with a narrow bracket around the jump).
TOL_STEP = 1e-5
MAX_STEPS = 64


@dataclass
class Inputs:
    """Per-scenario inputs (arrays of equal length, or scalars). Times in ns/s as named."""

    payload_bytes: np.ndarray  # P: goodput bytes per data packet
    skb_truesize_bytes: np.ndarray  # receive-buffer bytes per datagram (skb_truesize)
    wire_bytes: np.ndarray  # S + IP/UDP + Ethernet framing
    s_ns_packet: np.ndarray  # sender ns per data packet (no syscall, no ACK)
    s_ns_call: np.ndarray
    s_segments: np.ndarray
    s_ns_ack: np.ndarray
    s_cores: np.ndarray
    r_ns_packet: np.ndarray
    r_ns_call: np.ndarray
    r_segments: np.ndarray
    r_ns_ack: np.ndarray
    r_cores: np.ndarray
    ack_every: np.ndarray
    immediate_ack: np.ndarray  # 0/1
    stall_rate_hz: np.ndarray
    stall_min_s: np.ndarray
    stall_alpha: np.ndarray
    max_ack_delay_s: np.ndarray
    fc_window_bytes: np.ndarray
    busy: np.ndarray
    link_bps: np.ndarray
    rtt_s: np.ndarray
    loss_prob: np.ndarray
    queue_bytes: np.ndarray
    rcvbuf_bytes: np.ndarray
    cc: np.ndarray  # CC_CODES
    transfer_bytes: np.ndarray
    pacing: np.ndarray  # 0/1
    #: 0/1: the receiver's ACK threshold is not capped at the window
    #: (Behaviour.ack_threshold_fixed).
    ack_fixed: np.ndarray = field(default_factory=lambda: np.zeros(1))
    #: The fewest packets the capped threshold asks for (Behaviour.ack_threshold_floor_packets).
    ack_floor: np.ndarray = field(default_factory=lambda: np.full(1, 2.0))
    #: CUBIC's Reno-friendly estimate (Behaviour.cubic_reno_friendly): 0 per ACK, 1
    #: with time over the minimum RTT ("time"), 2 over the smoothed RTT ("time-srtt").
    time_friendly: np.ndarray = field(default_factory=lambda: np.zeros(1))
    #: NewReno's multiplicative decrease (Behaviour.reno_beta; RFC 9002: 0.5).
    reno_beta: np.ndarray = field(default_factory=lambda: np.full(1, RENO_BETA))

    def broadcast(self) -> Inputs:
        arrays = [np.asarray(getattr(self, f.name), dtype=np.float64) for f in fields(self)]
        shaped = np.broadcast_arrays(*[np.atleast_1d(a) for a in arrays])
        return Inputs(*[np.ascontiguousarray(a) for a in shaped])

    def __len__(self) -> int:
        return int(np.broadcast_shapes(*[np.shape(np.atleast_1d(getattr(self, f.name)))
                                         for f in fields(self)])[0])


@dataclass
class Outputs:
    goodput_bps: np.ndarray
    limit: np.ndarray  # index into LIMIT_NAMES
    rates_bps: np.ndarray  # shape (n, len(RESOURCES))
    loss_prob: np.ndarray  # total per data packet
    rcvbuf_drop_prob: np.ndarray
    acks_per_packet: np.ndarray
    s_ns_per_goodput_packet: np.ndarray
    r_ns_per_goodput_packet: np.ndarray
    sender_util: np.ndarray  # cores busy
    receiver_util: np.ndarray
    duration_s: np.ndarray
    rtt_eff_s: np.ndarray


LIMIT_NAMES = ("sender_cpu", "receiver_cpu", "interop", "link", "cwnd", "flow_control", "rcvbuf")


# ---------------------------------------------------------------------------
# The model, element by element.
#
# Each function below takes ``i``, the scenarios it works on: an int in the
# compiled backend (then every value is a float), a slice in the numpy backend
# (then every value is an array). Per-scenario invariants live in the rows C_*
# of ``c``, the solver's state in the rows S_* of ``s`` (the drivers pass one
# work array as both). Only the primitives may branch on the backend; the code
# here uses ``_where`` instead of ``if`` and never ``~``/``not``/``and``/``or``.

_where: Callable[..., Any] = np.where
_min: Callable[..., Any] = np.minimum
_max: Callable[..., Any] = np.maximum
_exp: Callable[..., Any] = np.exp
_log: Callable[..., Any] = np.log
_sqrt: Callable[..., Any] = np.sqrt
_abs: Callable[..., Any] = np.abs
_ceil: Callable[..., Any] = np.ceil


INF = math.inf

(C_P8, C_LOG_P8, C_RATE_LINK, C_S_BASE, C_R_BASE, C_S_NUM, C_R_NUM, C_S_ACK, C_R_ACK,
 C_ACK_BASE, C_ACK_WAIT, C_LOSS, C_KEEP, C_ALPHA_M1, C_INV_ALPHA_M1, C_STALL_RATE,
 C_X1, C_INV_X1, C_LOG_TM_X1, C_STALL_SCALE, C_MEAN_STALL, C_FC_BITS, C_FC_PKTS,
 C_RTT_BASE, C_RTT, C_MAX_ACK_DELAY, C_IMMEDIATE, C_BUSY, C_CC, C_ACK_FIXED, C_ACK_FLOOR,
 C_TIME_FRIENDLY, C_BETA, C_MATHIS2) = range(34)
N_C = 34
(S_YA, S_KNOWN_A, S_YB, S_FIRST, S_YC, S_YP, S_HP, S_YBEST, S_HBEST, S_YOUT,
 S_DONE) = range(N_C, N_C + 11)
#: Rows of the work array: the invariants, then the solver's state.
N_W = N_C + 11

def _prepare(c, i, payload, skb_bytes, wire, s_ns_packet, s_ns_call, s_segments, s_ns_ack,
             s_cores, r_ns_packet, r_ns_call, r_segments, r_ns_ack, r_cores, ack_every,
             immediate_ack, stall_rate_hz, stall_min_s, stall_alpha, max_ack_delay_s,
             fc_window_bytes, busy, link_bps, rtt_s, loss_prob, queue_bytes, rcvbuf_bytes, cc,
             ack_fixed, ack_floor, time_friendly, reno_beta):
    """Write the invariants of scenarios ``i`` (everything that does not depend on g) to ``c``."""
    P8 = payload * 8.0
    c[C_P8, i] = P8
    c[C_LOG_P8, i] = _log(P8)
    # Link: a drop-tail queue smaller than the BDP leaves the link idle after
    # each multiplicative decrease: W_max = BDP + Q, the window falls to
    # β·W_max and climbs back; the link is idle while the window is below the BDP.
    bdp = link_bps / 8.0 * rtt_s
    beta = _where(cc == 1.0, reno_beta, CUBIC_BETA)
    wmax = bdp + queue_bytes
    low = beta * wmax
    idle = _where(low < bdp, (bdp - low) * (bdp - low) / _max(2.0 * bdp * (wmax - low), 1e-9),
                  0.0)
    util = _where(cc == 2.0, 1.0, _min(_max(1.0 - idle, 0.05), 1.0))
    c[C_RATE_LINK, i] = link_bps * payload / wire * util
    # CPU: per-packet and per-call work; ACKs are added per goodput packet in _cpu_rates.
    s_base = s_ns_packet + s_ns_call / s_segments
    r_base = r_ns_packet + r_ns_call / r_segments
    c[C_S_BASE, i] = s_base
    c[C_R_BASE, i] = r_base
    c[C_S_NUM, i] = s_cores * P8 * 1e9  # rate = cores · P·8 / (ns · 1e-9)
    c[C_R_NUM, i] = r_cores * P8 * 1e9
    c[C_S_ACK, i] = s_ns_ack
    c[C_R_ACK, i] = r_ns_ack
    c[C_ACK_BASE, i] = 1.0 / _max(ack_every, 1e-9)
    c[C_ACK_WAIT, i] = _max(ack_every - 1.0, 0.0)
    c[C_LOSS, i] = loss_prob
    c[C_KEEP, i] = 1.0 - loss_prob  # path delivery probability
    # Receiver stalls: Poisson at stall_rate_hz, Pareto(τm, α) long. At one
    # datagram per second the buffer absorbs x1 = B / truesize seconds.
    alpha = _max(stall_alpha, 1.01)
    tm = _max(stall_min_s, 1e-12)
    x1 = _max(rcvbuf_bytes, 1.0) / skb_bytes
    c[C_ALPHA_M1, i] = alpha - 1.0
    c[C_INV_ALPHA_M1, i] = 1.0 / (alpha - 1.0)
    c[C_STALL_RATE, i] = stall_rate_hz
    c[C_X1, i] = x1
    c[C_INV_X1, i] = 1.0 / x1
    c[C_LOG_TM_X1, i] = _log(tm / x1)
    c[C_STALL_SCALE, i] = stall_rate_hz * tm
    c[C_MEAN_STALL, i] = stall_min_s * alpha / (alpha - 1.0)  # E[τ] = τm·α/(α−1)
    fc_bits = _where(fc_window_bytes > 0.0, fc_window_bytes * 8.0, INF)
    c[C_FC_BITS, i] = fc_bits
    c[C_FC_PKTS, i] = fc_bits / P8  # the flow-control window in full data packets
    # A packet is acknowledged only after it has been serialised onto the link
    # and the receiver has processed it: both add to the path's RTT in the
    # time a window must cover (a few µs at 1500 B, ~12 µs for 9000 B at 10 Gbit/s).
    c[C_RTT_BASE, i] = rtt_s + wire * 8.0 / _max(link_bps, 1.0) + r_base * 1e-9
    c[C_RTT, i] = rtt_s
    c[C_MAX_ACK_DELAY, i] = max_ack_delay_s
    c[C_IMMEDIATE, i] = immediate_ack
    c[C_BUSY, i] = busy
    c[C_ACK_FIXED, i] = ack_fixed
    c[C_ACK_FLOOR, i] = ack_floor
    c[C_TIME_FRIENDLY, i] = time_friendly
    c[C_BETA, i] = beta
    # The window loss leaves an AIMD sender, W² · p: (1 + β) / (2 (1 − β)) for Reno
    # (1.5 at β = 0.5, Mathis et al. 1997), 1.5 for CUBIC's Reno-friendly estimate.
    c[C_MATHIS2, i] = _where(cc == 1.0, (1.0 + beta) / (2.0 * (1.0 - beta)), 1.5)
    c[C_CC, i] = cc


def _cpu_rates(c, i, loss, acks):
    """Sender and receiver ns per goodput packet, and the CPU and interplay rates.

    Each goodput packet costs 1 + loss/(1 − loss) sends (retransmissions) and
    ``acks`` ACKs.
    """
    keep = _max(1.0 - loss, 1e-9)
    s_keep = (keep + loss) * c[C_S_BASE, i] + keep * acks * c[C_S_ACK, i]  # s_ns · keep
    r_ns = c[C_R_BASE, i] + acks * c[C_R_ACK, i]
    s_ns = s_keep / keep  # (only the outputs need it)
    # Each side's rate from its own costs alone (one division each), so that a
    # sender-bound answer does not move, not even by a bit, with the receiver's cost.
    rate_s = c[C_S_NUM, i] * keep / s_keep
    rate_r = c[C_R_NUM, i] / r_ns
    rate_pair = c[C_BUSY, i] * _min(rate_s, rate_r)
    return s_ns, r_ns, rate_s, rate_r, rate_pair


def _cwnd(c, i, events, inv_events, reno, rtt_eff):
    """Congestion window (packets) for the loss-event rate ``events`` = p per packet.

    CUBIC (RFC 9438 §5.1; Ha et al. 2008): the average window of the cubic
    function, (C·(3+β)/(4·(1−β)))^(1/4) · (RTT/p)^(3/4), never below its
    Reno-friendly estimate ``reno`` (with RFC 9438's α_cubic, Reno's response).
    Reno: ``reno``, Mathis et al. 1997's sqrt(1.5/p) at β = 0.5 (``_rates``
    passes it). BBR is not loss-driven below 20 % loss events; without loss, no
    limit."""
    t = rtt_eff * inv_events
    cubic = CUBIC_K * _sqrt(t * _sqrt(t))
    cc = c[C_CC, i]
    w = _where(cc == 0.0, _max(cubic, reno), reno)
    no_loss = (events > 0.0) == False  # noqa: E712
    return _where(((cc == 2.0) & (events < 0.2)) | no_loss, INF, w)


def _upper_bound(c, i):
    """A goodput no f(g) exceeds: every rate with the path's loss alone, the fewest
    ACKs and the base RTT (buffer drops, immediate ACKs and the receiver's ACK
    delay only add cost, loss events and round-trip time; each rate falls with
    them). The closer this is to the fixed point, the fewer steps the solver takes."""
    loss = c[C_LOSS, i]
    _, _, rate_s, rate_r, rate_pair = _cpu_rates(c, i, loss, _min(c[C_ACK_BASE, i], 1.0))
    rtt = c[C_RTT_BASE, i]
    inv_loss = 1.0 / _max(loss, 1e-300)
    rate_cc = _cwnd(c, i, loss, inv_loss, _sqrt(c[C_MATHIS2, i] * inv_loss), rtt) * c[C_P8, i] / rtt
    rate_fc = c[C_FC_BITS, i] / rtt
    return _max(_min(_min(_min(rate_s, rate_r), _min(rate_pair, c[C_RATE_LINK, i])),
                     _min(rate_cc, rate_fc)), 1.0)


def _rates(c, i, y):
    """Every resource's rate when scenarios ``i`` run at goodput ``g = e^y``.

    Returns ``f(g)`` (the smallest rate, at least 1 bit/s) and the quantities
    the outputs report at the solution.
    """
    # Data packets per second (at least one), its log and inverse.
    log_pkt = _max(y - c[C_LOG_P8, i], 0.0)
    pkt = _exp(log_pkt)
    inv_pkt = 1.0 / pkt
    # Receive-buffer drops (see sim/rcvbuf.py, rcvbuf_drop_fraction and stall_event_rate): the
    # buffer absorbs x = x1 / pkt seconds of arrivals. While x ≥ τm the overflow
    # tail is rate·τm^α·x^(1−α)/(α−1) and rate·τm^α·x^(−α) stalls per second
    # overflow; below, E[τ] − x and every stall. rate·τm^α·x^(1−α) =
    # rate·τm·(τm/x)^(α−1), and log(τm/x) = log(τm/x1) + log pkt.
    stall_rate = c[C_STALL_RATE, i]
    log_tm_x = c[C_LOG_TM_X1, i] + log_pkt
    x = c[C_X1, i] * inv_pkt
    scaled = c[C_STALL_SCALE, i] * _exp(c[C_ALPHA_M1, i] * log_tm_x)  # rate·τm^α·x^(1−α)
    above = log_tm_x <= 0.0  # x ≥ τm
    tail = _where(above, scaled * c[C_INV_ALPHA_M1, i], stall_rate * (c[C_MEAN_STALL, i] - x))
    stalls = stall_rate > 0.0
    p_buf = _where(stalls, _min(_max(tail, 0.0), 1.0), 0.0)
    # Overflowing stalls per data packet: rate·τm^α·x^(−α) / pkt = scaled / x1.
    overflows = _where(stalls, _where(above, scaled * c[C_INV_X1, i], stall_rate * inv_pkt), 0.0)
    loss = 1.0 - c[C_KEEP, i] * (1.0 - p_buf)
    # Loss events seen by congestion control: every random path loss, but one
    # per overflowing stall however many datagrams it drops.
    events = _min(c[C_LOSS, i] + overflows, 1.0)
    lossy = events > 0.0
    inv_events = 1.0 / _max(events, 1e-300)
    mathis = _sqrt(c[C_MATHIS2, i] * inv_events)  # Mathis: the window loss leaves, in packets
    # The sender's window must also cover the receiver's ACK turnaround: it
    # waits for ack_every − 1 more packets, at most max_ack_delay (RFC 9000
    # §13.2.1) — but its threshold is capped at ACK_WINDOW_FRACTION of the
    # window the sender has, the one loss leaves it (sqrt(1.5/p) packets) or
    # the flow-control window, whichever is smaller (TRANSPORT.md, "ACKs"),
    # else the sender would stall waiting for an ACK.
    # The cap never asks for fewer packets than the receiver's floor
    # (Behaviour.ack_threshold_floor_packets; RFC 9000 §13.2.2's 2 by default).
    w_have = _min(_where(lossy, mathis, INF), c[C_FC_PKTS, i])
    fixed = c[C_ACK_FIXED, i] > 0.0
    floor = c[C_ACK_FLOOR, i]
    threshold = c[C_ACK_WAIT, i] + 1.0
    ack_eff = _where(fixed, threshold,
                     _min(threshold, _max(floor, ACK_WINDOW_FRACTION * w_have)))
    rtt_eff = c[C_RTT_BASE, i] + _min((ack_eff - 1.0) * inv_pkt, c[C_MAX_ACK_DELAY, i])
    # CUBIC whose Reno-friendly estimate grows with time over the minimum RTT
    # (Behaviour.cubic_reno_friendly = "time", RFC 8312 §4.2): a round of rtt
    # grows it by α·rtt/RTT_min, not α, so the loss-limited window is
    # sqrt(rtt/RTT_min) times larger (AIMD: W ∝ sqrt(increase per round)).
    # Over the smoothed RTT (quinn) a round grows it by about α, as per ACK.
    timed = (c[C_TIME_FRIENDLY, i] > 0.0) & (c[C_CC, i] != 1.0)
    min_based = timed & (c[C_TIME_FRIENDLY, i] == 1.0)
    reno = mathis * _where(min_based, _sqrt(rtt_eff / c[C_RTT_BASE, i]), 1.0)
    # ACKs per packet: one per ack_eff packets (the capped threshold above), or
    # one per max_ack_delay when fewer packets than that arrive in it. A
    # receiver that follows RFC 9000 §13.2.1 also ACKs at once the packet that
    # opens a gap: one more ACK per loss event (a random loss, or an overflowing
    # stall however many datagrams it drops; TRANSPORT.md "ACKs").
    ack_base = _max(1.0 / ack_eff, inv_pkt / _max(c[C_MAX_ACK_DELAY, i], 1e-9))
    acks = _min(ack_base + c[C_IMMEDIATE, i] * events, 1.0)
    s_ns, r_ns, rate_s, rate_r, rate_pair = _cpu_rates(c, i, loss, acks)
    w = _cwnd(c, i, events, inv_events, reno, rtt_eff)
    inv_rtt = 1.0 / rtt_eff
    rate_cc = w * c[C_P8, i] * inv_rtt
    # A fixed threshold (Behaviour.ack_threshold_fixed; TRANSPORT.md "ACKs"): over
    # one loss cycle the window climbs from β·W_max to W_max = 2w/(1 + β) by
    # `grow` packets a round (Reno 1, CUBIC's Reno-friendly 3(1 − β)/(1 + β)).
    # A round whose window reaches the threshold gets its ACK once the threshold's
    # packets have arrived back to back (at the fastest CPU/link rate, not the
    # average goodput); one below it waits for max_ack_delay.
    # (The window is CUBIC's at that round trip, so that the rate stays below
    # _upper_bound's: CUBIC's window grows as RTT^(3/4), its rate falls as RTT^(−1/4).)
    # A floor above 2 (a receiver's own fixed tolerance, e.g. s2n-quic's 10) does
    # the same for the rounds whose window is below the floor.
    burst = _min(_min(rate_s, rate_r), _min(rate_pair, c[C_RATE_LINK, i]))
    wait_at = _where(fixed, threshold, _min(floor, threshold))
    rtt_fast = c[C_RTT_BASE, i] + _min((wait_at - 1.0) * c[C_P8, i] / _max(burst, 1.0),
                                       c[C_MAX_ACK_DELAY, i])
    stretch = _where(min_based, rtt_fast / c[C_RTT_BASE, i], 1.0)  # α·rtt/RTT_min a round
    w_fast = _cwnd(c, i, events, inv_events, mathis * _sqrt(stretch), rtt_fast)
    beta = c[C_BETA, i]
    w_fin = _where(lossy, _min(w_fast, 1e12), 1.0)
    w_max = 2.0 * w_fin / (1.0 + beta)
    grow = _where(c[C_CC, i] == 1.0, 1.0, 3.0 * (1.0 - beta) / (1.0 + beta)) * stretch
    rounds = _max(w_max * (1.0 - beta) / grow, 1.0)
    # Slow rounds: the window climbs `grow` a round to the threshold; with the
    # time-driven estimate the wait itself lifts it, by as much of what the late ACK
    # acknowledges as the cap allows: × 1.5 a slow round (half, s2n-quic), × 2 (all,
    # quinn).
    below = _max(wait_at / _max(beta * w_max, 1e-9), 1.0)
    per_slow = _where(c[C_TIME_FRIENDLY, i] == 2.0, LOG_2, LOG_1_5)
    slow = _min(_where(timed, _log(below) / per_slow,
                       _max((wait_at - beta * w_max) / grow, 0.0)), rounds)
    cycle_s = rounds * rtt_fast + slow * c[C_MAX_ACK_DELAY, i]
    rate_cc = _where((fixed | (floor > 2.0)) & lossy, w_fin * rounds * c[C_P8, i] / cycle_s,
                     rate_cc)
    # Flow control: at most the receiver's window in flight per (effective) RTT.
    rate_fc = c[C_FC_BITS, i] * inv_rtt
    f = _min(_min(_min(rate_s, rate_r), _min(rate_pair, c[C_RATE_LINK, i])),
             _min(rate_cc, rate_fc))
    return (_max(f, 1.0), rate_s, rate_r, rate_pair, rate_cc, rate_fc, p_buf, loss, acks,
            s_ns, r_ns, rtt_eff)


def _residual(c, i, y):
    """h(y) = log f(e^y) − y: positive below the fixed point, negative above."""
    return _log(_rates(c, i, y)[0]) - y


def _solve_start(s, c, i):
    """First evaluation: at the upper bound; the next point is one fixed-point step.

    In log goodput y, h(y) = log f(e^y) − y is ≥ 0 at y = 0 (f ≥ 1 bit/s) and
    ≤ 0 at the upper bound, so [0, y_hi] brackets a root; y = 0 itself is not
    evaluated (S_KNOWN_A = 0).
    """
    y = _log(_upper_bound(c, i))
    h = _residual(c, i, y)
    s[S_YA, i] = 0.0
    s[S_KNOWN_A, i] = 0.0
    s[S_YB, i] = y
    s[S_FIRST, i] = 1.0
    s[S_YP, i] = y
    s[S_HP, i] = h
    s[S_YBEST, i] = y
    s[S_HBEST, i] = h
    s[S_YC, i] = _max(y + h, 0.0)  # one fixed-point step: log f(g_hi)
    # The bound itself is the solution when f(g_hi) = g_hi (a CPU or the link).
    s[S_YOUT, i] = y
    s[S_DONE, i] = _where(h >= 0.0, 1.0, 0.0)


def _solve_step(s, c, i):
    """Evaluate h at the pending point, update the bracket, choose the next point.

    The bracket [y_a, y_b] has h(y_a) ≥ 0 ≥ h(y_b). The next point is the
    secant through the last two points when it falls inside the bracket
    (Dekker's method; not on the first step, whose other point is the upper
    bound: measured, allowing it there saves steps on average but splits the
    scenarios into slow and fast groups, which costs a vectorised kernel more);
    else the bracket's midpoint,
    or while no point with h ≥ 0 has been evaluated, a fixed-point step (which
    stays inside [0, y_b]). Only the answer (S_YOUT) and S_DONE of a scenario
    already done are kept; its other rows may change.
    """
    yc = s[S_YC, i]
    hc = _residual(c, i, yc)
    right = hc < 0.0  # the root lies below yc: yc becomes the upper end
    ya = _where(right, s[S_YA, i], yc)
    yb = _where(right, yc, s[S_YB, i])
    known_a = _where(right, s[S_KNOWN_A, i], 1.0)
    better = _abs(hc) < _abs(s[S_HBEST, i])
    ybest = _where(better, yc, s[S_YBEST, i])
    hbest = _where(better, hc, s[S_HBEST, i])
    yp, hp = s[S_YP, i], s[S_HP, i]
    secant = yc - hc * (yc - yp) / (hc - hp)
    use_secant = (secant > ya) & (secant < yb) & (s[S_FIRST, i] == 0.0)
    fixed = _max(yc + hc, 0.0)  # log f(g)
    y_n = _where(use_secant, secant, _where(known_a > 0.0, 0.5 * (ya + yb), fixed))
    # Near the root a secant step is a close (over)estimate of the distance to it.
    small_step = use_secant & (_abs(secant - yc) <= TOL_STEP)
    done = small_step | (hbest == 0.0) | (yb - ya <= TOL_STEP)
    # The answer: that last secant point, else the point with the smallest
    # residual (also when MAX_STEPS ends the iteration).
    y_out = _where(small_step & (hbest != 0.0), secant, ybest)
    s[S_YA, i] = ya
    s[S_KNOWN_A, i] = known_a
    s[S_YB, i] = yb
    s[S_FIRST, i] = 0.0
    s[S_YBEST, i] = ybest
    s[S_HBEST, i] = hbest
    s[S_YP, i] = yc
    s[S_HP, i] = hc
    s[S_YC, i] = y_n
    active = s[S_DONE, i] == 0.0
    s[S_YOUT, i] = _where(active, y_out, s[S_YOUT, i])
    s[S_DONE, i] = _where(active & (done == False), 0.0, 1.0)  # noqa: E712


def _finish(c, i, y, transfer_bytes, payload, s_cores, r_cores):
    """The outputs at the solution y (see Outputs), ``limit`` as a float code."""
    (goodput, rate_s, rate_r, rate_pair, rate_cc, rate_fc, p_buf, loss, acks, s_ns, r_ns,
     rtt_eff) = _rates(c, i, y)
    rate_link = c[C_RATE_LINK, i]
    # The limit: the first smallest rate (as np.argmin), then two namings.
    limit = _where(rate_r < rate_s, 1.0, 0.0)
    low = _min(rate_s, rate_r)
    limit = _where(rate_pair < low, 2.0, limit)
    low = _min(low, rate_pair)
    limit = _where(rate_link < low, 3.0, limit)
    low = _min(low, rate_link)
    limit = _where(rate_cc < low, 4.0, limit)
    low = _min(low, rate_cc)
    limit = _where(rate_fc < low, 5.0, limit)
    # Ties between CPU and interplay: name the CPU when the pair keeps it busy at
    # least BUSY_LIMIT of the time (kempf24 §4.4: "server limited … with a
    # server CPU usage above 95 %"; the DES and ns-3 use the same rule).
    limit = _where((limit == 2.0) & (c[C_BUSY, i] >= BUSY_LIMIT),
                   _where(rate_s <= rate_r, 0.0, 1.0), limit)
    # Loss that comes (mostly) from the receive buffer: call the limit rcvbuf.
    limit = _where((limit == 4.0) & (p_buf > c[C_LOSS, i]), 6.0, limit)
    # Startup: handshake (1.5 RTT) plus slow start from 10 packets to the
    # steady window, during which on average half the rate is achieved. A short
    # transfer ends in slow start: only the rounds its whole packets need count
    # (the window doubles a round: 10, 30, 70, … packets sent after 1, 2, 3 …
    # rounds), the last of them done when its packets arrive, half an RTT on.
    rtt = c[C_RTT, i]
    w_target = _max(goodput * rtt_eff / c[C_P8, i], 10.0)
    inv_log2 = 1.0 / math.log(2.0)
    ss_rounds = _log(_max(w_target / 10.0, 1.0)) * inv_log2
    packets = _ceil(transfer_bytes / payload)
    need = _ceil(_log(packets / 10.0 + 1.0) * inv_log2 - 1e-9)
    # A transfer that ends within slow start (its rounds no more than the rounds to
    # the steady window, however few a lossy or slow path leaves) pays its rounds
    # and the last packets' half RTT; a longer one the rounds to the steady window.
    in_ss = need - 1.0 <= ss_rounds
    startup = 1.5 * rtt + _where(in_ss, (need - 1.0) * rtt_eff + 0.5 * rtt, ss_rounds * rtt_eff)
    sent_in_ss = _min(transfer_bytes, 2.0 * w_target * payload)
    duration = _max(startup + _max(transfer_bytes - sent_in_ss, 0.0) * 8.0 / goodput,
                    1.5 * rtt + transfer_bytes * 8.0 / goodput)
    effective = transfer_bytes * 8.0 / duration
    return (effective, limit, rate_s, rate_r, rate_pair, rate_link, rate_cc, rate_fc, loss,
            p_buf, acks, s_ns, r_ns, effective / rate_s * s_cores, effective / rate_r * r_cores,
            duration, rtt_eff)


#: Inputs the model reads, in _prepare's order (transfer_bytes and the cores
#: again in _finish; pacing is not used by this engine).
_PREPARE_FIELDS = ("payload_bytes", "skb_truesize_bytes", "wire_bytes", "s_ns_packet", "s_ns_call",
                   "s_segments", "s_ns_ack", "s_cores", "r_ns_packet", "r_ns_call", "r_segments",
                   "r_ns_ack", "r_cores", "ack_every", "immediate_ack", "stall_rate_hz",
                   "stall_min_s", "stall_alpha", "max_ack_delay_s", "fc_window_bytes", "busy",
                   "link_bps", "rtt_s", "loss_prob", "queue_bytes", "rcvbuf_bytes", "cc",
                   "ack_fixed", "ack_floor", "time_friendly", "reno_beta")
#: Outputs in _finish's order: name, column of rates_bps (or -1).
_FINISH_OUTPUTS = (("goodput_bps", -1), ("limit", -1), ("rates_bps", 0), ("rates_bps", 1),
                   ("rates_bps", 2), ("rates_bps", 3), ("rates_bps", 4), ("rates_bps", 5),
                   ("loss_prob", -1), ("rcvbuf_drop_prob", -1), ("acks_per_packet", -1),
                   ("s_ns_per_goodput_packet", -1), ("r_ns_per_goodput_packet", -1),
                   ("sender_util", -1), ("receiver_util", -1), ("duration_s", -1),
                   ("rtt_eff_s", -1))


# ---------------------------------------------------------------------------
# numpy backend


def _evaluate_numpy(x: Inputs, out: Outputs) -> None:
    """Solve every scenario of ``x`` with the model run on whole arrays; fill ``out``."""
    n = len(x.payload_bytes)
    every = slice(None)
    with np.errstate(all="ignore"):
        w = np.empty((N_W, n))
        _prepare(w, every, *[getattr(x, name) for name in _PREPARE_FIELDS])
        _solve_start(w, w, every)
        active = np.flatnonzero(w[S_DONE] == 0.0)
        for _ in range(MAX_STEPS - 1):
            if not active.size:
                break
            # Only the scenarios still iterating: a compact copy of their rows.
            wa = w[:, active]
            _solve_step(wa, wa, every)
            w[:, active] = wa
            active = active[wa[S_DONE] == 0.0]
        results = _finish(w, every, w[S_YOUT], x.transfer_bytes, x.payload_bytes, x.s_cores,
                          x.r_cores)
    for (name, col), value in zip(_FINISH_OUTPUTS, results, strict=True):
        target = getattr(out, name)
        if col >= 0:
            target[:, col] = value
        else:
            target[:] = value


# ---------------------------------------------------------------------------
# entry point

#: Scenarios per task on the thread pool (either backend).
BLOCK = 16384

_pool: tuple[int, ThreadPoolExecutor] | None = None


def _threads() -> ThreadPoolExecutor:
    """One worker per usable core, made anew after a fork."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        _pool = (os.getpid(), ThreadPoolExecutor(max_workers=cores or 1))
    return _pool[1]


def backend_for(n: int, backend: str = "auto") -> str:
    """Which backend ``evaluate`` uses for ``n`` scenarios: "numpy" or "compiled".

    "auto": compiled, unless numba cannot be imported or QUICLAB_ANALYTIC_PURE
    is set (not "0"). The choice does not depend on ``n``, so a scenario gets
    the same bits in any batch, in any process on the same machine.
    """
    if backend not in ("auto", "numpy", "compiled"):
        raise ValueError(f"backend={backend!r}: one of auto, numpy, compiled")
    if backend == "numpy" or (backend == "auto" and os.environ.get("QUICLAB_ANALYTIC_PURE", "")
                              not in ("", "0")):
        return "numpy"
    from quiclab.sim.analytic.compiled import _compiled

    return "numpy" if _compiled() is None else "compiled"


def evaluate(inp: Inputs, backend: str = "auto") -> Outputs:
    """Solve the bottleneck model for every scenario (see the module docstring).

    ``backend``: "auto" (see ``backend_for``), "numpy" or "compiled" (numpy if
    numba cannot be imported). Large batches are split in blocks run on a
    thread per core.
    """
    x = inp.broadcast()
    n = len(x.payload_bytes)
    which = backend_for(n, backend)
    out = Outputs(**{f.name: np.empty(n, dtype=np.intp if f.name == "limit" else np.float64)
                     for f in fields(Outputs) if f.name != "rates_bps"},
                  rates_bps=np.empty((n, len(RESOURCES))))
    if which == "compiled":
        from quiclab.sim.analytic.compiled import _compiled

        kernel = _compiled()
        # (A read-only array would be another type for numba, hence another compilation.)
        args = [a if a.flags.writeable else a.copy()
                for a in [getattr(x, name) for name in _PREPARE_FIELDS] + [x.transfer_bytes]]
        outs = [out.goodput_bps, out.limit, out.rates_bps, out.loss_prob, out.rcvbuf_drop_prob,
                out.acks_per_packet, out.s_ns_per_goodput_packet, out.r_ns_per_goodput_packet,
                out.sender_util, out.receiver_util, out.duration_s, out.rtt_eff_s]

        def task(lo: int) -> None:
            kernel(*args, *outs, lo, min(lo + BLOCK, n))
    else:
        def task(lo: int) -> None:
            part = slice(lo, lo + BLOCK)
            _evaluate_numpy(Inputs(*[getattr(x, f.name)[part] for f in fields(Inputs)]),
                            Outputs(*[getattr(out, f.name)[part] for f in fields(Outputs)]))
    if n <= BLOCK:
        task(0)
        return out
    # Each block runs in a copy of the caller's context (np.errstate and the like).
    context = contextvars.copy_context()
    for _ in _threads().map(lambda lo: context.copy().run(task, lo), range(0, n, BLOCK)):
        pass
    return out
