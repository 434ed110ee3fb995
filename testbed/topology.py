"""Network namespaces, veth links and the per-run link knobs.

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

Per run (:class:`LinkConfig`): veth MTU; NIC offloads with ``ethtool -K``
(``tx-udp-segmentation``, ``gro``, ``tso``); link rate with ``tc tbf`` on the
server's egress (the data direction); random loss with a tc eBPF classifier
on the client's ingress (``bpf/loss.bpf.c``); UDP buffer sizes through the
host-wide ``net.core.{r,w}mem_{max,default}`` (they cannot be set inside a
namespace), restored afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quiclab.testbed.errors import TestbedError

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


#: The largest UDP GSO skb as tc counts it: a 64 KiB datagram plus, for each further
#: segment, the Ethernet/IP/UDP headers it will carry (qdisc_pkt_len; 54 segments at the
#: smallest payload the stacks send, 1200 B).
MAX_GSO_SKB_BYTES = 65535 + 14 + 53 * 42
#: The default tbf queue floor, two of those (136 KiB). A bfifo admits an skb whole or
#: drops it whole, so a 64 KiB limit refuses every full-size GSO batch (44 × 1472 B counts
#: 66.6 KB): quiche at 1 Gbit/s then moved 277 Mbit/s with a 27 ms PTO after each refused
#: batch (19 in 0.6 s, strace), and 942 Mbit/s with this floor (README "Rate").
MIN_TBF_LIMIT_BYTES = 136 * 1024


@dataclass(frozen=True)
class LinkConfig:
    """The knobs of one run's path. Units in the names; 0 means "not set"."""

    mtu_bytes: int = 1500
    #: tx-udp-segmentation on the veths: on passes GSO batches unsegmented.
    veth_segmentation: bool = True
    nic_gro: bool = False
    tso: bool = True
    rate_gbps: float = 0.0
    #: tbf queue limit in bytes (0 = 1 × BDP at the rate, at least MIN_TBF_LIMIT_BYTES).
    queue_bytes: int = 0
    loss_pct: float = 0.0
    #: Added round-trip delay (half each way, in the relay).
    rtt_ms: float = 0.0
    reorder_pct: float = 0.0
    relay_queue_bytes: int = 0
    rcvbuf_bytes: int = 0
    sndbuf_bytes: int = 0
    seed: int = 0
    #: "udp" (the QUIC peers) or "tcp" (kernel TCP peers: the fields below apply,
    #: and the loss classifier drops TCP segments).
    transport: str = "udp"
    #: generic-segmentation-offload and tx/rx checksumming on both veths (TCP runs).
    gso: bool = True
    csum_offload: bool = True
    #: The namespaces' net.ipv4.tcp_rmem[2] / tcp_wmem[2] and tcp_congestion_control
    #: (0 / "": left as the kernel has them).
    tcp_rmem_bytes: int = 0
    tcp_wmem_bytes: int = 0
    tcp_cc: str = ""

    @property
    def relayed(self) -> bool:
        return self.rtt_ms > 0 or self.reorder_pct > 0


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
    return removed


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


class Topology:
    """The namespaces of one run. Use as a context manager: always torn down.

    ``exec_prefix(role)`` gives the argv prefix that runs a command inside the
    ``server``, ``client`` or ``relay`` namespace.
    """

    SERVER_IP = "198.18.0.1"
    CLIENT_IP = "198.18.0.2"
    # Relayed: server 198.18.1.1 — .1.2 relay .2.2 — 198.18.2.1 client.
    RELAY_SERVER_SIDE = ("198.18.1.1", "198.18.1.2")
    RELAY_CLIENT_SIDE = ("198.18.2.1", "198.18.2.2")

    def __init__(self, link: LinkConfig, state_dir: Path = DEFAULT_STATE_DIR,
                 loss_object: Callable[..., Path] | None = None):
        self.link = link
        self.state_dir = state_dir
        self.loss_object = loss_object
        self.tag = f"{os.getpid()}-{next(_COUNTER)}"
        roles = ("srv", "rly", "cli") if link.relayed else ("srv", "cli")
        self.ns = {r: f"{PREFIX}{self.tag}-{r}" for r in roles}
        self.state_file = state_dir / f"{self.tag}.json"
        self.saved_sysctl: dict[str, str] = {}
        self.applied: dict[str, Any] = {}

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

    def namespace(self, role: str) -> str:
        return self.ns[{"server": "srv", "client": "cli", "relay": "rly"}[role]]

    def exec_prefix(self, role: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(role)]

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
        """Create namespaces, links, addresses and apply the link knobs."""
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
                self._offloads("relay", "eth1", segmentation=True, gro=False)
                self._offloads("relay", "eth2", segmentation=True, gro=False)
            else:
                self._pair("server", "eth0", "client", "eth0", self.SERVER_IP, self.CLIENT_IP)
            self._offloads("server", "eth0", self.link.veth_segmentation, self.link.nic_gro)
            self._offloads("client", "eth0", self.link.veth_segmentation, self.link.nic_gro)
            if self.link.rate_gbps:
                self._rate()
            if self.link.loss_pct:
                self._loss()
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

    def _offloads(self, role: str, dev: str, segmentation: bool, gro: bool) -> None:
        onoff = {True: "on", False: "off"}
        extra: list[str] = []
        if self.link.transport == "tcp":
            # Checksums first: without tx-checksumming the kernel drops TSO itself.
            extra = ["tx", onoff[self.link.csum_offload], "rx", onoff[self.link.csum_offload],
                     "gso", onoff[self.link.gso]]
        _run([*self.exec_prefix(role), "ethtool", "-K", dev, *extra,
              "tx-udp-segmentation", onoff[segmentation], "gro", onoff[gro],
              "tso", onoff[self.link.tso and (self.link.csum_offload
                                             or self.link.transport != "tcp")]])
        features = _run([*self.exec_prefix(role), "ethtool", "-k", dev]).stdout
        state = {}
        for line in features.splitlines():
            key, _, value = line.strip().partition(":")
            if key in ("tx-udp-segmentation", "generic-receive-offload",
                       "tcp-segmentation-offload", "generic-segmentation-offload",
                       "large-receive-offload", "tx-checksumming", "rx-checksumming"):
                state[key] = value.split()[0] if value.split() else value
        self.applied[f"{role}.{dev}"] = state

    def _rate(self) -> None:
        rate_bps = self.link.rate_gbps * 1e9
        # Burst: at least one 64 KiB GSO batch, or 2 ms at the rate (one timer tick).
        burst = max(64 * 1024 + 2 * self.link.mtu_bytes, int(rate_bps / 8 * 0.002))
        limit = self.link.queue_bytes or max(MIN_TBF_LIMIT_BYTES, int(
            rate_bps / 8 * max(self.link.rtt_ms, 0.1) / 1e3))
        _run([*self.exec_prefix("server"), "tc", "qdisc", "replace", "dev", "eth0", "root",
              "tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "limit", str(limit)])
        self.applied["tbf"] = {"rate_bps": int(rate_bps), "burst_bytes": burst,
                               "limit_bytes": limit}

    def _loss(self) -> None:
        if self.loss_object is None:
            raise TestbedError("loss_pct needs the eBPF loss classifier (clang); "
                               "run `quiclab testbed build`")
        obj = (self.loss_object(self.link.loss_pct, "tcp") if self.link.transport == "tcp"
               else self.loss_object(self.link.loss_pct))
        prefix = self.exec_prefix("client")
        _run([*prefix, "tc", "qdisc", "replace", "dev", "eth0", "clsact"])
        _run([*prefix, "tc", "filter", "replace", "dev", "eth0", "ingress", "bpf",
              "direct-action", "obj", str(obj), "sec", "tc"])
        self.applied["loss"] = {"where": "client eth0 ingress (tc bpf)", "object": obj.name,
                                "loss_pct": self.link.loss_pct}

    def _buffers(self) -> None:
        if self.link.rcvbuf_bytes:
            write_sysctl("net.core.rmem_max", self.link.rcvbuf_bytes)
            write_sysctl("net.core.rmem_default", self.link.rcvbuf_bytes)
        if self.link.sndbuf_bytes:
            write_sysctl("net.core.wmem_max", self.link.sndbuf_bytes)
            write_sysctl("net.core.wmem_default", self.link.sndbuf_bytes)
        self.applied["sysctl"] = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}

    def _tcp_sysctls(self) -> None:
        """The namespaces' own TCP settings (net.ipv4.tcp_* are per network namespace):
        the largest autotuned buffers and the default congestion controller."""
        settings: dict[str, str] = {}
        if self.link.tcp_rmem_bytes:
            r = self.link.tcp_rmem_bytes
            settings["net.ipv4.tcp_rmem"] = f"4096 {min(131072, r)} {r}"
        if self.link.tcp_wmem_bytes:
            w = self.link.tcp_wmem_bytes
            settings["net.ipv4.tcp_wmem"] = f"4096 {min(16384, w)} {w}"
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
        """Kill what runs inside, delete the namespaces, restore sysctls. Idempotent."""
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
        text = _run([*self.exec_prefix(role), "cat", *files]).stdout
        return parse_snmp(text)

    def link_stats(self, role: str, dev: str = "eth0") -> dict[str, int]:
        """The veth's own counters (``ip -s -j link``): packets here are GSO batches."""
        out = _run(["ip", "-n", self.namespace(role), "-s", "-j", "link", "show",
                    "dev", dev]).stdout
        data = json.loads(out)[0].get("stats64", {})
        rx, tx = data.get("rx", {}), data.get("tx", {})
        return {"rx_packets": rx.get("packets", 0), "rx_bytes": rx.get("bytes", 0),
                "rx_dropped": rx.get("dropped", 0), "tx_packets": tx.get("packets", 0),
                "tx_bytes": tx.get("bytes", 0), "tx_dropped": tx.get("dropped", 0)}

    def qdisc_stats(self, role: str = "server") -> list[dict[str, Any]]:
        out = _run([*self.exec_prefix(role), "tc", "-s", "-j", "qdisc", "show", "dev", "eth0"],
                   check=False).stdout
        try:
            return [{k: q.get(k) for k in ("kind", "bytes", "packets", "drops", "overlimits",
                                            "requeues", "backlog")} for q in json.loads(out)]
        except ValueError:
            return []


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """Parse ``/proc/net/snmp`` (pairs of header and value lines per protocol)."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    out: dict[str, dict[str, int]] = {}
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        section = header[0].rstrip(":")
        with contextlib.suppress(ValueError):
            out[section] = {k: int(v) for k, v in zip(header[1:], values[1:], strict=False)}
    return out
