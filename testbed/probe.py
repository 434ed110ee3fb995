"""The host probe: what one core of this host does per unit of each cost component, now.

A measurement lab keeps a reference measured beside every experiment; this is
the testbed's. ``quiclab host probe`` (and every testbed session, at its
start, middle and end) measures, in ``rounds`` interleaved rounds:

==================  ==================================================================
component           what (wall-clock ns per operation on one core)
==================  ==================================================================
aes_gcm_packet      AES-128-GCM seal, per packet (64-byte seal less its bytes)
aes_gcm_byte        AES-128-GCM seal, per byte (slope 64 B → 16 KiB)
chacha20_packet     ChaCha20-Poly1305 seal, per packet
chacha20_byte       ChaCha20-Poly1305 seal, per byte
copy_byte           memcpy of an L2-resident 256 KiB buffer, per byte
interp_packet       a fixed QUIC-header parsing loop (Python), per packet
udp_send            send of one 1350-byte datagram over the testbed's veth, no GSO
udp_recv            recv of one queued datagram, no GRO
udp_gso_segment     send of a 44-segment GSO batch, per datagram
udp_gro_segment     recv of that batch with UDP_GRO, per datagram
quic_packet         a short transfer of one QUIC stack (default quic-go → quic-go,
                    2 × 100 MB at MTU 1500): transfer time per data packet
==================  ==================================================================

The measurements run as two workers at once (:func:`on_cores`: one child
process each, unpinned like the peers), as a transfer's server and client keep
two cores busy, so that other work on the host takes its share of a core from
the probe as it does from a stack. Each component's figure is the median over
the rounds of both workers and its spread the semi-interquartile range over
that median (``spread``, robust to the odd round another task took whole;
``per_core`` keeps each worker's median); ``quiclab host probe --repeat N``
reports the run-to-run spread of whole probes. Beside the figures the probe
records what else the host did meanwhile
(:class:`HostState`: other busy cores, steal time, clock where readable).

The probe is stored in the catalog's ``host_probes`` table with the SHA-256 of
its content and the time it was taken; a testbed session's probes carry the
session's id, which its runs also carry (``extra.provenance.session``).
How the figures move a cost model is :mod:`quiclab.models.cpus` (the probe rule).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quiclab.testbed import probe_bench as bench
from quiclab.testbed.errors import TestbedError

SCHEMA = "quiclab.host-probe/1"
#: Every component, in report order, with its unit and what it stands for in a model.
COMPONENTS: dict[str, str] = {
    "aes_gcm_packet": "ns/packet: AES-128-GCM seal (crypto per packet, aes-ni)",
    "aes_gcm_byte": "ns/byte: AES-128-GCM seal (crypto per byte, aes-ni)",
    "chacha20_packet": "ns/packet: ChaCha20-Poly1305 seal (crypto per packet, chacha20)",
    "chacha20_byte": "ns/byte: ChaCha20-Poly1305 seal (crypto per byte, chacha20)",
    "copy_byte": "ns/byte: L2-resident memcpy (per-byte and application work)",
    "interp_packet": "ns/packet: QUIC header parsing loop (protocol work without a stack)",
    "udp_send": "ns/datagram: UDP send without GSO over veth (sender system call)",
    "udp_recv": "ns/datagram: UDP recv without GRO (receiver system call)",
    "udp_gso_segment": "ns/datagram: UDP send in a 44-segment GSO batch (sender kernel "
                       "per datagram)",
    "udp_gro_segment": "ns/datagram: UDP recv of a GRO batch (receiver kernel per datagram)",
    "quic_packet": "ns/packet: short QUIC transfer, transfer time per data packet "
                   "(protocol work per packet, ACKs)",
}
#: How long each micro-measurement lasts in a round (s).
MICRO_S = 0.08
UDP_S = 0.15
#: The QUIC transfer: stack, bytes and transfers per probe. quic-go: CPU-bound at
#: ~1–2 Gbit/s here, so 100 MB lasts ~0.5 s, and the peer every `make test` builds.
QUIC_STACK = "quic-go"
QUIC_BYTES = 100_000_000
QUIC_TRANSFERS = 2
#: Interleaved rounds of every micro-measurement (their quartiles give the spread).
ROUNDS = 5


@dataclass(frozen=True)
class Figure:
    """One component: median ns per operation over the rounds, and their spread."""

    ns: float
    spread: float  # semi-interquartile range of the rounds over the median (relative)
    rounds: tuple[float, ...]
    cpu_ns: float = math.nan  # median of this thread's CPU time per operation

    @classmethod
    def of(cls, wall: list[float], cpu: list[float] | None = None) -> Figure:
        med = statistics.median(wall)
        spread = 0.0
        if med > 0 and len(wall) > 1:
            q1, _, q3 = statistics.quantiles(wall, n=4, method="inclusive")
            spread = (q3 - q1) / 2 / med
        return cls(med, spread, tuple(round(v, 6) for v in wall),
                   statistics.median(cpu) if cpu else math.nan)


def _proc_stat(path: str = "/proc/stat") -> dict[str, list[int]]:
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("cpu"):
            parts = line.split()
            out[parts[0]] = [int(v) for v in parts[1:]]
    return out


def _clock_mhz() -> dict[str, float]:
    """Per core: cpufreq's current clock where the kernel has cpufreq, else the
    ``cpu MHz`` /proc/cpuinfo reports (on a VM often a fixed nominal value)."""
    out: dict[str, float] = {}
    for cpu in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*")):
        cur = cpu / "cpufreq" / "scaling_cur_freq"
        if cur.is_file():
            with contextlib.suppress(OSError, ValueError):
                out[cpu.name] = int(cur.read_text()) / 1000.0
    if out:
        return out
    n = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                out[f"cpu{n}"] = float(line.split(":")[1])
                n += 1
    except (OSError, ValueError):
        pass
    return out


@dataclass(frozen=True)
class HostState:
    """What the host did while the probe ran (/proc/stat over the probe's span).

    ``busy_cores``: all cores' busy time per wall second (steal included);
    ``other_busy_cores``: that less this process's own CPU (and its children's:
    the QUIC peers); ``steal_cores``: time the hypervisor ran other guests on
    our cores; ``per_core_busy``/``per_core_steal`` per core; ``clock_mhz`` per
    core (cpufreq's current clock, else /proc/cpuinfo); ``loadavg_1m``.
    """

    wall_s: float
    cores: int
    busy_cores: float
    other_busy_cores: float
    steal_cores: float
    per_core_busy: dict[str, float]
    per_core_steal: dict[str, float]
    clock_mhz: dict[str, float]
    clock_source: str
    loadavg_1m: float


class StateWindow:
    """Opens a window on the host's CPU accounting; :meth:`close` gives the HostState."""

    def __init__(self) -> None:
        self.stat = _proc_stat()
        self.wall = time.monotonic()
        self.own = self._own_cpu()

    @staticmethod
    def _own_cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def close(self) -> HostState:
        stat, wall = _proc_stat(), time.monotonic()
        span = max(wall - self.wall, 1e-9)
        hz = os.sysconf("SC_CLK_TCK")

        def busy_steal(name: str) -> tuple[float, float]:
            a, b = self.stat.get(name, []), stat.get(name, [])
            d = [y - x for x, y in zip(a, b, strict=False)]
            if len(d) < 8:
                return 0.0, 0.0
            idle = d[3] + d[4]
            total = sum(d[:8])
            return (total - idle) / hz / span, d[7] / hz / span
        busy, steal = busy_steal("cpu")
        per_core = {k: busy_steal(k) for k in sorted(stat) if k != "cpu"}
        own = (self._own_cpu() - self.own) / span
        clocks = _clock_mhz()
        cpufreq = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").is_file()
        return HostState(
            wall_s=round(span, 3), cores=os.cpu_count() or 1, busy_cores=round(busy, 3),
            other_busy_cores=round(max(0.0, busy - own), 3), steal_cores=round(steal, 4),
            per_core_busy={k: round(v[0], 3) for k, v in per_core.items()},
            per_core_steal={k: round(v[1], 4) for k, v in per_core.items()},
            clock_mhz=clocks, clock_source="cpufreq scaling_cur_freq" if cpufreq
            else "/proc/cpuinfo cpu MHz (no cpufreq: a VM's nominal clock)",
            loadavg_1m=os.getloadavg()[0])


@dataclass(frozen=True)
class HostProbe:
    """One probe: figures per component, the host's state, where and when."""

    taken_at: str  # UTC, ISO 8601
    host: str
    cpu: str  # the catalog name of this host's CPU (models/cpus.py read_host_cpu)
    figures: dict[str, Figure]
    state: HostState
    rounds: int
    duration_s: float
    name: str = ""
    session: str = ""
    phase: str = "adhoc"  # start | middle | end | adhoc
    quic: dict[str, Any] = field(default_factory=dict)
    code: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: Per worker (one per core, :func:`on_cores`): each component's median (the
    #: figures pool the workers).
    per_core: dict[str, dict[str, float]] = field(default_factory=dict)

    def content(self) -> dict[str, Any]:
        """Everything measured, JSON-safe (what the hash covers)."""
        data = asdict(self)
        data["schema"] = SCHEMA
        data["figures"] = {k: asdict(v) for k, v in sorted(self.figures.items())}
        return json.loads(json.dumps(data, sort_keys=True, default=_json_default))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.content(), sort_keys=True).encode()).hexdigest()

    @property
    def probe_id(self) -> str:
        return self.sha256[:12]

    def ns(self, component: str) -> float:
        fig = self.figures.get(component)
        return fig.ns if fig is not None else math.nan

    @classmethod
    def from_content(cls, data: dict[str, Any]) -> HostProbe:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema={data.get('schema')!r}, expected {SCHEMA!r}")
        figures = {k: Figure(float(v["ns"]), float(v["spread"]),
                             tuple(float(x) for x in v.get("rounds", ())),
                             float(v["cpu_ns"]) if v.get("cpu_ns") is not None else math.nan)
                   for k, v in data["figures"].items()}
        return cls(taken_at=data["taken_at"], host=data["host"], cpu=data["cpu"],
                   figures=figures, state=HostState(**data["state"]),
                   rounds=int(data["rounds"]), duration_s=float(data["duration_s"]),
                   name=data.get("name", ""), session=data.get("session", ""),
                   phase=data.get("phase", "adhoc"), quic=dict(data.get("quic") or {}),
                   code=dict(data.get("code") or {}), notes=tuple(data.get("notes") or ()),
                   per_core={k: dict(v) for k, v in (data.get("per_core") or {}).items()})


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, tuple):
        return list(value)
    return str(value)


# -- measuring ---------------------------------------------------------------------
def _micro(rounds: int, log: Callable[[str], None]) -> dict[str, tuple[list[float], list[float]]]:
    """Rounds of the in-process measurements: component → (wall ns, CPU ns) per round."""
    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in COMPONENTS}

    def add(name: str, wall: float, cpu: float) -> None:
        out[name][0].append(wall)
        out[name][1].append(cpu)
    for _ in range(rounds):
        for cipher, prefix in (("aes-gcm", "aes_gcm"), ("chacha20", "chacha20")):
            small = bench.aead(cipher, bench.AEAD_SMALL_BYTES, MICRO_S)
            large = bench.aead(cipher, bench.AEAD_LARGE_BYTES, MICRO_S)
            span = bench.AEAD_LARGE_BYTES - bench.AEAD_SMALL_BYTES
            per_byte = (large.wall_ns - small.wall_ns) / span
            per_byte_cpu = (large.cpu_ns - small.cpu_ns) / span
            add(f"{prefix}_byte", per_byte, per_byte_cpu)
            add(f"{prefix}_packet", small.wall_ns - per_byte * bench.AEAD_SMALL_BYTES,
                small.cpu_ns - per_byte_cpu * bench.AEAD_SMALL_BYTES)
        copy = bench.copy_bytes(MICRO_S)
        add("copy_byte", copy.wall_ns, copy.cpu_ns)
        interp = bench.interpreter(MICRO_S)
        add("interp_packet", interp.wall_ns, interp.cpu_ns)
    return {k: v for k, v in out.items() if v[0]}


def _udp_rounds(pairs: dict[bool, Any], rounds: int
                ) -> dict[str, tuple[list[float], list[float]]]:
    """Rounds of the UDP measurements on one core's socket pairs."""
    from quiclab.testbed import probe_net

    out: dict[str, tuple[list[float], list[float]]] = {
        k: ([], []) for k in ("udp_send", "udp_recv", "udp_gso_segment", "udp_gro_segment")}
    for _ in range(rounds):
        for gso, (send_name, recv_name) in ((False, ("udp_send", "udp_recv")),
                                            (True, ("udp_gso_segment", "udp_gro_segment"))):
            send, recv = probe_net.measure(pairs[gso], UDP_S)
            for name, t in ((send_name, send), (recv_name, recv)):
                out[name][0].append(t.wall_ns)
                out[name][1].append(t.cpu_ns)
    return out


def _udp(rounds: int, state_dir: Path, cores: list[int]
         ) -> dict[int, dict[str, tuple[list[float], list[float]]]]:
    """The UDP rounds on every core of ``cores`` at once, each core with its own socket
    pairs between two fresh testbed namespaces."""
    from quiclab.testbed import probe_net
    from quiclab.testbed.topology import LinkConfig, Topology

    with Topology(LinkConfig(), state_dir) as topo:
        pairs = {core: {gso: probe_net.UdpPair(topo.namespace("server"),
                                               topo.namespace("client"), topo.CLIENT_IP, gso,
                                               port=probe_net.PORT + 2 * i + int(gso))
                        for gso in (False, True)} for i, core in enumerate(cores)}
        try:
            jobs: dict[int, Callable[[], Any]] = {
                c: functools.partial(_udp_rounds, pairs[c], rounds) for c in cores}
            return on_cores(jobs)
        finally:
            for by_gso in pairs.values():
                for pair in by_gso.values():
                    pair.close()


def on_cores(bodies: dict[int, Callable[[], Any]], pin: bool = False) -> dict[int, Any]:
    """Run each body in a child process, all at once; their results (JSON-safe) by key.

    A transfer keeps two cores busy (server and client), so the probe measures with
    two workers at once: other work on the host then takes the share of a core from
    each that it takes from a stack. Each worker, like each peer, runs in a session
    of its own: where the kernel groups tasks by session for fair scheduling
    (autogroups, on by default), a worker in the probe's own session would share one
    session's share with the other worker and measure half the core a peer gets.
    Like the peers (unless a run pins them, ``pin=true``) the workers are not pinned,
    so the scheduler may move them off a busy core as it moves a peer; ``pin`` pins
    each to the core of its key.
    """
    children: dict[int, tuple[int, int]] = {}
    for core, body in bodies.items():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: pin, measure, report, leave without cleanup
            os.close(read)
            try:
                # A session of its own, as the peers get (runner: start_new_session):
                # with the scheduler's autogroups (kernel.sched_autogroup_enabled) each
                # session shares the cores fairly with every other busy session.
                os.setsid()
                if pin:
                    os.sched_setaffinity(0, {core})
                payload = json.dumps({"ok": body()})
            except BaseException as err:  # any failure is reported to the parent
                payload = json.dumps({"error": f"{type(err).__name__}: {err}"})
            with os.fdopen(write, "w") as pipe:
                pipe.write(payload)
            os._exit(0)
        os.close(write)
        children[core] = (pid, read)
    out: dict[int, Any] = {}
    errors = []
    for core, (pid, read) in children.items():
        with os.fdopen(read) as pipe:
            text = pipe.read()
        os.waitpid(pid, 0)
        try:
            result = json.loads(text)
        except ValueError:
            result = {"error": "no result"}
        if "error" in result:
            errors.append(f"core {core}: {result['error']}")
        else:
            out[core] = result["ok"]
    if errors:
        raise TestbedError("host probe: " + "; ".join(errors))
    return out


def probe_cores(count: int = 2) -> list[int]:
    """The cores the probe measures: the first ``count`` this process may run on."""
    return sorted(os.sched_getaffinity(0))[:count]


def _quic(testbed: Any, stack: str, transfers: int, nbytes: int
          ) -> tuple[list[float], dict[str, Any]]:
    """Transfer time per data packet of ``transfers`` short transfers of ``stack``."""
    from quiclab.testbed.config import RunConfig

    config = RunConfig.build(stack, stack, {}, {}, transfer_bytes=nbytes,
                             experiment="host-probe")
    per_packet, runs = [], []
    for rep in range(transfers):
        run_id = f"probe-{os.getpid()}-{time.time_ns()}-{rep}"
        result = testbed.run(config, rep, run_id)
        packets = result.server.report.get("packets_sent")
        seconds = result.client.report.get("transfer_s")
        entry = {"status": result.status, "goodput_mbps": result.goodput_mbps,
                 "data_packets": packets, "transfer_s": seconds,
                 "server_cpu_s": result.server.exit.cpu_s if result.server.exit else None,
                 "client_cpu_s": result.client.exit.cpu_s if result.client.exit else None,
                 "failure_reason": result.failure_reason}
        runs.append(entry)
        if result.status == "ok" and isinstance(packets, int | float) and packets > 0 \
                and isinstance(seconds, int | float) and seconds > 0:
            per_packet.append(float(seconds) * 1e9 / float(packets))
    return per_packet, {"stack": stack, "bytes": nbytes, "runs": runs}


def git_code(repo: Path) -> dict[str, Any]:
    from quiclab import __version__
    from quiclab.testbed.record import git_revision

    return {"quiclab": __version__, **git_revision(repo)}


def run_probe(*, rounds: int | None = None, network: bool = True, testbed: Any = None,
              quic_stack: str | None = None, quic_transfers: int | None = None,
              quic_bytes: int | None = None, state_dir: Path = Path("/run/quiclab"),
              name: str = "", session: str = "", phase: str = "adhoc",
              log: Callable[[str], None] = lambda line: None) -> HostProbe:
    """Measure every component (see the module docstring) and the host's state.

    ``network``: the UDP part (needs root: two namespaces); ``testbed``: a
    :class:`~quiclab.testbed.runner.Testbed` for the QUIC transfer (None, or a
    stack that is not built, leaves it out with a note; ``quic_stack=""`` too).
    Unset numbers take the module's defaults (:data:`ROUNDS`, :data:`QUIC_STACK`,
    …). The caller holds the testbed lock when ``network`` or a testbed is given.
    """
    from quiclab.testbed.record import host_cpu

    rounds = ROUNDS if rounds is None else rounds
    quic_stack = QUIC_STACK if quic_stack is None else quic_stack
    quic_transfers = quic_transfers or QUIC_TRANSFERS
    quic_bytes = quic_bytes or QUIC_BYTES

    if rounds < 1:
        raise TestbedError(f"rounds={rounds}: allowed ≥ 1")
    notes: list[str] = []
    window = StateWindow()
    t0 = time.monotonic()
    taken_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cores = probe_cores()
    per_core = on_cores({c: (lambda: _micro(rounds, log)) for c in cores})
    if network:
        if os.geteuid() != 0:
            notes.append("UDP between namespaces not measured: needs root")
        else:
            for core, found in _udp(rounds, state_dir, cores).items():
                per_core[core].update(found)
    # Each component pools its rounds on every core (the stacks' threads move).
    measured: dict[str, tuple[list[float], list[float]]] = {}
    for found in per_core.values():
        for comp, (wall, cpu) in found.items():
            have = measured.setdefault(comp, ([], []))
            have[0].extend(wall)
            have[1].extend(cpu)
    core_medians = {str(core): {comp: round(statistics.median(wall), 6)
                                for comp, (wall, _) in found.items() if wall}
                    for core, found in per_core.items()}
    quic: dict[str, Any] = {}
    if testbed is not None and quic_stack:
        stack = testbed.stacks.get(quic_stack)
        if stack is None or not testbed.builder.is_built(stack):
            notes.append(f"QUIC transfer not measured: {quic_stack} is not built "
                         "(`quiclab testbed build --stacks {quic_stack}`)")
        else:
            per_packet, quic = _quic(testbed, quic_stack, quic_transfers, quic_bytes)
            if per_packet:
                measured["quic_packet"] = (per_packet, [])
            else:
                notes.append(f"QUIC transfer failed: {quic['runs'][-1]['failure_reason']}")
    elif quic_stack:
        notes.append("QUIC transfer not measured: no testbed (run as root with built peers)")
    state = window.close()
    cpu_name, _ = host_cpu()
    figures = {k: Figure.of(wall, cpu or None) for k, (wall, cpu) in measured.items() if wall}
    return HostProbe(taken_at=taken_at, host=socket.gethostname(), cpu=cpu_name,
                     figures=figures, state=state, rounds=rounds,
                     duration_s=round(time.monotonic() - t0, 2), name=name, session=session,
                     phase=phase, quic=quic, code=git_code(Path(__file__).resolve().parent),
                     notes=tuple([*notes, f"kernel {platform.release()}"]),
                     per_core=core_medians)
