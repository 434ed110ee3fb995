"""``DesEngine``: the SimPy engine behind the Engine protocol.

``DesEngine(registry).predict(scenario)`` resolves the scenario, simulates the
connection (:mod:`quiclab.sim.des.connection`) and turns the counters into a
:class:`~quiclab.sim.prediction.Prediction`: goodput from the completion time
as the client sees it (handshake included), counters, CPU utilisation and the
limiting resource by the rules of TRANSPORT.md "Outputs".

Long transfers are simulated as a prefix (``max_packets`` goodput packets) and
extrapolated from the second half of that prefix; the Prediction's notes say
so. At ``granularity="batch"`` a record stands for a unit of packets (see
``sim/des/README.md`` for what that gives up).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from quiclab.errors import EngineError, ScenarioError
from quiclab.models.registry import Registry
from quiclab.sim.analytic import bounds
from quiclab.sim.analytic.pipeline import annotate
from quiclab.sim.bands import with_band
from quiclab.sim.des.connection import Connection, RunConfig, RunResult
from quiclab.sim.des.recovery import VALIDATIONS
from quiclab.sim.engine import prefix_transient, unmodelled_notes, versioned
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import Resolved, resolve
from quiclab.sim.scenario import Scenario

ENGINE_VERSION = versioned("des-1.0")
GRANULARITIES = ("packet", "batch")
#: Default prefix: packet granularity simulates at most this many goodput
#: packets (a few CPU-seconds) and extrapolates; batch granularity at most
#: this many packets or DEFAULT_MAX_UNITS records, whichever comes first, so
#: that 8 GiB (6.4 M packets of 1350 B) takes seconds whatever the unit size.
DEFAULT_MAX_PACKETS = {"packet": 200_000, "batch": 20_000_000}
DEFAULT_MAX_UNITS = 100_000
#: TRANSPORT.md "Outputs": a resource busy ≥ 95 % of the time is the limit.
BUSY_LIMIT = 0.95
#: A limit's analytic bound this far above the simulated goodput gets a note.
LIMIT_BOUND_SLACK = 1.5


class DesEngine:
    """The SimPy discrete-event engine (see the module docstring).

    Parameters: ``granularity`` "packet" (one record per packet) or "batch"
    (units of up to ``unit_packets`` packets, at most cwnd /
    ``unit_cwnd_divisor``); ``max_packets`` the prefix length in goodput
    packets (0 = always the whole transfer), and at batch granularity
    ``max_units`` the prefix length in records (0 = no limit); ``timeseries``
    and ``timeseries_interval_s`` for per-interval series in the Prediction;
    ``workers`` processes for ``predict_batch`` (1 = in this process);
    ``qlog_path`` a file for the sender's qlog of each run (packet granularity;
    at most ``qlog_max_events`` packet events, ``sim/des/qlog.py``);
    ``ack_window_fraction`` the receiver's ACK-threshold cap as a fraction of
    the sender's cwnd (TRANSPORT.md: 0.25; 0 switches the cap off, noted in
    the Prediction); ``cwnd_validation`` RFC 9002 §7.8's rule for cwnd growth:
    "app" (TRANSPORT.md: grow unless the sender was app-limited), "inflight"
    (only while bytes in flight fill cwnd) or "off" (every ACK); noted unless "app".
    Raises ValueError for an unknown granularity or a bad option.
    """

    name = "des"
    version = ENGINE_VERSION

    def __init__(self, registry: Registry, granularity: str = "packet",
                 max_packets: int | None = None, unit_packets: int = 256,
                 max_units: int = DEFAULT_MAX_UNITS, unit_cwnd_divisor: int = 8,
                 timeseries: bool = False, timeseries_interval_s: float = 0.01,
                 workers: int = 1, max_sim_s: float = 36_000.0,
                 ack_window_fraction: float = 0.25, cwnd_validation: str = "app",
                 qlog_path: str = "", qlog_max_events: int = 200_000):
        if granularity not in GRANULARITIES:
            raise ValueError(f'granularity={granularity!r}: allowed "packet" | "batch"')
        if max_packets is not None and max_packets < 0:
            raise ValueError(f'"max_packets" must be ≥ 0, got {max_packets!r}')
        if unit_packets < 1:
            raise ValueError(f'"unit_packets" must be ≥ 1, got {unit_packets!r}')
        if workers < 1:
            raise ValueError(f'"workers" must be ≥ 1, got {workers!r}')
        self.registry = registry
        self.granularity = granularity
        self.max_packets = DEFAULT_MAX_PACKETS[granularity] if max_packets is None \
            else max_packets
        self.unit_packets = unit_packets if granularity == "batch" else 1
        self.max_units = max_units if granularity == "batch" else 0
        self.unit_cwnd_divisor = unit_cwnd_divisor
        self.timeseries = timeseries
        self.timeseries_interval_s = timeseries_interval_s
        self.workers = workers
        self.max_sim_s = max_sim_s
        if not 0.0 <= ack_window_fraction <= 1.0:
            raise ValueError(f'"ack_window_fraction" must be in 0 … 1, got {ack_window_fraction!r}')
        self.ack_window_fraction = ack_window_fraction
        if cwnd_validation not in VALIDATIONS:
            raise ValueError(f'cwnd_validation={cwnd_validation!r}: allowed '
                             + " | ".join(f'"{v}"' for v in VALIDATIONS))
        self.cwnd_validation = cwnd_validation
        if qlog_path and granularity != "packet":
            raise ValueError('"qlog_path": qlog is written at granularity="packet" only')
        if qlog_max_events < 1:
            raise ValueError(f'"qlog_max_events" must be ≥ 1, got {qlog_max_events!r}')
        #: Write the sender's qlog of each run here (sim/des/qlog.py); "" = none.
        self.qlog_path = qlog_path
        self.qlog_max_events = qlog_max_events

    def options(self) -> dict[str, Any]:
        """Constructor arguments (to rebuild the engine in a worker process)."""
        return {"granularity": self.granularity, "max_packets": self.max_packets,
                "unit_packets": self.unit_packets, "max_units": self.max_units,
                "unit_cwnd_divisor": self.unit_cwnd_divisor, "timeseries": self.timeseries,
                "timeseries_interval_s": self.timeseries_interval_s, "workers": 1,
                "max_sim_s": self.max_sim_s, "ack_window_fraction": self.ack_window_fraction,
                "cwnd_validation": self.cwnd_validation, "qlog_path": self.qlog_path,
                "qlog_max_events": self.qlog_max_events}

    # ------------------------------------------------------------------ API
    def predict(self, scenario: Scenario) -> Prediction:
        """Simulate one scenario. Request and handshake workloads run the request
        model of :mod:`quiclab.sim.des.requests`. Raises ScenarioError for what the
        DES does not model (a bulk transfer over several connections) and
        EngineError if the simulation does not finish."""
        if scenario.workload != "bulk":
            from quiclab.sim.des.requests import predict_requests_des

            return with_band(predict_requests_des(resolve(scenario, self.registry),
                                                  self.name, self.version), self.registry)
        if scenario.connections != 1:
            raise ScenarioError("connections", scenario.connections,
                                "1 (the DES simulates one connection)")
        resolved = resolve(scenario, self.registry)
        return self.predict_resolved(resolved)

    def predict_batch(self, scenarios: Sequence[Scenario]) -> list[Prediction]:
        """Predict many scenarios, in ``workers`` processes when > 1 (order kept)."""
        if self.workers <= 1 or len(scenarios) <= 1:
            return [self.predict(s) for s in scenarios]
        workers = min(self.workers, len(scenarios), os.cpu_count() or 1)
        with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                                 initargs=(self.registry, self.options(),
                                           os.getpid())) as pool:
            return list(pool.map(_predict_in_worker, scenarios, chunksize=1))

    def run(self, resolved: Resolved) -> RunResult:
        """Simulate one resolved scenario and return the raw counters."""
        prefix = self.max_packets * resolved.sender.stream_bytes if self.max_packets else 0
        # Short transfers are simulated whole: extrapolating buys nothing.
        if prefix and resolved.scenario.transfer_bytes <= 1.25 * prefix:
            prefix = 0
        config = RunConfig(
            unit_packets=self.unit_packets, unit_cwnd_divisor=self.unit_cwnd_divisor,
            prefix_bytes=prefix, prefix_records=self.max_units,
            timeseries_interval_s=self.timeseries_interval_s if self.timeseries else 0.0,
            max_sim_s=self.max_sim_s, ack_window_fraction=self.ack_window_fraction,
            cwnd_validation=self.cwnd_validation, qlog_path=self.qlog_path,
            qlog_max_events=self.qlog_max_events)
        return Connection(resolved, config).run()

    def predict_resolved(self, resolved: Resolved) -> Prediction:
        """One simulated run, with its predictive band (:mod:`quiclab.sim.bands`)."""
        return with_band(prediction_from_run(resolved, self.run(resolved), self.name,
                                             self.version, self.granularity), self.registry)


# ---------------------------------------------------------------- worker pool
_WORKER: DesEngine | None = None


def _init_worker(registry: Registry, options: dict[str, Any], parent_pid: int) -> None:
    global _WORKER
    from quiclab.procs import die_with_parent

    die_with_parent(parent_pid)  # a killed `predict --runs` leaves no worker behind
    _WORKER = DesEngine(registry, **options)


def _predict_in_worker(scenario: Scenario) -> Prediction:
    assert _WORKER is not None
    return _WORKER.predict(scenario)


# ------------------------------------------------------------ counters → Prediction
def totals(result: RunResult, transfer_bytes: float) -> tuple[float, dict[str, float]]:
    """Completion time (s) and every counter for the whole transfer.

    A completed run is taken as is; a prefix is extrapolated linearly from the
    measurement window (the second half of the prefix).
    """
    end = result.end
    if result.completed:
        return end["t_s"], dict(end)
    start = result.window_start
    if end["consumed_bytes"] <= start["consumed_bytes"]:
        # Nothing delivered in the window (e.g. a retransmission timeout spans
        # it): extrapolate from the whole prefix instead.
        start = {k: 0.0 for k in end}
    d_bytes = end["consumed_bytes"] - start["consumed_bytes"]
    d_t = end["t_s"] - start["t_s"]
    if d_bytes <= 0:
        raise EngineError(f"DES: the simulated prefix ({end['t_s']:.3g} s) delivered no data; "
                          "raise max_units or max_packets")
    remaining = transfer_bytes - end["consumed_bytes"]
    scale = remaining / d_bytes
    out = {k: end[k] + (end[k] - start[k]) * scale for k in end}
    out["consumed_bytes"] = transfer_bytes
    return end["t_s"] + d_t * scale, out


def classify(resolved: Resolved, result: RunResult) -> tuple[str, dict[str, float]]:
    """The limiting resource over the measurement window (TRANSPORT.md "Outputs").

    Returns the limit and the fractions it was decided on.
    """
    a, b = result.window_start, result.end
    span = max(b["t_s"] - a["t_s"], 1e-12)

    def frac(key: str, capacity: float = 1.0) -> float:
        return (b[key] - a[key]) / (span * capacity)

    f = {
        "link": frac("link_busy_s"),
        "sender_cpu": frac("sender_busy_s", resolved.sender.cores),
        "receiver_cpu": frac("receiver_busy_s", resolved.receiver.cores),
        "cwnd": frac("cwnd_state_s"),
        "flow_control": frac("flow_state_s"),
        "interop": frac("hold_state_s"),
    }
    events = b["congestion_events"] - a["congestion_events"]
    rcvbuf_events = b["congestion_events_rcvbuf"] - a["congestion_events_rcvbuf"]
    f["rcvbuf"] = rcvbuf_events / events if events > 0 else 0.0
    for name in ("link", "sender_cpu", "receiver_cpu"):
        if f[name] >= BUSY_LIMIT:
            return name, f
    if f["interop"] > 0.02 and f["sender_cpu"] + f["interop"] >= BUSY_LIMIT:
        # The sender would be CPU-bound but the pair's interplay holds it off
        # (TRANSPORT.md "Pair interplay"; seed 002 §4.3).
        return "interop", f
    if events > 0 and f["rcvbuf"] > 0.5:
        return "rcvbuf", f
    for name in ("cwnd", "flow_control", "interop"):
        if f[name] > 0.5:
            return name, f
    # No single resource dominates: name the one that was busy or blocking longest.
    candidates = {k: v for k, v in f.items() if k != "rcvbuf"}
    return max(candidates, key=lambda k: candidates[k]), f


def prediction_from_run(resolved: Resolved, result: RunResult, engine: str, version: str,
                        granularity: str) -> Prediction:
    s = resolved.scenario
    duration, tot = totals(result, float(s.transfer_bytes))
    goodput = s.transfer_bytes * 8.0 / duration
    limit, fractions = classify(resolved, result)
    lo = hi = goodput
    rates = bounds(resolved)
    closed_form = rates.get(limit, math.inf)
    if closed_form > goodput / 1e6:
        # The simulation found this resource holding the goodput where it is
        # (Prediction: headroom 0 for the limit); the closed form's bound, which
        # leaves out what the run simulates (RFC 9002 §6.1.2's time threshold and
        # PTO waits at high loss), would report it with +33,000 % to spare.
        rates[limit] = goodput / 1e6
    if limit in ("sender_cpu", "receiver_cpu"):
        ep = resolved.sender if limit == "sender_cpu" else resolved.receiver
        lo = goodput / ep.cost_hi
        hi = min(goodput / ep.cost_lo, max(goodput, rates["link"] * 1e6))
    notes = [f"granularity={granularity}"
             + (f" (units of ≤ {result.unit_packets} packets)" if result.unit_packets > 1 else "")]
    if not result.completed:
        a, b = result.window_start, result.end
        notes.append(
            f"simulated a prefix of {b['consumed_bytes'] / 1e6:.1f} MB "
            f"({b['t_s']:.3f} s); the rest extrapolated from steady state over "
            f"[{a['t_s']:.3f}, {b['t_s']:.3f}] s "
            f"({b['congestion_events'] - a['congestion_events']:.0f} congestion events)")
    notes.extend(result.notes)
    notes.append(f"pair interplay: busy {resolved.interop_busy:.2f} ({resolved.interop_source})")
    notes.append("handshake: 1 RTT + request, no handshake CPU (a bulk run does not charge the "
                 "models' ns_per_connection; request workloads do)")
    if s.cc == "bbr":
        notes.append("bbr: approximated by CUBIC")
    notes += unmodelled_notes(s, engine, reordering=True)
    notes.append("limit fractions: " + ", ".join(f"{k} {v:.2f}" for k, v in fractions.items()))
    if closed_form > LIMIT_BOUND_SLACK * goodput / 1e6:
        notes.append(f"{limit}: the analytic bound is {closed_form:,.1f} Mbit/s, "
                     f"{closed_form / (goodput / 1e6):,.1f}× the simulated goodput; the "
                     f"limit's rate is the goodput simulated here")
    losses = tot["rcvbuf_drops"] + tot["queue_drops"] + tot["path_losses"]
    window = result.end["congestion_events"] - result.window_start["congestion_events"]
    transient = prefix_transient(result.completed, result.end["congestion_events"], window,
                                 RunConfig.min_window_events, result.end["t_s"])
    # Busy polling, runtime threads and placement notes (sim/cores.py).
    return annotate(Prediction(
        scenario=s,
        engine=engine,
        engine_version=version,
        goodput_mbps=goodput / 1e6,
        goodput_lo_mbps=lo / 1e6,
        goodput_hi_mbps=hi / 1e6,
        limit=limit,
        duration_s=duration,
        rates_mbps=rates,
        server_cpu_util=tot["sender_busy_s"] / duration,
        client_cpu_util=tot["receiver_busy_s"] / duration,
        server_cpu_s=tot["sender_busy_s"],
        client_cpu_s=tot["receiver_busy_s"],
        server_packets_sent=tot["packets_sent"],
        server_packets_received=tot["acks_received"],
        client_packets_sent=tot["acks_sent"],
        client_packets_received=tot["datagrams"],
        acks=tot["acks_sent"],
        losses=losses,
        retransmissions=tot["retransmitted"],
        rcvbuf_drops=tot["rcvbuf_drops"],
        server_syscalls=tot["sender_calls"] + tot["acks_received"],
        client_syscalls=tot["receiver_calls"] + tot["acks_sent"],
        model_versions=resolved.model_versions,
        cpu_rule=resolved.describe_cpu(),
        notes=tuple(notes),
        engine_specific=(transient,) if transient else (),
        timeseries=result.timeseries,
    ), resolved)
