"""A pipelined endpoint's CPU: one busy-until server per core, queues between them.

The sender's and receiver's event loops run on the core that handles the QUIC
protocol (the *main* core); every work item they start — a send call with its
packets, an ACK, a receive call with its datagrams — is split over the
endpoint's cores by the shares :mod:`quiclab.sim.analytic.pipeline` computed
(stage work plus hand-offs, per core). The main core does its share at once;
the item then passes through the other cores one after another, each a FIFO
busy-until server (``start = max(ready, free_at)``), and is done when the last
core finishes: packets leave the host then (sender), an ACK is sent then.

Queues between cores hold ``queue_messages`` items. When a core's backlog
reaches that, the main core stops taking new work until there is room —
Mukherjee et al. 2025 §3: the thread of a faster stage "sleeps when it
detects that the length of the queue to the subsequent stage exceeds a
configurable threshold". In steady state the slowest core sets the rate, as in
the analytic engine.

Simplification: cores that precede the protocol stage on the receive path
(I/O, UDP/IP) are run after it, like the sender's. Throughput is the same (the
slowest core still serves every item); what moves is when within an item's
processing its ACK leaves (by the upstream cores' service time, ≲ a few µs).

A :class:`quiclab.sim.des.host.CpuServers` (``free_at``, ``next``,
``slowdown``, ``busy_s``, ``ready_at``, ``run``, ``commit``) whose event-loop
core is its one server, so the sender and receiver loops are unchanged.
"""

from __future__ import annotations

from quiclab.sim.des.host import CpuServers


class PipelineCpu(CpuServers):
    """Cores of a pipelined endpoint (see the module docstring); times in s, work in ns."""

    def __init__(self, pipeline: tuple[tuple[str, float, bool, int], ...]):
        if not pipeline:
            raise ValueError('"pipeline" must name at least one core')
        shares = [float(c[1]) for c in pipeline]
        if any(s < 0 for s in shares) or not abs(sum(shares) - 1.0) < 1e-6:
            raise ValueError(f'"pipeline" shares must be ≥ 0 and sum to 1, got {shares!r}')
        self.labels = [c[0] for c in pipeline]
        main = next((i for i, c in enumerate(pipeline)
                     if "protocol" in c[0].rstrip("*").split("+")), 0)
        self.main = main
        #: The event loop's core: one server, so the loops' free_at[next] is its time.
        self.n = 1
        self.next = 0
        self.free_at = [0.0]
        #: Main-core service per ns of an item's work (its share of the endpoint's work).
        self.slowdown = shares[main]
        order = [i for i in range(len(pipeline)) if i != main]
        self.order = order
        self.other_share = [shares[i] for i in order]
        self.other_free = [0.0] * len(order)
        self.queue = [max(1, int(pipeline[i][3])) for i in order]
        self.busy_s = 0.0
        self.core_busy_s = [0.0] * len(pipeline)

    def ready_at(self, t_s: float) -> float:
        f = self.free_at[0]
        return f if f > t_s else t_s

    def run(self, start_s: float, work_ns: float) -> float:
        """Run an item of ``work_ns`` from ``start_s`` through every core; returns its end."""
        service = work_ns * 1e-9 * self.slowdown
        return self._through(start_s + service, service, work_ns)

    def commit(self, start_s: float, end_s: float, busy_s: float) -> None:
        """The main core's part was timed by the caller (``busy_s`` of work, stalls
        included in ``end_s``); the rest of the item runs on the other cores."""
        work_ns = busy_s / self.slowdown * 1e9 if self.slowdown > 0 else 0.0
        self._through(end_s, busy_s, work_ns)

    def _through(self, main_end: float, main_busy: float, work_ns: float) -> float:
        self.free_at[0] = main_end
        self.busy_s += main_busy
        self.core_busy_s[self.main] += main_busy
        t = main_end
        hold = main_end
        for k, share in enumerate(self.other_share):
            service = work_ns * 1e-9 * share
            free = self.other_free[k]
            start = free if free > t else t
            t = start + service
            self.other_free[k] = t
            self.busy_s += service
            self.core_busy_s[self.order[k]] += service
            # Back-pressure: the main core may run at most `queue` items ahead.
            room = t - self.queue[k] * service
            if room > hold:
                hold = room
        self.free_at[0] = hold
        return t


def cpu_for(endpoint: object) -> CpuServers:
    """The CPU model of an endpoint: its pipeline's cores, or ``cores`` round-robin servers."""
    pipeline = getattr(endpoint, "pipeline", ())
    if pipeline:
        return PipelineCpu(pipeline)
    return CpuServers(endpoint.cores)  # type: ignore[attr-defined]
