"""Optional per-interval time series of one DES run (for plots and the explorer).

A SimPy process samples the connection's cumulative counters every
``interval_s`` and turns them into per-interval values. Components run ahead
of the SimPy clock by at most one one-way delay (see ``sender.py``), so a
sample reflects each component's state within ``rtt/2`` of the sample time;
busy fractions are clipped to [0, cores] (a pipeline's cores: its CPU model's
``n`` is its event loop's one server). Memory grows with the number of
intervals only, never with the number of packets.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy

from quiclab.sim.des.host import CpuServers
from quiclab.sim.des.pipeline import PipelineCpu

if TYPE_CHECKING:
    from quiclab.sim.des.connection import Connection

#: Series names and units, in the order of ``Recorder.series()``.
SERIES = (
    "t_s",  # end of the interval
    "goodput_mbps",  # in-order bytes consumed by the client's application
    "cwnd_bytes",  # sender's congestion window at the sample
    "inflight_bytes",
    "sender_cpu_busy",  # cores working, averaged over the interval (no busy polling)
    "receiver_cpu_busy",
    "link_busy",  # fraction of the interval the forward link serialised
    "rcvbuf_bytes",  # socket-buffer occupancy at the sample
    "rcvbuf_drops",  # drops in the interval
)


class Recorder:
    """Samples a :class:`Connection` every ``interval_s`` seconds of simulated time."""

    def __init__(self, connection: Connection, interval_s: float):
        if not interval_s > 0:
            raise ValueError(f'"timeseries_interval_s" must be > 0, got {interval_s!r}')
        self.connection = connection
        self.interval_s = interval_s
        self._data: dict[str, list[float]] = {name: [] for name in SERIES}
        self._last = (0.0, 0.0, 0.0, 0.0, 0.0)
        self._cores = (cores(connection.sender.cpu), cores(connection.receiver.cpu))

    def process(self) -> Generator[simpy.Event, None, None]:
        env = self.connection.env
        while True:
            yield env.timeout(self.interval_s)
            self.sample(env.now)

    def sample(self, t_s: float) -> None:
        c = self.connection
        snd, rcv = c.sender, c.receiver
        now = (float(rcv.consumed), snd.cpu.busy_s, rcv.cpu.busy_s, c.link.busy_s,
               float(rcv.drops))
        last = self._last
        self._last = now
        dt = self.interval_s
        d = self._data
        d["t_s"].append(t_s)
        d["goodput_mbps"].append((now[0] - last[0]) * 8.0 / dt / 1e6)
        d["cwnd_bytes"].append(float(snd.cc.cwnd))
        d["inflight_bytes"].append(float(snd.inflight))
        d["sender_cpu_busy"].append(min(max((now[1] - last[1]) / dt, 0.0), self._cores[0]))
        d["receiver_cpu_busy"].append(min(max((now[2] - last[2]) / dt, 0.0), self._cores[1]))
        d["link_busy"].append(min(max((now[3] - last[3]) / dt, 0.0), 1.0))
        d["rcvbuf_bytes"].append(float(rcv.occupancy))
        d["rcvbuf_drops"].append(now[4] - last[4])

    def series(self) -> dict[str, list[float]]:
        return {name: list(values) for name, values in self._data.items()}


def cores(cpu: CpuServers) -> float:
    """The cores ``cpu``'s busy time is spread over: every core of a pipeline
    (whose ``n`` is its event loop's one server), else its servers."""
    return float(len(cpu.labels)) if isinstance(cpu, PipelineCpu) else float(cpu.n)
