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
iteration, vectorised like everything else.
"""

from __future__ import annotations

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


def evaluate(inp: Inputs, iterations: int = 12) -> Outputs:
    """Solve the bottleneck model for every scenario (see the module docstring)."""
    x = inp.broadcast()
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

    goodput = np.minimum(rate_link, 10e12)
    loss = x.loss_prob.copy()
    p_buf = np.zeros_like(loss)
    acks = 1.0 / np.maximum(x.ack_every, 1e-9)
    rtt_eff = x.rtt_s
    first = True
    for _ in range(iterations):
        pkt_rate = goodput / P8
        # The sender's window must also cover the receiver's ACK turnaround: it
        # waits for ack_every packets, at most max_ack_delay (RFC 9000 §13.2.1).
        rtt_eff = x.rtt_s + np.minimum(np.maximum(x.ack_every - 1.0, 0.0)
                                       / np.maximum(pkt_rate, 1.0), x.max_ack_delay_s)
        arrival = pkt_rate * (x.udp_payload_bytes + SKB_OVERHEAD_BYTES)
        p_buf = rcvbuf_drop_fraction(arrival, x.rcvbuf_bytes, x.stall_rate_hz,
                                     x.stall_min_s, x.stall_alpha)
        loss = 1.0 - (1.0 - x.loss_prob) * (1.0 - p_buf)
        # Loss events seen by congestion control: every random path loss, but a
        # whole burst of buffer drops per overflowing stall.
        events = x.loss_prob + stall_event_rate(arrival, x.rcvbuf_bytes, x.stall_rate_hz,
                                                x.stall_min_s, x.stall_alpha) / \
            np.maximum(pkt_rate, 1.0)
        # After a loss, a receiver that ACKs out-of-order arrivals immediately
        # sends one ACK per packet until the retransmission fills the gap,
        # about one path RTT's worth of packets (RFC 9000 §13.2.1) — these ACKs
        # are immediate, so the receiver's ACK delay does not stretch the gap.
        gap_acks = x.immediate_ack * loss * pkt_rate * x.rtt_s
        acks = 1.0 / np.maximum(x.ack_every, 1e-9) + gap_acks
        acks = np.minimum(acks, 1.0)
        retx = loss / np.maximum(1.0 - loss, 1e-9)  # extra sends per goodput packet
        s_ns = (1.0 + retx) * (x.s_ns_packet + x.s_ns_call / x.s_segments) + acks * x.s_ns_ack
        r_ns = x.r_ns_packet + x.r_ns_call / x.r_segments + acks * x.r_ns_ack
        rate_s = x.s_cores * P8 / (s_ns * 1e-9)
        rate_r = x.r_cores * P8 / (r_ns * 1e-9)
        rate_pair = x.busy * np.minimum(rate_s, rate_r)
        w = cc_window_packets(np.minimum(events, 1.0), rtt_eff, x.cc)
        rate_cc = w * P8 / rtt_eff
        # Flow control: at most the receiver's window in flight per (effective) RTT.
        rate_fc = np.where(x.fc_window_bytes > 0, x.fc_window_bytes * 8.0 / rtt_eff, np.inf)
        new = np.minimum.reduce([rate_s, rate_r, rate_pair, rate_link, rate_cc, rate_fc])
        # Damped (geometric) update: the loss ↔ rate feedback converges in a few steps.
        goodput = new if first else np.sqrt(goodput * new)
        first = False
    # Report the bound the final rates imply (the damped value is only the
    # iteration's state): goodput is exactly the minimum of the rates returned.
    goodput = new
    rates = np.stack([rate_s, rate_r, rate_pair, rate_link, rate_cc, rate_fc], axis=1)
    limit = np.argmin(rates, axis=1)
    # Ties between CPU and interplay: name the CPU when the pair is fully busy.
    limit = np.where((limit == 2) & (x.busy >= 0.999),
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
    return Outputs(
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
