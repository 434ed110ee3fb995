"""Run one transfer between two peers in fresh namespaces and collect everything.

:meth:`Testbed.run` never raises for a run that goes wrong: a peer that
fails, hangs (killed after a timeout derived from the expected transfer time)
or a knob a stack cannot honour gives a :class:`RunResult` with status
``failed`` and a one-line ``failure_reason``, so a sweep goes on. Only
interruption (Ctrl-C, SIGTERM) propagates, after the topology is torn down.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiclab.testbed import collect
from quiclab.testbed.build import Builder
from quiclab.testbed.config import Resolved, RunConfig, expected_seconds, resolve, timeout_seconds
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.stacks import STACKS, Stack
from quiclab.testbed.topology import PORT, LinkConfig, Topology

PACKAGE_DIR = Path(__file__).resolve().parent
#: The window before each transfer over which the host's background load is read
#: (/proc/stat counts in 10 ms ticks: about 0.03 cores of resolution on 2 cores).
BACKGROUND_WINDOW_S = 0.3
#: Bytes per test of the TCP peer's micro-benchmark (about 20 ms a core on this host).
BENCH_BYTES = 16 << 20


@dataclass(frozen=True)
class Paths:
    """Where the testbed reads and writes. Nothing is created at import time."""

    build_dir: Path
    runs_dir: Path
    peers_dir: Path = PACKAGE_DIR / "peers"
    bpf_dir: Path = PACKAGE_DIR / "bpf"
    state_dir: Path = Path("/run/quiclab")

    @classmethod
    def default(cls, runs_dir: Path | None = None, build_dir: Path | None = None) -> Paths:
        """Builds beside the package source (``testbed/.build``, outside git), run logs in
        ``runs_dir`` (default: ``testbed/.build/runs``)."""
        build = build_dir or PACKAGE_DIR / ".build"
        return cls(build_dir=build, runs_dir=runs_dir or build / "runs")


@dataclass
class Side:
    """What one peer reported and used."""

    stack: str
    report: dict[str, Any] = field(default_factory=dict)
    exit: collect.Exit | None = None
    samples: list[collect.CpuSample] = field(default_factory=list)
    syscalls: int | None = None
    snmp: dict[str, dict[str, int]] = field(default_factory=dict)
    link: dict[str, int] = field(default_factory=dict)
    #: The core it ran on: the pinned one, else the one its threads used most
    #: (``core_source`` "pinned", "observed", or "last-seen" when it used less than a
    #: clock tick of CPU; ``core_shares`` is CPU time per observed core).
    core: int | None = None
    core_source: str | None = None
    core_shares: dict[int, float] = field(default_factory=dict)
    stderr_tail: str = ""
    #: (user s, system s) it used within the transfer window (start_ns … end_ns): the
    #: client's whole life; for the server, its sampler's readings at the window's
    #: edges (its start-up and the background window before are left out).
    window_cpu: tuple[float, float] | None = None


@dataclass
class RunResult:
    """One run, ready for the catalog (see :func:`quiclab.testbed.record.run_row`)."""

    run_id: str
    config: RunConfig
    repetition: int
    status: str
    failure_reason: str | None
    server: Side
    client: Side
    effective: dict[str, Any] = field(default_factory=dict)
    topology: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0
    expected_s: float = 0.0
    timeout_s: float = 0.0
    logdir: str = ""
    #: The host's busy cores before the transfer (``background_cores``: the server
    #: waiting, nothing of this run moving) and during it (``busy_cores``), and
    #: ``cores`` (collect.HostLoad).
    host: dict[str, Any] = field(default_factory=dict)

    @property
    def goodput_mbps(self) -> float | None:
        return self._client_number("goodput_mbps")

    @property
    def requests_per_s(self) -> float | None:
        """Requests answered per second (request workloads; None for bulk runs)."""
        if self.config.scenario.workload == "bulk":
            return None
        return self._client_number("requests_per_s")

    def _client_number(self, key: str) -> float | None:
        value = self.client.report.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    def summary(self) -> dict[str, Any]:
        """The one JSON object ``quiclab testbed run --json`` prints."""
        def cpu(side: Side) -> float | None:
            return round(side.exit.cpu_s, 4) if side.exit else None
        return {
            "run_id": self.run_id, "status": self.status, "failure_reason": self.failure_reason,
            "server": self.server.stack, "client": self.client.stack,
            "repetition": self.repetition,
            "goodput_mbps": None if self.goodput_mbps is None else round(self.goodput_mbps, 2),
            "server_cpu_s": cpu(self.server), "client_cpu_s": cpu(self.client),
            "server_syscalls": self.server.syscalls, "client_syscalls": self.client.syscalls,
            "handshake_ms": self.client.report.get("handshake_ms"),
            "transfer_bytes": self.config.scenario.transfer_bytes,
            **{k: self.effective.get(k) for k in ("gso", "gro", "udp_payload_bytes", "cc",
                                                   "veth_segmentation")},
            "server_core": self.server.core, "client_core": self.client.core,
            "core_source": {"server": self.server.core_source,
                            "client": self.client.core_source},
            "workload": self.config.scenario.workload,
            **(self._request_summary() if self.config.scenario.workload != "bulk" else {}),
        }

    def _request_summary(self) -> dict[str, Any]:
        def num(key: str, digits: int) -> float | None:
            value = self._client_number(key)
            return None if value is None else round(value, digits)
        return {k: self.effective.get(k)
                for k in ("requests", "request_bytes", "connections", "streams")} | {
            "requests_done": self.client.report.get("requests"),
            "requests_per_s": num("requests_per_s", 1), "completion_s": num("transfer_s", 4),
            "latency_p50_ms": num("latency_p50_ms", 3),
            "latency_p90_ms": num("latency_p90_ms", 3),
            "latency_p99_ms": num("latency_p99_ms", 3)}


def last_json(text: str) -> dict[str, Any]:
    """The last line of ``text`` that is a JSON object ({} if none)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    return value
    return {}


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[:300]


def _head(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[0][:300] if lines else ""


def _udp_port_bound(pid: int, port: int) -> bool:
    """Whether the network namespace of ``pid`` has a UDP socket on ``port`` (IPv4 or a
    dual-stack IPv6 socket, as MsQuic opens)."""
    return _port_bound(pid, port, "udp")


def _port_bound(pid: int, port: int, transport: str = "udp") -> bool:
    """Whether the network namespace of ``pid`` has a UDP socket on ``port``, or for
    ``transport="tcp"`` a TCP socket listening there (state 0A, TCP_LISTEN)."""
    lines: list[str] = []
    for table in ((transport, transport + "6")):
        with contextlib.suppress(OSError):
            lines += Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
    hex_port = f":{port:04X}"
    return any(line.split()[1].endswith(hex_port)
               and (transport != "tcp" or line.split()[3] == "0A")
               for line in lines if len(line.split()) > 3)


class Testbed:
    """Runs transfers. ``stacks`` may be replaced (tests add a hanging peer)."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, paths: Paths, stacks: dict[str, Stack] | None = None,
                 builder: Builder | None = None, startup_s: float = 15.0,
                 log: Any = None):
        self.paths = paths
        self.stacks = dict(STACKS if stacks is None else stacks)
        self.builder = builder or Builder(paths.build_dir, paths.peers_dir, paths.bpf_dir)
        self.startup_s = startup_s
        self.log = log or (lambda line: None)
        self._perf: bool | None = None

    def perf_ok(self) -> bool:
        if self._perf is None:
            self._perf = collect.perf_available()
        return self._perf

    # ------------------------------------------------------------------
    def run(self, config: RunConfig, repetition: int, run_id: str) -> RunResult:
        s = config.scenario
        server, client = self.stacks.get(s.server), self.stacks.get(s.client)
        result = RunResult(run_id, config, repetition, "failed", None,
                           Side(s.server), Side(s.client), start_ns=time.time_ns())
        if server is None or client is None:
            missing = s.server if server is None else s.client
            result.failure_reason = f"stack {missing!r} is unknown"
            return result
        try:
            resolved = resolve(config, server, client)
        except TestbedError as err:
            result.failure_reason = f"refused: {err}"
            return result
        result.effective = resolved.effective
        for stack in (server, client):
            absent = [p for p in self.builder.outputs(stack) if not p.exists()]
            if absent:
                result.failure_reason = (f"{stack.name} is not built ({absent[0]} missing): "
                                         "run `quiclab testbed build`")
                return result
        result.expected_s = expected_seconds(config, server, client)
        result.timeout_s = timeout_seconds(config, server, client, self.startup_s)
        logdir = self.paths.runs_dir / run_id
        logdir.mkdir(parents=True, exist_ok=True)
        result.logdir = str(logdir)
        eff = resolved.effective
        tcp = server.transport == "tcp"
        link = LinkConfig(
            mtu_bytes=s.mtu_bytes, veth_segmentation=eff["veth_segmentation"],
            nic_gro=eff["nic_gro"], tso=eff["tso"],
            rate_gbps=s.link_gbps if "link_gbps" in config.explicit else 0.0,
            queue_bytes=s.queue_bytes, loss_pct=s.loss_pct, rtt_ms=s.rtt_ms,
            reorder_pct=s.reorder_pct, relay_queue_bytes=int(config.knob("relay_queue_bytes")),
            # The UDP buffers are host-wide sysctls; kernel TCP sizes its own buffers
            # (tcp_rmem/tcp_wmem of its namespaces), so a TCP run leaves them alone.
            rcvbuf_bytes=0 if tcp else s.rcvbuf_bytes, sndbuf_bytes=0 if tcp else s.sndbuf_bytes,
            seed=s.seed, transport=server.transport, gso=eff.get("gso", True) if tcp else True,
            csum_offload=eff.get("csum_offload", True),
            tcp_rmem_bytes=eff.get("tcp_rmem_bytes") or 0 if tcp else 0,
            tcp_wmem_bytes=eff.get("tcp_wmem_bytes") or 0 if tcp else 0,
            tcp_cc=eff.get("cc", "") if tcp else "")
        try:
            with Topology(link, self.paths.state_dir, self.builder.loss_object) as topo:
                self._transfer(topo, config, resolved, server, client, result, logdir)
        except TestbedError as err:
            result.status, result.failure_reason = "failed", str(err)
        result.end_ns = result.end_ns or time.time_ns()
        (logdir / "result.json").write_text(json.dumps(result.summary(), indent=2))
        return result

    # ------------------------------------------------------------------
    def _command(self, topo: Topology, role: str, stack: Stack, resolved: Resolved,
                 logdir: Path, config: RunConfig) -> list[str]:
        argv = [*topo.exec_prefix(role)]
        if config.knob("nice"):
            argv += ["nice", "-n", str(int(config.knob("nice")))]
        core = resolved.effective.get(f"{role}_pinned_core")
        if core is not None:
            argv += ["taskset", "-c", str(core)]
        if config.knob("count_syscalls") and self.perf_ok():
            argv += collect.perf_prefix(logdir / f"{role}.perf")
        argv += collect.NO_NET_ADMIN
        argv += stack.argv(self.paths.build_dir, self.paths.peers_dir)
        cert, key = self.builder.certs()
        s = config.scenario
        # --bytes: one transfer's size, or one response's in request mode.
        nbytes = s.transfer_bytes if s.workload == "bulk" else s.request_bytes
        if role == "server":
            # Wrapped HTTP/3 servers prepare a response of that size.
            argv += ["--role=server", f"--addr={topo.server_listen}", f"--cert={cert}",
                     f"--key={key}", "--once=true", f"--bytes={nbytes}"]
        else:
            argv += ["--role=client", f"--addr={topo.client_target}", f"--ca={cert}",
                     "--server-name=quiclab", f"--bytes={nbytes}"]
        if config.knob("qlog"):
            qlog = logdir / f"qlog-{role}"
            qlog.mkdir(exist_ok=True)
            argv.append(f"--qlog={qlog}")
        return argv + (resolved.server_args if role == "server" else resolved.client_args)

    def _start(self, argv: list[str], logdir: Path, name: str,
               stack: Stack | None) -> subprocess.Popen[bytes]:
        (logdir / f"{name}.cmd").write_text(" ".join(argv) + "\n")
        env = dict(os.environ)
        for key, value in (stack.env if stack else ()):
            env[key] = value.format(build=self.paths.build_dir, peers=self.paths.peers_dir)
        with open(logdir / f"{name}.out", "wb") as out, open(logdir / f"{name}.err", "wb") as err:
            return subprocess.Popen(argv, stdout=out, stderr=err, env=env,
                                    start_new_session=True)

    def _transfer(self, topo: Topology, config: RunConfig, resolved: Resolved, server: Stack,
                  client: Stack, result: RunResult, logdir: Path) -> None:
        if server.transport == "tcp":
            result.host["bench"] = self._bench(topo, server, resolved, int(config.knob("nice")))
        relay = None
        if topo.link.relayed:
            relay = self._start(self._relay_argv(topo), logdir, "relay", None)
        srv = self._start(self._command(topo, "server", server, resolved, logdir, config),
                          logdir, "server", server)
        nice = int(config.knob("nice"))
        if nice:
            collect.set_autogroup_nice(srv.pid, nice)
        cli: subprocess.Popen[bytes] | None = None
        try:
            srv_sampler = collect.CpuSampler(srv.pid).start()
            started = time.monotonic()
            while not _port_bound(srv.pid, PORT, server.transport):
                if srv.poll() is not None or time.monotonic() - started > 10:
                    report = last_json((logdir / "server.out").read_text(errors="replace"))
                    why = report.get("error") or _head(logdir / "server.err") or "no output"
                    raise TestbedError(f"server {server.name} did not start: {why}")
                time.sleep(0.02)
            # What else keeps this host busy (the server only waits meanwhile).
            ncores = os.cpu_count() or 1
            background = collect.HostLoad(ncores)
            time.sleep(BACKGROUND_WINDOW_S)
            result.host = {**result.host, "background_cores": round(background.cores(), 3),
                           "cores": float(ncores)}
            during = collect.HostLoad(ncores)
            cores_during = collect.CoreLoad()
            # The server's samples start afresh here: the window's first edge.
            srv_start = srv_sampler.cut()
            result.start_ns = srv_start.time_ns
            t0 = time.monotonic()
            cli = self._start(self._command(topo, "client", client, resolved, logdir, config),
                              logdir, "client", client)
            if nice:
                collect.set_autogroup_nice(cli.pid, nice)
            cli_sampler = collect.CpuSampler(cli.pid).start()
            cli_exit = collect.wait(cli, result.timeout_s, t0)
            srv_end = srv_sampler.cut()
            result.end_ns = srv_end.time_ns
            result.host["busy_cores"] = round(during.cores(), 3)
            result.host["per_core"] = cores_during.read()
            result.client.samples = cli_sampler.stop()
            # Perf peers exit by themselves (--once) once the client has closed the
            # connection; wrapped tools serve forever and are stopped here.
            if not server.server_exits:
                time.sleep(0.3)
                collect.stop_peer(srv, signal.SIGTERM)
            srv_exit = collect.wait(srv, 5.0, t0)
            if srv_exit.timed_out:
                srv_exit.extra["killed"] = 1.0
            result.server.samples = srv_sampler.stop()
            if relay is not None:
                # SIGTERM makes the relay print its counters; wait4 gives its CPU time.
                collect.kill_group(relay, signal.SIGTERM)
                relay_exit = collect.wait(relay, 3.0, t0)
        finally:
            for proc in (cli, srv, relay):
                if proc is not None and proc.returncode is None:
                    collect.kill_group(proc, signal.SIGTERM)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=2)
                    collect.kill_group(proc, signal.SIGKILL)
                    proc.wait()
        if config.knob("count_syscalls") and self.perf_ok():
            # perf reaps the peer: a peer killed by a signal is in its stderr, not its exit.
            for peer_exit, role in ((cli_exit, "client"), (srv_exit, "server")):
                err_text = (logdir / f"{role}.err").read_text(errors="replace")
                collect.perf_child_status(peer_exit, err_text, collect.NO_NET_ADMIN[0])
        result.client.exit, result.server.exit = cli_exit, srv_exit
        result.client.window_cpu = (cli_exit.user_s, cli_exit.system_s)
        if srv_end.complete:
            result.server.window_cpu = (max(0.0, srv_end.user_s - srv_start.user_s),
                                        max(0.0, srv_end.system_s - srv_start.system_s))
        else:  # the server had exited by the window's end: all it used since is inside
            result.server.window_cpu = (max(0.0, srv_exit.user_s - srv_start.user_s),
                                        max(0.0, srv_exit.system_s - srv_start.system_s))
        for side, role, sampler in ((result.server, "server", srv_sampler),
                                    (result.client, "client", cli_sampler)):
            side.report = last_json((logdir / f"{role}.out").read_text(errors="replace"))
            side.stderr_tail = _tail(logdir / f"{role}.err", 2)
            side.syscalls = collect.parse_perf(logdir / f"{role}.perf")
            side.snmp = topo.snmp(role)
            side.link = topo.link_stats(role)
            side.core_shares = sampler.core_shares()
            pinned = resolved.effective.get(f"{role}_pinned_core")
            if pinned is not None:
                side.core, side.core_source = int(pinned), "pinned"
            elif (observed := sampler.main_core()) is not None:
                side.core, side.core_source = observed, "observed"
            elif (seen := sampler.last_core()) is not None:
                side.core, side.core_source = seen, "last-seen"
        result.topology = {"mode": "relayed" if topo.link.relayed else "direct",
                           "namespaces": list(topo.ns.values()), "applied": topo.applied,
                           "qdisc": topo.qdisc_stats("server")}
        if relay is not None:
            counters = last_json((logdir / "relay.out").read_text()).get("relay") or {}
            counters["cpu_s"] = relay_exit.cpu_s
            result.topology["relay"] = counters
        result.status, result.failure_reason = _verdict(result, cli_exit, srv_exit, client,
                                                        server, config)

    def _bench(self, topo: Topology, stack: Stack, resolved: Resolved,
               nice: int = 0) -> dict[str, Any]:
        """The TCP peer's micro-benchmark on each side's core, just before the transfer
        (AES-GCM and memcpy ns per byte, a multiply-add step: how fast the core is for
        this run, whatever else the host does; ``peers/tcp-tls`` ``--role=bench``)."""
        out: dict[str, Any] = {}
        for role in ("server", "client"):
            core = resolved.effective.get(f"{role}_pinned_core")
            argv = [*topo.exec_prefix(role), *(["nice", "-n", str(nice)] if nice else []),
                    *(["taskset", "-c", str(core)] if core is not None else []),
                    *stack.argv(self.paths.build_dir, self.paths.peers_dir),
                    "--role=bench", f"--bytes={BENCH_BYTES}"]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
            report = last_json(proc.stdout)
            out[role] = {k: v for k, v in report.items() if "_ns" in k}
        return out

    def _relay_argv(self, topo: Topology) -> list[str]:
        link = topo.link
        one_way_s = link.rtt_ms / 2e3
        # Bound: 2 × what is in flight in the delay line at the relay's top rate (or the link's).
        rate_bps = min(link.rate_gbps * 1e9 if link.rate_gbps else 2e9, 2e9)
        queue = link.relay_queue_bytes or max(1 << 20, int(2 * rate_bps / 8 * one_way_s))
        return [*topo.exec_prefix("relay"), str(self.builder.relay()),
                f"-listen={topo.client_target}", f"-server={topo.server_listen}",
                f"-delay={one_way_s * 1e6:.0f}us", f"-reorder-pct={link.reorder_pct}",
                f"-queue-bytes={queue}", f"-seed={link.seed + 1}"]


def _server_problem(srv_exit: collect.Exit, server: Stack) -> str | None:
    """Why the server's ending fails the run (None when it ended as it should): a perf
    peer exits 0 by itself (--once); a wrapped tool that serves forever is stopped
    with SIGTERM, which it may die of."""
    if srv_exit.timed_out:
        return (f"server {server.name} did not exit within 5 s of the client: killed"
                if server.server_exits else
                f"server {server.name} did not stop within 5 s of SIGTERM: killed")
    if not server.server_exits and (srv_exit.signal == signal.SIGTERM
                                    or srv_exit.returncode == 128 + signal.SIGTERM):
        return None
    if srv_exit.signal is not None or srv_exit.returncode != 0:
        return f"server {server.name} {srv_exit.how}"
    return None


def _verdict(result: RunResult, cli_exit: collect.Exit, srv_exit: collect.Exit,
             client: Stack, server: Stack, config: RunConfig) -> tuple[str, str | None]:
    report = result.client.report
    if cli_exit.timed_out:
        said = (f" after reporting: {report['error']}" if report.get("error") else "")
        return "failed", (f"client {client.name} hung{said}: killed after "
                          f"{result.timeout_s:.0f} s (expected ~{result.expected_s:.1f} s for "
                          f"{config.scenario.transfer_bytes} B)")
    if cli_exit.signal is not None:
        said = " after reporting" if report else ""
        return "failed", (f"client {client.name} {cli_exit.how}{said}"
                          + (f": {result.client.stderr_tail}" if result.client.stderr_tail
                             else ""))
    if report.get("error"):
        server_said = result.server.report.get("close_reason") or result.server.report.get("error")
        return "failed", f"client: {report['error']}" + (f" (server: {server_said})"
                                                          if server_said else "")
    if cli_exit.returncode != 0:
        return "failed", (f"client exited {cli_exit.returncode}: "
                          f"{result.client.stderr_tail or 'no output'}")
    if not report:
        return "failed", "client printed no JSON report"
    if config.scenario.workload != "bulk" and report.get("requests") != result.effective.get(
            "requests"):
        return "failed", (f"client completed {report.get('requests')} of "
                          f"{result.effective.get('requests')} requests")
    if report.get("bytes") not in (None, config.scenario.transfer_bytes):
        return "failed", (f"client received {report.get('bytes')} of "
                          f"{config.scenario.transfer_bytes} bytes")
    if result.server.report.get("error"):
        return "failed", f"server: {result.server.report['error']}"
    if (problem := _server_problem(srv_exit, server)) is not None:
        tail = result.server.stderr_tail
        return "failed", problem + (f": {tail}" if tail else "")
    return "ok", None
