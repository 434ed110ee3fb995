"""Wiring: one QUIC connection (sender, path, receiver) in one SimPy environment.

``Connection(resolved, config).run()`` simulates the transfer (or a prefix of
it, see :class:`RunConfig`) and returns a :class:`RunResult` of counters; the
engine turns that into a Prediction. Model code lives in ``sender.py``,
``receiver.py``, ``link.py``, ``host.py`` and ``cc.py``; this module only
builds and runs it (the ns-3 split of models and helpers).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np
import simpy
from simpy.events import Timeout

from quiclab.errors import EngineError
from quiclab.sim.analytic.core import skb_truesize
from quiclab.sim.des.host import Stalls
from quiclab.sim.des.link import CAUSE_RCVBUF, ForwardLink, ReverseLink
from quiclab.sim.des.receiver import Receiver
from quiclab.sim.des.sender import Sender
from quiclab.sim.des.timeseries import Recorder
from quiclab.sim.resolve import Resolved

#: Counters every snapshot holds (all cumulative since t = 0).
COUNTERS = (
    "t_s", "consumed_bytes", "sender_busy_s", "receiver_busy_s", "link_busy_s",
    "packets_sent", "retransmitted", "sender_calls", "acks_received", "declared_lost",
    "datagrams", "receiver_calls", "acks_sent", "rcvbuf_drops", "queue_drops",
    "path_losses", "congestion_events", "congestion_events_rcvbuf", "pto_fired",
    "busy_state_s", "cwnd_state_s", "flow_state_s", "hold_state_s", "nodata_state_s",
    "stalls", "stall_s",
)


@dataclass(frozen=True)
class RunConfig:
    """How to simulate one connection.

    ``unit_packets`` > 1 selects batch granularity: a sent record stands for a
    unit of up to that many back-to-back packets, capped at cwnd /
    ``unit_cwnd_divisor`` and so that a unit's socket-buffer footprint stays
    below rcvbuf / ``unit_rcvbuf_divisor``. ``prefix_bytes`` > 0 stops after
    that much goodput, ``prefix_records`` > 0 after that many sent records
    (packets, or units at batch granularity), whichever comes first; the rest
    is extrapolated from the second half of the prefix. If congestion events
    happen but fewer than ``min_window_events`` fall into that half, the
    prefix grows (up to ``prefix_extend`` times) so that a loss-driven
    steady state is measured over enough sawtooth cycles.
    ``timeseries_interval_s`` > 0 records per-interval series.
    """

    unit_packets: int = 1
    unit_cwnd_divisor: int = 8
    unit_rcvbuf_divisor: int = 8
    prefix_bytes: int = 0
    prefix_records: int = 0
    min_window_events: int = 20
    prefix_extend: float = 4.0
    #: Receiver ACK threshold capped at this fraction of the sender's cwnd
    #: (0 = TRANSPORT.md's fixed ack_every_packets; see Receiver).
    ack_window_fraction: float = 0.25
    #: RFC 9002 §7.8 rule for cwnd growth (recovery.VALIDATIONS): "app" per TRANSPORT.md.
    cwnd_validation: str = "app"
    timeseries_interval_s: float = 0.0
    max_sim_s: float = 36_000.0
    #: Write the sender's qlog here (sim/des/qlog.py; packet granularity only), at most
    #: ``qlog_max_events`` packet events; "" = none.
    qlog_path: str = ""
    qlog_max_events: int = 200_000


@dataclass
class RunResult:
    """Counters at the start and end of the measurement window, and the outcome."""

    completed: bool
    end: dict[str, float]
    window_start: dict[str, float]
    data_start_s: float
    unit_packets: int
    timeseries: dict[str, list[float]] | None = None
    notes: list[str] = field(default_factory=list)


class Connection:
    """One transfer of ``resolved.scenario`` (see the module docstring)."""

    def __init__(self, resolved: Resolved, config: RunConfig):
        self.resolved = resolved
        self.config = config
        s = resolved.scenario
        self.env = simpy.Environment()
        # Independent streams per mechanism (ns-3's SetSeed/SetRun): changing
        # the loss rate does not change the stall pattern, and so on.
        loss_ss, reorder_ss, stall_ss = np.random.SeedSequence([s.seed, s.run]).spawn(3)
        path = resolved.path
        self.link = ForwardLink(path, np.random.default_rng(loss_ss),
                                np.random.default_rng(reorder_ss))
        self.reverse = ReverseLink(path)
        rx = resolved.receiver
        self.stalls = Stalls(rx.rx_stall_rate_hz, rx.rx_stall_min_s, rx.rx_stall_alpha,
                             np.random.default_rng(stall_ss))
        unit = 1
        if config.unit_packets > 1:
            truesize = skb_truesize(resolved.sender.udp_payload_bytes)
            by_buffer = int(path.rcvbuf_bytes // (truesize * config.unit_rcvbuf_divisor))
            unit = max(1, min(config.unit_packets, by_buffer))
        self.unit = unit
        self.sender = Sender(self.env, resolved, self.link, unit_packets_max=unit,
                             unit_cwnd_divisor=config.unit_cwnd_divisor if unit > 1 else 1,
                             cwnd_validation=config.cwnd_validation)
        transfer = s.transfer_bytes
        prefix = config.prefix_bytes if 0 < config.prefix_bytes < transfer else 0
        self.prefix = prefix
        self.prefix_records = config.prefix_records
        # Snapshots every ~1/16 of the prefix (at most 16 MB apart): the window
        # start is the last one at or below half the goodput at the end.
        step = prefix // 16 if prefix else transfer
        if self.prefix_records:
            step = min(step, max(1, self.prefix_records * unit * resolved.sender.stream_bytes
                                 // 16), 1 << 24)
        self.snapshots: list[dict[str, float]] = []
        self.receiver = Receiver(self.env, resolved, self.reverse, self.sender, self.stalls,
                                 self._on_progress, max(1, step),
                                 ack_window_fraction=config.ack_window_fraction)
        self.done = self.env.event()
        self.window_start: dict[str, float] | None = None
        self.end: dict[str, float] | None = None
        self.completed = False
        self.data_start_s = 1.5 * path.rtt_s
        self.recorder: Recorder | None = None
        if config.timeseries_interval_s > 0:
            self.recorder = Recorder(self, config.timeseries_interval_s)
        if config.qlog_path:
            if unit > 1:
                raise ValueError("qlog_path: the DES writes qlog at packet granularity only "
                                 "(a batch unit stands for many packets)")
            from quiclab.sim.des.qlog import QlogWriter

            self.sender.qlog = QlogWriter(
                config.qlog_path, title=f"quiclab DES: {s.describe()}",
                description=f"seed={s.seed} run={s.run}; sender (server) view",
                max_events=config.qlog_max_events)

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        """Simulate until the transfer (or prefix) completes.

        Raises EngineError if the simulation stalls or exceeds ``max_sim_s``.
        """
        env = self.env
        env.process(self._handshake())
        if self.recorder is not None:
            env.process(self.recorder.process())
        watchdog = env.timeout(self.config.max_sim_s)
        try:
            env.run(until=env.any_of([self.done, watchdog]))
        except RuntimeError as err:  # no events left: a deadlock in the model
            raise EngineError(f"des: {self.resolved.scenario.describe()}: simulation "
                              f"stalled at t={env.now:.6f} s ({err})") from None
        if not self.done.triggered or self.end is None:
            raise EngineError(f"des: {self.resolved.scenario.describe()}: not finished after "
                              f"max_sim_s={self.config.max_sim_s} s of simulated time")
        notes: list[str] = []
        if self.sender.qlog is not None:
            notes.append(self.sender.qlog.close())
        if self.config.ack_window_fraction != 0.25:
            notes.append(f"not TRANSPORT.md: the receiver's ACK threshold is capped at "
                         f"{self.config.ack_window_fraction:g} × the sender's cwnd "
                         "(spec: 0.25; 0 = no cap)")
        if self.config.cwnd_validation != "app":
            notes.append(f"not TRANSPORT.md: cwnd_validation={self.config.cwnd_validation} "
                         "(cwnd grows " + ("on every ACK" if self.config.cwnd_validation == "off"
                                           else "only while bytes in flight fill it") + ")")
        start = self.window_start
        if start is None:
            start = dict.fromkeys(COUNTERS, 0.0)
            start["t_s"] = self.data_start_s
        return RunResult(
            completed=self.completed, end=self.end, window_start=start,
            data_start_s=self.data_start_s, unit_packets=self.unit,
            timeseries=self.recorder.series() if self.recorder else None, notes=notes)

    def _handshake(self) -> Generator[simpy.Event, None, None]:
        """1-RTT handshake: the client's Initial at t = 0, the server's reply one RTT later.

        The client then sends its requests (with its Finished); the server
        starts sending when they arrive, 1.5 RTT after the start. Handshake
        CPU (the models' ``ns_per_connection``) is not simulated in a bulk run.
        """
        yield self.env.timeout(self.resolved.path.rtt_s)
        self.receiver.open_streams(self.env.now)

    def _on_progress(self, t_s: float, consumed: int, done: bool) -> None:
        if done:
            self._stop(t_s)
            return
        if not (self.prefix or self.prefix_records):
            return
        snap = self.snapshot(t_s)
        self.snapshots.append(snap)
        cfg = self.config
        records = self.sender.next_pn
        reached = (self.prefix and consumed >= self.prefix) or (
            self.prefix_records and records >= self.prefix_records)
        if not reached:
            return
        start = self._window_start(consumed)
        events = snap["congestion_events"] - start["congestion_events"]
        capped = (self.prefix and consumed >= cfg.prefix_extend * self.prefix) or (
            self.prefix_records and records >= cfg.prefix_extend * self.prefix_records)
        if snap["congestion_events"] == 0 or events >= cfg.min_window_events or capped:
            self.window_start = start
            self._stop(t_s, snap)

    def _window_start(self, consumed: int) -> dict[str, float]:
        """The last snapshot at or below half of ``consumed`` (the steady-state window)."""
        best = self.snapshots[0]
        for snap in self.snapshots:
            if snap["consumed_bytes"] > consumed / 2:
                break
            best = snap
        return best

    def _stop(self, t_s: float, snap: dict[str, float] | None = None) -> None:
        self.completed = self.receiver.done_chunks >= self.receiver.chunks
        self.end = snap or self.snapshot(t_s)
        self.snapshots = []
        # The receiver runs ahead of the clock; finish at its time.
        ev = Timeout(self.env, max(0.0, t_s - self.env.now))
        ev.callbacks.append(self._finish)
        self.receiver.on_progress = lambda *a: None

    def _finish(self, _event: simpy.Event) -> None:
        if not self.done.triggered:
            self.done.succeed()

    def snapshot(self, t_s: float) -> dict[str, float]:
        """Every counter of :data:`COUNTERS` as of ``t_s``."""
        snd, rcv, link = self.sender, self.receiver, self.link
        states = snd.flush_states(t_s)
        events = snd.events_by_cause
        return {
            "t_s": t_s,
            "consumed_bytes": float(rcv.consumed),
            "sender_busy_s": snd.cpu.busy_s,
            "receiver_busy_s": rcv.cpu.busy_s,
            "link_busy_s": link.busy_s,
            "packets_sent": float(snd.packets_sent),
            "retransmitted": float(snd.retransmitted),
            "sender_calls": float(snd.calls),
            "acks_received": snd.acks_received,
            "declared_lost": float(snd.declared_lost),
            "datagrams": float(rcv.datagrams),
            "receiver_calls": float(rcv.calls),
            "acks_sent": rcv.acks_sent,
            "rcvbuf_drops": float(rcv.drops),
            "queue_drops": float(link.queue_drops),
            "path_losses": float(link.path_losses),
            "congestion_events": float(sum(events)),
            "congestion_events_rcvbuf": float(events[CAUSE_RCVBUF]),
            "pto_fired": float(snd.pto_fired),
            "busy_state_s": states[0],
            "cwnd_state_s": states[1],
            "flow_state_s": states[2],
            "hold_state_s": states[3],
            "nodata_state_s": states[4],
            "stalls": float(self.stalls.count),
            "stall_s": self.stalls.total_s,
        }

