"""The QUIC sender (the server of a download): the send loop.

Event structure (``sim/des/README.md``): the sender is one SimPy callback,
``_on_wake``, that runs its event loop *ahead* of the simulation clock up to a
horizon of one one-way delay. Every ACK that can reach the sender before
``now + rtt/2`` has already been emitted by the receiver (it left the receiver
before ``now``), so within that horizon the sender's future is fully
determined and needs no further events. The loop does, in order, whatever its
CPU would do next (an event loop: read and process every ACK that has
arrived, then send):

1. process one ACK frame that arrived by the time the CPU is free
   (``ns_per_ack`` per ACK it stands for; RFC 9002 §5–7, ``recovery.py``);
2. fire the loss-detection timer (RFC 9002 §6.1.2) or PTO (§6.2) if due;
3. build and send batches of up to ``segments_per_call`` packets (one GSO
   send call each) back to back while cwnd, flow-control credit and the
   pair-interplay hold-off allow it and nothing else is due;
4. otherwise sleep until the next known ACK arrival, timer, or hold-off end —
   or until the receiver announces an ACK (``notify``).

Units: times in seconds, CPU work in ns, windows and sizes in bytes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING, Any

import simpy
from simpy.events import Timeout

from quiclab.sim.analytic.core import (
    GRO_SKB_OVERHEAD_BYTES,
    SKB_HEAD_BYTES,
    SKB_STRUCT_BYTES,
    skb_truesize,
)
from quiclab.sim.des.cc import GRANULARITY_S, RttEstimator, congestion_controller
from quiclab.sim.des.host import CpuServers
from quiclab.sim.des.link import CAUSE_PATH, CAUSE_QUEUE, ForwardLink
from quiclab.sim.des.pipeline import cpu_for
from quiclab.sim.des.recovery import (
    VALIDATE_APP,
    VALIDATE_OFF,
    VALIDATIONS,
    AckFrame,
    Record,
    Recovery,
)
from quiclab.sim.resolve import ETHERNET_WIRE_OVERHEAD_BYTES, IP_UDP_HEADER_BYTES, Resolved

if TYPE_CHECKING:
    from quiclab.sim.des.receiver import Receiver

#: Why the send loop is not sending (TRANSPORT.md "Outputs": the ``limit`` rule).
BUSY, CWND, FLOW, HOLD, NODATA = range(5)
STATE_NAMES = ("busy", "cwnd", "flow_control", "interop", "no_data")
#: RFC 9002 §7.7: pacing rate = N · cwnd / smoothed_rtt with N = 1.25.
PACING_GAIN = 1.25


class Sender(Recovery):
    """One QUIC sender on its own CPU; see the module docstring for the loop.

    ``unit_packets_max`` > 1 is batch granularity: one record stands for a
    unit of up to that many packets, at most cwnd / ``unit_cwnd_divisor``.
    ``cwnd_validation`` is RFC 9002 §7.8's rule for when cwnd may grow (see
    :data:`VALIDATIONS`).
    """

    def __init__(self, env: simpy.Environment, resolved: Resolved, link: ForwardLink,
                 unit_packets_max: int = 1, unit_cwnd_divisor: int = 1,
                 cwnd_validation: str = "app"):
        ep = resolved.sender
        self.env = env
        self.link = link
        self.rx: Receiver | None = None
        self.lookahead_s = resolved.path.rtt_s / 2.0
        # One server per core, or the pipeline's cores (sim/des/pipeline.py).
        self.cpu = cpu_for(ep)
        self.one_server = type(self.cpu) is CpuServers and self.cpu.n == 1
        self.ns_packet = ep.ns_per_data_packet
        self.ns_call = ep.ns_per_call
        self.ns_ack = ep.ns_per_ack
        self.segments = ep.segments_per_call
        self.payload = ep.udp_payload_bytes
        #: Receive-buffer bytes of a full-size datagram (skb truesize), and the
        #: payload above which a datagram falls in the same allocation.
        self.truesize = skb_truesize(ep.udp_payload_bytes)
        self.truesize_floor = (self.truesize - SKB_STRUCT_BYTES) / 2 - SKB_HEAD_BYTES
        self.stream_bytes = ep.stream_bytes
        self.overhead = ep.udp_payload_bytes - ep.stream_bytes
        self.wire_extra = IP_UDP_HEADER_BYTES + ETHERNET_WIRE_OVERHEAD_BYTES
        self.pacing = ep.pacing
        #: The pacer's bucket (Behaviour.pacing_burst_*): seconds of the pacing
        #: rate it may send back to back, within [min, max] full datagrams.
        self.burst_s = ep.pacing_burst_s
        self.burst_min = float(ep.pacing_burst_min_packets * ep.udp_payload_bytes)
        self.burst_max = (float(ep.pacing_burst_max_packets * ep.udp_payload_bytes)
                          if ep.pacing_burst_max_packets > 0 else math.inf)
        #: A pacer that has to wait waits at least this long after its last packet.
        self.pace_min_delay = ep.pacing_min_delay_s
        self.pace_last = -math.inf
        self.peer_max_ack_delay_s = resolved.receiver.max_ack_delay_s
        busy = resolved.interop_busy
        # TRANSPORT.md "Pair interplay": after a send call costing c, hold off c·(1/busy − 1).
        self.hold_factor = (1.0 / busy - 1.0) if 0 < busy < 1 else 0.0
        self.unit_max = unit_packets_max
        #: A GSO batch reaches the receiver as one skb (set by a receiver that uses
        #: GRO, see Receiver.coalesce).
        self.coalesce = False
        self.unit_div = unit_cwnd_divisor
        # RFC 9002 §5.2: the handshake gives the first RTT sample.
        self.rtt = RttEstimator(resolved.path.rtt_s, ep.recovery)
        timed = ep.cubic_reno_friendly != "acks"
        self.cc = congestion_controller(resolved.cc, ep.udp_payload_bytes,
                                        self.rtt if timed else None, ep.reno_beta,
                                        ep.cubic_reno_friendly == "time-srtt")
        # --- transport state (see recovery.py) -------------------------------
        self.next_pn = 0
        self.sent: dict[int, Record] = {}
        self.pending: set[int] = set()
        self.causes: dict[int, int] = {}
        self.largest_acked = -1
        self.inflight = 0
        self.max_inflight = 0
        self.cwnd_blocked = False
        #: RFC 9002 §7.8, as VALIDATIONS codes it (APP by default, as in ns-3).
        self.validation = VALIDATIONS[cwnd_validation]
        #: Since the last ACK the send loop stopped with room in cwnd but nothing it
        #: could send (no data, no flow-control credit).
        self.app_limited = False
        self.recovery_start_s = -1.0
        self.retx: deque[tuple[int, int, int]] = deque()
        self.streams: dict[int, list[int]] = {}  # sid → [next offset, size, MAX_STREAM_DATA]
        self.rr: deque[int] = deque()  # streams with unsent data, round-robin
        self.conn_sent = 0
        self.max_data = resolved.receiver.fc_window_bytes or (1 << 62)
        # Stream windows: the connection window divided among `streams`, never below
        # one packet (the sender sends whole packets while credit-limited, so a
        # smaller window would never open: 100 streams sharing quiche@2025's
        # 114 kB ran until max_sim_s). With one stream at a time the connection
        # window always binds first (a stream never has more unconsumed data than
        # the connection), so none is kept.
        streams = resolved.scenario.streams
        self.stream_window = (max(self.max_data // streams, self.stream_bytes) if streams > 1
                              else 1 << 62)
        #: The smaller of the connection and stream windows (bytes): batch units' bound.
        self.fc_window = float(min(self.max_data, self.stream_window))
        #: Packets a batch unit may hold so that it fits half the bottleneck queue.
        self.unit_queue_max = max(1, int(resolved.path.queue_bytes
                                         // (2 * (ep.udp_payload_bytes + self.wire_extra))))
        self.acks: deque[AckFrame] = deque()
        self.last_sent_s = 0.0
        self.pto_count = 0
        self.probes = 0
        self.timer_at = math.inf
        self.pto_backoff_s = self.rtt.probe_s(self.peer_max_ack_delay_s, 0)
        self.hold_until = 0.0
        self.pacer_next = 0.0
        # --- bookkeeping ------------------------------------------------------
        self.clock = 0.0
        self.state = NODATA
        self.state_since = 0.0
        self.state_s = [0.0] * len(STATE_NAMES)
        self.packets_sent = 0
        self.retransmitted = 0
        self.calls = 0
        self.acks_received = 0.0
        self.declared_lost = 0
        self.pto_fired = 0
        self.events_by_cause = [0, 0, 0, 0]  # congestion events by first drop cause
        self._wake_at = math.inf
        self._token = 0
        self._waiting = True
        #: A qlog writer (sim/des/qlog.py) when the run writes one; None costs one test
        #: per packet and per ACK.
        self.qlog: Any = None

    # ------------------------------------------------------------------ wiring
    def open_stream(self, sid: int, size: int) -> None:
        """A request for ``size`` bytes on stream ``sid`` reached the server."""
        self.streams[sid] = [0, size, self.stream_window]
        self.rr.append(sid)

    def notify(self, arrival_s: float) -> None:
        """The receiver emitted an ACK frame that arrives at ``arrival_s``."""
        if self._waiting and arrival_s < self._wake_at:
            self._schedule(arrival_s)

    def _schedule(self, at_s: float) -> None:
        self._wake_at = at_s
        self._token += 1
        Timeout(self.env, at_s - self.env.now, self._token).callbacks.append(self._on_wake)

    def _on_wake(self, event: simpy.Event) -> None:
        if event._value != self._token:
            return  # superseded by an earlier wake-up
        self._wake_at = math.inf
        self._run(self.env.now)

    def _set_state(self, state: int, t_s: float) -> None:
        if state != self.state:
            if t_s > self.state_since:
                self.state_s[self.state] += t_s - self.state_since
                self.state_since = t_s
            self.state = state

    def flush_states(self, t_s: float) -> list[float]:
        """Time (s) spent in each state up to ``t_s`` (BUSY, CWND, FLOW, HOLD, NODATA)."""
        out = list(self.state_s)
        if t_s > self.state_since:
            out[self.state] += t_s - self.state_since
        return out

    # ---------------------------------------------------------------- the loop
    def _run(self, now: float) -> None:
        """The host's event loop from ``now`` up to the horizon (see the module docstring).

        The per-packet work is inlined here (it runs once per packet): the send
        call and its packets' trip over the link and into the receiver's
        arrivals, the CPU server when it is a single one, and the common case
        of an ACK frame (in order, nothing outstanding below it: RTT sample,
        cwnd growth, PTO). Everything else goes through the methods of
        ``recovery.py``, ``host.py`` and ``link.py``, which do the same
        arithmetic in the same order. State that does not change within one
        wake-up is held in locals.
        """
        horizon = now + self.lookahead_s
        t = self.clock if self.clock > now else now
        cpu = self.cpu
        free_at = cpu.free_at
        one = self.one_server  # a single busy-until server: cpu.run() inlined
        slowdown = cpu.slowdown
        acks = self.acks
        cc = self.cc
        rtt = self.rtt
        mad = self.peer_max_ack_delay_s
        payload = self.payload
        truesize = self.truesize
        truesize_floor = self.truesize_floor
        sb = self.stream_bytes
        overhead = self.overhead
        segments = self.segments
        unit_max = self.unit_max
        ns_ack = self.ns_ack
        ns_packet = self.ns_packet
        ns_call = self.ns_call
        hold_factor = self.hold_factor
        pacing = self.pacing
        streams = self.streams
        rr = self.rr
        retx = self.retx
        sent = self.sent
        pending = self.pending
        causes = self.causes
        link = self.link
        inline_link = not link.reorder_on
        loss = link.loss
        rate_bps = link.rate_Bps
        queue_bytes = link.queue_bytes
        prop_s = link.prop_s
        rx = self.rx
        assert rx is not None
        arrivals = rx.arrivals
        wire_extra = self.wire_extra
        # Only this loop changes these (snapshots read them between wake-ups):
        # locals, written back before it returns.
        state = self.state
        since = self.state_since
        state_s = self.state_s
        n_calls = self.calls
        n_packets = self.packets_sent
        pn = self.next_pn
        pacer_next = self.pacer_next
        pace_last = self.pace_last
        pace_min_delay = self.pace_min_delay
        qlog = self.qlog
        while True:
            ts = free_at[cpu.next]
            if ts < t:
                ts = t
            if ts >= horizon:
                # ACKs that arrive after the horizon are not known yet.
                self._waiting = False
                break
            if acks and acks[0][0] <= ts:
                # ---- one ACK frame ----------------------------------------------
                if state != BUSY:  # _set_state(BUSY, ts)
                    if ts > since:
                        state_s[state] += ts - since
                        since = ts
                    state = BUSY
                ack = acks.popleft()
                if one:
                    service = ack[1] * ns_ack * 1e-9 * slowdown
                    te = ts + service
                    free_at[0] = te
                    cpu.busy_s += service
                else:
                    te = cpu.run(ts, ack[1] * ns_ack)
                ranges = ack[2]
                la = self.largest_acked
                if (not ranges or pending or ranges[0][1] <= la or ranges[0][0] > la + 1
                        or ack[5] or ack[6] or ack[7]):
                    self.process_ack(te, ack)
                    if qlog is not None:
                        qlog.ack(te, ranges, ack[3], self)
                    t = ts
                    continue
                # process_ack()'s in-order case inlined: everything up to `largest`
                # is acknowledged, nothing is outstanding below it.
                self.acks_received += ack[1]
                if ack[4] > self.max_data:
                    self.max_data = ack[4]
                largest = ranges[0][1]
                acked = 0
                newest_s = -1.0
                rec = None
                for acked_pn in range(la + 1, largest + 1):
                    rec = sent.pop(acked_pn, None)
                    if rec is not None:
                        acked += rec[1]
                        newest_s = rec[0]
                inflight = self.inflight - acked
                self.inflight = inflight
                self.largest_acked = largest
                if rec is not None:
                    # RttEstimator.update() for the largest's record (RFC 9002 §5.3).
                    latest = te - rec[0]
                    delay = ack[3]
                    rtt.latest = latest
                    if latest < rtt.min:
                        rtt.min = latest
                    if delay > mad:
                        delay = mad
                    adjusted = latest - delay if latest >= rtt.min + delay else latest
                    diff = rtt.smoothed - adjusted
                    rtt.var = 0.75 * rtt.var + 0.25 * (diff if diff >= 0 else -diff)
                    rtt.smoothed = 0.875 * rtt.smoothed + 0.125 * adjusted
                if acked:
                    self.pto_count = 0
                    # Recovery._grow() (RFC 9002 §7.8, §7.3.2).
                    cwnd = cc.cwnd
                    validation = self.validation
                    if validation == VALIDATE_APP:
                        limited = not self.app_limited
                    elif validation == VALIDATE_OFF:
                        limited = True
                    elif cwnd < cc.ssthresh:
                        limited = self.cwnd_blocked or self.max_inflight * 2 > cwnd
                    else:
                        limited = self.cwnd_blocked or (
                            self.max_inflight + payload * segments >= cwnd)
                    self.cwnd_blocked = False
                    self.app_limited = False
                    self.max_inflight = inflight
                    if limited and newest_s > self.recovery_start_s:
                        cc.on_ack(acked, te, rtt.smoothed)
                # Recovery.arm_timer() with nothing pending (RFC 9002 §6.2.1).
                var4 = 4.0 * rtt.var
                pto = (rtt.smoothed + (var4 if var4 > GRANULARITY_S else GRANULARITY_S)
                       + mad) * (1 << self.pto_count)
                self.pto_backoff_s = pto
                self.timer_at = self.last_sent_s + pto if inflight > 0 else math.inf
                if qlog is not None:
                    qlog.ack(te, ranges, ack[3], self)
                t = ts
                continue
            if ts >= self.timer_at:
                self.on_timer(ts)
            # ---- one send call: up to `segments` packets allowed now --------
            if ts < self.hold_until:
                reason = HOLD
            else:
                inflight = self.inflight
                room = cc.cwnd - inflight
                probes = self.probes
                if probes:
                    room = max(room, probes * payload)
                if room < payload:
                    reason = CWND
                    self.cwnd_blocked = True
                else:
                    batch: list[tuple[int, int, int, int, int]] = []
                    packets = 0
                    reason = BUSY
                    while packets < segments:
                        if room < payload:
                            reason = CWND
                            self.cwnd_blocked = True
                            break
                        count = 1
                        if unit_max > 1:
                            # A unit is at most 1/unit_div of the window that binds:
                            # cwnd or the flow-control window (a unit larger than the
                            # credit would wait for all of it at once), and at most half
                            # the bottleneck queue (a unit arrives there at once).
                            window = cc.cwnd if cc.cwnd < self.fc_window else self.fc_window
                            count = min(int(room // payload), unit_max, self.unit_queue_max,
                                        max(1, int(window // (payload * self.unit_div))))
                        if len(rr) == 1 and not retx:
                            # _next_data() inlined: one open stream, nothing to retransmit.
                            sid = rr[0]
                            st = streams[sid]
                            off = st[0]
                            remaining = st[1] - off
                            length = min(count * sb, remaining, st[2] - off,
                                         self.max_data - self.conn_sent)
                            if length < remaining:
                                length -= length % sb
                            if length <= 0:
                                reason = FLOW
                                break
                            st[0] = off + length
                            self.conn_sent += length
                            if length >= remaining:
                                rr.popleft()
                        else:
                            data = self._next_data(count * sb)
                            if data is None:
                                reason = FLOW if (rr and not retx) else NODATA
                                break
                            sid, off, length = data
                        if length > sb:
                            count = -(-length // sb)
                        size = length + count * overhead
                        room -= size
                        packets += count
                        batch.append((sid, off, length, count, size))
                    if batch:
                        # ---- the call runs from `ts`; its packets leave when it ends ----
                        if state != BUSY:  # _set_state(BUSY, ts)
                            if ts > since:
                                state_s[state] += ts - since
                                since = ts
                            state = BUSY
                        if probes:
                            self.probes = max(0, probes - len(batch))
                        calls = -(-packets // segments)
                        work = packets * ns_packet + calls * ns_call
                        if one:
                            service = work * 1e-9 * slowdown
                            end = ts + service
                            free_at[0] = end
                            cpu.busy_s += service
                        else:
                            end = cpu.run(ts, work)
                        n_calls += calls
                        n_packets += packets
                        if hold_factor:
                            self.hold_until = end + work * 1e-9 * hold_factor
                        # Back to back when the call returns, or paced (RFC 9002 §7.7).
                        release = end
                        rate = PACING_GAIN * cc.cwnd / rtt.smoothed if pacing else 0.0
                        # The pacer is a token bucket kept as the time it would be
                        # empty (pacer_next): a packet may leave up to `ahead` before
                        # it, so a full bucket sends `burst` bytes back to back.
                        ahead = 0.0
                        if rate and self.burst_max > payload:
                            burst: float = rate * self.burst_s
                            if burst < self.burst_min:
                                burst = self.burst_min
                            if burst > self.burst_max:
                                burst = self.burst_max
                            ahead = (burst - payload) / rate if burst > payload else 0.0
                        la = self.largest_acked
                        if rate and release < pace_last:
                            release = pace_last  # paced packets leave in order
                        skb = -1
                        skb_bytes = 0.0
                        if self.coalesce:
                            skb = pn
                            skb_bytes = float(GRO_SKB_OVERHEAD_BYTES)
                            for b in batch:
                                skb_bytes += b[4]
                        for sid, off, length, count, size in batch:
                            if rate:
                                if pacer_next - ahead > release:
                                    release = pacer_next - ahead
                                    if release < pace_last + pace_min_delay:
                                        release = pace_last + pace_min_delay
                                pacer_next = (pacer_next if pacer_next > release else release) \
                                    + size / rate
                                pace_last = release
                            rec = (release, size, count, sid, off, length)
                            each = size / count if count > 1 else size
                            sent[pn] = rec
                            inflight += size
                            if qlog is not None:
                                qlog.sent(release, pn, size, sid, off, length)
                            if count == 1 and inline_link:
                                # link.transmit() inlined for one packet (the same
                                # arithmetic and the same random draws).
                                wire = each + wire_extra
                                free = link.free_at_s
                                if free > release:
                                    backlog = (free - release) * rate_bps
                                    start = free
                                else:
                                    backlog = 0.0
                                    start = release
                                if backlog + wire > queue_bytes:
                                    link.queue_drops += 1
                                    causes[pn] = CAUSE_QUEUE
                                    pn += 1
                                    continue
                                ser = wire / rate_bps
                                free = start + ser
                                link.free_at_s = free
                                link.busy_s += ser
                                left = loss.left - 1
                                if left == 0:
                                    loss.left = loss.next_gap()
                                    link.path_losses += 1
                                    causes[pn] = CAUSE_PATH
                                    pn += 1
                                    continue
                                loss.left = left
                                arrival = free + prop_s
                                delivered = 1
                                cause = 0
                            else:
                                arrival, delivered, cause = link.transmit(release, count,
                                                                          each + wire_extra)
                            if delivered:
                                # Hand over to the receiver (its deliver(), inlined).
                                if skb < 0:
                                    item = (arrival, pn, delivered, rec, la,
                                            truesize if each > truesize_floor
                                            else skb_truesize(each), -1, 0.0)
                                else:
                                    item = (arrival, pn, delivered, rec, la,
                                            each + GRO_SKB_OVERHEAD_BYTES if pn == skb else each,
                                            skb, skb_bytes)
                                if arrivals and arrival < arrivals[-1][0]:
                                    heapq.heappush(rx.reordered, item)
                                else:
                                    arrivals.append(item)
                                if rx._waiting and arrival < rx._wake_at:
                                    rx._schedule(arrival)
                            if cause:
                                causes[pn] = cause
                            pn += 1
                        self.inflight = inflight
                        if inflight > self.max_inflight:
                            self.max_inflight = inflight
                        self.last_sent_s = release
                        if not pending:
                            # RFC 9002 §6.2.1: the PTO runs from the last ack-eliciting packet.
                            self.timer_at = release + self.pto_backoff_s
                        t = ts
                        continue
            # ---- nothing to do now: sleep until what can change that --------
            nxt = self.timer_at
            if acks and acks[0][0] < nxt:
                nxt = acks[0][0]
            if reason == HOLD and self.hold_until < nxt:
                nxt = self.hold_until
            if reason in (FLOW, NODATA):
                self.app_limited = True  # idle with room in cwnd (RFC 9002 §7.8)
            if reason != state:  # _set_state(reason, ts)
                if ts > since:
                    state_s[state] += ts - since
                    since = ts
                state = reason
            if nxt < horizon:
                t = nxt
                continue
            self._waiting = True
            break
        self.clock = ts
        self.state = state
        self.state_since = since
        self.calls = n_calls
        self.packets_sent = n_packets
        self.next_pn = pn
        self.pacer_next = pacer_next
        self.pace_last = pace_last
        if not self._waiting:
            self._schedule(ts)
        elif nxt < math.inf:
            self._schedule(nxt)

    def _next_data(self, max_len: int) -> tuple[int, int, int] | None:
        """Stream data for one packet/unit: lost data first, then new data round-robin."""
        retx = self.retx
        if retx:
            sid, off, length = retx[0]
            if length <= max_len:
                retx.popleft()
            else:
                retx[0] = (sid, off + max_len, length - max_len)
                length = max_len
            self.retransmitted += -(-length // self.stream_bytes)
            return sid, off, length
        rr = self.rr
        if not rr:
            return None
        credit = self.max_data - self.conn_sent
        sb = self.stream_bytes
        for _ in range(len(rr)):
            sid = rr[0]
            st = self.streams[sid]
            nxt, size, smax = st
            remaining = size - nxt
            length = min(max_len, remaining, smax - nxt, credit)
            # Send only whole packets unless this is the stream's tail.
            if length < remaining:
                length -= length % sb
            if length > 0:
                st[0] = nxt + length
                self.conn_sent += length
                if nxt + length >= size:
                    rr.popleft()
                elif len(rr) > 1:
                    rr.rotate(-1)
                return sid, nxt, length
            rr.rotate(-1)
        return None
