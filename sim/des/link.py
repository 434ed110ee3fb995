"""The path between the hosts: a busy-until link with a drop-tail queue (TRANSPORT.md "Topology").

No SimPy event is needed per packet: a FIFO link that serialises at a fixed
rate is fully described by the time it becomes free (``free_at_s``), so the
departure and arrival times of a packet follow from arithmetic at the moment
it enters the queue. Random loss and reordering draw *gaps* between affected
packets from geometric distributions (one random draw per affected packet, not
one per packet), which is the same Bernoulli process, and makes the loss
pattern identical in packet and batch granularity for the same seed.
"""

from __future__ import annotations

import numpy as np

from quiclab.sim.resolve import ACK_PACKET_BYTES, Path

#: Drop causes recorded on a sent packet (for the ``rcvbuf`` limit rule).
CAUSE_NONE = 0
CAUSE_PATH = 1
CAUSE_QUEUE = 2
CAUSE_RCVBUF = 3
#: TRANSPORT.md "Topology": a reordered packet is delayed by rtt/2, at least 100 µs.
MIN_REORDER_DELAY_S = 100e-6


#: "Never" for a countdown of a process with p = 0 (no draw is ever made).
NEVER = 1 << 62


class Countdown:
    """Packets until the next event of a Bernoulli(p) process (geometric gaps).

    ``left`` is the position of the next hit counted from the next packet
    (1 = the next packet is hit); :data:`NEVER` when ``p`` is 0.
    """

    __slots__ = ("left", "p", "rng")

    def __init__(self, p: float, rng: np.random.Generator):
        self.p = p
        self.rng = rng
        self.left = self.next_gap() if p > 0 else NEVER

    def next_gap(self) -> int:
        """Packets from one hit to the next (geometric, ≥ 1)."""
        return int(self.rng.geometric(self.p))

    def hits(self, count: int) -> int:
        """How many of the next ``count`` packets are hit (0 … count)."""
        left = self.left - count
        hits = 0
        while left <= 0:
            hits += 1
            left += self.next_gap()
        self.left = left
        return hits


class ForwardLink:
    """Sender → receiver: drop-tail queue of ``queue_bytes``, serialisation, loss, reorder.

    Sizes are wire bytes (UDP payload + IP/UDP + Ethernet framing, see
    :meth:`quiclab.sim.resolve.Path.wire_bytes`); times in seconds.
    """

    def __init__(self, path: Path, loss_rng: np.random.Generator,
                 reorder_rng: np.random.Generator):
        self.rate_Bps = path.link_bps / 8.0
        self.prop_s = path.rtt_s / 2.0
        self.queue_bytes = float(path.queue_bytes)
        self.reorder_delay_s = max(path.rtt_s / 2.0, MIN_REORDER_DELAY_S)
        self.free_at_s = 0.0
        self.busy_s = 0.0
        self.queue_drops = 0
        self.path_losses = 0
        self.reordered = 0
        self.loss = Countdown(path.loss_prob, loss_rng)
        self.reorder = Countdown(path.reorder_prob, reorder_rng)
        #: False lets the sender inline single packets (no reordering draws to make).
        self.reorder_on = path.reorder_prob > 0

    def transmit(self, t_s: float, count: int, wire_bytes_each: float) -> tuple[float, int, int]:
        """Offer ``count`` back-to-back packets at ``t_s``.

        Returns ``(arrival_s, delivered, cause)``: when the last delivered packet
        reaches the receiver, how many of them arrive (a drop-tail queue admits
        what fits; the rest are queue drops; random loss hits admitted packets
        after serialisation), and the cause of the first drop (CAUSE_*).
        """
        free = self.free_at_s
        backlog = (free - t_s) * self.rate_Bps if free > t_s else 0.0
        admitted = count
        cause = CAUSE_NONE
        if backlog + count * wire_bytes_each > self.queue_bytes:
            # Drop-tail: whole packets that still fit behind the backlog.
            admitted = int((self.queue_bytes - backlog) // wire_bytes_each)
            admitted = max(0, min(count, admitted))
            self.queue_drops += count - admitted
            cause = CAUSE_QUEUE
            if admitted == 0:
                return 0.0, 0, cause
        ser = admitted * wire_bytes_each / self.rate_Bps
        start = free if free > t_s else t_s
        self.free_at_s = start + ser
        self.busy_s += ser
        lost = self.loss.hits(admitted)
        if lost:
            self.path_losses += lost
            if cause == CAUSE_NONE:
                cause = CAUSE_PATH
        delivered = admitted - lost
        arrival = self.free_at_s + self.prop_s
        if delivered and self.reorder_on and self.reorder.hits(delivered):
            # TRANSPORT.md: a reordered packet arrives rtt/2 (≥ 100 µs) late.
            # Batch granularity delays the whole unit.
            self.reordered += 1
            arrival += self.reorder_delay_s
        return arrival, delivered, cause


class ReverseLink:
    """Receiver → sender: same rate and delay, no loss, no queue limit (ACKs only)."""

    def __init__(self, path: Path):
        self.prop_s = path.rtt_s / 2.0
        self.ser_s = path.wire_bytes(ACK_PACKET_BYTES) * 8.0 / path.link_bps
        self.free_at_s = 0.0

    def send(self, t_s: float) -> float:
        """Send one ACK packet at ``t_s``; returns its arrival time at the sender (s)."""
        start = self.free_at_s if self.free_at_s > t_s else t_s
        self.free_at_s = start + self.ser_s
        return self.free_at_s + self.prop_s
