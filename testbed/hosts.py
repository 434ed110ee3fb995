"""The hosts of a run: an agent on each, reached through a namespace or over SSH.

A :class:`Host` is one side of the testbed as the runner sees it: an
:class:`AgentClient` (``agent.py`` running there, spoken to in JSON lines), the
host's facts (``hello``), and where builds, peers, certificates and run logs are
*on that host*. Only how the agent is started differs:

- namespace mode: ``ip netns exec <ns> python agent.py`` on this machine; the
  host's paths are this machine's;
- SSH mode: ``ssh [options] target python3 <workdir>/agent/agent.py`` (the
  system's OpenSSH client, so ``~/.ssh/config``, agents, ``ProxyJump`` and
  ``ControlMaster`` work as they do for the user; paramiko honours none of
  ProxyJump or ControlMaster, and asyncssh would add a dependency for what one
  ``ssh`` process per host does: :mod:`~quiclab.testbed.remote`). Peers,
  certificates, the delay relay and the eBPF loss object are copied to
  ``<workdir>`` first (:class:`~quiclab.testbed.remote.Deployer`).

A lost agent (its connection dropped, the host rebooted, ssh gave up after
``ServerAliveInterval`` × ``ServerAliveCountMax``) raises :class:`HostLost`, one
line naming the host and what ssh said; the agent on the host has then killed
its peers and undone its changes itself (``agent.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.inventory import HostSpec

PACKAGE_DIR = Path(__file__).resolve().parent
#: Files that make the agent on a host (standard library only).
AGENT_FILES = ("agent.py", "collect.py")
#: Ping the agent this often; it undoes everything after DEADMAN_S without a word.
HEARTBEAT_S = 5.0
DEADMAN_S = 60.0


class HostLost(TestbedError):
    """The agent on a host is gone: its connection dropped, or it died."""


@dataclass
class Completed:
    """A command's result on a host."""

    rc: int
    stdout: str
    stderr: str

    @property
    def first_line(self) -> str:
        lines = (self.stderr or self.stdout).strip().splitlines()
        return lines[0][:200] if lines else f"exit {self.rc}"


class AgentClient:
    """The controller's end of one agent: a child process (``ip netns exec …`` or
    ``ssh …``) whose stdin/stdout carry JSON lines."""

    def __init__(self, argv: list[str], where: str, log_path: Path):
        self.argv = argv
        self.where = where
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.lost: str | None = None
        #: A request sent whose answer has not been read (an interrupted one): the
        #: channel is out of step and only abandon() is left.
        self.pending = False

    def start(self) -> AgentClient:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as err:
            # A session of its own: Ctrl-C reaches the controller, which then restores
            # in order, not the agent's ssh (which would cut it off mid-restore).
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, bufsize=0,
                                         start_new_session=True)
        threading.Thread(target=self._heartbeat, daemon=True).start()
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(HostLost):
                self._write({"op": "ping"})

    def _write(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        data = (json.dumps(message, default=str) + "\n").encode()
        with self._lock:
            try:
                self.proc.stdin.write(data)
            except (BrokenPipeError, OSError, ValueError):
                raise self._lost("its input is closed") from None

    def _stderr_tail(self) -> str:
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines()
                     if ln.strip() and not ln.startswith("Warning: Permanently added")]
        except OSError:
            return ""
        return lines[-1][:200] if lines else ""

    def _lost(self, why: str) -> HostLost:
        if self.proc is not None and self.proc.poll() is None:
            # SIGTERM: the agent (or ssh, whose remote agent then reads EOF) ends the run
            # and undoes its journal; SIGKILL only if it does not end.
            with contextlib.suppress(OSError):
                self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        said = self._stderr_tail()
        code = self.proc.returncode if self.proc is not None else None
        self.lost = (f"lost the agent on {self.where}: {why}"
                     + (f" (exit {code})" if code not in (None, 0) else "")
                     + (f": {said}" if said else ""))
        self._stop.set()
        return HostLost(self.lost)

    def _readline(self, deadline: float) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._lost("no answer in time")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._lost("its connection closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def request(self, op: str, wait_s: float = 60.0, **kwargs: Any) -> dict[str, Any]:
        """Send one operation and wait for its answer; raises HostLost when the agent
        is gone and TestbedError (one line) when it refused the operation."""
        if self.lost:
            raise HostLost(self.lost)
        if self.pending:
            raise HostLost(f"the agent on {self.where} is still busy with an interrupted "
                           "operation")
        self.pending = True
        self._write({"op": op, **kwargs})
        deadline = time.monotonic() + wait_s
        while True:
            line = self._readline(deadline)
            try:
                reply = json.loads(line)
            except ValueError:
                continue  # not ours (a banner): skip it
            if isinstance(reply, dict) and "ok" in reply:
                break
        self.pending = False
        if not reply.get("ok"):
            raise TestbedError(f"{self.where}: {op}: {reply.get('error')}")
        return dict(reply)

    @property
    def usable(self) -> bool:
        return self.proc is not None and not self.lost and not self.pending

    def abandon(self, timeout_s: float = 60.0) -> bool:
        """Close the agent's input without a word: it kills its peers, undoes its
        journal and exits (``agent.py``). Returns whether it exited in time."""
        self._stop.set()
        if self.proc is None:
            return True
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False

    def close(self, timeout_s: float = 30.0) -> None:
        """``bye`` (the agent kills what is left and restores), then wait for it."""
        self._stop.set()
        if self.proc is None:
            return
        if not self.usable:
            self.abandon(timeout_s)
            return
        if self.proc.poll() is None and not self.lost:
            with contextlib.suppress(HostLost, TestbedError):
                self.request("bye", wait_s=timeout_s)
        with contextlib.suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        """End the agent's channel at once (its agent then restores by itself)."""
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Host:
    """One side of a run: its inventory entry, its agent and its facts (``hello``)."""

    spec: HostSpec
    agent: AgentClient
    facts: dict[str, Any] = field(default_factory=dict)
    #: Controller clock − host clock, ns (0 on this machine: the same boot).
    clock_offset_ns: int = 0
    remote: bool = False

    @property
    def where(self) -> str:
        return self.agent.where

    def hello(self, controller: dict[str, Any], lock_wait_s: float = 60.0) -> dict[str, Any]:
        t0 = time.time_ns()
        # The agent and the peers it starts run at the controller's nice value.
        self.facts = self.agent.request("hello", wait_s=lock_wait_s + 60,
                                        controller=controller, lock_wait_s=lock_wait_s,
                                        nice=os.getpriority(os.PRIO_PROCESS, 0))
        t1 = time.time_ns()
        if self.facts.get("boot_id") and self.facts["boot_id"] == _boot_id():
            self.clock_offset_ns = 0  # the same kernel: the same CLOCK_REALTIME
        else:
            self.clock_offset_ns = (t0 + t1) // 2 - int(self.facts["time_ns"])
        return self.facts

    def local_ns(self, host_ns: int) -> int:
        """A host timestamp on the controller's clock."""
        return int(host_ns) + self.clock_offset_ns

    def run(self, argv: list[str], timeout_s: float = 60.0) -> Completed:
        reply = self.agent.request("exec", wait_s=timeout_s + 30, argv=[str(a) for a in argv],
                                   timeout_s=timeout_s)
        return Completed(int(reply["rc"]), reply.get("stdout", ""), reply.get("stderr", ""))

    def check(self, argv: list[str], what: str = "") -> Completed:
        done = self.run(argv)
        if done.rc != 0:
            raise TestbedError(f"{self.where}: `{what or ' '.join(argv)}` failed: "
                               f"{done.first_line}")
        return done

    def change(self, do: list[str], undo: list[str], what: str = "",
               may_fail: bool = False) -> Completed:
        """Run ``do`` after journalling ``undo`` on the host (it is undone at the end of
        the run, or by the host itself if the controller goes away)."""
        reply = self.agent.request("change", wait_s=90, do={"argv": do},
                                   undo={"argv": undo, "what": what, "may_fail": may_fail})
        return Completed(int(reply["rc"]), reply.get("stdout", ""), reply.get("stderr", ""))

    def write(self, path: str, value: str, old: str, via: tuple[str, ...] = (),
              what: str = "") -> Completed:
        """Write a file (a sysctl, an IRQ's affinity), journalling ``old`` to write back."""
        reply = self.agent.request(
            "change", wait_s=90, do={"write": path, "value": value, "via": list(via)},
            undo={"write": path, "value": old, "via": list(via), "what": what or path})
        return Completed(int(reply["rc"]), reply.get("stdout", ""), reply.get("stderr", ""))

    def read(self, path: str) -> str | None:
        reply = self.agent.request("read", path=path)
        return reply.get("text")

    def writable(self, path: str) -> bool:
        """Whether the agent may write ``path`` itself (a namespace may not write the
        sysctls of the initial one, net.core.*)."""
        return bool(self.agent.request("read", path=path).get("writable"))

    def restore(self) -> list[str]:
        """Undo this run's changes now; returns the undos that failed (one line each)."""
        return list(self.agent.request("restore", wait_s=180).get("failed", []))


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


# -- starting agents -----------------------------------------------------------------
def netns_agent_argv(namespace: str | None, state_dir: Path) -> list[str]:
    """This machine's agent, inside ``namespace`` (or in this one)."""
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return [*prefix, sys.executable, str(PACKAGE_DIR / "agent.py"),
            "--state-dir", str(state_dir / "agent"), "--deadman-s", str(DEADMAN_S)]


def host_record(host: Host, nic: dict[str, Any]) -> dict[str, Any]:
    """What the catalog keeps of a host (``extra.hosts.<role>``, the ``hosts`` table):
    its CPU as a catalog entry (``models.cpus.host_cpu_from_cpuinfo``: model,
    microarchitecture, cores, clock, AES-NI), kernel, NUMA nodes, and its test NIC
    (driver, firmware, speed, NUMA node, rings, coalescing, channels, offloads).
    ``host_id`` names the host in this state: its hostname and a hash of its inventory
    name, CPU, kernel and NIC, so an upgraded kernel or firmware is a new host."""
    from quiclab.models.cpus import CpuCatalog, host_cpu_from_cpuinfo

    facts = host.facts
    cpu = host_cpu_from_cpuinfo(str(facts.get("cpuinfo", "")), CpuCatalog.packaged(),
                                max_khz=facts.get("cpufreq_max_khz"))
    cpu_row = {k: v for k, v in cpu.to_row().items() if k != "sources"}
    spec = host.spec
    # Two namespaces of one machine are two hosts of the pair: the name is part of it.
    ident = json.dumps([spec.kind, spec.name, cpu.name, cpu.cores, facts.get("kernel"),
                        facts.get("machine"), nic.get("interface"), nic.get("driver"),
                        nic.get("firmware")])
    return {
        "host_id": f"{facts.get('hostname', '?')}-{hashlib.sha256(ident.encode()).hexdigest()[:8]}",
        "name": spec.name, "label": spec.label, "kind": spec.kind, "ssh": spec.ssh or None,
        "hostname": facts.get("hostname"), "kernel": facts.get("kernel"),
        "machine": facts.get("machine"), "boot_id": facts.get("boot_id"),
        "python": facts.get("python"), "numa_nodes": facts.get("numa_nodes"),
        "cpu": cpu_row, "nic": nic, "peer_cores": list(spec.peer_cores),
        "irq_cores": list(spec.irq_cores), "perf": facts.get("perf"),
    }
