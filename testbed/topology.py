"""Network namespaces, veth links, the per-run link knobs, and the testbed lock.

Two namespaces joined by one veth pair (``direct``), or three with a
userspace UDP relay in the middle when delay or reordering is asked for
(``relayed``; this kernel has no netem). Everything quiclab creates is named
``quiclab-<pid>-<n>-<role>`` and described in a state file
``<state_dir>/<pid>-<n>.json`` written *before* anything is created, so a
later run can clean up what a killed one left (:func:`clean_stale`):
namespaces, processes inside them, and the host-wide UDP buffer sysctls.

Addresses are from 198.18.0.0/15 (RFC 2544, reserved for benchmarking
network devices) and live only inside these namespaces, which have no
default route.

Each namespace is a host with an agent in it (:mod:`~quiclab.testbed.hosts`), and
the run's knobs are set by :func:`apply_knobs`, the code that also sets them on
two servers over SSH (:mod:`~quiclab.testbed.hostpair`): MTU, offloads with
``ethtool -K`` (``tx-udp-segmentation``, ``gro``, ``tso``, …), ring sizes and IRQ
affinity where the interface has them, the link rate with ``tc tbf`` on the
server's egress (the data direction), random loss with a tc eBPF classifier on
the client's ingress (``bpf/loss.bpf.c``). The UDP buffer sizes go through the
host-wide ``net.core.{r,w}mem_{max,default}`` (they cannot be set inside a
namespace), restored afterwards.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.hosts import AgentClient, Host, netns_agent_argv
from quiclab.testbed.inventory import Inventory

# The path knobs and their code live in link.py; imported from here as before.
from quiclab.testbed.link import (  # noqa: F401
    MAX_GSO_SKB_BYTES,
    MIN_TBF_LIMIT_BYTES,
    LinkConfig,
    NoNetem,
    apply_knobs,
    netem_limit_packets,
)
from quiclab.testbed.nic import Interface
from quiclab.testbed.stacks import Stack

PREFIX = "quiclab-"
DEFAULT_STATE_DIR = Path("/run/quiclab")
#: Host-wide UDP buffer sysctls a run may change (and must restore).
BUFFER_SYSCTLS = ("net.core.rmem_max", "net.core.rmem_default",
                  "net.core.wmem_max", "net.core.wmem_default")
PORT = 4433
#: The controllers a process without CAP_NET_ADMIN may choose with TCP_CONGESTION
#: (host-wide; a namespace cannot set its own default to one outside it either). A TCP
#: run whose controller is missing adds it for the run and restores the list after.
ALLOWED_CC = "net.ipv4.tcp_allowed_congestion_control"


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        raise TestbedError(f"`{' '.join(argv)}` failed: {first[0] if first else proc.returncode}")
    return proc


def require_root() -> None:
    """Raise TestbedError (one line) unless this process may create namespaces."""
    if os.geteuid() != 0:
        raise TestbedError("quiclab testbed needs root to create network namespaces "
                           f"(running as uid {os.geteuid()}); rerun as root")


def read_sysctl(name: str) -> str:
    return Path("/proc/sys", *name.split(".")).read_text().strip()


def write_sysctl(name: str, value: str | int) -> None:
    Path("/proc/sys", *name.split(".")).write_text(str(value))


def list_namespaces() -> list[str]:
    """Names of all network namespaces under /run/netns."""
    proc = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace(name: str) -> None:
    """Kill every process in namespace ``name``, then delete it."""
    pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    for _ in range(50):
        if _run(["ip", "netns", "del", name], check=False).returncode == 0:
            return
        time.sleep(0.05)


def _owner_pid(namespace: str) -> int | None:
    # quiclab-<pid>-<n>-<role>
    parts = namespace[len(PREFIX):].split("-")
    return int(parts[0]) if parts and parts[0].isdigit() else None


def clean_stale(state_dir: Path = DEFAULT_STATE_DIR, everything: bool = False) -> list[str]:
    """Remove what killed runs left: namespaces, their processes, changed sysctls.

    A run is stale when the pid in its name is no longer alive (or always, with
    ``everything=True``, for ``quiclab testbed clean``). Returns the namespaces removed.
    """
    removed: list[str] = []
    if state_dir.is_dir():
        for state_file in sorted(state_dir.glob("*.json")):
            try:
                state = json.loads(state_file.read_text())
            except (OSError, ValueError):
                state_file.unlink(missing_ok=True)
                continue
            pid = int(state.get("pid", 0))
            if not everything and pid != os.getpid() and _pid_alive(pid):
                continue
            if not everything and pid == os.getpid():
                continue
            for ns in state.get("namespaces", []):
                if ns in list_namespaces():
                    _kill_namespace(ns)
                    removed.append(ns)
            for name, value in state.get("sysctl", {}).items():
                with contextlib.suppress(OSError):
                    write_sysctl(name, value)
            state_file.unlink(missing_ok=True)
    for ns in list_namespaces():
        if not ns.startswith(PREFIX):
            continue
        owner = _owner_pid(ns)
        if everything or owner is None or (owner != os.getpid() and not _pid_alive(owner)):
            _kill_namespace(ns)
            removed.append(ns)
    _drop_orphan_journals(state_dir / "agent")
    return removed


def _drop_orphan_journals(journal_dir: Path) -> None:
    """Remove agents' journals whose network namespace is gone (a killed run's
    namespaces, deleted above: what the journal would undo went with them)."""
    if not journal_dir.is_dir():
        return
    alive: set[str] = set()
    for path in [Path("/proc/1/ns/net"), *Path("/run/netns").glob("*")]:
        with contextlib.suppress(OSError):
            alive.add(str(os.stat(path).st_ino))
    for journal in journal_dir.glob("agent-*.json"):
        netns = journal.name.split("-")[1] if journal.name.count("-") >= 2 else ""
        if netns not in alive:
            journal.unlink(missing_ok=True)


@contextlib.contextmanager
def exclusive(state_dir: Path = DEFAULT_STATE_DIR, wait_s: float = 600.0) -> Iterator[None]:
    """Hold the testbed lock: one run at a time on this host (runs measure CPU)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock_path = state_dir / "testbed.lock"
    with open(lock_path, "a+") as lock:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.seek(0)
                    raise TestbedError(f"{lock_path}: another testbed run "
                                       f"(pid {lock.read().strip() or '?'}) holds the lock"
                                       ) from None
                time.sleep(0.2)
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_COUNTER = iter(range(1, 1 << 30))


def tbf_limit_bytes(link: LinkConfig) -> int:
    """The ``tc tbf`` queue limit a rate-limited run gets: ``queue_bytes``, else 1 × BDP
    at the rate (RTT at least 0.1 ms), at least :data:`MIN_TBF_LIMIT_BYTES`."""
    rate_bps = link.rate_gbps * 1e9
    return link.queue_bytes or max(MIN_TBF_LIMIT_BYTES, int(
        rate_bps / 8 * max(link.rtt_ms, 0.1) / 1e3))


def relay_queue_bytes(link: LinkConfig) -> int:
    """The delay relay's queue bound per direction: ``relay_queue_bytes``, else 2 × what
    the delay line holds at the relay's top rate (or the link's), at least 1 MiB."""
    one_way_s = link.rtt_ms / 2e3
    rate_bps = min(link.rate_gbps * 1e9 if link.rate_gbps else 2e9, 2e9)
    return link.relay_queue_bytes or max(1 << 20, int(2 * rate_bps / 8 * one_way_s))


class Topology:
    """The namespaces of one run. Use as a context manager: always torn down.

    ``exec_prefix(role)`` gives the argv prefix that runs a command inside the
    ``server``, ``client`` or ``relay`` namespace; ``hosts[role]`` is the agent there.
    """

    SERVER_IP = "198.18.0.1"
    CLIENT_IP = "198.18.0.2"
    # Relayed: server 198.18.1.1 — .1.2 relay .2.2 — 198.18.2.1 client.
    RELAY_SERVER_SIDE = ("198.18.1.1", "198.18.1.2")
    RELAY_CLIENT_SIDE = ("198.18.2.1", "198.18.2.2")
    DEV = "eth0"

    def __init__(self, link: LinkConfig, state_dir: Path = DEFAULT_STATE_DIR,
                 loss_object: Callable[..., Path] | None = None,
                 log_dir: Path | None = None, inventory: Inventory | None = None,
                 build_dir: Path = Path("/"), peers_dir: Path = Path("/")):
        self.link = link
        self.state_dir = state_dir
        self.loss_object = loss_object
        self.tag = f"{os.getpid()}-{next(_COUNTER)}"
        roles = ("srv", "rly", "cli") if link.relayed else ("srv", "cli")
        self.ns = {r: f"{PREFIX}{self.tag}-{r}" for r in roles}
        self.state_file = state_dir / f"{self.tag}.json"
        self.saved_sysctl: dict[str, str] = {}
        self.applied: dict[str, Any] = {}
        self.inventory = inventory or Inventory.namespaces(os.cpu_count() or 1)
        self.log_dir = log_dir or state_dir / "agent-logs"
        self.hosts: dict[str, Host] = {}
        self.build_dir, self.peers_dir = build_dir, peers_dir
        #: Undos that failed at the end, per host (none expected: the namespaces go).
        self.restore_failed: dict[str, list[str]] = {}

    # -- where things are on the hosts: this machine's paths -------------------------
    def place(self, role: str, local: Path) -> str:
        return str(local)

    def logdir(self, role: str) -> str:
        return str(self.log_dir)

    def peer_argv(self, role: str, stack: Stack) -> list[str]:
        return stack.argv(self.build_dir, self.peers_dir)

    def peer_env(self, role: str, stack: Stack) -> dict[str, str]:
        return {k: v.format(build=self.build_dir, peers=self.peers_dir) for k, v in stack.env}

    def fetch_logs(self, local: Path) -> None:
        """The peers wrote into the run's log directory already (this machine)."""

    # -- addresses -------------------------------------------------------
    @property
    def server_listen(self) -> str:
        ip = self.RELAY_SERVER_SIDE[0] if self.link.relayed else self.SERVER_IP
        return f"{ip}:{PORT}"

    @property
    def client_target(self) -> str:
        """Where the client connects: the server, or the relay in front of it."""
        ip = self.RELAY_CLIENT_SIDE[1] if self.link.relayed else self.SERVER_IP
        return f"{ip}:{PORT}"

    @property
    def relayed(self) -> bool:
        return self.link.relayed

    def namespace(self, role: str) -> str:
        return self.ns[{"server": "srv", "client": "cli", "relay": "rly"}[role]]

    def exec_prefix(self, role: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(role)]

    def interface(self, role: str) -> Interface:
        return Interface(self.hosts[role], self.DEV, role)

    def _ip(self, role: str, *args: str) -> None:
        _run(["ip", "-n", self.namespace(role), *args])

    # -- life cycle --------------------------------------------------------
    def _write_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({
            "pid": os.getpid(), "namespaces": list(self.ns.values()),
            "sysctl": self.saved_sysctl, "link": asdict(self.link)}))

    def __enter__(self) -> Topology:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Create namespaces, links and addresses, start an agent in each namespace and
        apply the link knobs."""
        require_root()
        if self.link.rcvbuf_bytes or self.link.sndbuf_bytes:
            self.saved_sysctl = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}
        allowed = read_sysctl(ALLOWED_CC) if self.link.tcp_cc else ""
        if self.link.tcp_cc and self.link.tcp_cc not in allowed.split():
            self.saved_sysctl[ALLOWED_CC] = allowed
        self._write_state()  # before creating anything: a crash leaves a trace to clean
        try:
            for ns in self.ns.values():
                _run(["ip", "netns", "add", ns])
            for role in self.ns:
                _run(["ip", "-n", self.ns[role], "link", "set", "lo", "up"])
            if self.link.relayed:
                self._pair("server", "eth0", "relay", "eth1", *self.RELAY_SERVER_SIDE)
                self._pair("client", "eth0", "relay", "eth2",
                           self.RELAY_CLIENT_SIDE[0], self.RELAY_CLIENT_SIDE[1])
                for dev in ("eth1", "eth2"):
                    _run([*self.exec_prefix("relay"), "ethtool", "-K", dev,
                          "tx-udp-segmentation", "on", "gro", "off"])
            else:
                self._pair("server", "eth0", "client", "eth0", self.SERVER_IP, self.CLIENT_IP)
            roles = ("server", "client") + (("relay",) if self.link.relayed else ())
            for role in roles:
                spec = self.inventory.host(role) if role != "relay" else dataclasses.replace(
                    self.inventory.client, role="relay", name="relay")
                agent = AgentClient(netns_agent_argv(self.namespace(role), self.state_dir),
                                    f"netns:{role}", self.log_dir / f"agent-{role}.log")
                self.hosts[role] = Host(spec, agent.start())
                self.hosts[role].hello({"pid": os.getpid(), "topology": self.tag})
            loss = (str(self.loss_object(self.link.loss_pct, self.link.transport))
                    if self.link.loss_pct and self.loss_object else None)
            if self.link.loss_pct and loss is None:
                raise TestbedError("loss_pct needs the eBPF loss classifier (clang); "
                                   "run `quiclab testbed build`")
            self.applied.update(apply_knobs(self.interface("server"), self.interface("client"),
                                            self.link, loss))
            self._buffers()
            if self.link.transport == "tcp":
                self._tcp_sysctls()
        except BaseException:
            self.down()
            raise

    def _pair(self, a: str, a_dev: str, b: str, b_dev: str, a_ip: str, b_ip: str) -> None:
        _run(["ip", "-n", self.namespace(a), "link", "add", a_dev, "type", "veth",
              "peer", "name", b_dev, "netns", self.namespace(b)])
        for role, dev, ip in ((a, a_dev, a_ip), (b, b_dev, b_ip)):
            self._ip(role, "link", "set", dev, "mtu", str(self.link.mtu_bytes))
            self._ip(role, "addr", "add", f"{ip}/24", "dev", dev)
            self._ip(role, "link", "set", dev, "up")

    def _buffers(self) -> None:
        for name, value in self.link.buffer_sysctls().items():
            write_sysctl(name, value)
        self.applied["sysctl"] = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}

    def _tcp_sysctls(self) -> None:
        """The namespaces' own TCP settings (net.ipv4.tcp_* are per network namespace):
        the largest autotuned buffers and the default congestion controller."""
        settings = self.link.tcp_sysctls()
        if ALLOWED_CC in self.saved_sysctl:
            # The peers run without CAP_NET_ADMIN: they may pick only an allowed controller.
            write_sysctl(ALLOWED_CC, f"{self.saved_sysctl[ALLOWED_CC]} {self.link.tcp_cc}")
        applied: dict[str, Any] = {}
        for role in ("server", "client"):
            for name, value in settings.items():
                _run([*self.exec_prefix(role), "sysctl", "-q", "-w", f"{name}={value}"])
            applied[role] = {name: _run([*self.exec_prefix(role), "sysctl", "-n", name]).stdout
                             .strip().replace("\t", " ")
                             for name in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                                          "net.ipv4.tcp_sack", "net.ipv4.tcp_timestamps",
                                          "net.ipv4.tcp_autocorking")}
        applied[ALLOWED_CC] = read_sysctl(ALLOWED_CC)
        self.applied["tcp_sysctl"] = applied

    def down(self) -> None:
        """Stop the agents (each undoes its changes), kill what runs inside, delete the
        namespaces, restore sysctls. Idempotent."""
        for host in self.hosts.values():
            if host.agent.usable:  # (an interrupted one undoes its changes as it exits)
                with contextlib.suppress(TestbedError):
                    host.restore()
            host.agent.close()
        present = set(list_namespaces())
        for ns in self.ns.values():
            if ns in present:
                _kill_namespace(ns)
        for name, value in self.saved_sysctl.items():
            with contextlib.suppress(OSError):
                write_sysctl(name, value)
        self.state_file.unlink(missing_ok=True)

    # -- counters ------------------------------------------------------------
    def snmp(self, role: str) -> dict[str, dict[str, int]]:
        """``/proc/net/snmp`` of one namespace as {section: {counter: value}}; for TCP
        runs also ``/proc/net/netstat`` (TcpExt, IpExt: the counters ``nstat`` reads)."""
        files = ["/proc/net/snmp"] + (["/proc/net/netstat"] if self.link.transport == "tcp"
                                      else [])
        return parse_snmp("\n".join(self.hosts[role].read(f) or "" for f in files))

    def link_stats(self, role: str, dev: str = "eth0") -> dict[str, int]:
        """The veth's own counters (``ip -s -j link``): packets here are GSO batches."""
        return Interface(self.hosts[role], dev, role).link_stats()

    def qdisc_stats(self, role: str = "server") -> list[dict[str, Any]]:
        return self.interface(role).qdisc_stats()


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """Parse ``/proc/net/snmp`` (pairs of header and value lines per protocol)."""
    from quiclab.testbed.nic import parse_snmp as parse

    return parse(text)
