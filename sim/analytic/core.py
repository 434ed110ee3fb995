"""Closed-form bottleneck model, vectorised over scenarios with numpy.

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
  (see ``rcvbuf_drop_fraction``) and therefore act through the cwnd term and the
  extra ACKs and retransmissions they cost; if they make the cwnd term the
  minimum, the limit is reported as ``rcvbuf``.

Because loss depends on the rate (faster arrivals overflow a stalled
receiver's buffer sooner) and costs depend on loss (retransmissions, the
receiver's immediate ACKs on gaps), the model is solved by a short fixed-point
iteration, vectorised like everything else. Large batches are solved in
cache-sized blocks, one thread per core; every scenario goes through the same
floating-point operations whatever batch it is in, so its result does not
depend on the batch (bit for bit).
"""

from __future__ import annotations

import contextvars
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields

import numpy as np

#: Order of the resources in ``Outputs.rates`` columns.
RESOURCES = ("sender_cpu", "receiver_cpu", "interop", "link", "cwnd", "flow_control")
#: Kernel bookkeeping per datagram charged to the socket buffer (skb truesize
#: overhead beyond the payload; ~256 B on x86-64 Linux).
SKB_OVERHEAD_BYTES = 256.0
CUBIC_C = 0.4  # RFC 9438 §5.1
CUBIC_BETA = 0.7
RENO_BETA = 0.5
CC_CODES = {"cubic": 0, "reno": 1, "bbr": 2}
#: A side busy at least this fraction of the time is the limit (not the interplay).
CPU_BOUND_BUSY = 0.95
#: The receiver's ACK threshold is capped at this fraction of the sender's
#: window, in packets (TRANSPORT.md "ACKs"; the DES and ns-3 use the same).
ACK_WINDOW_FRACTION = 0.25


@dataclass
class Inputs:
    """Per-scenario inputs (arrays of equal length, or scalars). Times in ns/s as named."""

    payload_bytes: np.ndarray  # P: goodput bytes per data packet
    udp_payload_bytes: np.ndarray  # S
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


def rcvbuf_drop_fraction(arrival_Bps: np.ndarray, rcvbuf_bytes: np.ndarray,
                         stall_rate_hz: np.ndarray, stall_min_s: np.ndarray,
                         stall_alpha: np.ndarray) -> np.ndarray:
    """Fraction of arriving bytes dropped because the receiver stalled.

    Stalls arrive at ``stall_rate_hz`` (Poisson) and last a Pareto(τm, α) time;
    during a stall the buffer of B bytes absorbs B/r seconds of arrivals at r
    bytes/s, the rest overflows. Expected overflow time per stall:

    - x = B/r ≥ τm:  E[(τ−x)+] = τm^α · x^(1−α) / (α − 1)
    - x < τm:        E[τ] − x  = τm·α/(α−1) − x

    Drop fraction = stall_rate × E[(τ−x)+] (capped at 1).
    """
    r = np.maximum(arrival_Bps, 1.0)
    x = rcvbuf_bytes / r
    a = np.maximum(stall_alpha, 1.01)
    tm = stall_min_s
    safe_x = np.maximum(x, 1e-12)
    tail = np.where(x >= tm, tm**a * safe_x ** (1.0 - a) / (a - 1.0), tm * a / (a - 1.0) - x)
    return np.clip(stall_rate_hz * tail, 0.0, 1.0)


def stall_event_rate(arrival_Bps: np.ndarray, rcvbuf_bytes: np.ndarray,
                     stall_rate_hz: np.ndarray, stall_min_s: np.ndarray,
                     stall_alpha: np.ndarray) -> np.ndarray:
    """Stalls per second that overflow the buffer: rate × P(τ > B/r) = rate·(τm/x)^α.

    Each overflowing stall drops a burst of consecutive datagrams, which the
    sender's congestion controller sees as one loss event (RFC 9002 §7.3.2:
    one reduction per round trip).
    """
    x = rcvbuf_bytes / np.maximum(arrival_Bps, 1.0)
    a = np.maximum(stall_alpha, 1.01)
    tail = np.where(x >= stall_min_s, (stall_min_s / np.maximum(x, 1e-12)) ** a, 1.0)
    return stall_rate_hz * tail


def cc_window_packets(loss: np.ndarray, rtt_s: np.ndarray, cc: np.ndarray) -> np.ndarray:
    """Average congestion window (packets) for a loss probability per packet.

    CUBIC (RFC 9438 §5.1 and Appendix of Ha et al. 2008): the average window of
    the cubic function is (C·(3+β)/(4·(1−β)))^(1/4) · RTT^(3/4) / p^(3/4); CUBIC
    never does worse than its Reno-friendly estimate sqrt(3(1+β)/(2(1−β)p))…
    expressed with RFC 9438's α_cubic this equals Reno's 1.22/√p. Reno:
    Mathis et al. 1997, sqrt(3/(2p)). BBR is not loss-driven below ~20 % loss.
    """
    p = np.maximum(loss, 1e-12)
    reno = np.sqrt(1.5 / p)
    cubic = (CUBIC_C * (3 + CUBIC_BETA) / (4 * (1 - CUBIC_BETA))) ** 0.25 * \
        rtt_s ** 0.75 / p ** 0.75
    w = np.where(cc == 0, np.maximum(cubic, reno), reno)
    w = np.where(cc == 2, np.where(loss < 0.2, np.inf, reno), w)
    return np.where(loss <= 0, np.inf, w)


def _where_into(out: np.ndarray, mask: np.ndarray, value: float | np.ndarray) -> None:
    """``out = np.where(mask, value, out)`` in place; cheap when the mask is (almost) empty."""
    if mask.any():
        out[mask] = value if np.ndim(value) == 0 else value[mask]  # type: ignore[index]


def _blend(bits: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = np.where(mask, a, b)`` bit for bit, with ``bits = -mask`` as int64 (0 or all ones).

    np.where branches per element and mispredicts on the solver's irregular
    masks (~9 ns per element against ~1 ns for this blend of the float64 bit
    patterns: b ^ ((a ^ b) & bits)). ``out`` may be ``a`` or ``b``.
    """
    ai, bi = a.view(np.int64), b.view(np.int64)
    t = np.bitwise_xor(ai, bi)
    np.bitwise_and(t, bits, out=t)
    np.bitwise_xor(t, bi, out=out.view(np.int64))


class _RateModel:
    """``f(g)``: the smallest resource rate when the transfer runs at goodput ``g``.

    Invariants of the scenarios are computed once; each call costs a few dozen
    vector operations and keeps its intermediate arrays for the outputs. Terms
    that the whole block does not need (stalls, CUBIC, BBR, zero-loss rows) are
    skipped; every value is computed with the same operations in the same order
    either way, so the results do not depend on how scenarios are grouped.
    """

    def __init__(self, x: Inputs, P8: np.ndarray, rate_link: np.ndarray):
        self.x = x
        self.P8 = P8
        self.rate_link = rate_link
        self.s_base = x.s_ns_packet + x.s_ns_call / x.s_segments
        self.r_base = x.r_ns_packet + x.r_ns_call / x.r_segments
        self.s_rate_num = x.s_cores * P8
        self.r_rate_num = x.r_cores * P8
        self.ack_base = 1.0 / np.maximum(x.ack_every, 1e-9)
        self.ack_wait = np.maximum(x.ack_every - 1.0, 0.0)
        self.arrival_per_pkt = x.udp_payload_bytes + SKB_OVERHEAD_BYTES
        self.keep = 1.0 - x.loss_prob  # path delivery probability
        self.alpha = np.maximum(x.stall_alpha, 1.01)
        self.has_stalls = x.stall_rate_hz > 0
        self.any_stalls = bool(self.has_stalls.any())
        self.all_stalls = bool(self.has_stalls.all())
        with np.errstate(divide="ignore"):
            self.log_tm = np.log(np.maximum(x.stall_min_s, 1e-12))
        # rate·τm^α, the scale of both the overflow tail and the event rate.
        self.stall_scale = x.stall_rate_hz * np.exp(self.alpha * self.log_tm)
        self.mean_stall = x.stall_min_s * self.alpha / (self.alpha - 1.0)  # E[τ] = τm·α/(α−1)
        self.log_B = np.log(np.maximum(x.rcvbuf_bytes, 1.0))
        self.fc_bits = np.where(x.fc_window_bytes > 0, x.fc_window_bytes * 8.0, np.inf)
        self.fc_pkts = self.fc_bits / P8  # the flow-control window in full data packets
        # A packet is acknowledged only after it has been serialised onto the link
        # and the receiver has processed it: both add to the path's RTT in the
        # time a window must cover (a few µs at 1500 B, ~12 µs for 9000 B at 10 Gbit/s).
        self.rtt_base = (x.rtt_s + x.wire_bytes * 8.0 / np.maximum(x.link_bps, 1.0)
                         + self.r_base * 1e-9)
        self.cubic_k = (CUBIC_C * (3 + CUBIC_BETA) / (4 * (1 - CUBIC_BETA))) ** 0.25
        self.is_cubic = x.cc == 0
        self.any_cubic = bool(self.is_cubic.any())
        self.all_cubic = bool(self.is_cubic.all())
        self.is_bbr = x.cc == 2
        self.any_bbr = bool(self.is_bbr.any())

    def loss_free(self) -> np.ndarray:
        """The bound without buffer drops: CPU, pair, link (an upper end for the root)."""
        x = self.x
        retx = x.loss_prob / np.maximum(1.0 - x.loss_prob, 1e-9)
        s_ns = (1.0 + retx) * self.s_base + self.ack_base * x.s_ns_ack
        r_ns = self.r_base + self.ack_base * x.r_ns_ack
        rate_s = x.s_cores * self.P8 / (s_ns * 1e-9)
        rate_r = x.r_cores * self.P8 / (r_ns * 1e-9)
        return np.maximum(np.minimum.reduce([rate_s, rate_r, x.busy * np.minimum(rate_s, rate_r),
                                             self.rate_link]), 1.0)

    def _stall_losses(self, pkt_rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Buffer drop probability and overflowing stalls per second at ``pkt_rate``.

        Pareto tail, see rcvbuf_drop_fraction and stall_event_rate: with
        x = B / r, overflow tail = rate·τm^α·x^(1−α)/(α−1) and events =
        rate·τm^α·x^(−α) while x ≥ τm; below, E[τ] − x and every stall.
        """
        x = self.x
        log_x = self.log_B - np.log(pkt_rate * self.arrival_per_pkt)
        scaled = self.stall_scale * np.exp((1.0 - self.alpha) * log_x)  # rate·τm^α·x^(1−α)
        tail = scaled / (self.alpha - 1.0)
        event_rate = scaled * np.exp(-log_x)
        below = ~(log_x >= self.log_tm)  # the buffer holds less than the shortest stall
        if below.any():
            i = np.flatnonzero(below)
            tail[i] = x.stall_rate_hz[i] * (self.mean_stall[i] - np.exp(log_x[i]))
            event_rate[i] = x.stall_rate_hz[i]
        p_buf = np.clip(tail, 0.0, 1.0, out=tail)
        if not self.all_stalls:
            no_stalls = ~self.has_stalls
            p_buf[no_stalls] = 0.0
            event_rate[no_stalls] = 0.0
        return p_buf, event_rate

    def __call__(self, goodput: np.ndarray) -> np.ndarray:
        x = self.x
        pkt_rate = np.maximum(goodput / self.P8, 1.0)
        if self.any_stalls:
            self.p_buf, event_rate = p_buf, event_rate = self._stall_losses(pkt_rate)
            self.loss = loss = 1.0 - self.keep * (1.0 - p_buf)
            # Loss events seen by congestion control: every random path loss, but
            # one per overflowing stall however many datagrams it drops.
            events = np.minimum(x.loss_prob + event_rate / pkt_rate, 1.0)
        else:  # no buffer drops anywhere in the block: the path's loss alone
            self.p_buf = np.zeros_like(pkt_rate)
            self.loss = loss = 1.0 - self.keep
            events = np.minimum(x.loss_prob, 1.0)
        # The sender's window must also cover the receiver's ACK turnaround: it
        # waits for ack_every − 1 more packets, at most max_ack_delay (RFC 9000
        # §13.2.1) — but its threshold is capped at ACK_WINDOW_FRACTION of the
        # window the sender has, the one loss leaves it (sqrt(1.5/p) packets) or
        # the flow-control window, whichever is smaller (TRANSPORT.md, "ACKs"),
        # else the sender would stall waiting for an ACK.
        w_loss = np.sqrt(1.5 / np.maximum(events, 1e-300))
        _where_into(w_loss, ~(events > 0), np.inf)
        np.minimum(w_loss, self.fc_pkts, out=w_loss)
        ack_eff = np.minimum(self.ack_wait + 1.0,
                             np.maximum(2.0, ACK_WINDOW_FRACTION * w_loss))
        self.rtt_eff = rtt_eff = self.rtt_base + np.minimum((ack_eff - 1.0) / pkt_rate,
                                                            x.max_ack_delay_s)
        # After a loss, a receiver that ACKs out-of-order arrivals immediately
        # sends one ACK per packet until the retransmission fills the gap,
        # about one path RTT's worth of packets (RFC 9000 §13.2.1).
        self.acks = acks = np.minimum(self.ack_base + x.immediate_ack * loss * pkt_rate * x.rtt_s,
                                      1.0)
        retx = loss / np.maximum(1.0 - loss, 1e-9)  # extra sends per goodput packet
        self.s_ns = s_ns = (1.0 + retx) * self.s_base + acks * x.s_ns_ack
        self.r_ns = r_ns = self.r_base + acks * x.r_ns_ack
        self.rate_s = rate_s = self.s_rate_num / (s_ns * 1e-9)
        self.rate_r = rate_r = self.r_rate_num / (r_ns * 1e-9)
        self.rate_pair = rate_pair = x.busy * np.minimum(rate_s, rate_r)
        # Congestion window for the loss-event rate (see cc_window_packets).
        with np.errstate(divide="ignore"):
            log_p = np.log(np.maximum(events, 1e-300))
        w = np.sqrt(1.5) * np.exp(-0.5 * log_p)  # Reno
        if self.any_cubic:
            cubic = self.cubic_k * np.exp(0.75 * (np.log(rtt_eff) - log_p))
            if self.all_cubic:
                np.maximum(cubic, w, out=w)
            else:
                np.maximum(cubic, w, out=cubic)
                w[self.is_cubic] = cubic[self.is_cubic]
        if self.any_bbr:
            _where_into(w, self.is_bbr & (events < 0.2), np.inf)
        _where_into(w, events <= 0, np.inf)
        self.rate_cc = rate_cc = w * self.P8 / rtt_eff
        # Flow control: at most the receiver's window in flight per (effective) RTT.
        self.rate_fc = rate_fc = self.fc_bits / rtt_eff
        f = np.minimum(rate_s, rate_r)
        for rate in (rate_pair, self.rate_link, rate_cc, rate_fc):
            np.minimum(f, rate, out=f)
        return np.maximum(f, 1.0, out=f)


#: Scenarios evaluated per block: the vector operations of a solver step then
#: stay in the CPU cache instead of streaming 8-byte arrays through memory.
BLOCK = 16384

_pool: tuple[int, ThreadPoolExecutor] | None = None


def _threads() -> ThreadPoolExecutor:
    """One worker per usable core (numpy's loops release the GIL), made anew after a fork."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        _pool = (os.getpid(), ThreadPoolExecutor(max_workers=cores or 1))
    return _pool[1]


def evaluate(inp: Inputs, iterations: int = 8) -> Outputs:
    """Solve the bottleneck model for every scenario, block by block (see _evaluate).

    Blocks are independent and run on a thread per core.
    """
    x = inp.broadcast()
    n = len(x.payload_bytes)
    if n <= BLOCK:
        return _evaluate(x, iterations)
    out = Outputs(**{f.name: np.empty(n, dtype=np.intp if f.name == "limit" else np.float64)
                     for f in fields(Outputs) if f.name != "rates_bps"},
                  rates_bps=np.empty((n, len(RESOURCES))))

    def block(i: int) -> None:
        part = slice(i, i + BLOCK)
        _evaluate(Inputs(*[getattr(x, f.name)[part] for f in fields(Inputs)]), iterations,
                  out=Outputs(*[getattr(out, f.name)[part] for f in fields(Outputs)]))

    # Each block runs in a copy of the caller's context, so np.errstate holds there too.
    context = contextvars.copy_context()
    for _ in _threads().map(lambda i: context.copy().run(block, i), range(0, n, BLOCK)):
        pass
    return out


def _evaluate(x: Inputs, iterations: int = 8, out: Outputs | None = None) -> Outputs:
    """Solve the bottleneck model for every scenario (see the module docstring).

    Goodput ``g`` is the fixed point ``g = f(g)``, where ``f`` gives the
    smallest resource rate when the transfer runs at ``g`` (loss from the
    receive buffer grows with ``g``, the delayed-ACK wait shrinks). ``f`` is
    non-increasing, so the root of ``log f(e^y) − y`` is bracketed by
    ``[log f(g_hi), log g_hi]`` with ``g_hi`` the loss-free bound, and found
    with the Illinois variant of regula falsi — ``iterations`` evaluations of
    ``f`` for every scenario at once. ``x`` must be broadcast; results go to
    ``out`` (arrays of the block's length) when given.
    """
    P8 = x.payload_bytes * 8.0
    link_goodput = x.link_bps * x.payload_bytes / x.wire_bytes
    bdp = x.link_bps / 8.0 * x.rtt_s
    # Drop-tail queue smaller than the BDP leaves the link idle after each
    # multiplicative decrease: W_max = BDP + Q, the window falls to β·W_max
    # and climbs back; the link is idle while the window is below the BDP.
    beta = np.where(x.cc == 1, RENO_BETA, CUBIC_BETA)
    wmax = bdp + x.queue_bytes
    low = beta * wmax
    idle = np.where(low < bdp, (bdp - low) ** 2 / np.maximum(2 * bdp * (wmax - low), 1e-9), 0.0)
    util = np.where(x.cc == 2, 1.0, np.clip(1.0 - idle, 0.05, 1.0))
    rate_link = link_goodput * util
    f = _RateModel(x, P8, rate_link)

    # Bracket the root in log space: g_hi from the loss-free CPU/link bounds.
    g_hi = f.loss_free()
    y_b = np.log(g_hi)
    h_b = np.log(f(g_hi)) - y_b  # ≤ 0
    g_lo = np.exp(y_b + h_b)
    y_a = np.log(g_lo)
    h_a = np.log(f(g_lo)) - y_a  # ≥ 0
    # Illinois: the end that stays twice in a row has its weight halved; the
    # factors are exactly 1 or 0.5, so scaling by them equals halving or not.
    halve_a = np.ones_like(y_a)
    halve_b = np.ones_like(y_b)
    for _ in range(max(iterations - 2, 1)):
        denom = h_a - h_b
        with np.errstate(divide="ignore", invalid="ignore"):
            y_c = (y_b * h_a - y_a * h_b) / denom
        _where_into(y_c, ~(np.abs(denom) > 1e-15), y_a)
        h_c = np.log(f(np.exp(y_c))) - y_c
        right = h_c < 0  # root lies left of c: c replaces b
        bits = np.negative(right.view(np.int8), dtype=np.int64)
        _blend(bits, y_c, y_b, out=y_b)
        _blend(bits, h_c, np.multiply(h_b, halve_b, out=h_b), out=h_b)
        _blend(bits, y_a, y_c, out=y_a)
        _blend(bits, np.multiply(h_a, halve_a, out=h_a), h_c, out=h_a)
        np.subtract(1.0, 0.5 * right, out=halve_a)  # a stayed: halve it next time
        np.add(0.5, 0.5 * right, out=halve_b)  # b stayed
    # Evaluate once more at the solution; report exactly the bound the final
    # rates imply (goodput is the minimum of the rates returned).
    goodput = f(np.exp(0.5 * (y_a + y_b)))
    rate_s, rate_r, rate_pair = f.rate_s, f.rate_r, f.rate_pair
    rate_cc, rate_fc = f.rate_cc, f.rate_fc
    p_buf, loss, acks, rtt_eff, s_ns, r_ns = f.p_buf, f.loss, f.acks, f.rtt_eff, f.s_ns, f.r_ns
    rates = np.stack([rate_s, rate_r, rate_pair, rate_link, rate_cc, rate_fc], axis=1,
                     out=None if out is None else out.rates_bps)
    limit = np.argmin(rates, axis=1)
    # Ties between CPU and interplay: name the CPU when the pair keeps it busy at
    # least CPU_BOUND_BUSY of the time (seed 002 §4.4: "server limited … with a
    # server CPU usage above 95 %"; the DES and ns-3 use the same, BUSY_LIMIT).
    limit = np.where((limit == 2) & (x.busy >= CPU_BOUND_BUSY),
                     np.where(rate_s <= rate_r, 0, 1), limit)
    # Loss that comes (mostly) from the receive buffer: call the limit rcvbuf.
    limit = np.where((limit == 4) & (p_buf > x.loss_prob), 6, limit)
    # Startup: handshake (1.5 RTT) plus slow start from 10 packets to the
    # steady window, during which on average half the rate is achieved.
    w_target = np.maximum(goodput * rtt_eff / P8, 10.0)
    ss_rounds = np.log2(np.maximum(w_target / 10.0, 1.0))
    startup = 1.5 * x.rtt_s + ss_rounds * rtt_eff
    sent_in_ss = np.minimum(x.transfer_bytes, 2.0 * w_target * x.payload_bytes)
    duration = np.maximum(startup + np.maximum(x.transfer_bytes - sent_in_ss, 0.0) * 8.0 / goodput,
                          1.5 * x.rtt_s + x.transfer_bytes * 8.0 / goodput)
    effective = x.transfer_bytes * 8.0 / duration
    result = Outputs(
        goodput_bps=effective,
        limit=limit,
        rates_bps=rates,
        loss_prob=loss,
        rcvbuf_drop_prob=p_buf,
        acks_per_packet=acks,
        s_ns_per_goodput_packet=s_ns,
        r_ns_per_goodput_packet=r_ns,
        sender_util=effective / rate_s * x.s_cores,
        receiver_util=effective / rate_r * x.r_cores,
        duration_s=duration,
        rtt_eff_s=rtt_eff,
    )
    if out is None:
        return result
    for fld in fields(Outputs):
        if fld.name != "rates_bps":
            np.copyto(getattr(out, fld.name), getattr(result, fld.name))
    return out
