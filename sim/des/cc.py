"""Congestion control and RTT estimation of the DES sender (RFC 9002, RFC 9438).

Windows are in bytes of UDP payload (RFC 9002 §7: "bytes in flight" counts
QUIC packets without UDP/IP overhead), times in seconds. Both controllers are
plain objects with the same three methods so that the sender never branches on
the algorithm's name:

- ``on_ack(acked_bytes, now_s, srtt_s)`` — called once per ACK frame with the
  newly acknowledged bytes, only when the sender was cwnd-limited and not in
  recovery (RFC 9002 §7.8, §7.3.2);
- ``on_congestion(now_s)`` — one multiplicative decrease per recovery period;
- ``on_persistent_congestion()`` — collapse to the minimum window (§7.6.2).
"""

from __future__ import annotations

import math
from typing import ClassVar

#: RFC 9002 §7.2: kInitialWindow — the TRANSPORT.md spec fixes it at 10 packets.
INITIAL_WINDOW_PACKETS = 10
#: RFC 9002 §7.2: kMinimumWindow = 2 × max_datagram_size.
MINIMUM_WINDOW_PACKETS = 2
#: RFC 9438 §4.1: C = 0.4 (segments / s³), β_cubic = 0.7.
CUBIC_C = 0.4
CUBIC_BETA = 0.7
#: RFC 9438 §4.3: α_cubic = 3 (1 − β) / (1 + β), the Reno-friendly additive increase.
CUBIC_ALPHA = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
#: RFC 9002 §7.3.2 / Appendix B.1: kLossReductionFactor = 0.5 for NewReno.
RENO_BETA = 0.5
#: RFC 9002 §6.1.1 kPacketThreshold, §6.1.2 kTimeThreshold, §6.1.2 kGranularity (s).
PACKET_THRESHOLD = 3
TIME_THRESHOLD = 9.0 / 8.0
GRANULARITY_S = 0.001
#: RFC 9002 §7.6.1: kPersistentCongestionThreshold.
PERSISTENT_CONGESTION_THRESHOLD = 3


class CongestionController:
    """What the sender uses of a congestion controller: the window (bytes), the
    slow-start threshold and the three events of the module docstring."""

    mss: float
    cwnd: float
    ssthresh: float
    congestion_events: int

    def on_ack(self, acked_bytes: float, now_s: float, srtt_s: float) -> None:
        raise NotImplementedError

    def on_congestion(self, now_s: float) -> None:
        raise NotImplementedError

    def on_persistent_congestion(self) -> None:
        raise NotImplementedError


class NewReno(CongestionController):
    """NewReno of RFC 9002 §7.3 (slow start, congestion avoidance, β = 0.5 unless the
    sender's model says otherwise: Behaviour.reno_beta, quic-go's 0.7)."""

    def __init__(self, max_datagram_bytes: int, beta: float = RENO_BETA):
        self.beta = beta
        self.mss = float(max_datagram_bytes)
        self.cwnd = INITIAL_WINDOW_PACKETS * self.mss
        self.ssthresh = math.inf
        self.congestion_events = 0

    def on_ack(self, acked_bytes: float, now_s: float, srtt_s: float) -> None:
        if self.cwnd < self.ssthresh:
            # RFC 9002 §7.3.1: slow start grows by the acknowledged bytes.
            self.cwnd += acked_bytes
        else:
            # RFC 9002 §7.3.3: one max_datagram_size per cwnd of acknowledged bytes.
            self.cwnd += self.mss * acked_bytes / self.cwnd

    def on_congestion(self, now_s: float) -> None:
        self.congestion_events += 1
        self.ssthresh = max(self.cwnd * self.beta, MINIMUM_WINDOW_PACKETS * self.mss)
        self.cwnd = self.ssthresh

    def on_persistent_congestion(self) -> None:
        self.cwnd = MINIMUM_WINDOW_PACKETS * self.mss


class Cubic(CongestionController):
    """CUBIC of RFC 9438 with fast convergence and the Reno-friendly region.

    ``w_max`` and ``w_est`` are kept in bytes; the cubic function itself is in
    segments of ``mss`` bytes as in RFC 9438 §4.2 (C in segments per s³).

    With ``time_rtt`` (Behaviour.cubic_reno_friendly = "time") the Reno-friendly
    estimate is RFC 8312's: W_est(t) = β·W_max + α_cubic·t / RTT (§4.2, eq. 4),
    with t the time since the epoch and RTT that estimator's minimum (as s2n-quic
    and Linux take it), and an ACK raises cwnd by at most half the bytes it
    acknowledges (Linux's cap, s2n-quic's too). Time spent waiting — a delayed
    ACK, a stall — then counts towards the window as if round trips had passed.
    ``smoothed`` ("time-srtt", quinn): RTT is the smoothed one, and an ACK raises
    cwnd by at most one datagram per datagram it acknowledges.
    """

    beta: ClassVar[float] = CUBIC_BETA

    def __init__(self, max_datagram_bytes: int, time_rtt: RttEstimator | None = None,
                 smoothed: bool = False):
        self.time_rtt = time_rtt
        self.time_smoothed = smoothed
        self.time_cap = 1.0 if smoothed else 0.5
        self.mss = float(max_datagram_bytes)
        self.cwnd = INITIAL_WINDOW_PACKETS * self.mss
        self.ssthresh = math.inf
        self.w_max = 0.0
        self.cwnd_prior = 0.0
        self.w_est = 0.0
        self.k_s = 0.0
        self.epoch_s = -1.0
        self.congestion_events = 0

    def on_ack(self, acked_bytes: float, now_s: float, srtt_s: float) -> None:
        cwnd = self.cwnd
        if cwnd < self.ssthresh:
            # RFC 9438 §4.10: slow start as in RFC 9002 §7.3.1.
            self.cwnd = cwnd + acked_bytes
            return
        mss = self.mss
        if self.epoch_s < 0:
            # Congestion avoidance entered without a recorded epoch (ssthresh
            # reached): start one here with W_max = cwnd (RFC 9438 §4.2).
            self.epoch_s = now_s
            self.w_max = cwnd
            self.cwnd_prior = cwnd
            self.w_est = cwnd
            self.k_s = 0.0
        time_rtt = self.time_rtt
        if time_rtt is None:
            # RFC 9438 §4.3: W_est += α_cubic · segments_acked / cwnd; α = 1 once W_est
            # reaches cwnd_prior (the window before the last reduction).
            alpha = 1.0 if self.w_est >= self.cwnd_prior else CUBIC_ALPHA
            self.w_est += alpha * acked_bytes * mss / cwnd
            ahead = srtt_s
            cap = math.inf
        else:
            # RFC 8312 §4.2 eq. 4 over the minimum (or smoothed) RTT; growth ≤ half
            # (or all) of the acked bytes.
            ahead = time_rtt.smoothed if self.time_smoothed else time_rtt.min
            self.w_est = (self.w_max * CUBIC_BETA
                          + CUBIC_ALPHA * (now_s - self.epoch_s) / ahead * mss)
            cap = cwnd + self.time_cap * acked_bytes
        # RFC 9438 §4.2 eq. 1, evaluated one RTT ahead (§4.4: target = W_cubic(t + RTT)).
        d = now_s - self.epoch_s + ahead - self.k_s
        w_cubic = CUBIC_C * d * d * d * mss + self.w_max
        if w_cubic < self.w_est:
            # RFC 9438 §4.3: Reno-friendly region.
            if time_rtt is None:
                self.cwnd = self.w_est
            elif self.w_est > cwnd:
                self.cwnd = self.w_est if self.w_est < cap else cap
            return
        # RFC 9438 §4.4: target clamped to [cwnd, 1.5 cwnd]; cwnd grows by
        # (target − cwnd) / cwnd per acknowledged segment.
        target = w_cubic if w_cubic < 1.5 * cwnd else 1.5 * cwnd
        if target > cwnd:
            grown = cwnd + (target - cwnd) * acked_bytes / cwnd
            self.cwnd = grown if grown < cap else cap

    def on_congestion(self, now_s: float) -> None:
        self.congestion_events += 1
        cwnd = self.cwnd
        self.cwnd_prior = cwnd
        # RFC 9438 §4.7 fast convergence: release bandwidth if W_max shrank.
        if cwnd < self.w_max:
            self.w_max = cwnd * (1.0 + CUBIC_BETA) / 2.0
        else:
            self.w_max = cwnd
        # RFC 9438 §4.6: ssthresh = cwnd · β_cubic (never below the minimum window).
        self.ssthresh = max(cwnd * CUBIC_BETA, MINIMUM_WINDOW_PACKETS * self.mss)
        self.cwnd = self.ssthresh
        self.epoch_s = now_s
        self.w_est = self.cwnd
        # RFC 9438 §4.2 eq. 2: K = ∛((W_max − cwnd_epoch) / C), windows in segments.
        # (Zero when fast convergence left W_max below the minimum window.)
        self.k_s = (max(0.0, self.w_max - self.cwnd) / self.mss / CUBIC_C) ** (1.0 / 3.0)

    def on_persistent_congestion(self) -> None:
        # RFC 9002 §7.6.2 and RFC 9438 §4.8: collapse and start a new epoch later.
        self.cwnd = MINIMUM_WINDOW_PACKETS * self.mss
        self.epoch_s = -1.0


def congestion_controller(cc: str, max_datagram_bytes: int,
                          time_rtt: RttEstimator | None = None,
                          reno_beta: float = RENO_BETA,
                          smoothed: bool = False) -> CongestionController:
    """The controller for a Scenario's ``cc``; BBR is approximated by CUBIC.

    ``time_rtt``: CUBIC's Reno-friendly estimate follows time over this
    estimator's minimum RTT (Behaviour.cubic_reno_friendly = "time"), or its
    smoothed RTT with ``smoothed`` ("time-srtt"); ``reno_beta``: NewReno's
    multiplicative decrease (Behaviour.reno_beta).
    Raises ValueError for an unknown name.
    """
    if cc in ("cubic", "bbr"):
        return Cubic(max_datagram_bytes, time_rtt, smoothed)
    if cc == "reno":
        return NewReno(max_datagram_bytes, reno_beta)
    raise ValueError(f'cc={cc!r}: allowed "cubic" | "reno" | "bbr"')


#: Linux TCP's loss probe and retransmission timeout (net/ipv4/tcp_output.c
#: tcp_schedule_loss_probe: 2 × srtt + TCP_TIMEOUT_MIN, 2 jiffies ≈ 2 ms; tcp.h
#: TCP_RTO_MIN 200 ms, RFC 6298 §2.4: RTO = srtt + 4 · rttvar, at least the minimum).
TLP_EXTRA_S = 0.002
RTO_MIN_S = 0.2
#: Loss detection and probes: RFC 9002 (QUIC), or Linux TCP's RACK-TLP (RFC 8985).
RECOVERY_MODES = ("rfc9002", "tcp")


class RttEstimator:
    """RFC 9002 §5: latest, minimum and smoothed RTT and its variation (seconds).

    The first sample comes from the handshake (§5.2), so the estimator is
    constructed with it. ``mode="tcp"`` gives Linux TCP's rules for the same
    quantities (RFC 8985 RACK-TLP): no ACK delay is reported (TCP's timestamps
    echo the delayed ACK's time, so samples keep it), a segment is lost once a
    later one was delivered and RACK's reordering window — a quarter of the
    minimum RTT — has passed beyond the latest RTT, and the first probe is a
    tail-loss probe at 2 × srtt, the next ones retransmission timeouts of at
    least 200 ms, doubling.
    """

    __slots__ = ("latest", "min", "smoothed", "tcp", "var")

    def __init__(self, first_sample_s: float, mode: str = "rfc9002"):
        if mode not in RECOVERY_MODES:
            raise ValueError(f"recovery={mode!r}: allowed " + " | ".join(RECOVERY_MODES))
        self.latest = first_sample_s
        self.min = first_sample_s
        self.smoothed = first_sample_s
        self.var = first_sample_s / 2.0
        self.tcp = mode == "tcp"

    def update(self, latest_s: float, ack_delay_s: float, max_ack_delay_s: float) -> None:
        """One RTT sample (§5.3); ``ack_delay_s`` is the peer's reported delay."""
        self.latest = latest_s
        if latest_s < self.min:
            self.min = latest_s
        if self.tcp:
            ack_delay_s = 0.0  # TCP reports none: the sample keeps it (RFC 7323 §4)
        # §5.3: ack_delay is capped at max_ack_delay once the handshake is confirmed,
        # and only subtracted when that does not push the sample below min_rtt.
        if ack_delay_s > max_ack_delay_s:
            ack_delay_s = max_ack_delay_s
        adjusted = latest_s - ack_delay_s if latest_s >= self.min + ack_delay_s else latest_s
        diff = self.smoothed - adjusted
        self.var = 0.75 * self.var + 0.25 * (diff if diff >= 0 else -diff)
        self.smoothed = 0.875 * self.smoothed + 0.125 * adjusted

    def loss_delay_s(self) -> float:
        """§6.1.2: kTimeThreshold · max(smoothed_rtt, latest_rtt), at least kGranularity;
        TCP (RFC 8985 §6.2): RACK.rtt (the latest delivered segment's RTT) plus the
        reordering window min_rtt / 4, at least a timer tick."""
        if self.tcp:
            return max(self.latest + self.min / 4.0, GRANULARITY_S)
        rtt = self.smoothed if self.smoothed > self.latest else self.latest
        return max(TIME_THRESHOLD * rtt, GRANULARITY_S)

    def pto_s(self, max_ack_delay_s: float) -> float:
        """§6.2.1: smoothed_rtt + max(4 · rttvar, kGranularity) + max_ack_delay; TCP:
        the retransmission timeout, srtt + 4 · rttvar, at least 200 ms."""
        if self.tcp:
            return max(self.smoothed + 4.0 * self.var, RTO_MIN_S)
        return self.smoothed + max(4.0 * self.var, GRANULARITY_S) + max_ack_delay_s

    def probe_s(self, max_ack_delay_s: float, count: int) -> float:
        """The ``count``-th probe timer (0: the first): PTO with exponential backoff
        (§6.2.1); TCP: a tail-loss probe at 2 × srtt + 2 ms (RFC 8985 §7.2), then
        retransmission timeouts, doubling (RFC 6298 §5.5)."""
        if self.tcp:
            if count == 0:
                return 2.0 * self.smoothed + TLP_EXTRA_S
            return self.pto_s(max_ack_delay_s) * (1 << (count - 1))
        return self.pto_s(max_ack_delay_s) * (1 << count)
