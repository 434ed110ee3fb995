"""ACK processing, loss detection and timers of the DES sender (RFC 9002 §5–7).

A mixin of :class:`quiclab.sim.des.sender.Sender`, kept apart so that the send
path and the recovery logic each fit on a screen. State it uses (set up by the
sender): ``sent`` (pn → record, in pn order), ``pending`` (unacknowledged pns
below the largest acknowledged: the only candidates for loss), ``rtt``,
``cc``, ``retx``, ``inflight``, flow-control and stream state.

Records are tuples ``(sent_s, size_bytes, count, stream, offset, length)``;
``causes`` maps the pn of a dropped packet to its drop cause (link.CAUSE_*),
written by the path and the receiver, read here to attribute congestion events.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Final

from quiclab.sim.des.cc import (
    PACKET_THRESHOLD,
    PERSISTENT_CONGESTION_THRESHOLD,
    CongestionController,
    RttEstimator,
)

#: A sent record: (sent_s, size_bytes, count, stream, offset, length).
Record = tuple[float, int, int, int, int, int]
R_TIME: Final = 0
R_SIZE: Final = 1
R_COUNT: Final = 2
R_SID: Final = 3
R_OFF: Final = 4
R_LEN: Final = 5
#: ACK ranges ((lo, hi), …), highest first; (stream, value) pairs.
Ranges = tuple[tuple[int, int], ...]
Pairs = tuple[tuple[int, int], ...]
#: An ACK frame (built by the receiver): arrival time, ACK packets it stands
#: for, ranges, ack delay (s), MAX_DATA, ((sid, MAX_STREAM_DATA), …),
#: {pn: delivered} for partly delivered units, ((sid, size), …) new requests.
AckFrame = tuple[float, float, Ranges, float, int, Pairs, dict[int, int], Pairs]
A_TIME: Final = 0
A_WEIGHT: Final = 1
A_RANGES: Final = 2
A_DELAY: Final = 3
A_MAX_DATA: Final = 4
A_STREAMS: Final = 5
A_PARTIAL: Final = 6
A_REQUESTS: Final = 7
#: A datagram (or unit) on its way into the receiver: (arrival_s, pn, delivered
#: packets, record, largest acknowledged pn the sender knew, receive-buffer bytes
#: per datagram, and for a GSO batch that reaches a GRO receiver whole the skb it
#: is part of (its first pn, else -1) and that skb's truesize).
Arrival = tuple[float, int, int, Record, int, float, int, float]
#: RFC 9002 §6.2.4: up to two probe datagrams per PTO.
PTO_PROBES = 2


#: RFC 9002 §7.8 — when may cwnd grow on an ACK (the ``cwnd_validation`` option):
#: "app" (default): unless the send loop, since the previous ACK, stopped with room in
#: cwnd but nothing it could send (no data, no flow-control credit) — a sender that only
#: its own CPU (or the pair's interplay hold, which models a slower send loop) holds
#: back is not under-using its window; this is
#: what the receive-buffer drops of seed 002 Fig. 4 need (a CPU-bound sender's flight
#: must outgrow the 208 KiB buffer, ~130 datagrams, far beyond its ~15-packet BDP);
#: "inflight": only when bytes in flight (nearly) fill cwnd; "off": on every ACK.
VALIDATE_APP, VALIDATE_INFLIGHT, VALIDATE_OFF = range(3)
VALIDATIONS = {"app": VALIDATE_APP, "inflight": VALIDATE_INFLIGHT, "off": VALIDATE_OFF}

class Recovery:
    """RFC 9002 loss recovery for the sender (see the module docstring)."""

    # Provided by Sender.__init__ (declared for type checkers).
    sent: dict[int, Record]
    pending: set[int]
    causes: dict[int, int]
    largest_acked: int
    inflight: int
    max_inflight: int
    cwnd_blocked: bool
    app_limited: bool
    validation: int
    recovery_start_s: float
    retx: deque[tuple[int, int, int]]
    streams: dict[int, list[int]]
    rr: deque[int]
    max_data: int
    rtt: RttEstimator
    cc: CongestionController
    peer_max_ack_delay_s: float
    stream_bytes: int
    payload: int
    segments: int
    last_sent_s: float
    pto_count: int
    probes: int
    timer_at: float
    pto_backoff_s: float
    acks_received: float
    declared_lost: int
    pto_fired: int
    events_by_cause: list[int]
    qlog: Any

    def open_stream(self, sid: int, size: int) -> None:  # pragma: no cover - Sender's
        raise NotImplementedError

    # ------------------------------------------------------------------- ACKs
    def process_ack(self, t: float, ack: AckFrame) -> None:
        """RFC 9002 §5–7 for one ACK frame, processed (CPU done) at ``t``."""
        self.acks_received += ack[A_WEIGHT]
        # Flow control and requests ride on the ACK (MAX_DATA, MAX_STREAM_DATA).
        if ack[A_MAX_DATA] > self.max_data:
            self.max_data = ack[A_MAX_DATA]
        if ack[A_STREAMS]:
            for sid, smax in ack[A_STREAMS]:
                st = self.streams.get(sid)
                if st is not None and smax > st[2]:
                    st[2] = smax
        if ack[A_REQUESTS]:
            for sid, size in ack[A_REQUESTS]:
                self.open_stream(sid, size)
        ranges = ack[A_RANGES]
        if not ranges:
            return
        largest = ranges[0][1]
        la = self.largest_acked
        if largest > la and ranges[0][0] <= la + 1 and not self.pending and not ack[A_PARTIAL]:
            # The common case, in order and nothing outstanding below: everything
            # up to `largest` is acknowledged (the general path below does the same).
            sent = self.sent
            acked = 0
            newest_s = -1.0
            rec = None
            for pn in range(la + 1, largest + 1):
                rec = sent.pop(pn, None)
                if rec is not None:
                    acked += rec[R_SIZE]
                    newest_s = rec[R_TIME]
            self.inflight -= acked
            self.largest_acked = largest
            if rec is not None:  # `rec` is the largest's record (RFC 9002 §5.1 sample)
                self.rtt.update(t - rec[R_TIME], ack[A_DELAY], self.peer_max_ack_delay_s)
            if acked:
                self.pto_count = 0
                self._grow(acked, newest_s, t)
            self.arm_timer()
            return
        partial = ack[A_PARTIAL]
        sent = self.sent
        pending = self.pending
        acked_bytes = 0.0
        newest_s = -1.0  # send time of the last-sent newly acknowledged packet
        # RFC 9002 §5.1: an RTT sample only if the largest acknowledged is newly acked.
        sample = sent.get(largest)
        if largest > self.largest_acked:
            start = self.largest_acked + 1
            upper = largest + 1  # pns in [hi + 1, upper) are gaps in the ranges
            for lo, hi in ranges:
                if hi < start:
                    break
                for pn in range(hi + 1, upper):
                    if pn in sent:
                        pending.add(pn)
                for pn in range(lo if lo > start else start, hi + 1):
                    rec = sent.pop(pn, None)
                    if rec is not None:
                        if partial and pn in partial:
                            acked_bytes += self._partly_acked(t, pn, rec, partial[pn])
                        else:
                            acked_bytes += rec[R_SIZE]
                            self.inflight -= rec[R_SIZE]
                        if rec[R_TIME] > newest_s:
                            newest_s = rec[R_TIME]
                upper = lo
            for pn in range(start, upper):
                if pn in sent:
                    pending.add(pn)
            self.largest_acked = largest
        if pending:
            for pn in sorted(pending):
                if pn > largest:
                    break
                for lo, hi in ranges:
                    if lo <= pn <= hi:
                        pending.discard(pn)
                        rec = sent.pop(pn, None)
                        if rec is not None:
                            if partial and pn in partial:
                                acked_bytes += self._partly_acked(t, pn, rec, partial[pn])
                            else:
                                acked_bytes += rec[R_SIZE]
                                self.inflight -= rec[R_SIZE]
                            if rec[R_TIME] > newest_s:
                                newest_s = rec[R_TIME]
                        break
                    if hi < pn:
                        break
        if sample is not None and largest not in sent:
            self.rtt.update(t - sample[R_TIME], ack[A_DELAY], self.peer_max_ack_delay_s)
        if acked_bytes:
            self.pto_count = 0
            self._grow(acked_bytes, newest_s, t)
        if pending:
            self.detect_lost(t)
        self.arm_timer()

    def _partly_acked(self, t: float, pn: int, rec: Record, got: int) -> float:
        """Batch granularity: only ``got`` packets of the unit arrived; the tail is lost."""
        self.inflight -= rec[R_SIZE]
        count = rec[R_COUNT]
        delivered_len = min(rec[R_LEN], got * self.stream_bytes)
        self.declared_lost += count - got
        self._lost_data(rec[R_SID], rec[R_OFF] + delivered_len, rec[R_LEN] - delivered_len)
        self._congestion(t, rec[R_TIME], self.causes.pop(pn, 0))
        return rec[R_SIZE] * got / count

    def _grow(self, acked_bytes: float, newest_s: float, t: float) -> None:
        cc = self.cc
        # RFC 9002 §7.8 (VALIDATIONS): grow unless the sender was app-limited since the
        # last ACK; or (opt-in) only when bytes in flight nearly fill cwnd (Linux's rule
        # in slow start: cwnd < 2 × bytes in flight); or on every ACK.
        if self.validation == VALIDATE_APP:
            limited = not self.app_limited
        elif self.validation == VALIDATE_OFF:
            limited = True
        elif cc.cwnd < cc.ssthresh:
            limited = self.cwnd_blocked or self.max_inflight * 2 > cc.cwnd
        else:
            limited = self.cwnd_blocked or (
                self.max_inflight + self.payload * self.segments >= cc.cwnd)
        self.cwnd_blocked = False
        self.app_limited = False
        self.max_inflight = self.inflight
        # RFC 9002 §7.3.2: no growth for packets sent before recovery began.
        if limited and newest_s > self.recovery_start_s:
            cc.on_ack(acked_bytes, t, self.rtt.smoothed)

    def detect_lost(self, t: float) -> None:
        """RFC 9002 §6.1: packet threshold 3 and time threshold on pns below largest acked."""
        loss_delay = self.rtt.loss_delay_s()
        largest = self.largest_acked
        sent = self.sent
        pending = self.pending
        lost: list[int] = []
        for pn in sorted(pending):
            rec = sent.get(pn)
            if rec is None:
                pending.discard(pn)
            elif pn <= largest - PACKET_THRESHOLD or rec[R_TIME] + loss_delay <= t:
                lost.append(pn)
        if not lost:
            return
        first_s = last_s = 0.0
        causes = self.causes
        cause = causes.pop(lost[0], 0)
        qlog = self.qlog
        for pn in lost:
            pending.discard(pn)
            rec = sent.pop(pn)
            if qlog is not None:
                qlog.lost(t, pn, rec[R_SIZE], pn <= largest - PACKET_THRESHOLD)
            self.inflight -= rec[R_SIZE]
            self.declared_lost += rec[R_COUNT]
            self._lost_data(rec[R_SID], rec[R_OFF], rec[R_LEN])
            if causes:
                causes.pop(pn, None)
            if pn == lost[0]:
                first_s = rec[R_TIME]
            last_s = rec[R_TIME]
        self._congestion(t, last_s, cause)
        # RFC 9002 §7.6: persistent congestion — every packet over a span longer
        # than 3 × PTO lost (checked within one detection round).
        span_limit = self.rtt.pto_s(self.peer_max_ack_delay_s) * PERSISTENT_CONGESTION_THRESHOLD
        if (not self.rtt.tcp and len(lost) >= 2 and lost[-1] - lost[0] + 1 == len(lost)
                and last_s - first_s > span_limit):
            self.cc.on_persistent_congestion()

    def _lost_data(self, sid: int, off: int, length: int) -> None:
        # TRANSPORT.md: a lost packet's bytes go out again (new pn) before new data.
        if length > 0:
            self.retx.append((sid, off, length))

    def _congestion(self, t: float, newest_lost_s: float, cause: int) -> None:
        """One congestion event per recovery period (RFC 9002 §7.3.2).

        ``cause`` is the drop cause of the first lost packet (for the limit rule).
        """
        if newest_lost_s > self.recovery_start_s:
            self.recovery_start_s = t
            self.cc.on_congestion(t)
            self.events_by_cause[cause] += 1
            if self.qlog is not None:
                self.qlog.congestion(t, self)

    # ----------------------------------------------------------------- timers
    def arm_timer(self) -> None:
        """RFC 9002 §6.2.1 / Appendix A.8: loss time if any, else PTO while in flight."""
        # PTO period with exponential backoff (cached: the send path re-arms it per call).
        self.pto_backoff_s = self.rtt.probe_s(self.peer_max_ack_delay_s, self.pto_count)
        if self.pending:
            sent = self.sent
            earliest = min((sent[pn][R_TIME] for pn in self.pending if pn in sent),
                           default=math.inf)
            self.timer_at = earliest + self.rtt.loss_delay_s()
        elif self.inflight > 0:
            self.timer_at = self.last_sent_s + self.pto_backoff_s
        else:
            self.timer_at = math.inf

    def on_timer(self, t: float) -> None:
        if self.pending:
            self.detect_lost(t)
        else:
            # RFC 9002 §6.2.4: PTO — probe with up to two packets, regardless of cwnd;
            # with nothing new to send, the oldest unacknowledged data goes again.
            self.pto_count += 1
            self.pto_fired += 1
            if self.qlog is not None:
                self.qlog.pto(t, self.pto_count)
            self.probes = PTO_PROBES
            if self.rtt.tcp:
                # RFC 8985 §7.3: a tail-loss probe sends one segment; a retransmission
                # timeout after it (RFC 5681 §3.1, RFC 6298 §5) is a congestion event
                # that leaves the loss window (here the minimum window, 2 segments).
                self.probes = 1
                if self.pto_count >= 2:
                    if self.last_sent_s > self.recovery_start_s:
                        self.recovery_start_s = t
                        self.cc.on_congestion(t)
                    self.cc.on_persistent_congestion()
            if not self.retx and not self.rr and self.sent:
                rec = self.sent[next(iter(self.sent))]
                self.retx.append((rec[R_SID], rec[R_OFF], rec[R_LEN]))
        self.arm_timer()
