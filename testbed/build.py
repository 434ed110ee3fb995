"""Build the peers from the registries reachable here, cached by source hash.

Each stack builds on its own (Go module proxy, crates.io, PyPI, Debian); one
stack's failure is recorded and does not stop the others. A stack is rebuilt
only when the hash of its peer source (and its :class:`~quiclab.testbed.stacks.Stack`
entry) changes or its output is missing. Build time per stack is kept in
``<build_dir>/builds.json`` and each build's output in ``<build_dir>/logs/``.

Builds run under ``nice -n 10`` with at most two parallel jobs: the machine
has two cores shared with other work.

Also built here: the delay relay (``peers/udp-relay``, Go, standard library
only), the eBPF loss classifier (``bpf/loss.bpf.c``, one object per loss
rate) and a self-signed certificate (``basicConstraints=critical,CA:FALSE``:
rustls rejects a self-signed certificate marked as a CA).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.stacks import Stack

#: Debian packages the harness itself needs (namespaces, offloads, tc, eBPF loss).
HARNESS_APT = ("iproute2", "ethtool", "clang", "llvm", "libbpf-dev", "openssl")
#: Wanted but not required: system-call counts come from `perf stat` when it is there.
HARNESS_APT_OPTIONAL = ("linux-perf",)
NICE = ("nice", "-n", "10")
JOBS = "2"


@dataclass
class BuildResult:
    """What one build step did. ``seconds`` is the wall time of the last real build."""

    stack: str
    ok: bool
    cached: bool
    seconds: float
    source_hash: str
    error: str = ""
    log: str = ""


def tree_hash(root: Path, salt: str = "") -> str:
    """sha256 over the relative paths and contents of a source tree (build outputs excluded)."""
    digest = hashlib.sha256(salt.encode())
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or rel.parts[0] in ("target", "__pycache__", "bin"):
            continue
        digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def go_binary() -> str:
    """The Go toolchain: on PATH, or where the machine image installs it."""
    found = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if Path(p).exists()), None)
    if found is None:
        raise TestbedError("go not found on PATH or in /usr/local/go/bin")
    return found


def installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                          capture_output=True, text=True, check=False)
    return proc.returncode == 0 and "install ok installed" in proc.stdout


class Builder:
    """Builds stacks into ``build_dir``; ``log`` receives one line per event."""

    def __init__(self, build_dir: Path, peers_dir: Path, bpf_dir: Path,
                 log: Callable[[str], None] = print):
        self.build_dir = build_dir
        self.peers_dir = peers_dir
        self.bpf_dir = bpf_dir
        self.log = log
        self._apt_updated = False

    # -- Debian packages ------------------------------------------------------
    def ensure_apt(self, packages: tuple[str, ...] | list[str]) -> None:
        """Install missing Debian packages (needs root; CI runs as root on a fresh machine)."""
        missing = [p for p in packages if not installed(p)]
        if not missing:
            return
        if os.geteuid() != 0:
            raise TestbedError(f"missing Debian packages {', '.join(missing)} "
                               "(install them as root: apt-get install " + " ".join(missing) + ")")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if not self._apt_updated:
            self.log("apt-get update")
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
            self._apt_updated = True
        self.log(f"apt-get install {' '.join(missing)}")
        proc = subprocess.run(["apt-get", "install", "-y", "-q", *missing], capture_output=True,
                              text=True, env=env, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            raise TestbedError(f"apt-get install {' '.join(missing)} failed: "
                               f"{tail[-1] if tail else proc.returncode}")

    # -- bookkeeping ------------------------------------------------------------
    @property
    def _record_path(self) -> Path:
        return self.build_dir / "builds.json"

    def records(self) -> dict[str, dict[str, object]]:
        try:
            data = json.loads(self._record_path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, result: BuildResult) -> None:
        records = self.records()
        previous = records.get(result.stack, {})
        entry = asdict(result)
        if result.cached and previous:
            # Keep the time of the real build it reuses.
            entry["seconds"] = previous.get("seconds", result.seconds)
        records[result.stack] = entry
        self.build_dir.mkdir(parents=True, exist_ok=True)
        self._record_path.write_text(json.dumps(records, indent=2, sort_keys=True))

    def _sh(self, argv: list[str], cwd: Path, log_path: Path,
            env: dict[str, str] | None = None) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(argv)}  (in {cwd})\n")
            log.flush()
            proc = subprocess.run(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **(env or {})}, check=False)
        if proc.returncode != 0:
            lines = log_path.read_text().strip().splitlines()
            errors = [ln for ln in lines if "error" in ln.lower()] or lines
            raise TestbedError(f"{argv[3] if argv[:3] == list(NICE) else argv[0]} exited "
                               f"{proc.returncode}: {errors[-1][:200] if errors else ''} "
                               f"(log: {log_path})")

    # -- stacks -------------------------------------------------------------------
    def outputs(self, stack: Stack) -> list[Path]:
        """Files that must exist for the stack to run (its executable and declared outputs)."""
        first = Path(stack.argv(self.build_dir, self.peers_dir)[0])
        declared = [self.build_dir / p for p in stack.extra.get("outputs", ())]
        return ([first] if first.is_absolute() else []) + declared

    def is_built(self, stack: Stack) -> bool:
        record = self.records().get(stack.name, {})
        return bool(record.get("ok")) and all(p.exists() for p in self.outputs(stack)) and (
            record.get("source_hash") == self.source_hash(stack))

    def source_hash(self, stack: Stack) -> str:
        src = self.peers_dir / stack.source
        salt = repr((stack.build, stack.command, stack.extra, stack.apt))
        return tree_hash(src, salt) if src.is_dir() else hashlib.sha256(
            salt.encode()).hexdigest()[:16]

    def build(self, stack: Stack, force: bool = False) -> BuildResult:
        """Build one stack (or reuse the cached build). Never raises: failures are results."""
        source_hash = self.source_hash(stack)
        if not force and self.is_built(stack):
            result = BuildResult(stack.name, True, True, 0.0, source_hash)
            self._save(result)
            return result
        log_path = self.build_dir / "logs" / f"{stack.name}.log"
        log_path.unlink(missing_ok=True)
        self.log(f"building {stack.name} ({stack.origin}) …")
        start = time.monotonic()
        try:
            if stack.apt:
                self.ensure_apt(stack.apt)
            method = getattr(self, f"_build_{stack.build.replace('-', '_')}", None)
            if method is None:
                raise TestbedError(f"build={stack.build!r} unknown for {stack.name}")
            method(stack, log_path)
            missing = [str(p) for p in self.outputs(stack) if not p.exists()]
            if missing:
                raise TestbedError(f"build finished but {missing[0]} is missing")
            result = BuildResult(stack.name, True, False, time.monotonic() - start,
                                 source_hash, log=str(log_path))
        except (TestbedError, OSError) as err:
            result = BuildResult(stack.name, False, False, time.monotonic() - start,
                                 source_hash, error=str(err), log=str(log_path))
        self._save(result)
        self.log(f"{stack.name}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.0f} s"
                 + (f" — {result.error}" if result.error else ""))
        return result

    def build_all(self, stacks: list[Stack], force: bool = False) -> list[BuildResult]:
        return [self.build(s, force=force) for s in stacks]

    def _build_go(self, stack: Stack, log_path: Path) -> None:
        out = self.outputs(stack)[0]
        out.parent.mkdir(parents=True, exist_ok=True)
        self._sh([*NICE, go_binary(), "build", "-p", JOBS, "-o", str(out), "."],
                 self.peers_dir / stack.source, log_path, env={"GOFLAGS": "-mod=mod"})

    def _build_cc(self, stack: Stack, log_path: Path) -> None:
        """A C peer (``peer.c``) against Debian's OpenSSL (libssl-dev), with gcc."""
        out = self.outputs(stack)[0]
        out.parent.mkdir(parents=True, exist_ok=True)
        src = self.peers_dir / stack.source
        self._sh([*NICE, "gcc", "-O2", "-Wall", "-Wextra", "-o", str(out), "peer.c", "-lssl",
                  "-lcrypto"], src, log_path)

    def _build_cargo(self, stack: Stack, log_path: Path) -> None:
        cargo = shutil.which("cargo") or str(Path.home() / ".cargo/bin/cargo")
        if not Path(cargo).exists():
            raise TestbedError("cargo not found on PATH or in ~/.cargo/bin")
        src = self.peers_dir / stack.source
        self._sh([*NICE, cargo, "build", "--release", "--locked", "-j", JOBS], src, log_path)
        pattern = stack.extra.get("copy_libs")
        if pattern:
            # Shared libraries the crate built (MsQuic's libmsquic.so) go beside the binary.
            libs = sorted(src.glob(str(pattern)))
            if not libs:
                raise TestbedError(f"{stack.name}: no library matches {pattern}")
            for lib in libs:
                shutil.copy2(lib, src / "target" / "release" / lib.name, follow_symlinks=True)

    def _build_cargo_install(self, stack: Stack, log_path: Path) -> None:
        cargo = shutil.which("cargo") or str(Path.home() / ".cargo/bin/cargo")
        root = self.build_dir / stack.name
        self._sh([*NICE, cargo, "install", "--locked", "-j", JOBS, "--root", str(root),
                  str(stack.extra["crate"])], self.build_dir, log_path)
        # The wrapper runs under the build's Python environment.
        self._build_pyvenv(stack, log_path)

    def _build_pyvenv(self, stack: Stack, log_path: Path) -> None:
        venv = self.build_dir / "pyenv"
        if not (venv / "bin" / "python").exists():
            self._sh([sys.executable, "-m", "venv", str(venv)], self.build_dir, log_path)
        pins = list(stack.extra.get("pip", ()))
        if pins:
            self._sh([str(venv / "bin" / "pip"), "install", "-q", *pins], self.build_dir,
                     log_path)

    def _build_debian(self, stack: Stack, log_path: Path) -> None:
        # The packages were installed by ensure_apt(stack.apt) above; the wrapper is Python.
        self._build_pyvenv(stack, log_path)

    def _build_none(self, stack: Stack, log_path: Path) -> None:
        return None

    # -- harness tools ------------------------------------------------------------
    def relay(self) -> Path:
        """The delay relay binary, built if its source changed."""
        out = self.build_dir / "bin" / "udp-relay"
        src = self.peers_dir / "udp-relay"
        stamp = self.build_dir / "stamps" / "udp-relay"
        digest = tree_hash(src)
        if out.exists() and stamp.exists() and stamp.read_text() == digest:
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        self._sh([*NICE, go_binary(), "build", "-o", str(out), "."], src,
                 self.build_dir / "logs" / "udp-relay.log")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
        return out

    def loss_object(self, loss_pct: float, transport: str = "udp") -> Path:
        """The tc eBPF loss classifier for ``loss_pct``, compiled once per rate and
        transport (``udp``: every datagram; ``tcp``: segments that carry payload)."""
        threshold = min(round(loss_pct / 100.0 * 2**32), 2**32 - 1)
        src = self.bpf_dir / "loss.bpf.c"
        digest = tree_hash(self.bpf_dir)
        tcp = transport == "tcp"
        out = self.build_dir / "bpf" / f"loss-{threshold}{'-tcp' if tcp else ''}-{digest}.o"
        if out.exists():
            return out
        if shutil.which("clang") is None:
            self.ensure_apt(("clang", "llvm", "libbpf-dev"))
        out.parent.mkdir(parents=True, exist_ok=True)
        arch_inc = f"/usr/include/{os.uname().machine}-linux-gnu"
        self._sh(["clang", "-O2", "-g", "-target", "bpf", f"-I{arch_inc}",
                  f"-DLOSS_THRESHOLD={threshold}u", f"-DLOSS_TCP={int(tcp)}", "-c", str(src),
                  "-o", str(out)],
                 self.bpf_dir, self.build_dir / "logs" / "bpf.log")
        return out

    def certs(self) -> tuple[Path, Path]:
        """A self-signed P-256 certificate for the name ``quiclab`` (end entity, not a CA)."""
        cert, key = self.build_dir / "certs" / "cert.pem", self.build_dir / "certs" / "key.pem"
        if cert.exists() and key.exists():
            return cert, key
        cert.parent.mkdir(parents=True, exist_ok=True)
        self._sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                  str(cert), "-days", "3650", "-subj", "/CN=quiclab", "-addext",
                  "subjectAltName=DNS:quiclab,DNS:localhost", "-addext",
                  "basicConstraints=critical,CA:FALSE"], cert.parent,
                 self.build_dir / "logs" / "certs.log")
        return cert, key

    def harness(self) -> None:
        """The harness's own Debian tools (ethtool, clang, libbpf headers; perf if it can)."""
        self.ensure_apt(HARNESS_APT)
        try:
            self.ensure_apt(HARNESS_APT_OPTIONAL)
        except TestbedError as err:
            self.log(f"optional: {err} (system calls will not be counted)")
