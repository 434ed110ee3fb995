"""The testbed's two hosts: an inventory (YAML), or the namespace pair on this host.

An inventory names the server (the sender) and the client (the receiver), how to
reach each over SSH, its test interface and address, the cores its peer may run
on and the cores its interrupts are steered to. The namespace mode is the same
shape with no SSH (:meth:`Inventory.namespaces`): a run takes an inventory, and
:mod:`~quiclab.testbed.hostpair` or :mod:`~quiclab.testbed.topology` makes the
hosts exist.

A file looks like this (``docs/how-to/own-servers.md`` walks through it)::

    name: lab-25g                  # the runs' hostpair (default: the file's stem)
    defaults:                      # any host key, for both hosts
      key: ~/.ssh/quiclab_ed25519
    hosts:
      server:
        ssh: root@10.0.0.11        # [user@]host, or an alias of ~/.ssh/config
        interface: enp65s0f0np0
        address: 192.168.50.1      # already on the interface
        peer_cores: [2, 3]
        irq_cores: [0]
      client:
        ssh: root@10.0.0.12
        interface: enp65s0f0np0
        address: 192.168.50.2

Every value is checked when the file is read; a bad one is refused in one line
naming the file, the key path and the value (:class:`~quiclab.errors.SpecError`).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quiclab import yamlio
from quiclab.errors import SpecError

ROLES = ("server", "client")
#: Keys of one host. ``ssh`` is required; the rest have defaults.
HOST_KEYS = ("ssh", "name", "port", "key", "ssh_options", "sudo", "python", "workdir",
             "state_dir", "quiclab_dir", "interface", "address", "peer_cores", "irq_cores",
             "irq_match", "sysctls", "sysctl_via", "connect_timeout_s")
TOP_KEYS = ("name", "description", "defaults", "hosts")
#: A Linux interface name: 1-15 characters, no '/', ':' or whitespace (dev_valid_name).
_IFNAME = re.compile(r"^[^/:\s]{1,15}$")
_SYSCTL = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_\-]+)+$")
_WORD = re.compile(r"^[A-Za-z0-9_.+\-/]+$")


@dataclass(frozen=True)
class HostSpec:
    """One host of the pair. ``kind`` is ``netns`` (a namespace on this host, made per
    run) or ``ssh`` (a machine reached over SSH, whose interface is used as it is)."""

    role: str
    kind: str
    #: What the runs' ``server_host``/``client_host`` say.
    name: str
    interface: str
    address: str
    ssh: str = ""
    port: int = 22
    key: str = ""
    ssh_options: tuple[str, ...] = ()
    #: Run the agent (and so every command on the host) through ``sudo -n``.
    sudo: bool = False
    python: str = "python3"
    #: Where peers and the agent are deployed on the host.
    workdir: str = "/var/tmp/quiclab"
    #: State files (a journal of every change, to restore it): tmpfs, as a reboot
    #: also resets what they record (MTU, offloads, qdiscs, sysctls, IRQ affinity).
    state_dir: str = "/run/quiclab"
    #: A quiclab checkout on the host whose peers were built there (``make testbed``):
    #: used instead of deploying this host's builds (another architecture).
    quiclab_dir: str = ""
    #: Cores the peer may run on; ``pin=true`` takes the first (empty: any core).
    peer_cores: tuple[int, ...] = ()
    #: Cores the interface's interrupts are steered to for every run (empty: left
    #: as they are unless a run sets ``irq_core``).
    irq_cores: tuple[int, ...] = ()
    #: Regular expression on /proc/interrupts names selecting the interface's IRQs
    #: (default: the device's MSI IRQs, else names containing the interface).
    irq_match: str = ""
    #: Sysctls set for every run and restored after ({name: value}).
    sysctls: tuple[tuple[str, str], ...] = ()
    #: Command prefix that writes sysctls the host's own network namespace cannot
    #: (net.core.* belong to the initial namespace): for hosts that are namespaces
    #: of one machine, ``[nsenter, --net=/proc/1/ns/net]``.
    sysctl_via: tuple[str, ...] = ()
    connect_timeout_s: float = 10.0

    @property
    def label(self) -> str:
        """``ssh:<name>`` or ``netns:<role>``, as the catalog's host columns have it."""
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class Inventory:
    """The server and client hosts of a testbed, and where the description came from."""

    name: str
    server: HostSpec
    client: HostSpec
    source: str = ""
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def kind(self) -> str:
        return self.server.kind

    @property
    def ssh(self) -> bool:
        return self.kind == "ssh"

    def host(self, role: str) -> HostSpec:
        return self.server if role == "server" else self.client

    @property
    def hostpair(self) -> str:
        """The runs' ``hostpair``: ``veth`` for the namespace pair (as before), else
        ``<server>-<client>`` as the published QIR runs name theirs."""
        return "veth" if not self.ssh else f"{self.server.name}-{self.client.name}"

    @classmethod
    def namespaces(cls, cores: int = 2) -> Inventory:
        """The default: two namespaces on this host, server on core 0, client on core 1
        when pinned (the addresses are those of :class:`~quiclab.testbed.topology.Topology`)."""
        return cls("netns", HostSpec("server", "netns", "server", "eth0", "198.18.0.1",
                                     peer_cores=(0,)),
                   HostSpec("client", "netns", "client", "eth0", "198.18.0.2",
                            peer_cores=(min(1, max(cores - 1, 0)),)),
                   source="namespaces")

    @classmethod
    def load(cls, path: Path) -> Inventory:
        """Read and check an inventory file; raises SpecError (one line)."""
        where = str(path)
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise SpecError(f"{where}: cannot read ({err.strerror or err})") from None
        except UnicodeDecodeError:
            raise SpecError(f"{where}: not UTF-8 text") from None
        try:
            raw = yamlio.load(text)
        except yaml.YAMLError as err:
            raise SpecError(f"{where}: not valid YAML: {yamlio.where(err)}") from None
        return cls.from_dict(raw, where, default_name=Path(path).stem)

    @classmethod
    def from_dict(cls, raw: Any, where: str = "inventory",
                  default_name: str = "inventory") -> Inventory:
        if not isinstance(raw, dict):
            raise SpecError(f"{where}: not a mapping (allowed keys: {', '.join(TOP_KEYS)})")
        for key in raw:
            if key not in TOP_KEYS:
                raise _fail(where, str(key), raw[key],
                            f"unknown key: allowed {', '.join(TOP_KEYS)}")
        name = raw.get("name", default_name)
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9_.\-]{1,64}$", name):
            raise _fail(where, "name", name, "allowed 1-64 characters of A-Z a-z 0-9 _ . -")
        defaults = raw.get("defaults") or {}
        if not isinstance(defaults, dict):
            raise _fail(where, "defaults", defaults, "allowed a mapping of host keys")
        for key in defaults:
            if key not in HOST_KEYS or key in ("ssh", "name", "address"):
                raise _fail(where, f"defaults.{key}", defaults[key],
                            "unknown key: allowed " + ", ".join(
                                k for k in HOST_KEYS if k not in ("ssh", "name", "address")))
        hosts = raw.get("hosts")
        if not isinstance(hosts, dict):
            raise _fail(where, "hosts", hosts, "allowed a mapping with server: and client:")
        for role in hosts:
            if role not in ROLES:
                raise _fail(where, f"hosts.{role}", hosts[role],
                            "unknown role: allowed server, client")
        specs = {}
        for role in ROLES:
            if role not in hosts:
                raise _fail(where, f"hosts.{role}", None, "missing: an inventory names both "
                            "the server (sender) and the client (receiver)")
            entry = hosts[role]
            if not isinstance(entry, dict):
                raise _fail(where, f"hosts.{role}", entry, "allowed a mapping of host keys")
            specs[role] = _host(where, role, {**defaults, **entry})
        server, client = specs["server"], specs["client"]
        if server.address == client.address:
            raise _fail(where, "hosts.client.address", client.address,
                        "the same address as the server's: allowed two addresses of one link")
        description = raw.get("description", "")
        if not isinstance(description, str):
            raise _fail(where, "description", description, "allowed text")
        return cls(name, server, client, source=where, description=description)


def _fail(where: str, path: str, value: Any, reason: str) -> SpecError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return SpecError(f"{where}: {path}={shown}: {reason}")


def _cores(where: str, path: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, list)
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 4096
                       for c in value) or len(set(value)) != len(value)):
        raise _fail(where, path, value, "allowed a list of distinct core numbers 0 … 4095")
    return tuple(value)


def _text(where: str, path: str, value: Any, pattern: re.Pattern[str] | None = None,
          allowed: str = "text") -> str:
    if not isinstance(value, str) or not value.strip() or (pattern and not pattern.match(value)):
        raise _fail(where, path, value, f"allowed {allowed}")
    return value.strip()


def _absolute(where: str, path: str, value: Any) -> str:
    text = _text(where, path, value, allowed="an absolute path")
    if not text.startswith("/") or "\n" in text:
        raise _fail(where, path, value, "allowed an absolute path")
    return text.rstrip("/") or "/"


def _host(where: str, role: str, entry: dict[str, Any]) -> HostSpec:
    p = f"hosts.{role}"
    for key in entry:
        if key not in HOST_KEYS:
            raise _fail(where, f"{p}.{key}", entry[key],
                        f"unknown key: allowed {', '.join(HOST_KEYS)}")
    ssh = _text(where, f"{p}.ssh", entry.get("ssh"),
                re.compile(r"^([A-Za-z0-9_.\-]+@)?[A-Za-z0-9_.\-:\[\]%]+$"),
                "an SSH target, [user@]host (missing: every host is reached over SSH)")
    target_host = ssh.rsplit("@", 1)[-1]
    name = entry.get("name", target_host)
    name = _text(where, f"{p}.name", name, re.compile(r"^[A-Za-z0-9_.\-:\[\]%]{1,64}$"),
                 "1-64 characters of A-Z a-z 0-9 _ . - : [ ] %")
    port = entry.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise _fail(where, f"{p}.port", port, "allowed a whole number 1 … 65535")
    key = entry.get("key", "")
    if key:
        key = _text(where, f"{p}.key", key, allowed="a path to a private key")
        key = str(Path(key).expanduser())
    options = entry.get("ssh_options") or []
    if not isinstance(options, list) or not all(
            isinstance(o, str) and re.match(r"^[A-Za-z]+=\S.*$", o) for o in options):
        raise _fail(where, f"{p}.ssh_options", options,
                    "allowed a list of Option=value (each passed as ssh -o)")
    sudo = entry.get("sudo", False)
    if not isinstance(sudo, bool):
        raise _fail(where, f"{p}.sudo", sudo, "allowed true or false")
    python = _text(where, f"{p}.python", entry.get("python", "python3"), _WORD,
                   "a command or path (the host's Python ≥ 3.9)")
    workdir = _absolute(where, f"{p}.workdir", entry.get("workdir", "/var/tmp/quiclab"))
    if workdir == "/":
        raise _fail(where, f"{p}.workdir", workdir, "allowed a directory of its own, not /")
    state_dir = _absolute(where, f"{p}.state_dir", entry.get("state_dir", "/run/quiclab"))
    quiclab_dir = entry.get("quiclab_dir", "")
    if quiclab_dir:
        quiclab_dir = _absolute(where, f"{p}.quiclab_dir", quiclab_dir)
    interface = _text(where, f"{p}.interface", entry.get("interface"), _IFNAME,
                      "a network interface name (1-15 characters, no '/', ':' or space)")
    address = entry.get("address")
    try:
        parsed = ipaddress.IPv4Address(str(address).split("/")[0]) if isinstance(
            address, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.is_unspecified or parsed.is_multicast:
        raise _fail(where, f"{p}.address", address,
                    "allowed the interface's IPv4 address on the test link (e.g. 192.168.50.1)")
    peer_cores = _cores(where, f"{p}.peer_cores", entry.get("peer_cores"))
    irq_cores = _cores(where, f"{p}.irq_cores", entry.get("irq_cores"))
    irq_match = entry.get("irq_match", "")
    if irq_match:
        irq_match = _text(where, f"{p}.irq_match", irq_match, allowed="a regular expression")
        try:
            re.compile(irq_match)
        except re.error as err:
            raise _fail(where, f"{p}.irq_match", irq_match,
                        f"not a regular expression ({err})") from None
    raw_sysctls = entry.get("sysctls") or {}
    if not isinstance(raw_sysctls, dict):
        raise _fail(where, f"{p}.sysctls", raw_sysctls, "allowed a mapping name: value")
    sysctls = []
    for sname, value in raw_sysctls.items():
        if not isinstance(sname, str) or not _SYSCTL.match(sname):
            raise _fail(where, f"{p}.sysctls", sname, "allowed sysctl names like net.core.rmem_max")
        if isinstance(value, bool) or not isinstance(value, int | float | str) or (
                isinstance(value, str) and not re.match(r"^[\w .:\-/]{1,200}$", value)):
            raise _fail(where, f"{p}.sysctls.{sname}", value,
                        "allowed a number or a short value (letters, digits, spaces)")
        sysctls.append((sname, str(value)))
    via = entry.get("sysctl_via") or []
    if not isinstance(via, list) or not all(isinstance(v, str) and v.strip() for v in via):
        raise _fail(where, f"{p}.sysctl_via", via, "allowed a command prefix as a list of words")
    timeout = entry.get("connect_timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 1 <= timeout <= 600:
        raise _fail(where, f"{p}.connect_timeout_s", timeout, "allowed 1 … 600 seconds")
    return HostSpec(role, "ssh", name, interface, str(parsed), ssh=ssh, port=int(port), key=key,
                    ssh_options=tuple(options), sudo=sudo, python=python, workdir=workdir,
                    state_dir=state_dir, quiclab_dir=quiclab_dir, peer_cores=peer_cores,
                    irq_cores=irq_cores, irq_match=irq_match, sysctls=tuple(sysctls),
                    sysctl_via=tuple(via), connect_timeout_s=float(timeout))
