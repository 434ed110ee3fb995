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
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from quiclab.testbed import collect
from quiclab.testbed.build import Builder
from quiclab.testbed.config import (
    Resolved,
    RunConfig,
    expected_seconds,
    pinned_cores,
    resolve,
    timeout_seconds,
)
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.hostpair import HostPair
from quiclab.testbed.hosts import Host, host_record
from quiclab.testbed.inventory import Inventory
from quiclab.testbed.nic import FEATURES, parse_snmp
from quiclab.testbed.remote import Deployer
from quiclab.testbed.stacks import STACKS, Stack
from quiclab.testbed.topology import PORT, LinkConfig, Topology, relay_queue_bytes

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
    #: The NIC's own counters over the run (``ethtool -S`` after − before; None where
    #: the driver has none).
    nic: dict[str, Any] = field(default_factory=dict)


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
    #: ``cores`` (collect.HostLoad); on two machines also the client's; ``per_core``
    #: (collect.CoreLoad over the transfer) and, for TCP runs, ``bench``.
    host: dict[str, Any] = field(default_factory=dict)
    #: Each side's host: CPU, kernel, NIC (driver, firmware, rings, coalescing, …).
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The inventory's hostpair (``veth`` for the namespace pair).
    hostpair: str = "veth"

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


def link_config(config: RunConfig, resolved: Resolved, transport: str = "udp") -> LinkConfig:
    """The path knobs of a run (what :meth:`Testbed.run` sets up). Offloads, rings and
    the IRQ core are set only where the run asks for them (a knob set explicitly, or
    one loss forces); otherwise the interface keeps its own setting, which the row
    records. A kernel TCP run sets every offload it has a field for (tso, gso, gro,
    checksums): they are its Scenario's, and its model reads them."""
    s, eff, ex = config.scenario, resolved.effective, config.explicit
    tcp = transport == "tcp"

    def offload(knob: str) -> bool | None:
        forced = s.loss_pct > 0 and knob in ("veth_segmentation", "nic_gro") and \
            eff.get(knob) is False and not s.rtt_ms and not s.reorder_pct
        if tcp and knob in ("veth_segmentation", "nic_gro", "tso"):
            return bool(eff[knob])
        return bool(eff.get(knob, config.knob(knob))) if knob in ex or forced else None

    return LinkConfig(
        mtu_bytes=s.mtu_bytes, veth_segmentation=offload("veth_segmentation"),
        nic_gro=offload("nic_gro"), tso=offload("tso"), nic_lro=offload("nic_lro"),
        nic_gso=bool(eff.get("gso", True)) if tcp else offload("nic_gso"),
        csum_offload=bool(eff.get("csum_offload", True)) if tcp else None,
        rx_ring=int(config.knob("rx_ring")), tx_ring=int(config.knob("tx_ring")),
        irq_core=s.irq_core,
        rate_gbps=s.link_gbps if "link_gbps" in config.explicit else 0.0,
        queue_bytes=s.queue_bytes, loss_pct=s.loss_pct, rtt_ms=s.rtt_ms,
        reorder_pct=s.reorder_pct, relay_queue_bytes=int(config.knob("relay_queue_bytes")),
        # The UDP buffers are host-wide sysctls; kernel TCP sizes its own buffers
        # (tcp_rmem/tcp_wmem of its namespaces), so a TCP run leaves them alone.
        rcvbuf_bytes=0 if tcp else s.rcvbuf_bytes, sndbuf_bytes=0 if tcp else s.sndbuf_bytes,
        seed=s.seed, transport=transport,
        tcp_rmem_bytes=int(eff.get("tcp_rmem_bytes") or 0) if tcp else 0,
        tcp_wmem_bytes=int(eff.get("tcp_wmem_bytes") or 0) if tcp else 0,
        tcp_cc=str(eff.get("cc", "")) if tcp else "")


class Testbed:
    """Runs transfers. ``stacks`` may be replaced (tests add a hanging peer).

    ``inventory``: the two hosts (default: the namespace pair on this host); with an
    SSH inventory every run deploys to and runs on those hosts, through the same
    steps (:class:`~quiclab.testbed.hostpair.HostPair` instead of
    :class:`~quiclab.testbed.topology.Topology`)."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, paths: Paths, stacks: dict[str, Stack] | None = None,
                 builder: Builder | None = None, startup_s: float = 15.0,
                 log: Any = None, inventory: Inventory | None = None):
        self.paths = paths
        self.stacks = dict(STACKS if stacks is None else stacks)
        self.builder = builder or Builder(paths.build_dir, paths.peers_dir, paths.bpf_dir)
        self.startup_s = startup_s
        self.log = log or (lambda line: None)
        self.inventory = inventory or Inventory.namespaces(os.cpu_count() or 1)
        self.deployer = Deployer()
        self._perf: bool | None = None

    def perf_ok(self) -> bool:
        """Whether ``perf stat`` counts system calls on this machine (each host's agent
        says so for itself: ``facts["perf"]``)."""
        if self._perf is None:
            self._perf = collect.perf_available()
        return self._perf

    # ------------------------------------------------------------------
    def run(self, config: RunConfig, repetition: int, run_id: str) -> RunResult:
        s = config.scenario
        server, client = self.stacks.get(s.server), self.stacks.get(s.client)
        result = RunResult(run_id, config, repetition, "failed", None,
                           Side(s.server), Side(s.client), start_ns=time.time_ns())
        result.hostpair = self.inventory.hostpair
        if server is None or client is None:
            missing = s.server if server is None else s.client
            result.failure_reason = f"stack {missing!r} is unknown"
            return result
        ssh = self.inventory.ssh
        try:
            # Cores are checked on the hosts themselves (below) in SSH mode.
            resolved = resolve(config, server, client, cores={} if ssh else None)
        except TestbedError as err:
            result.failure_reason = f"refused: {err}"
            return result
        result.effective = resolved.effective
        for stack in (server, client):
            absent = [p for p in self.builder.outputs(stack) if not p.exists()]
            if absent and not any(self.inventory.host(r).quiclab_dir for r in ("server",
                                                                               "client")):
                result.failure_reason = (f"{stack.name} is not built ({absent[0]} missing): "
                                         "run `quiclab testbed build`")
                return result
        result.expected_s = expected_seconds(config, server, client)
        result.timeout_s = timeout_seconds(config, server, client, self.startup_s)
        logdir = self.paths.runs_dir / run_id
        logdir.mkdir(parents=True, exist_ok=True)
        result.logdir = str(logdir)
        link = link_config(config, resolved, server.transport)
        topo: Topology | HostPair
        if ssh:
            topo = HostPair(link, self.inventory, self.builder, self.deployer,
                            {"server": server, "client": client}, run_id, logdir)
        else:
            topo = Topology(link, self.paths.state_dir, self.builder.loss_object,
                            log_dir=logdir, inventory=self.inventory,
                            build_dir=self.paths.build_dir, peers_dir=self.paths.peers_dir)
        try:
            with topo:
                self._on_hosts(topo, config, resolved, server, client)
                self._transfer(topo, config, resolved, server, client, result, logdir)
        except TestbedError as err:
            result.status, result.failure_reason = "failed", str(err)
        if topo.restore_failed:
            result.topology["restore_failed"] = topo.restore_failed
            if result.status == "ok":
                result.status = "failed"
                result.failure_reason = ("restore failed: " + "; ".join(
                    f"{role}: {lines[0]}" for role, lines in topo.restore_failed.items()))
        result.end_ns = result.end_ns or time.time_ns()
        (logdir / "result.json").write_text(json.dumps(result.summary(), indent=2))
        return result

    def _on_hosts(self, topo: Topology | HostPair, config: RunConfig, resolved: Resolved,
                  server: Stack, client: Stack) -> None:
        """What the hosts decide: the cores the peers go on (each host's own count and
        the inventory's peer cores), and the offloads in effect as the interfaces have
        them (recorded for the knobs the run left alone)."""
        cores = {r: int(topo.hosts[r].facts.get("cores") or 1) for r in ("server", "client")}
        resolved.effective.update(pinned_cores(
            config.scenario, cores,
            {r: self.inventory.host(r).peer_cores for r in ("server", "client")},
            restrict=self.inventory.ssh))
        features = {r: topo.applied.get(f"{r}.{topo.interface(r).dev}", {})
                    for r in ("server", "client")}
        for knob, role in (("veth_segmentation", "server"), ("nic_gro", "client"),
                           ("tso", "server"), ("nic_lro", "client"), ("nic_gso", "server")):
            long = FEATURES[knob][1]
            if knob not in config.explicit and long in features[role]:
                resolved.effective[knob] = features[role][long] == "on"

    # ------------------------------------------------------------------
    def _command(self, topo: Topology | HostPair, role: str, stack: Stack, resolved: Resolved,
                 config: RunConfig) -> list[str]:
        host = topo.hosts[role]
        argv: list[str] = []
        if config.knob("nice"):
            argv += ["nice", "-n", str(int(config.knob("nice")))]
        core = resolved.effective.get(f"{role}_pinned_core")
        if core is not None:
            argv += ["taskset", "-c", str(core)]
        there = PurePosixPath(topo.logdir(role))
        if config.knob("count_syscalls") and host.facts.get("perf"):
            argv += collect.perf_prefix(Path(str(there / f"{role}.perf")))
        argv += collect.NO_NET_ADMIN
        argv += topo.peer_argv(role, stack)
        cert, key = (topo.place(role, p) for p in self.builder.certs())
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
            qlog = there / f"qlog-{role}"
            host.run(["mkdir", "-p", str(qlog)])
            argv.append(f"--qlog={qlog}")
        return argv + (resolved.server_args if role == "server" else resolved.client_args)

    @staticmethod
    def _spawn(host: Host, name: str, argv: list[str], logdir: str, env: dict[str, str],
               sample: bool = True, nice: int = 0) -> None:
        """Start a peer through its host's agent; ``nice`` also goes to the peer's
        autogroup (its own session: collect.set_autogroup_nice)."""
        host.agent.request("spawn", name=name, argv=argv, env=env, logdir=logdir,
                           sample=sample, **({"autogroup_nice": nice} if nice else {}))

    def _transfer(self, topo: Topology | HostPair, config: RunConfig, resolved: Resolved,
                  server: Stack, client: Stack, result: RunResult, logdir: Path) -> None:
        srv, cli = topo.hosts["server"], topo.hosts["client"]
        relay_host = topo.hosts.get("relay") if topo.relayed else None
        nice = int(config.knob("nice"))
        if server.transport == "tcp":
            result.host["bench"] = self._bench(topo, server, resolved, nice)
        nic_before = {r: topo.interface(r).counters() for r in ("server", "client")}
        if relay_host is not None:
            self._spawn(relay_host, "relay", self._relay_argv(topo), topo.logdir("relay"), {},
                        sample=False)
        self._spawn(srv, "server", self._command(topo, "server", server, resolved, config),
                    topo.logdir("server"), topo.peer_env("server", server), nice=nice)
        hosts = [srv, cli] + ([relay_host] if relay_host is not None else [])
        two_machines = srv.facts.get("boot_id") != cli.facts.get("boot_id")
        try:
            bound = srv.agent.request("bound", wait_s=40, name="server", port=PORT,
                                      timeout_s=10.0, transport=server.transport)
            if not bound["bound"]:
                topo.fetch_logs(logdir)
                report = last_json(_read(logdir / "server.out"))
                why = report.get("error") or _head(logdir / "server.err") or "no output"
                raise TestbedError(f"server {server.name} did not start: {why}")
            # What else keeps the hosts busy (the server only waits meanwhile).
            srv.agent.request("load_begin", key="background")
            time.sleep(BACKGROUND_WINDOW_S)
            background = srv.agent.request("load", key="background")
            result.host = {**result.host, "background_cores": round(background["cores"], 3),
                           "cores": float(background["ncores"]),
                           "nice": float(os.getpriority(os.PRIO_PROCESS, 0))}
            for host in {id(h): h for h in (srv, cli)}.values():
                host.agent.request("load_begin", key="during", per_core=True)
            # The server's samples start afresh here: the window's first edge.
            srv_start = srv.agent.request("cut", name="server")
            result.start_ns = srv.local_ns(srv_start["time_ns"])
            self._spawn(cli, "client", self._command(topo, "client", client, resolved, config),
                        topo.logdir("client"), topo.peer_env("client", client), nice=nice)
            reply = cli.agent.request("wait", wait_s=result.timeout_s + 60, name="client",
                                      timeout_s=result.timeout_s, since_start=True)
            cli_exit = collect.Exit(**reply["exit"])
            srv_end = srv.agent.request("cut", name="server")
            result.end_ns = srv.local_ns(srv_end["time_ns"])
            during = srv.agent.request("load", key="during")
            result.host["busy_cores"] = round(during["cores"], 3)
            result.host["per_core"] = during.get("per_core") or {}
            if two_machines:
                during = cli.agent.request("load", key="during")
                result.host.update(client_busy_cores=round(during["cores"], 3),
                                   client_cores=float(during["ncores"]),
                                   client_per_core=during.get("per_core") or {})
            cli_cores = cli.agent.request("stop_sampler", name="client")
            # Perf peers exit by themselves (--once) once the client has closed the
            # connection; wrapped tools serve forever and are stopped here.
            if not server.server_exits:
                time.sleep(0.3)
                srv.agent.request("signal", name="server", signal=int(signal.SIGTERM),
                                  peer_only=True)
            reply = srv.agent.request("wait", wait_s=60, name="server", timeout_s=5.0,
                                      since_start=True)
            srv_exit = collect.Exit(**reply["exit"])
            if srv_exit.timed_out:
                srv_exit.extra["killed"] = 1.0
            srv_cores = srv.agent.request("stop_sampler", name="server")
            relay_exit = None
            if relay_host is not None:
                # SIGTERM makes the relay print its counters; wait4 gives its CPU time.
                relay_host.agent.request("signal", name="relay", signal=int(signal.SIGTERM))
                relay_exit = collect.Exit(**relay_host.agent.request(
                    "wait", wait_s=60, name="relay", timeout_s=3.0)["exit"])
        finally:
            for host in hosts:
                with contextlib.suppress(TestbedError):
                    host.agent.request("reap", wait_s=60)
        topo.fetch_logs(logdir)
        if config.knob("count_syscalls") and srv.facts.get("perf"):
            # perf reaps the peer: a peer killed by a signal is in its stderr, not its exit.
            for peer_exit, role in ((cli_exit, "client"), (srv_exit, "server")):
                collect.perf_child_status(peer_exit, _read(logdir / f"{role}.err"),
                                          collect.NO_NET_ADMIN[0])
        result.client.exit, result.server.exit = cli_exit, srv_exit
        result.client.window_cpu = (cli_exit.user_s, cli_exit.system_s)
        if srv_end["complete"]:
            result.server.window_cpu = (max(0.0, srv_end["user_s"] - srv_start["user_s"]),
                                        max(0.0, srv_end["system_s"] - srv_start["system_s"]))
        else:  # the server had exited by the window's end: all it used since is inside
            result.server.window_cpu = (max(0.0, srv_exit.user_s - srv_start["user_s"]),
                                        max(0.0, srv_exit.system_s - srv_start["system_s"]))
        for side, role, host, cores in ((result.server, "server", srv, srv_cores),
                                        (result.client, "client", cli, cli_cores)):
            side.samples = [collect.CpuSample(**{**c, "start_ns": host.local_ns(c["start_ns"]),
                                                 "end_ns": host.local_ns(c["end_ns"])})
                            for c in cores["samples"]]
            side.report = last_json(_read(logdir / f"{role}.out"))
            side.stderr_tail = _tail(logdir / f"{role}.err", 2)
            side.syscalls = collect.parse_perf(logdir / f"{role}.perf")
            iface = topo.interface(role)
            side.snmp = parse_snmp("\n".join(
                host.read(f) or "" for f in ("/proc/net/snmp", *(
                    ("/proc/net/netstat",) if server.transport == "tcp" else ()))))
            side.link = iface.link_stats()
            side.core_shares = {int(c): v for c, v in cores["core_shares"].items()}
            pinned = resolved.effective.get(f"{role}_pinned_core")
            if pinned is not None:
                side.core, side.core_source = int(pinned), "pinned"
            elif cores["main_core"] is not None:
                side.core, side.core_source = int(cores["main_core"]), "observed"
            elif cores["last_core"] is not None:
                side.core, side.core_source = int(cores["last_core"]), "last-seen"
            after = iface.counters()
            before = nic_before[role]
            side.nic = {"counters_delta": None if before is None or after is None else
                        {k: v - before.get(k, 0) for k, v in after.items()
                         if v - before.get(k, 0)}}
        result.topology = {"mode": "relayed" if topo.relayed else "direct",
                           "hosts": self.inventory.kind, "applied": topo.applied,
                           "qdisc": topo.interface("server").qdisc_stats()}
        if isinstance(topo, Topology):
            result.topology["namespaces"] = list(topo.ns.values())
        else:
            result.topology["netem"] = topo.netem
        result.hosts = {r: host_record(topo.hosts[r], topo.interface(r).info())
                        for r in ("server", "client")}
        if relay_exit is not None:
            counters = last_json(_read(logdir / "relay.out")).get("relay") or {}
            counters["cpu_s"] = relay_exit.cpu_s
            result.topology["relay"] = counters
        result.status, result.failure_reason = _verdict(result, cli_exit, srv_exit, client,
                                                        server, config)

    def _bench(self, topo: Topology | HostPair, stack: Stack, resolved: Resolved,
               nice: int = 0) -> dict[str, Any]:
        """The TCP peer's micro-benchmark on each side's core, just before the transfer
        (AES-GCM and memcpy ns per byte, a multiply-add step: how fast the core is for
        this run, whatever else the host does; ``peers/tcp-tls`` ``--role=bench``), run
        by each host's agent."""
        out: dict[str, Any] = {}
        for role in ("server", "client"):
            core = resolved.effective.get(f"{role}_pinned_core")
            argv = [*(["nice", "-n", str(nice)] if nice else []),
                    *(["taskset", "-c", str(core)] if core is not None else []),
                    *topo.peer_argv(role, stack), "--role=bench", f"--bytes={BENCH_BYTES}"]
            done = topo.hosts[role].run(argv, timeout_s=30.0)
            report = last_json(done.stdout)
            out[role] = {k: v for k, v in report.items() if "_ns" in k}
        return out

    def _relay_argv(self, topo: Topology | HostPair) -> list[str]:
        link = topo.link
        one_way_s = link.rtt_ms / 2e3
        # Bound: 2 × what is in flight in the delay line at the relay's top rate (or the link's).
        queue = relay_queue_bytes(link)
        return [topo.place("relay", self.builder.relay()),
                f"-listen={topo.client_target}", f"-server={topo.server_listen}",
                f"-delay={one_way_s * 1e6:.0f}us", f"-reorder-pct={link.reorder_pct}",
                f"-queue-bytes={queue}", f"-seed={link.seed + 1}"]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


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
