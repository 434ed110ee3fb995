"""The QUIC receiver (the client of a download): socket buffer, receive calls, ACKs, streams.

Like the sender, the receiver is one SimPy callback that runs its host ahead
of the clock up to one one-way delay (every datagram that arrives before
``now + rtt/2`` has already left the sender). Datagrams are kept in arrival
order (a deque, plus a heap for the few reordered ones) and *admitted* to the
UDP socket buffer lazily: the buffer only shrinks when a receive call takes
datagrams out, so the drop decision for every arrival between two calls can be
made when the next call starts, against exactly the occupancy the kernel would
have seen (TRANSPORT.md "Receive buffer", Kempf et al. 2024 §2.3, Fig. 3).

The loop does, in order: wait out a scheduling stall; admit arrivals; send a
delayed ACK whose timer expired (``ack_timer_s``: the receiver's own, else its
``max_ack_delay``); else perform one receive call of
up to ``segments_per_call`` datagrams (GRO) and process them — each may emit an
ACK (RFC 9000 §13.2: every ``ack_every_packets``, or at once for a packet that
opens a gap or arrives out of order, §13.2.1) that goes back over the reverse
path; else sleep until the next arrival or ACK deadline. A receive call and the
processing of its datagrams (and the ACKs they trigger) is one CPU work item.

Units: times in seconds, CPU work in ns, sizes in bytes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import simpy
from simpy.events import Timeout

from quiclab.sim.analytic.core import skb_truesize
from quiclab.sim.des.host import Stalls
from quiclab.sim.des.link import CAUSE_RCVBUF, ReverseLink
from quiclab.sim.des.pipeline import cpu_for
from quiclab.sim.des.recovery import R_COUNT, R_LEN, R_OFF, R_SID, R_SIZE, Arrival, Record
from quiclab.sim.des.sender import Sender
from quiclab.sim.resolve import Resolved

#: RFC 9000 §19.3: ACK ranges a frame carries at most (a receiver-side cap; the
#: stacks in the seeds keep 32–256). Older ranges are dropped.
MAX_ACK_RANGES = 32
_NO_STREAMS: tuple[tuple[int, int], ...] = ()
_NO_PARTIAL: dict[int, int] = {}
_NO_REQUESTS: tuple[tuple[int, int], ...] = ()


class Receiver:
    """One QUIC receiver on its own CPU; see the module docstring for the loop.

    ``on_progress(t_s, consumed_bytes, done)`` is called each time the
    application has consumed another ``progress_step_bytes`` of in-order data,
    and once every chunk is complete (``done``).
    """

    def __init__(self, env: simpy.Environment, resolved: Resolved, reverse: ReverseLink,
                 sender: Sender, stalls: Stalls, on_progress: Callable[[float, int, bool], None],
                 progress_step_bytes: int, ack_window_fraction: float = 0.0):
        ep = resolved.receiver
        s = resolved.scenario
        self.env = env
        self.reverse = reverse
        self.sender = sender
        sender.rx = self
        self.stalls = stalls
        self.on_progress = on_progress
        self.lookahead_s = resolved.path.rtt_s / 2.0
        # One server per core, or the pipeline's cores (sim/des/pipeline.py).
        self.cpu = cpu_for(ep)
        self.ns_packet = ep.ns_per_data_packet
        self.ns_call = ep.ns_per_call
        self.ns_ack = ep.ns_per_ack
        self.segments = ep.segments_per_call
        self.stream_bytes = resolved.sender.stream_bytes
        self.rcvbuf = resolved.path.rcvbuf_bytes
        self.ack_every = max(ep.ack_every_packets, 1e-9)
        self.inv_ack_every = 1.0 / self.ack_every
        #: > 0: an ACK at least every that fraction of the sender's cwnd (≥ 2
        #: packets), as a sender using the ACK-frequency extension would request
        #: (draft-ietf-quic-ack-frequency; TRANSPORT.md "ACKs": 0.25). Off for a
        #: receiver whose threshold is fixed (Behaviour.ack_threshold_fixed).
        self.ack_window_fraction = 0.0 if ep.ack_threshold_fixed else ack_window_fraction
        self.payload = resolved.sender.udp_payload_bytes
        self.immediate = ep.immediate_ack_on_gap
        #: The delayed-ACK timer (Behaviour.ack_timer_ms, else max_ack_delay).
        self.ack_timer_s = ep.ack_timer_s
        #: The cap never asks for an ACK sooner than this (Behaviour.ack_threshold_floor_packets),
        #: nor later than ack_every would.
        self.ack_floor = min(ep.ack_floor_packets, max(self.ack_every, 2.0))
        self.fc_window = ep.fc_window_bytes or (1 << 62)
        #: The stream window the sender was granted (Sender.stream_window: one rule for
        #: both ends); MAX_STREAM_DATA only matters with several streams.
        self.stream_window = sender.stream_window
        self.stream_fc = s.streams > 1
        # --- the transfer: chunks requested as streams, at most `streams` at once
        self.chunks = s.chunks
        self.chunk_bytes = s.transfer_bytes // s.chunks
        self.last_chunk_bytes = s.transfer_bytes - self.chunk_bytes * (s.chunks - 1)
        self.max_open = s.streams
        self.next_chunk = 0
        self.done_chunks = 0
        self.streams: dict[int, list[Any]] = {}  # sid → [contiguous, heap of (off, end), size]
        self.consumed = 0
        self.progress_step = progress_step_bytes
        self.next_progress = progress_step_bytes
        # --- socket buffer and arrivals
        self.arrivals: deque[Arrival] = deque()
        self.reordered: list[Arrival] = []
        self.buffer: deque[Arrival] = deque()
        self.occupancy = 0.0
        #: GRO (TRANSPORT.md "Receive buffer"): each GSO batch of the sender arrives
        #: as one skb, which the kernel admits whole while occupancy + its
        #: truesize fits the buffer (or the buffer is empty) and drops whole
        #: otherwise. Packet granularity only: a batch unit is already many datagrams.
        self.coalesce = self.segments > 1 and sender.segments > 1 and sender.unit_max <= 1
        sender.coalesce = self.coalesce
        #: The skb the last arrival belonged to (-1: none), and whether it was admitted.
        self.skb = -1
        self.skb_in = False
        # --- ACK state
        self.ranges: list[list[int]] = []  # [lo, hi] descending, ACK-of-ACK pruned
        self.prune_floor = -1
        self.largest = -1
        self.largest_time = 0.0
        self.ack_credit = 0.0
        self.ack_deadline = math.inf
        self.dirty: dict[int, int] = {}  # stream → MAX_STREAM_DATA to announce
        self.partial: dict[int, int] = {}
        self.requests: list[tuple[int, int]] = []
        # --- counters
        self.clock = 0.0
        self.datagrams = 0
        self.calls = 0
        self.acks_sent = 0.0
        self.ack_frames = 0
        self.drops = 0
        #: Receive-buffer errors as the kernel counts them: one per dropped skb.
        self.errors = 0
        self._wake_at = math.inf
        self._token = 0
        self._waiting = True

    # ------------------------------------------------------------------ wiring
    def open_streams(self, t_s: float) -> None:
        """The handshake is done (client side): request the first chunks."""
        while self.next_chunk < self.chunks and len(self.streams) < self.max_open:
            self._request(self.next_chunk)
        # The request frames go out in one packet on the reverse path (no CPU:
        # handshake and request costs are not in the cost models).
        self._emit_ack(t_s, 0.0, with_ranges=False)

    def _request(self, chunk: int) -> None:
        size = self.last_chunk_bytes if chunk == self.chunks - 1 else self.chunk_bytes
        sid = 4 * chunk  # RFC 9000 §2.1: client-initiated bidirectional stream ids
        self.streams[sid] = [0, [], size]
        self.requests.append((sid, size))
        self.next_chunk += 1

    def deliver(self, arrival_s: float, pn: int, delivered: int, record: Record,
                largest_acked: int) -> None:
        """A datagram (or unit) that survived the path arrives at ``arrival_s``.

        (The sender inlines this on its hot path; keep the two in step.)
        """
        # The kernel charges each datagram its skb truesize (analytic.core.skb_truesize).
        each = record[R_SIZE] / record[R_COUNT]
        truesize = self.sender.truesize if each > self.sender.truesize_floor else skb_truesize(each)
        item = (arrival_s, pn, delivered, record, largest_acked, truesize, -1, 0.0)
        if self.arrivals and arrival_s < self.arrivals[-1][0]:
            heapq.heappush(self.reordered, item)
        else:
            self.arrivals.append(item)
        if self._waiting and arrival_s < self._wake_at:
            self._schedule(arrival_s)

    def _schedule(self, at_s: float) -> None:
        self._wake_at = at_s
        self._token += 1
        Timeout(self.env, at_s - self.env.now, self._token).callbacks.append(self._on_wake)

    def _on_wake(self, event: simpy.Event) -> None:
        if event._value != self._token:
            return
        self._wake_at = math.inf
        self._run(self.env.now)

    # ---------------------------------------------------------------- the loop
    def _run(self, now: float) -> None:
        """The host's event loop from ``now`` up to the horizon (see the module docstring).

        The receive call and the processing of its datagrams are inlined (they
        run once per datagram), and so is the common ACK (ranges only, over
        the reverse link); the rarer cases go through ``_admit``,
        ``_insert_pn``, ``_stream_data`` and ``_emit_ack``, which do the same
        arithmetic in the same order.
        """
        horizon = now + self.lookahead_s
        t = self.clock if self.clock > now else now
        cpu = self.cpu
        free_at = cpu.free_at
        slow = cpu.slowdown * 1e-9
        stalls = self.stalls
        arrivals = self.arrivals
        reordered = self.reordered
        buf = self.buffer
        cap = self.rcvbuf
        segments = self.segments
        ns_packet = self.ns_packet
        ns_call = self.ns_call
        ns_ack = self.ns_ack
        stream_window = self.stream_window
        stream_fc = self.stream_fc
        dirty = self.dirty
        ranges = self.ranges
        streams = self.streams
        stream_bytes = self.stream_bytes
        immediate = self.immediate
        inv_ack_every = self.inv_ack_every
        ack_every = self.ack_every
        ack_window_fraction = self.ack_window_fraction
        payload = self.payload
        ack_timer_s = self.ack_timer_s
        ack_floor = self.ack_floor
        fc_window = self.fc_window
        sender = self.sender
        sender_cc = sender.cc
        sender_acks = sender.acks
        reverse = self.reverse
        reverse_ser_s = reverse.ser_s
        reverse_prop_s = reverse.prop_s
        # Only this loop changes these between wake-ups: locals, written back
        # before it returns (``_admit`` and ``_emit_ack`` get them in sync).
        occ = self.occupancy
        deadline = self.ack_deadline
        stall_at = stalls.start_s  # the next stall's start (changes in begin/finish)
        while True:
            # cpu.ready_at() inlined.
            ts = free_at[cpu.next]
            if ts < t:
                ts = t
            if ts >= stall_at:
                ts = stalls.begin(ts)
                stall_at = stalls.start_s
            if ts >= horizon:
                self._waiting = False
                break
            if reordered:
                self.occupancy = occ
                self._admit(ts)
                occ = self.occupancy
            elif arrivals and arrivals[0][0] <= ts:
                # _admit() inlined for the common case (in-order arrivals).
                while arrivals and arrivals[0][0] <= ts:
                    item = arrivals.popleft()
                    if item[6] >= 0:
                        occ = self._gro_segment(item, occ)
                        continue
                    need = item[2] * item[5]
                    if occ + need <= cap:
                        occ += need
                        buf.append(item)
                    else:
                        self.occupancy = occ
                        arrivals.appendleft(item)
                        self._admit(ts)
                        occ = self.occupancy
            if deadline <= ts:
                # RFC 9000 §13.2.1: max_ack_delay expired with packets unacknowledged.
                end = cpu.run(ts, ns_ack)
                if end > stall_at:
                    end = stalls.finish(ts, end)
                    stall_at = stalls.start_s
                # The ACK is sent: credit and timer reset.
                self.ack_credit = 0.0
                deadline = math.inf
                self.acks_sent += 1.0
                self._emit_ack(end, 1.0)
                t = ts
                continue
            if not buf:
                # Sleep until the next arrival or the ACK deadline.
                nxt = arrivals[0][0] if arrivals else math.inf
                if reordered and reordered[0][0] < nxt:
                    nxt = reordered[0][0]
                if deadline < nxt:
                    nxt = deadline
                if nxt < horizon:
                    t = nxt
                    continue
                self._waiting = True
                break
            # ---- one recvmsg (GRO) call of up to `segments` datagrams ----------
            taken: list[Arrival] = []
            packets = 0
            while buf and packets < segments:
                item = buf.popleft()
                occ -= item[2] * item[5]
                taken.append(item)
                packets += item[2]
            if not buf:
                occ = 0.0  # (no float drift when empty)
            calls = -(-packets // segments)
            self.calls += calls
            work = calls * ns_call
            te = ts + work * slow
            if te > stall_at:
                te = stalls.finish(ts, te)
                stall_at = stalls.start_s
            # ... and the processing of its datagrams (one CPU work item).
            for item in taken:
                pn = item[1]
                delivered = item[2]
                rec = item[3]
                w = delivered * ns_packet
                work += w
                start = te
                te += w * slow
                if te > stall_at:
                    te = stalls.finish(start, te)
                    stall_at = stalls.start_s
                self.datagrams += delivered
                # ACK ranges, pruned below what the sender already knows it has
                # acked (a stand-in for RFC 9000 §13.2.4's ACK-of-ACK tracking).
                sla = item[4]
                if sla > self.prune_floor:
                    self.prune_floor = sla
                    while len(ranges) > 1 and ranges[-1][1] < sla:
                        ranges.pop()
                if ranges and pn == ranges[0][1] + 1:
                    ranges[0][1] = pn
                else:
                    self._insert_pn(pn)
                # RFC 9000 §13.2.1: this packet opens a gap (it is beyond the largest
                # received + 1) or arrives out of order (below the largest).
                largest = self.largest
                out_of_order = largest >= 0 and (pn > largest + 1 or pn < largest)
                if pn > largest:
                    self.largest = pn
                    self.largest_time = te
                # Stream data: the application consumes in-order data at once.
                length = rec[R_LEN]
                if delivered < rec[R_COUNT]:
                    self.partial[pn] = delivered
                    length = min(length, delivered * stream_bytes)
                sid = rec[R_SID]
                st = streams.get(sid)
                if st is not None:
                    off = rec[R_OFF]
                    if off == st[0] and not st[1] and off + length < st[2]:
                        # In order, no hole, chunk not finished: the common case.
                        st[0] = off + length
                        consumed = self.consumed + length
                        self.consumed = consumed
                        if stream_fc:
                            dirty[sid] = off + length + stream_window
                        if consumed >= self.next_progress:
                            self.next_progress = consumed + self.progress_step
                            self.on_progress(te, consumed, False)
                    else:
                        self._stream_data(te, st, sid, off, length)
                # RFC 9000 §13.2: ACK policy.
                weight = 0.0
                if immediate and out_of_order:
                    weight = 1.0
                    keep = False
                else:
                    inv = inv_ack_every
                    if ack_window_fraction:
                        window = ack_window_fraction * sender_cc.cwnd / payload
                        if window < ack_every:
                            inv = 1.0 / (window if window > ack_floor else ack_floor)
                    credit = self.ack_credit + delivered * inv
                    if credit >= 1.0 - 1e-9:
                        weight = float(int(credit + 1e-9))
                        self.ack_credit = credit - weight
                        keep = True
                    else:
                        self.ack_credit = credit
                        if deadline == math.inf:
                            deadline = te + ack_timer_s
                if self.requests and not weight:
                    weight = 1.0  # a new request goes out at once, with an ACK
                    keep = True
                if not weight:
                    continue
                w = weight * ns_ack
                work += w
                start = te
                te += w * slow
                if te > stall_at:
                    te = stalls.finish(start, te)
                    stall_at = stalls.start_s
                # The ACK is sent: the timer stops; the credit restarts unless kept.
                if not keep:
                    self.ack_credit = 0.0
                deadline = math.inf
                self.acks_sent += weight
                if dirty or self.partial or self.requests:
                    self._emit_ack(te, weight)
                    continue
                # _emit_ack() inlined for an ACK frame of ranges only.
                if len(ranges) == 1:
                    r = ranges[0]
                    snapshot: tuple[tuple[int, int], ...] = ((r[0], r[1]),)
                else:
                    snapshot = tuple((r[0], r[1]) for r in ranges)
                free = reverse.free_at_s
                if te > free:
                    free = te
                free += reverse_ser_s
                reverse.free_at_s = free
                arrival = free + reverse_prop_s
                self.ack_frames += 1
                sender_acks.append((arrival, weight, snapshot, te - self.largest_time,
                                    self.consumed + fc_window, _NO_STREAMS, _NO_PARTIAL,
                                    _NO_REQUESTS))
                if sender._waiting and arrival < sender._wake_at:
                    sender._schedule(arrival)
            cpu.commit(ts, te, work * slow)
            t = ts
        self.clock = ts
        self.occupancy = occ
        self.ack_deadline = deadline
        if not self._waiting:
            self._schedule(ts)
        elif nxt < math.inf:
            self._schedule(nxt)

    def _admit(self, ts: float) -> None:
        """Datagrams that arrived by ``ts`` enter the socket buffer, or are dropped."""
        arrivals = self.arrivals
        reordered = self.reordered
        buf = self.buffer
        cap = self.rcvbuf
        occ = self.occupancy
        while True:
            if reordered and (not arrivals or reordered[0][0] < arrivals[0][0]):
                if reordered[0][0] > ts:
                    break
                item = heapq.heappop(reordered)
            elif arrivals and arrivals[0][0] <= ts:
                item = arrivals.popleft()
            else:
                break
            delivered = item[2]
            if item[6] >= 0:
                occ = self._gro_segment(item, occ)
                continue
            each = item[5]  # skb truesize per datagram
            need = delivered * each
            if occ + need <= cap:
                occ += need
                buf.append(item)
                continue
            fit = max(0, int((cap - occ) // each))
            self.drops += delivered - fit
            self.errors += delivered - fit
            self.sender.causes[item[1]] = CAUSE_RCVBUF
            if fit:
                occ += fit * each
                buf.append((item[0], item[1], fit, item[3], item[4], each, -1, 0.0))
        self.occupancy = occ

    def _gro_segment(self, item: Arrival, occ: float) -> float:
        """Admit or drop one segment of a GRO skb (``item[6]`` ≥ 0) at occupancy
        ``occ``; returns the new occupancy. The skb's first arriving segment decides
        for all of it: in while occupancy + the skb's truesize fits, or the buffer
        is empty (TRANSPORT.md "Receive buffer")."""
        skb = item[6]
        if skb != self.skb:
            self.skb = skb
            self.skb_in = occ + item[7] <= self.rcvbuf or not self.buffer
            if not self.skb_in:
                self.errors += 1
        if self.skb_in:
            self.buffer.append(item)
            return occ + item[5]
        self.drops += item[2]
        self.sender.causes[item[1]] = CAUSE_RCVBUF
        return occ

    def _insert_pn(self, pn: int) -> None:
        """Add ``pn`` to the ACK ranges (new gap, reordered or duplicate arrival)."""
        ranges = self.ranges
        if not ranges or pn > ranges[0][1] + 1:
            ranges.insert(0, [pn, pn])
        else:
            for i, r in enumerate(ranges):
                lo, hi = r
                if lo <= pn <= hi:
                    return  # duplicate
                if pn == hi + 1:
                    r[1] = pn
                    if i > 0 and ranges[i - 1][0] == pn + 1:
                        r[1] = ranges[i - 1][1]
                        del ranges[i - 1]
                    return
                if pn == lo - 1:
                    r[0] = pn
                    if i + 1 < len(ranges) and ranges[i + 1][1] == pn - 1:
                        r[0] = ranges[i + 1][0]
                        del ranges[i + 1]
                    return
                if pn > hi:
                    ranges.insert(i, [pn, pn])
                    break
            else:
                ranges.append([pn, pn])
        if len(ranges) > MAX_ACK_RANGES:
            ranges.pop()

    def _stream_data(self, t: float, st: list[Any], sid: int, off: int, length: int) -> None:
        """Stream reassembly beyond the common case: holes, duplicates, chunk ends."""
        if length <= 0:
            return
        cum = st[0]
        end = off + length
        heap = st[1]
        if off > cum:
            heapq.heappush(heap, (off, end))
            return
        if end <= cum:
            return  # duplicate (a spurious retransmission)
        old = cum
        cum = end
        while heap and heap[0][0] <= cum:
            e = heapq.heappop(heap)[1]
            if e > cum:
                cum = e
        st[0] = cum
        self.consumed += cum - old
        if self.stream_fc:
            self.dirty[sid] = cum + self.stream_window
        if cum >= st[2]:
            # Chunk complete: close the stream and request the next chunk.
            del self.streams[sid]
            self.dirty.pop(sid, None)
            self.done_chunks += 1
            if self.next_chunk < self.chunks:
                self._request(self.next_chunk)
        done = self.done_chunks >= self.chunks
        if done or self.consumed >= self.next_progress:
            self.next_progress = self.consumed + self.progress_step
            self.on_progress(t, self.consumed, done)

    # ------------------------------------------------------------------- ACKs
    def _emit_ack(self, t: float, weight: float, with_ranges: bool = True) -> None:
        """One ACK packet leaves at ``t`` (standing for ``weight`` ACKs at batch granularity)."""
        if with_ranges:
            ranges = self.ranges
            if len(ranges) == 1:
                snapshot: tuple[tuple[int, int], ...] = ((ranges[0][0], ranges[0][1]),)
            else:
                snapshot = tuple((r[0], r[1]) for r in ranges)
        else:
            snapshot = ()
        streams = _NO_STREAMS
        if self.dirty:
            streams = tuple(self.dirty.items())
            self.dirty.clear()
        partial = _NO_PARTIAL
        if self.partial:
            partial = self.partial
            self.partial = {}
        requests = _NO_REQUESTS
        if self.requests:
            requests = tuple(self.requests)
            self.requests.clear()
        arrival = self.reverse.send(t)
        self.ack_frames += 1
        sender = self.sender
        sender.acks.append((arrival, weight, snapshot, t - self.largest_time,
                            self.consumed + self.fc_window, streams, partial, requests))
        if sender._waiting and arrival < sender._wake_at:
            sender._schedule(arrival)
