"""The ns-3 engine: one Scenario in, one compiled ns-3 run, one Prediction out.

``Ns3Engine(registry).predict(scenario)`` resolves the scenario (the same
:class:`~quiclab.sim.resolve.Resolved` the analytic engine and the DES use),
passes it to the cached simulator binary as ``--Name=value`` arguments, and
turns the JSON it prints into a :class:`~quiclab.sim.prediction.Prediction`.
The model is sim/TRANSPORT.md; the C++ is beside this file.

Long transfers are simulated as a prefix (``prefix_packets`` data packets) and
extrapolated at the steady-state rate measured over the prefix's last
``1 − warm_fraction``; a loss-driven prefix grows (up to ``prefix_extend``
times) until that window holds ``min_window_events`` congestion events, as in
the DES. The Prediction's notes say so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from quiclab.errors import EngineError, ScenarioError
from quiclab.models.registry import Registry
from quiclab.sim.analytic.pipeline import annotate
from quiclab.sim.bands import with_band
from quiclab.sim.engine import prefix_transient, unmodelled_notes, versioned
from quiclab.sim.ns3.build import ensure_binary
from quiclab.sim.ns3.results import RunResult, limit_fractions, limit_of
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import Resolved, resolve
from quiclab.sim.scenario import Scenario

ENGINE_VERSION = versioned("ns3-1.0")
#: Default build cache when the caller passes none (the CLI passes ``paths.cache / "ns3"``).
DEFAULT_CACHE_DIR = Path("~/.local/share/quiclab/cache/ns3")
#: Data packets simulated before a long transfer is extrapolated.
DEFAULT_PREFIX_PACKETS = 200_000
#: Share of the prefix treated as warm-up (handshake, slow start) and not measured;
#: the DES measures the second half of its prefix too.
DEFAULT_WARM_FRACTION = 0.5
#: cwnd_validation → the simulator's cwndValidation (the DES's recovery.VALIDATIONS).
VALIDATION_CODES = {"app": 0, "inflight": 1, "off": 2}
#: A loss-driven prefix grows (up to DEFAULT_PREFIX_EXTEND prefixes) until its
#: window holds this many congestion events (the DES's RunConfig defaults).
DEFAULT_MIN_WINDOW_EVENTS = 20
DEFAULT_PREFIX_EXTEND = 4.0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _flag(value: bool) -> str:
    return "true" if value else "false"


class Ns3Engine:
    """Packet-level engine: the QUIC-like transport as ns-3 Applications.

    Parameters: ``cache_dir`` for the compiled binary (built on first use);
    ``jobs`` simulations run in parallel by ``predict_batch``;
    ``prefix_packets``/``warm_fraction`` bound the simulated part of long
    transfers; ``progress`` receives the one-line build notice (default:
    stderr); ``ack_window_fraction`` the receiver's ACK-threshold cap as a fraction
    of the sender's cwnd (TRANSPORT.md: 0.25; 0 = no cap), ``cwnd_validation``
    RFC 9002 §7.8's rule for cwnd growth as in the DES ("app" per TRANSPORT.md,
    "inflight", "off"; noted unless "app"). Raises EngineError
    (one line) if the build or a run fails.
    """

    name = "ns3"
    version = ENGINE_VERSION

    def __init__(self, registry: Registry, cache_dir: Path | str | None = None, jobs: int = 1,
                 prefix_packets: int = DEFAULT_PREFIX_PACKETS,
                 warm_fraction: float = DEFAULT_WARM_FRACTION, compiler: str | None = None,
                 progress: Callable[[str], None] | None = _stderr, timeout_s: float = 3600.0,
                 ack_window_fraction: float = 0.25, cwnd_validation: str = "app",
                 min_window_events: int = DEFAULT_MIN_WINDOW_EVENTS,
                 prefix_extend: float = DEFAULT_PREFIX_EXTEND):
        if jobs < 1:
            raise ValueError(f"jobs={jobs}: allowed ≥ 1")
        if prefix_packets < 1000:
            raise ValueError(f"prefix_packets={prefix_packets}: allowed ≥ 1000")
        if not 0.0 < warm_fraction < 0.9:
            raise ValueError(f"warm_fraction={warm_fraction}: allowed 0 < x < 0.9")
        if min_window_events < 0 or prefix_extend < 1.0:
            raise ValueError(f"min_window_events={min_window_events}, prefix_extend="
                             f"{prefix_extend}: allowed ≥ 0 and ≥ 1")
        if not 0.0 <= ack_window_fraction <= 1.0:
            raise ValueError(f"ack_window_fraction={ack_window_fraction}: allowed 0 … 1")
        self.registry = registry
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else \
            DEFAULT_CACHE_DIR.expanduser()
        self.jobs = jobs
        self.prefix_packets = prefix_packets
        self.warm_fraction = warm_fraction
        self.compiler = compiler
        self.progress = progress
        self.timeout_s = timeout_s
        self.ack_window_fraction = ack_window_fraction
        if cwnd_validation not in VALIDATION_CODES:
            raise ValueError(f'cwnd_validation={cwnd_validation!r}: allowed '
                             + " | ".join(f'"{v}"' for v in VALIDATION_CODES))
        self.cwnd_validation = cwnd_validation
        self.min_window_events = min_window_events
        self.prefix_extend = prefix_extend
        self._binary: Path | None = None
        self.build_record: dict[str, object] = {}

    # -- the binary -----------------------------------------------------------
    def binary(self) -> Path:
        """The simulator binary (built on the first call, then cached by source hash)."""
        if self._binary is None or not self._binary.is_file():
            self._binary, self.build_record = ensure_binary(
                self.cache_dir, compiler=self.compiler, progress=self.progress)
        return self._binary

    # -- Engine protocol --------------------------------------------------------
    def predict(self, scenario: Scenario) -> Prediction:
        return self.predict_batch([scenario])[0]

    def predict_batch(self, scenarios: Sequence[Scenario]) -> list[Prediction]:
        resolved = [self.resolve(s) for s in scenarios]  # refuse bad input before any run
        if not resolved:
            return []
        binary = self.binary()
        if self.jobs == 1 or len(resolved) == 1:
            return [self._predict(binary, r) for r in resolved]
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:  # each run is a process
            return list(pool.map(lambda r: self._predict(binary, r), resolved))

    def resolve(self, scenario: Scenario) -> Resolved:
        """Resolve a Scenario; refuse the workloads this engine does not simulate."""
        if scenario.workload != "bulk":
            raise ScenarioError("workload", scenario.workload,
                                "bulk (the ns3 engine simulates one bulk transfer)")
        if scenario.connections != 1:
            raise ScenarioError("connections", scenario.connections,
                                "1 (the ns3 engine simulates one connection)")
        return resolve(scenario, self.registry)

    # -- one run ----------------------------------------------------------------
    def arguments(self, r: Resolved) -> list[str]:
        """The simulator's ``--Name=value`` arguments for one resolved scenario."""
        s, snd, rcv, path = r.scenario, r.sender, r.receiver, r.path
        prefix_bytes = self.prefix_packets * snd.stream_bytes
        # Whole transfer when it is at most 1.25 prefixes long, else a prefix
        # (the DES's rule, so both engines extrapolate the same scenarios).
        use_prefix = s.transfer_bytes > 1.25 * prefix_bytes
        args: dict[str, Any] = {
            "linkBps": repr(path.link_bps),
            "mtuBytes": path.mtu_bytes,
            "rttS": repr(path.rtt_s),
            "lossProb": repr(path.loss_prob),
            "reorderProb": repr(path.reorder_prob),
            "queueBytes": path.queue_bytes,
            "rcvbufBytes": path.rcvbuf_bytes,
            "udpPayload": snd.udp_payload_bytes,
            "streamBytes": snd.stream_bytes,
            "transferBytes": s.transfer_bytes,
            "streams": s.streams,
            "chunks": s.chunks,
            # TRANSPORT.md: "bbr" may be approximated by CUBIC (noted in the Prediction).
            "cc": "reno" if r.cc == "reno" else "cubic",
            "sNsPacket": repr(snd.ns_per_data_packet),
            "sNsCall": repr(snd.ns_per_call),
            "sNsAck": repr(snd.ns_per_ack),
            "sSegments": snd.segments_per_call,
            "sCores": repr(snd.cores),
            "pacing": _flag(snd.pacing),
            "pacingBurstS": repr(snd.pacing_burst_s),
            "pacingBurstMin": snd.pacing_burst_min_packets,
            "pacingBurstMax": snd.pacing_burst_max_packets,
            "pacingMinDelayS": repr(snd.pacing_min_delay_s),
            "rNsPacket": repr(rcv.ns_per_data_packet),
            "rNsCall": repr(rcv.ns_per_call),
            "rNsAck": repr(rcv.ns_per_ack),
            "rSegments": rcv.segments_per_call,
            "rCores": repr(rcv.cores),
            "ackEvery": repr(rcv.ack_every_packets),
            "immediateAck": _flag(rcv.immediate_ack_on_gap),
            "maxAckDelayS": repr(rcv.max_ack_delay_s),
            "ackTimerS": repr(rcv.ack_timer_s),
            "ackFloor": repr(rcv.ack_floor_packets),
            "fcWindowBytes": rcv.fc_window_bytes,
            "stallRateHz": repr(rcv.rx_stall_rate_hz),
            "stallMinS": repr(rcv.rx_stall_min_s),
            "stallAlpha": repr(rcv.rx_stall_alpha),
            "interopBusy": repr(min(1.0, r.interop_busy)),
            # A receiver without the ACK-frequency extension keeps its threshold.
            "ackWindowFraction": repr(0.0 if rcv.ack_threshold_fixed
                                      else self.ack_window_fraction),
            "cwndValidation": VALIDATION_CODES[self.cwnd_validation],
            "cubicTimeFriendly": _flag(snd.cubic_reno_friendly != "acks"),
            "cubicTimeSmoothed": _flag(snd.cubic_reno_friendly == "time-srtt"),
            "renoBeta": repr(snd.reno_beta),
            "seed": s.seed,
            "run": s.run,
            "prefixBytes": prefix_bytes if use_prefix else 0,
            "warmFraction": repr(self.warm_fraction),
            "minWindowEvents": self.min_window_events,
            "prefixExtend": repr(self.prefix_extend),
            "maxSimS": repr(self._time_limit_s(r, prefix_bytes if use_prefix else 0)),
        }
        return [f"--{k}={v}" for k, v in args.items()]

    def _time_limit_s(self, r: Resolved, prefix_bytes: int) -> float:
        """Simulated-time guard: 50× the time the slowest analytic bound needs."""
        from quiclab.sim.analytic import bounds

        target = prefix_bytes * self.prefix_extend or r.scenario.transfer_bytes
        slowest = max(min(v for v in bounds(r).values() if v > 0), 1e-3)  # Mbit/s
        return max(60.0, 50.0 * (target * 8 / (slowest * 1e6) + 10 * r.path.rtt_s))

    def run(self, binary: Path, r: Resolved) -> RunResult:
        """Run the simulator once; raises EngineError with its stderr's last line."""
        cmd = [str(binary), *self.arguments(r)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            raise EngineError(f"ns3 engine: run exceeded {self.timeout_s:.0f} s "
                              f"({r.scenario.describe()})") from None
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            raise EngineError(f"ns3 engine: simulator failed: {last} ({r.scenario.describe()})")
        try:
            data = json.loads(proc.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            raise EngineError("ns3 engine: simulator printed no JSON result "
                              f"({r.scenario.describe()})") from None
        return RunResult(data, r.scenario.transfer_bytes, 1.5 * r.path.rtt_s)

    def _predict(self, binary: Path, r: Resolved) -> Prediction:
        """One ns-3 run, with its predictive band (:mod:`quiclab.sim.bands`)."""
        return with_band(self._simulate(binary, r), self.registry)

    def _simulate(self, binary: Path, r: Resolved) -> Prediction:
        from quiclab.sim.analytic import bounds

        res = self.run(binary, r)
        s = r.scenario
        goodput = res.goodput_bps
        fractions = limit_fractions(res, r)
        limit = limit_of(fractions)
        lo = hi = goodput
        if limit in ("sender_cpu", "receiver_cpu", "interop"):
            ep = r.sender if limit == "sender_cpu" else r.receiver
            if limit == "interop":
                ep = r.sender if res.window_util("sender") >= res.window_util("receiver") \
                    else r.receiver
            lo, hi = goodput / ep.cost_hi, goodput / ep.cost_lo
        rates = bounds(r)
        hi = min(hi, rates["link"] * 1e6)
        notes = [f"pair interplay: busy {r.interop_busy:.2f} ({r.interop_source})",
                 f"ns-3 {self.build_record.get('ns3_version', '?')}: "
                 "handshake modelled as one RTT without CPU"]
        if s.cc == "bbr":
            notes.append("bbr: approximated by CUBIC (sim/TRANSPORT.md)")
        notes += unmodelled_notes(s, self.name, reordering=True)
        if r.sender.recovery == "tcp":
            notes.append("kernel TCP: its costs, ACK policy (the window-following threshold, "
                         "40 ms delayed-ACK timer, immediate ACKs for gaps) and CUBIC as the "
                         "DES has them, but this simulator's loss detection and probes are "
                         "RFC 9002's (9/8 RTT, PTO), not RACK-TLP's and the 200 ms "
                         "retransmission timeout (the DES runs those)")
        if self.ack_window_fraction != 0.25:
            notes.append(f"not TRANSPORT.md: the receiver's ACK threshold is capped at "
                         f"{self.ack_window_fraction:g} × the sender's cwnd "
                         "(spec: 0.25; 0 = no cap)")
        if self.cwnd_validation != "app":
            notes.append(f"not TRANSPORT.md: cwnd_validation={self.cwnd_validation} "
                         "(cwnd grows " + ("on every ACK" if self.cwnd_validation == "off"
                                           else "only while bytes in flight fill it") + ")")
        if r.sender.pipeline or r.receiver.pipeline:
            # A pipeline reaches ns-3 as its capacity (W / max L effective
            # cores, sim/analytic/pipeline.py), not as stages in series (the DES's).
            notes.append("pipeline run as its capacity: ⌈c⌉ round-robin cores at the "
                         "slowest stage's rate, not as stages in series")
        notes += res.notes()
        notes.append("limit fractions: " + ", ".join(f"{k} {v:.2f}" for k, v in fractions.items()))
        total = res.extrapolated
        duration = res.duration_s
        transient = prefix_transient(res.completed, float(res.end["congestion_events"]),
                                     res.delta("congestion_events"), self.min_window_events,
                                     float(res.end["time_s"]))
        # Busy polling, runtime threads and placement (sim/cores.py).
        return annotate(Prediction(
            scenario=s,
            engine=self.name,
            engine_version=self.version,
            goodput_mbps=goodput / 1e6,
            goodput_lo_mbps=min(lo, goodput) / 1e6,
            goodput_hi_mbps=max(hi, goodput) / 1e6,
            limit=limit,
            duration_s=duration,
            rates_mbps=rates,
            server_cpu_util=total("sender_busy_s") / duration,
            client_cpu_util=total("receiver_busy_s") / duration,
            server_cpu_s=total("sender_busy_s"),
            client_cpu_s=total("receiver_busy_s"),
            server_packets_sent=total("data_sent"),
            server_packets_received=total("acks_received"),
            client_packets_sent=total("acks_sent"),
            client_packets_received=total("data_processed"),
            acks=total("acks_sent"),
            losses=total("path_drops") + total("queue_drops") + total("rcvbuf_drops"),
            retransmissions=total("retransmissions"),
            rcvbuf_drops=total("rcvbuf_drops"),
            server_syscalls=total("sender_calls") + total("acks_received"),
            client_syscalls=total("receiver_calls") + total("acks_sent"),
            model_versions=r.model_versions,
            cpu_rule=r.describe_cpu(),
            notes=tuple(notes),
            engine_specific=(transient,) if transient else (),
        ), r)
