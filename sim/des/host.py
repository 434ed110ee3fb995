"""End-host CPUs as busy-until servers, and the receiver's scheduling stalls.

TRANSPORT.md "Hosts": each endpoint's CPU is a FIFO server (``cores`` of them
when the implementation uses more than one thread; items go round-robin and
each runs on one core). A server is its ``free_at`` time: starting an item is
``start = max(ready, free_at); free_at = start + service`` — no SimPy process
or event per item. A fractional core count ``c`` (CostModel ``cores`` is an
effective value) is ``n = ⌈c⌉`` servers each running at ``c / n`` speed, so the
capacity is exactly ``c`` cores.
"""

from __future__ import annotations

import math

import numpy as np


class CpuServers:
    """``n`` round-robin busy-until servers (times in s, work in ns)."""

    __slots__ = ("busy_s", "free_at", "n", "next", "slowdown")

    def __init__(self, cores: float):
        if not cores > 0:
            raise ValueError(f'"cores" must be > 0, got {cores!r}')
        self.n = max(1, math.ceil(cores - 1e-9))
        #: Service time multiplier: ⌈c⌉ / c (1 for whole core counts).
        self.slowdown = self.n / cores
        self.free_at = [0.0] * self.n
        self.next = 0
        self.busy_s = 0.0

    def ready_at(self, t_s: float) -> float:
        """Earliest time ≥ ``t_s`` at which the next item in rotation can start."""
        f = self.free_at[self.next]
        return f if f > t_s else t_s

    def run(self, start_s: float, work_ns: float) -> float:
        """Run an item of ``work_ns`` starting at ``start_s`` (≥ ``ready_at``); returns its end."""
        service = work_ns * 1e-9 * self.slowdown
        end = start_s + service
        i = self.next
        self.free_at[i] = end
        self.next = i + 1 if i + 1 < self.n else 0
        self.busy_s += service
        return end

    def commit(self, start_s: float, end_s: float, busy_s: float) -> None:
        """Record an item already timed by the caller: from ``start_s`` to ``end_s``
        on the next core, ``busy_s`` of it working (the rest pre-empted by stalls)."""
        i = self.next
        self.free_at[i] = end_s
        self.next = i + 1 if i + 1 < self.n else 0
        self.busy_s += busy_s


#: Stall gaps and durations drawn per numpy call (Stalls._gap, Stalls._duration).
STALL_DRAWS = 1024


class Stalls:
    """Receiver scheduling stalls (TRANSPORT.md "Receive buffer").

    Stall starts form a Poisson process of ``rate_hz``; each stall lasts a
    Pareto(``min_s``, ``alpha``) time. Overlapping stalls merge. During a stall
    the receiver's CPU does no work for this endpoint; an item that is running
    when a stall starts is pre-empted and finishes later by the stall's length.
    ``start_s`` is +inf when there are no stalls, so the hot path costs one
    comparison per work item.
    """

    __slots__ = ("_durations", "_gaps", "_next_duration", "_next_gap", "alpha", "count",
                 "end_s", "min_s", "next_start_s", "rate_hz", "rng", "start_s", "total_s")

    def __init__(self, rate_hz: float, min_s: float, alpha: float, rng: np.random.Generator):
        self.rate_hz = rate_hz
        self.min_s = min_s
        self.alpha = alpha
        self.rng = rng
        self.count = 0
        self.total_s = 0.0
        self.start_s = math.inf
        self.end_s = math.inf
        self.next_start_s = math.inf
        self._gaps: list[float] = []
        self._durations: list[float] = []
        self._next_gap = 0
        self._next_duration = 0
        if rate_hz > 0 and min_s > 0:
            self._stall_from(self._gap())

    def _gap(self) -> float:
        # Drawn STALL_DRAWS at a time: a stall is ~2 µs of numpy call overhead drawn
        # one by one, and a slow transfer crosses millions of them (3258 stalls/s
        # over 400 simulated seconds at 240 ms RTT and 1 % loss).
        i = self._next_gap
        if i >= len(self._gaps):
            self._gaps = self.rng.exponential(1.0 / self.rate_hz, STALL_DRAWS).tolist()
            i = 0
        self._next_gap = i + 1
        return self._gaps[i]

    def _duration(self) -> float:
        # numpy's pareto() is the Lomax form: τm·(1 + X) is Pareto(τm, α).
        i = self._next_duration
        if i >= len(self._durations):
            self._durations = self.rng.pareto(self.alpha, STALL_DRAWS).tolist()
            i = 0
        self._next_duration = i + 1
        return self.min_s * (1.0 + self._durations[i])

    def _stall_from(self, start: float) -> None:
        """The next stall begins at ``start``; stalls that begin before it ends merge in."""
        end = start + self._duration()
        nxt = start + self._gap()
        while nxt < end:
            end = max(end, nxt + self._duration())
            nxt += self._gap()
        self.start_s = start
        self.end_s = end
        self.next_start_s = nxt

    def _advance(self) -> None:
        """The current stall is over (or in the past): move to the next one."""
        self.count += 1
        self.total_s += self.end_s - self.start_s
        self._stall_from(self.next_start_s)

    def begin(self, t_s: float) -> float:
        """The earliest time ≥ ``t_s`` at which work can start (after any stall at ``t_s``)."""
        while self.start_s <= t_s:
            if t_s < self.end_s:
                t_s = self.end_s
            self._advance()
        return t_s

    def finish(self, start_s: float, end_s: float) -> float:
        """End of an item that runs from ``start_s`` (not stalled) for ``end_s − start_s``.

        Every stall that starts before the (extended) end pre-empts the item.
        """
        while self.start_s < end_s:
            if self.start_s >= start_s:
                end_s += self.end_s - self.start_s
            self._advance()
        return end_s
