"""Two hosts of an inventory, reached over SSH, as the topology of one run.

What :class:`~quiclab.testbed.topology.Topology` is for the namespace pair,
:class:`HostPair` is for two machines: it deploys the agent and the run's peers
(:class:`~quiclab.testbed.remote.Deployer`), starts an agent on each host, checks
the test interface and its address, and sets the run's knobs with the same
:func:`~quiclab.testbed.topology.apply_knobs`, plus the socket-buffer sysctls and
the inventory's own. Every change is journalled on its host before it is made;
:meth:`HostPair.down` undoes them. When the controller dies, is interrupted or
loses a connection, the agent on that host undoes them itself, and a journal
whose agent died too is undone by the next agent there (``agent.py``). ``down``
checks that: for a host whose agent was lost it starts a new one, which takes the
host's lock once the old one has finished and restores whatever is left.

Delay: ``netem`` on both hosts' egress (half the RTT each) where the kernel has
it; otherwise, and always for reordering, the project's delay relay runs on the
client host (the client sends to it over loopback; README "Delay").

Peers: the binaries built here are copied to ``<workdir>/build`` and
``<workdir>/peers`` (only what the host lacks), provided the host has this
machine's architecture; otherwise ``quiclab_dir`` names a checkout built on the
host. Python peers (aioquic, qh3) get a virtual environment made by the host's
own ``python3`` (``--without-pip``) with their pinned packages installed here
for the host's Python and architecture (``pip install --target --only-binary``).
The HTTP/3 wrappers (ngtcp2, tquic) run under the host's ``python3``; ngtcp2
needs Debian's ``ngtcp2-server``/``ngtcp2-client`` there.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from quiclab.testbed.build import Builder
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.hosts import AGENT_FILES, PACKAGE_DIR, AgentClient, Host, HostLost
from quiclab.testbed.inventory import HostSpec, Inventory
from quiclab.testbed.link import LinkConfig, NoNetem, apply_knobs
from quiclab.testbed.nic import Interface, set_sysctl
from quiclab.testbed.remote import Deployer, elf_machine, fetch_dir, ssh_agent_argv
from quiclab.testbed.stacks import Stack
from quiclab.testbed.topology import ALLOWED_CC, PORT

#: The interpreter of quiclab's Python peers, as stacks.py writes it.
PYENV_PYTHON = "{build}/pyenv/bin/python"


def _local_files(local: Path) -> list[Path]:
    if local.is_dir():
        return sorted(p for p in local.rglob("*") if p.is_file())
    return [local] if local.is_file() else []


def stack_files(stack: Stack, build_dir: Path, peers_dir: Path) -> list[Path]:
    """Local files a host needs to run ``stack``'s peer: every ``{build}``/``{peers}``
    path of its command (a directory whole), its declared outputs and the shared
    libraries beside its executable (MsQuic's ``libmsquic.so``). The Python
    interpreter of the build's venv is not among them (it is made on the host)."""
    files: list[Path] = []
    for part in stack.command:
        if part == PYENV_PYTHON:
            continue
        for piece in re.findall(r"\{(?:build|peers)\}[^\s=]*", part):
            files += _local_files(Path(piece.format(build=build_dir, peers=peers_dir)))
    for rel in stack.extra.get("outputs", ()):
        files += _local_files(build_dir / rel)
    if stack.extra.get("copy_libs"):
        exe = Path(stack.argv(build_dir, peers_dir)[0])
        files += sorted(exe.parent.glob("lib*.so*"))
    return list(dict.fromkeys(files))


def host_python_tag(facts: dict[str, Any]) -> str:
    version = str(facts.get("python", "3"))
    return "cp" + "".join(version.split(".")[:2]) + "-" + str(facts.get("machine", "x86_64"))


class HostPair:
    """The server and client hosts of an inventory for one run (a context manager)."""

    def __init__(self, link: LinkConfig, inventory: Inventory, builder: Builder,
                 deployer: Deployer, stacks: dict[str, Stack], run_id: str, log_dir: Path,
                 controller: dict[str, Any] | None = None, lock_wait_s: float = 120.0):
        self.link = link
        self.inventory = inventory
        self.builder = builder
        self.deployer = deployer
        self.stacks = stacks
        self.run_id = run_id
        self.log_dir = log_dir
        self.controller = {"pid": os.getpid(), "run_id": run_id, **(controller or {})}
        self.lock_wait_s = lock_wait_s
        self.hosts: dict[str, Host] = {}
        self.applied: dict[str, Any] = {}
        self.restore_failed: dict[str, list[str]] = {}
        #: Whether the delay goes through the relay (no netem, or reordering).
        self.relayed = link.reorder_pct > 0
        self.netem = False
        self._pyenv: dict[str, str] = {}

    # -- paths on a host ---------------------------------------------------------------
    def _spec(self, role: str) -> HostSpec:
        return self.inventory.host("client" if role == "relay" else role)

    def dirs(self, role: str) -> tuple[PurePosixPath, PurePosixPath]:
        """(build dir, peers dir) on the host."""
        spec = self._spec(role)
        if spec.quiclab_dir:
            base = PurePosixPath(spec.quiclab_dir) / "testbed"
            return base / ".build", base / "peers"
        work = PurePosixPath(spec.workdir)
        return work / "build", work / "peers"

    def place(self, role: str, local: Path) -> str:
        """Where the host sees a local file: under its build or peers directory (or its
        work directory's certs), else the same path (a tool the host must have)."""
        build, peers = self.dirs(role)
        local = Path(local)
        for base, there in ((self.builder.build_dir, build), (self.builder.peers_dir, peers)):
            with contextlib.suppress(ValueError):
                rel = local.relative_to(base)
                if rel.parts and rel.parts[0] in ("certs", "bpf"):
                    return str(PurePosixPath(self._spec(role).workdir) / rel)
                return str(there / rel)
        return str(local)

    def _rel(self, role: str, local: Path) -> str | None:
        """A local file's path relative to the host's work directory (None: not deployed)."""
        spec = self._spec(role)
        for base, prefix in ((self.builder.build_dir, "build"), (self.builder.peers_dir, "peers")):
            with contextlib.suppress(ValueError):
                rel = Path(local).relative_to(base)
                if rel.parts and rel.parts[0] in ("certs", "bpf"):
                    return str(rel)
                if spec.quiclab_dir:
                    return None  # built there
                return f"{prefix}/{rel}"
        return None

    def logdir(self, role: str) -> str:
        return str(PurePosixPath(self._spec(role).workdir) / "runs" / self.run_id)

    def peer_argv(self, role: str, stack: Stack) -> list[str]:
        build, peers = self.dirs(role)
        argv = stack.argv(Path(str(build)), Path(str(peers)))
        if stack.command and stack.command[0] == PYENV_PYTHON:
            argv[0] = self._pyenv.get(role) or self._spec(role).python
        return argv

    def peer_env(self, role: str, stack: Stack) -> dict[str, str]:
        build, peers = self.dirs(role)
        return {k: v.format(build=build, peers=peers) for k, v in stack.env}

    @property
    def server_listen(self) -> str:
        return f"{self.inventory.server.address}:{PORT}"

    @property
    def client_target(self) -> str:
        """The server, or the relay on the client host in front of it."""
        return f"127.0.0.1:{PORT}" if self.relayed else self.server_listen

    def interface(self, role: str) -> Interface:
        spec = self._spec(role)
        return Interface(self.hosts[role], spec.interface, role)

    # -- life cycle ----------------------------------------------------------------------
    def __enter__(self) -> HostPair:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _connect(self, role: str, clean: bool = True) -> Host:
        spec = self.inventory.host(role)
        self.deployer.deploy(spec, {f"agent/{name}": PACKAGE_DIR / name for name in AGENT_FILES})
        agent = AgentClient(ssh_agent_argv(spec), f"{role} host {spec.ssh}",
                            self.log_dir / f"agent-{role}.log").start()
        host = Host(spec, agent, remote=True)
        facts = host.hello(self.controller, self.lock_wait_s)
        if not facts.get("euid") == 0:
            raise TestbedError(f"{host.where}: the agent runs as uid {facts.get('euid')}: "
                               "it needs root (log in as root, or set sudo: true)")
        missing = [t for t, needed in (("ip", 1), ("tc", 1), ("ethtool", 1), ("taskset", 1),
                                       ("setpriv", 1)) if not facts.get("tools", {}).get(t)]
        if missing:
            raise TestbedError(f"{host.where}: missing {', '.join(missing)} (Debian: "
                               "iproute2, ethtool, util-linux)")
        return host

    def up(self) -> None:
        try:
            for role in ("server", "client"):
                self.hosts[role] = self._connect(role)
                # Logs of runs cut short on this host (this agent holds its lock: no run
                # of another controller is writing there).
                self.hosts[role].run(["rm", "-rf", str(PurePosixPath(self.logdir(role)).parent)])
            self._deploy()
            for role in ("server", "client"):
                iface = self.interface(role)
                if not iface.exists():
                    raise TestbedError(f"{self.hosts[role].where}: no interface "
                                       f"{iface.dev!r} (inventory hosts.{role}.interface)")
                spec = self.inventory.host(role)
                if spec.address not in iface.addresses():
                    raise TestbedError(f"{self.hosts[role].where}: {spec.address} is not on "
                                       f"{iface.dev} (inventory hosts.{role}.address)")
            self._apply()
        except BaseException:
            self.down()
            raise

    def _deploy(self) -> None:
        """Copy each host's peers (its architecture checked), the certificate, and the
        relay and loss object when the run needs them."""
        cert, key = self.builder.certs()
        for role in ("server", "client"):
            host, spec = self.hosts[role], self.inventory.host(role)
            stack = self.stacks[role]
            local = [cert, key]
            if not spec.quiclab_dir:
                local += stack_files(stack, self.builder.build_dir, self.builder.peers_dir)
            if role == "client" and (self.link.rtt_ms > 0 or self.link.reorder_pct > 0):
                local.append(self.builder.relay())
            if role == "client" and self.link.loss_pct > 0:
                local.append(self.builder.loss_object(self.link.loss_pct, self.link.transport))
            machine = str(host.facts.get("machine"))
            self.deployer.refresh(spec, host.read(str(PurePosixPath(spec.workdir) /
                                                      ".manifest.json")))
            files: dict[str, Path] = {}
            for path in local:
                built_for = elf_machine(path)
                if built_for not in (None, "bpf", machine):  # eBPF objects run anywhere
                    raise TestbedError(
                        f"{host.where}: {path.name} is built for {built_for}, the host is "
                        f"{machine}: build the peers there (`make testbed` in a quiclab "
                        f"checkout) and set hosts.{role}.quiclab_dir")
                rel = self._rel(role, path)
                if rel is not None:
                    files[rel] = path
            self.deployer.deploy(spec, files)
            if stack.build == "debian":
                missing = [p for p in stack.apt
                           if host.run(["dpkg-query", "-W", "-f=${Status}", p]).stdout.find(
                               "install ok installed") < 0]
                if missing:
                    raise TestbedError(f"{host.where}: {stack.name} needs the Debian packages "
                                       f"{', '.join(missing)} there (apt-get install "
                                       f"{' '.join(missing)})")
            if stack.command and stack.command[0] == PYENV_PYTHON and stack.extra.get("pip"):
                self._pyenv[role] = self._python_env(role, stack)

    def _python_env(self, role: str, stack: Stack) -> str:
        """A venv on the host (its own python3, no pip) with the stack's pinned packages,
        installed here for the host's Python and architecture; returns its python."""
        host, spec = self.hosts[role], self.inventory.host(role)
        pins = sorted(stack.extra.get("pip", ()))
        tag = host_python_tag(host.facts)
        version = ".".join(str(host.facts.get("python", "3")).split(".")[:2])
        machine = str(host.facts.get("machine"))
        digest = hashlib.sha256(" ".join(pins).encode()).hexdigest()[:12]
        target = self.builder.build_dir / "hostpy" / f"{tag}-{digest}"
        if not (target / ".complete").exists():
            pip = self.builder.build_dir / "pyenv" / "bin" / "pip"
            argv = [str(pip) if pip.exists() else sys.executable, *([] if pip.exists() else
                    ["-m", "pip"]), "install", "-q", "--target", str(target),
                    "--only-binary=:all:", "--python-version", version, "--implementation",
                    "cp", *[a for p in (f"manylinux2014_{machine}", f"manylinux_2_17_{machine}",
                                        f"manylinux_2_28_{machine}", f"linux_{machine}")
                            for a in ("--platform", p)], *pins]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()
                raise TestbedError(f"{host.where}: {stack.name}'s packages for Python {version} "
                                   f"on {machine}: pip failed: {tail[-1] if tail else ''}")
            (target / ".complete").write_text(" ".join(pins))
        venv = PurePosixPath(spec.workdir) / "pyenv" / tag
        python = venv / "bin" / "python"
        if host.read(str(python.parent / "activate")) is None:
            host.check([spec.python, "-m", "venv", "--without-pip", str(venv)],
                       f"{spec.python} -m venv --without-pip {venv}")
        site = f"pyenv/{tag}/lib/python{version}/site-packages"
        self.deployer.deploy(spec, {f"{site}/{p.relative_to(target)}": p
                                    for p in sorted(target.rglob("*"))
                                    if p.is_file() and p.name != ".complete"})
        return str(python)

    def _apply(self) -> None:
        link = self.link
        server, client = self.interface("server"), self.interface("client")
        delay_us = link.rtt_ms / 2 * 1e3
        loss = (self.place("client", self.builder.loss_object(link.loss_pct, link.transport))
                if link.loss_pct else None)
        roles = ("server", "client")
        irq_cores = {r: self.inventory.host(r).irq_cores for r in roles}
        irq_match = {r: self.inventory.host(r).irq_match for r in roles}
        self.netem = link.rtt_ms > 0 and not self.relayed
        try:
            self.applied.update(apply_knobs(server, client, link, loss, irq_cores, irq_match,
                                            netem_delay_us=delay_us if self.netem else 0.0))
        except NoNetem:
            # No netem on the client host: the relay there holds the datagrams instead.
            self.netem, self.relayed = False, True
            self.applied.update(apply_knobs(server, client, link, loss, irq_cores, irq_match))
        if self.relayed:
            self.hosts["relay"] = self.hosts["client"]
            self.applied["relay"] = {"where": "client host, the client sends to it over "
                                     "loopback", "why": "reordering" if link.reorder_pct > 0
                                     else "no netem in the client host's kernel"}
        sysctls: dict[str, Any] = {}
        for role in ("server", "client"):
            host, spec = self.hosts[role], self.inventory.host(role)
            now: dict[str, str] = {}
            for name, value in spec.sysctls:
                now[name] = set_sysctl(host, name, value, f"hosts.{role}.sysctls.{name}",
                                       spec.sysctl_via)
            for name, size in link.buffer_sysctls().items():
                knob = "rcvbuf_bytes" if "rmem" in name else "sndbuf_bytes"
                now[name] = set_sysctl(host, name, size, f"{knob}={size}", spec.sysctl_via)
            for name, text in link.tcp_sysctls().items():
                knob = "tcp_rmem_bytes" if "rmem" in name else "tcp_wmem_bytes"
                now[name] = set_sysctl(host, name, text, f"{knob}={text.split()[-1]}")
            if link.tcp_cc:
                # The peers run without CAP_NET_ADMIN: they may pick only an allowed
                # controller (TCP_CONGESTION), so a missing one is allowed for the run.
                allowed = (host.read("/proc/sys/" + ALLOWED_CC.replace(".", "/")) or "").split()
                if link.tcp_cc not in allowed:
                    now[ALLOWED_CC] = set_sysctl(host, ALLOWED_CC,
                                                 " ".join([*allowed, link.tcp_cc]),
                                                 f"cc={link.tcp_cc}", spec.sysctl_via)
            sysctls[role] = now
        self.applied["sysctl"] = sysctls

    def down(self) -> None:
        """Undo every change on both hosts and stop their agents. A host whose agent was
        lost gets a new agent, which restores whatever the old one left (its journal)."""
        for role in ("server", "client"):
            host = self.hosts.get(role)
            if host is None:
                continue
            failed: list[str] = []
            try:
                if not host.agent.usable:
                    # Interrupted mid-operation or lost: it undoes its journal as it exits;
                    # a new agent checks that (and undoes what is left).
                    host.agent.abandon()
                    raise HostLost(host.agent.lost or "interrupted")
                failed = host.restore()
                host.agent.close()
            except HostLost:
                failed = self._restore_lost(role)
            except TestbedError as err:
                failed = [str(err)]
                host.agent.close()
            if failed:
                self.restore_failed[role] = failed
        self.hosts.clear()

    def _restore_lost(self, role: str) -> list[str]:
        """A fresh agent on a host whose agent was lost: its hello undoes the old
        journal once the old agent is gone."""
        try:
            host = self._connect(role)
        except TestbedError as err:
            return [f"could not reconnect to restore ({err}); the host's agent restores by "
                    "itself, else `quiclab testbed clean --hosts` does"]
        restored = host.facts.get("restored") or []
        failed = [f for r in restored for f in r.get("failed", [])]
        host.agent.close()
        return failed

    # -- after the run ---------------------------------------------------------------------
    def fetch_logs(self, local: Path) -> None:
        """The peers' output, perf counts and qlog, copied back into the run's log dir."""
        for role in ("server", "client"):
            fetch_dir(self.inventory.host(role), self.logdir(role), local)
            host = self.hosts.get(role)
            if host is not None:  # the host keeps nothing of the run
                host.run(["rm", "-rf", self.logdir(role)])


def clean_hosts(inventory: Inventory, builder: Builder, log_dir: Path,
                lock_wait_s: float = 10.0) -> dict[str, list[dict[str, Any]]]:
    """``testbed clean --hosts``: an agent on each host undoes the journals of agents
    that are gone (a killed controller's, an agent killed with SIGKILL); returns what
    each host's agent restored."""
    pair = HostPair(LinkConfig(), inventory, builder, Deployer(), {}, "clean", log_dir,
                    lock_wait_s=lock_wait_s)
    out = {}
    for role in ("server", "client"):
        host = pair._connect(role)
        out[role] = list(host.facts.get("restored") or [])
        host.agent.close()
    return out


def probe_hosts(inventory: Inventory, builder: Builder, log_dir: Path,
                lock_wait_s: float = 10.0) -> dict[str, dict[str, Any]]:
    """``testbed hosts``: each host's record (:func:`~quiclab.testbed.hosts.host_record`)
    and whether its test address is on its interface; nothing is changed."""
    from quiclab.testbed.hosts import host_record

    pair = HostPair(LinkConfig(), inventory, builder, Deployer(), {}, "hosts", log_dir,
                    lock_wait_s=lock_wait_s)
    out = {}
    try:
        for role in ("server", "client"):
            pair.hosts[role] = pair._connect(role)
            iface = pair.interface(role)
            if not iface.exists():
                raise TestbedError(f"{pair.hosts[role].where}: no interface {iface.dev!r} "
                                   f"(inventory hosts.{role}.interface)")
            record = host_record(pair.hosts[role], iface.info())
            record["address_present"] = inventory.host(role).address in iface.addresses()
            record["restored"] = pair.hosts[role].facts.get("restored")
            out[role] = record
    finally:
        for host in pair.hosts.values():
            host.agent.close()
    return out
