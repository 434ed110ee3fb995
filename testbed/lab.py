"""Two SSH hosts on this machine: network namespaces, each with a real OpenSSH server.

The SSH mode's whole path (deployment, agents, knobs on an interface that outlives
the run, restore after a dropped connection) needs two hosts that quiclab reaches
over SSH. :class:`SshLab` makes them here: two namespaces ``qlhost-<i>-server`` and
``qlhost-<i>-client``, each running Debian's ``sshd`` on a management link to the
root namespace (198.19.<64+2i>.0/30 and 198.19.<65+2i>.0/30, RFC 2544 space), and
joined by the test link (veth ``test0``, 198.19.<i>.1 and .2). It writes a key pair,
the sshd configurations and an inventory (``<dir>/inventory.yaml``) that the
testbed takes as it would a pair of servers. ``quiclab testbed lab up|down``.

The hosts share this machine's kernel: its global sysctls (``net.core.*``) are
written from the root namespace by the server host (``sysctl_via: [nsenter,
--net=/run/netns/qlhost-<i>-root]``, the root namespace named with ``ip netns
attach``); the client host then finds them set. The peers are
pinned as in the namespace mode (the server's to core 0, the client's to core 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from quiclab.testbed.errors import TestbedError

PREFIX = "qlhost-"
#: Where each host's sshd listens (root side .1, host side .2 of a /30).
MGMT_BASE = 64


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        raise TestbedError(f"`{' '.join(argv)}` failed: {first[0] if first else proc.returncode}")
    return proc


def sshd_binary() -> Path:
    """Debian's sshd, installed (``apt-get install openssh-server``) when missing and root."""
    path = Path(shutil.which("sshd") or "/usr/sbin/sshd")
    if path.exists():
        return path
    if os.geteuid() != 0:
        raise TestbedError("the SSH lab needs sshd (Debian: apt-get install openssh-server)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
    proc = subprocess.run(["apt-get", "install", "-y", "-q", "openssh-server"],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0 or not path.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        raise TestbedError("apt-get install openssh-server failed: "
                           f"{tail[-1] if tail else proc.returncode}")
    return path


def _root_addresses() -> set[str]:
    out = _run(["ip", "-j", "-4", "addr", "show"], check=False).stdout
    try:
        return {a.get("local", "") for e in json.loads(out) for a in e.get("addr_info", [])}
    except ValueError:
        return set()


def _namespaces() -> list[str]:
    return [ln.split()[0] for ln in _run(["ip", "netns", "list"], check=False).stdout.splitlines()
            if ln.strip()]


class SshLab:
    """Two namespaced SSH hosts and their inventory, under ``directory``."""

    def __init__(self, directory: Path, irq_match: str = "", irq_cores: tuple[int, ...] = ()):
        self.dir = Path(directory).resolve()
        self.state_path = self.dir / "lab.json"
        self.irq_match = irq_match
        self.irq_cores = irq_cores
        self.index = -1

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yaml"

    def names(self, index: int) -> dict[str, dict[str, str]]:
        out = {}
        for k, role in enumerate(("server", "client")):
            octet = MGMT_BASE + 2 * index + k
            out[role] = {"ns": f"{PREFIX}{index}-{role}", "root_dev": f"qlm{index}{role[0]}",
                         "root_ip": f"198.19.{octet}.1", "host_ip": f"198.19.{octet}.2",
                         "test_ip": f"198.19.{index}.{k + 1}"}
        return out

    @staticmethod
    def root_ns(index: int) -> str:
        return f"{PREFIX}{index}-root"

    def _free_index(self) -> int:
        used = _root_addresses()
        present = set(_namespaces())
        for index in range(0, 48):
            names = self.names(index)
            if self.root_ns(index) not in present and not any(
                    n["root_ip"] in used or n["ns"] in present for n in names.values()):
                return index
        raise TestbedError("no free SSH lab slot (48 labs up?): `quiclab testbed lab down`")

    def __enter__(self) -> SshLab:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Path:
        """Make both hosts and start their sshd; returns the inventory's path."""
        if os.geteuid() != 0:
            raise TestbedError("the SSH lab needs root (network namespaces)")
        sshd = sshd_binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.state_path.exists():
            self.down()
        self.index = self._free_index()
        names = self.names(self.index)
        state: dict[str, Any] = {"index": self.index, "owner": os.getpid(), "hosts": names,
                                 "pids": {}}
        self.state_path.write_text(json.dumps(state))  # before anything exists: down() finds it
        try:
            key = self.dir / "id_ed25519"
            if not key.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "quiclab-lab",
                      "-f", str(key)])
            (self.dir / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())
            (self.dir / "known_hosts").unlink(missing_ok=True)
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
            for n in names.values():
                ns = n["ns"]
                _run(["ip", "netns", "add", ns])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
                _run(["ip", "link", "add", n["root_dev"], "type", "veth", "peer", "name", "mgmt0",
                      "netns", ns])
                _run(["ip", "addr", "add", f"{n['root_ip']}/30", "dev", n["root_dev"]])
                _run(["ip", "link", "set", n["root_dev"], "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{n['host_ip']}/30", "dev", "mgmt0"])
                _run(["ip", "-n", ns, "link", "set", "mgmt0", "up"])
            # The root namespace, named, for the server host's global sysctls.
            _run(["ip", "netns", "attach", self.root_ns(self.index), str(os.getpid())])
            srv, cli = names["server"]["ns"], names["client"]["ns"]
            _run(["ip", "-n", srv, "link", "add", "test0", "type", "veth", "peer", "name",
                  "test0", "netns", cli])
            for n in names.values():
                _run(["ip", "-n", n["ns"], "addr", "add", f"{n['test_ip']}/24", "dev", "test0"])
                _run(["ip", "-n", n["ns"], "link", "set", "test0", "up"])
            for role, n in names.items():
                state["pids"][role] = self._sshd(sshd, role, n)
                self.state_path.write_text(json.dumps(state))
            self._inventory(names)
            for role in names:
                self._wait_ssh(role)
        except BaseException:
            self.down()
            raise
        return self.inventory_path

    def _sshd(self, sshd: Path, role: str, n: dict[str, str]) -> int:
        home = self.dir / role
        home.mkdir(exist_ok=True)
        hostkey = home / "ssh_host_ed25519_key"
        if not hostkey.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)])
        config = home / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {n['host_ip']}", "Port 22", f"HostKey {hostkey}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            f"PidFile {home / 'sshd.pid'}", "LogLevel ERROR", "MaxStartups 64",
            "MaxSessions 64",
            # A silent client ends its session within 15 s, as a real host should be set.
            "ClientAliveInterval 5", "ClientAliveCountMax 3", ""]))
        (home / "sshd.pid").unlink(missing_ok=True)
        _run(["ip", "netns", "exec", n["ns"], str(sshd), "-f", str(config),
              "-E", str(home / "sshd.log")])
        for _ in range(100):
            with contextlib.suppress(OSError, ValueError):
                return int((home / "sshd.pid").read_text())
            time.sleep(0.05)
        raise TestbedError(f"sshd for the lab's {role} host did not start: "
                           f"{(home / 'sshd.log').read_text(errors='replace')[-200:]}")

    def _inventory(self, names: dict[str, dict[str, str]]) -> None:
        hosts = {}
        for k, (role, n) in enumerate(names.items()):
            entry: dict[str, Any] = {
                "ssh": f"root@{n['host_ip']}", "name": f"lab{self.index}-{role}",
                "interface": "test0", "address": n["test_ip"],
                "workdir": f"/var/tmp/quiclab-lab{self.index}-{role}",
                "state_dir": f"/run/quiclab-lab{self.index}-{role}",
                "peer_cores": [min(k, (os.cpu_count() or 1) - 1)]}
            if role == "server":
                entry["sysctl_via"] = ["nsenter",
                                       f"--net=/run/netns/{self.root_ns(self.index)}"]
                if self.irq_match:
                    entry["irq_match"] = self.irq_match
                    entry["irq_cores"] = list(self.irq_cores)
            hosts[role] = entry
        inventory = {
            "name": f"ssh-lab{self.index}",
            "description": "two network namespaces of this machine, each with its own "
                           "sshd, joined by a veth test link (quiclab testbed lab)",
            "defaults": {"key": str(self.dir / "id_ed25519"), "ssh_options": [
                f"UserKnownHostsFile={self.dir / 'known_hosts'}",
                "StrictHostKeyChecking=accept-new"]},
            "hosts": hosts}
        self.inventory_path.write_text(yaml.safe_dump(inventory, sort_keys=False))

    def _wait_ssh(self, role: str) -> None:
        from quiclab.testbed.inventory import Inventory
        from quiclab.testbed.remote import ssh_run

        spec = Inventory.load(self.inventory_path).host(role)
        last = ""
        for _ in range(50):
            done = ssh_run(spec, ["true"], timeout_s=20)
            if done.rc == 0:
                return
            last = done.first_line
            time.sleep(0.2)
        raise TestbedError(f"the lab's {role} host does not answer over SSH: {last}")

    def down(self) -> None:
        """Stop the sshd processes, remove the namespaces and the root-side links."""
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return
        for pid in (state.get("pids") or {}).values():
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGTERM)
        present = set(_namespaces())
        for n in (state.get("hosts") or {}).values():
            if n["ns"] in present:
                for pid in _run(["ip", "netns", "pids", n["ns"]], check=False).stdout.split():
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                for _ in range(50):
                    if _run(["ip", "netns", "del", n["ns"]], check=False).returncode == 0:
                        break
                    time.sleep(0.05)
            _run(["ip", "link", "del", n["root_dev"]], check=False)
        if "index" in state and self.root_ns(int(state["index"])) in present:
            # Only the name goes: the root namespace itself is this machine's.
            _run(["ip", "netns", "del", self.root_ns(int(state["index"]))], check=False)
        self.state_path.unlink(missing_ok=True)
