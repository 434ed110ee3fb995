"""Reaching an inventory's hosts with the system's OpenSSH client: the agent's command
line, one-off commands, copying files to a host's work directory and run logs back.

``ssh`` rather than a Python SSH library: the user's ``~/.ssh/config``, agent,
``ProxyJump`` and ``ControlMaster`` then work as they do for ``ssh`` itself (paramiko
honours neither ProxyJump nor ControlMaster; asyncssh would be a dependency for what one
``ssh`` process per host does). Every command is ``BatchMode`` (no prompt: a missing
key or an unknown host key is one line, not a hang) with ``ServerAlive`` probes, so a
silent connection is given up on after 15 s.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import subprocess
import tarfile
import time
from pathlib import Path, PurePosixPath

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.hosts import DEADMAN_S, Completed
from quiclab.testbed.inventory import HostSpec

#: ssh gives up on a silent connection after ServerAliveInterval × ServerAliveCountMax.
SSH_ALIVE = ("-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
#: e_machine of an ELF header → ``uname -m`` (247: eBPF, which runs anywhere).
ELF_MACHINES = {3: "i686", 40: "armv7l", 62: "x86_64", 183: "aarch64", 243: "riscv64",
                21: "ppc64le", 22: "s390x", 247: "bpf"}


def ssh_base(spec: HostSpec) -> list[str]:
    """``ssh`` with the host's options, no command yet."""
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o",
            f"ConnectTimeout={max(1, round(spec.connect_timeout_s))}", *SSH_ALIVE]
    if spec.key:
        argv += ["-i", spec.key, "-o", "IdentitiesOnly=yes"]
    if spec.port != 22:
        argv += ["-p", str(spec.port)]
    for option in spec.ssh_options:
        argv += ["-o", option]
    return [*argv, spec.ssh, "--"]


def remote_command(spec: HostSpec, argv: list[str]) -> str:
    """One shell command line for the remote side (``sudo -n`` first when asked)."""
    words = (["sudo", "-n"] if spec.sudo else []) + argv
    return " ".join(shlex.quote(w) for w in words)


def ssh_agent_argv(spec: HostSpec) -> list[str]:
    workdir = PurePosixPath(spec.workdir)
    return [*ssh_base(spec), remote_command(spec, [
        spec.python, str(workdir / "agent" / "agent.py"),
        "--state-dir", str(PurePosixPath(spec.state_dir) / "agent"),
        "--deadman-s", str(DEADMAN_S)])]


def _ssh(spec: HostSpec, argv: list[str], stdin: bytes | None,
         timeout_s: float) -> tuple[int, bytes, str]:
    cmd = [*ssh_base(spec), remote_command(spec, argv)]
    try:
        proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout_s,
                              check=False, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise TestbedError(f"ssh {spec.ssh}: no answer within {timeout_s:.0f} s") from None
    except OSError as err:
        raise TestbedError(f"ssh {spec.ssh}: cannot run ssh ({err})") from None
    stderr = "\n".join(ln for ln in proc.stderr.decode(errors="replace").splitlines()
                       if not ln.startswith("Warning: Permanently added"))
    return proc.returncode, proc.stdout, stderr


def ssh_run(spec: HostSpec, argv: list[str], stdin: bytes | None = None,
            timeout_s: float = 300.0) -> Completed:
    """One command on a host over its own ssh connection (deployment, probing)."""
    rc, out, err = _ssh(spec, argv, stdin, timeout_s)
    return Completed(rc, out.decode(errors="replace"), err)


def elf_machine(path: Path) -> str | None:
    """``uname -m`` of the machine an ELF file is built for (None: not ELF)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    number = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return ELF_MACHINES.get(number, f"ELF machine {number}")


class Deployer:
    """Copies files to hosts' work directories, each only when the host lacks it.

    The host keeps ``<workdir>/.manifest.json`` (relative path → SHA-256); the
    controller keeps what it last read of it for the session, and local hashes by
    (path, size, mtime), so a run that needs nothing new costs no transfer.
    """

    def __init__(self) -> None:
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._manifests: dict[str, dict[str, str]] = {}

    def _sha(self, path: Path) -> str:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in self._hashes:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            self._hashes[key] = digest.hexdigest()
        return self._hashes[key]

    def manifest(self, spec: HostSpec) -> dict[str, str]:
        if spec.ssh not in self._manifests:
            done = ssh_run(spec, ["cat", str(PurePosixPath(spec.workdir) / ".manifest.json")],
                           timeout_s=spec.connect_timeout_s + 30)
            if done.rc == 255:
                raise TestbedError(f"ssh {spec.ssh}: cannot connect: {done.first_line}")
            try:
                found = json.loads(done.stdout) if done.rc == 0 else {}
            except ValueError:
                found = {}
            self._manifests[spec.ssh] = found if isinstance(found, dict) else {}
        return self._manifests[spec.ssh]

    def deploy(self, spec: HostSpec, files: dict[str, Path]) -> list[str]:
        """Make ``<workdir>/<rel>`` hold each local file; returns the paths sent."""
        have = self.manifest(spec)
        wanted = {rel: self._sha(path) for rel, path in files.items()}
        send = sorted(rel for rel, sha in wanted.items() if have.get(rel) != sha)
        if not send:
            return []
        merged = {**have, **wanted}
        stream = io.BytesIO()
        with tarfile.open(fileobj=stream, mode="w") as tar:
            for rel in send:
                info = tar.gettarinfo(str(files[rel]), arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with open(files[rel], "rb") as f:
                    tar.addfile(info, f)
            blob = json.dumps(merged, sort_keys=True).encode()
            info = tarfile.TarInfo(".manifest.json")
            info.size, info.mtime = len(blob), int(time.time())
            tar.addfile(info, io.BytesIO(blob))
        workdir = spec.workdir
        done = ssh_run(spec, ["sh", "-c", 'mkdir -p "$1" && tar -C "$1" -xmf - --no-same-owner',
                              "sh", workdir], stdin=stream.getvalue(), timeout_s=900)
        if done.rc != 0:
            raise TestbedError(f"ssh {spec.ssh}: copying {len(send)} file(s) to {workdir} "
                               f"failed: {done.first_line}")
        self._manifests[spec.ssh] = merged
        return send

    def forget(self, spec: HostSpec) -> None:
        self._manifests.pop(spec.ssh, None)

    def refresh(self, spec: HostSpec, text: str | None) -> None:
        """Take the host's manifest as its agent just read it (a work directory emptied
        since the session began is then filled again)."""
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            found = {}
        self._manifests[spec.ssh] = found if isinstance(found, dict) else {}


def fetch_dir(spec: HostSpec, remote_dir: str, local_dir: Path) -> None:
    """Copy a run's log directory back from a host (peers' output, perf counts, qlog)."""
    rc, out, err = _ssh(spec, ["sh", "-c", 'cd "$1" && tar -cf - .', "sh", remote_dir], None,
                        600.0)
    if rc != 0:
        raise TestbedError(f"ssh {spec.ssh}: fetching {remote_dir} failed: "
                           f"{err.strip().splitlines()[-1] if err.strip() else rc}")
    local_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(out), mode="r") as tar:
        tar.extractall(local_dir, filter="data")
