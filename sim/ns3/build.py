"""Build the ns-3 simulator binary against the ``ns3`` wheel, once per source hash.

The PyPI ``ns3`` wheel ships ns-3's headers (``ns3/include``) and shared
libraries (``ns3/lib64/libns3.<version>-<module>.so``). Its CMake and
pkg-config files name the wheel's build machine's paths, so this module uses
plain ``-I``/``-L``/``-l`` flags and an rpath to ``lib64`` (the libraries find
each other through their own ``$ORIGIN`` rpaths). The Python ``ns`` module is
never imported: it costs ~10 s and ~600 MB.

The binary is cached as ``<cache_dir>/quiclab-ns3-<hash>``, where the hash
covers the C++ sources, the flags, the compiler version and the ns-3 version;
a sidecar ``.json`` records how long the build took. Concurrent callers
serialise on a lock file, so a sweep started in parallel builds once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from quiclab.errors import EngineError

#: The C++ sources, in the order they are hashed (package data of quiclab.sim.ns3).
SOURCES = ("transport.h", "path.h", "congestion.cc", "quic_sender.cc", "quic_receiver.cc",
           "path.cc", "main.cc")
#: ns-3 modules the binary links (TRANSPORT.md: sockets, links, queue discs, error models).
NS3_MODULES = ("core", "network", "internet", "point-to-point", "traffic-control",
               "applications", "stats")
#: The wheel's release build defines these (its CMake INTERFACE_COMPILE_DEFINITIONS);
#: headers must see the same ones or inline code disagrees with the libraries.
NS3_DEFINES = ("-DNS3_BUILD_PROFILE_RELEASE", "-DNS3_LOG_ENABLE", "-DNS3_ASSERT_ENABLE")
CXXFLAGS = ("-std=c++20", "-O2", "-pipe")
BINARY_STEM = "quiclab-ns3"


@dataclass(frozen=True)
class Toolchain:
    """Where the compiler and the ns-3 wheel's headers and libraries are."""

    compiler: Path
    compiler_version: str
    include_dir: Path
    lib_dir: Path
    ns3_version: str  # e.g. "3.44"
    libraries: tuple[str, ...]  # -l names, e.g. "ns3.44-core"

    def compile_command(self, source: Path, obj: Path) -> list[str]:
        return [str(self.compiler), *CXXFLAGS, *NS3_DEFINES, f"-I{self.include_dir}",
                "-c", str(source), "-o", str(obj)]

    def link_command(self, objects: list[Path], binary: Path) -> list[str]:
        return [str(self.compiler), *(str(o) for o in objects), "-o", str(binary),
                f"-L{self.lib_dir}", *(f"-l{lib}" for lib in self.libraries),
                f"-Wl,-rpath,{self.lib_dir}"]


def wheel_root() -> Path:
    """The installed ``ns3`` wheel's package folder (``…/site-packages/ns3``).

    Found through the distribution's metadata, so nothing of ns-3 is imported.
    Raises EngineError if the wheel is not installed.
    """
    try:
        dist = metadata.distribution("ns3")
    except metadata.PackageNotFoundError:
        raise EngineError("ns3 engine: the `ns3` package is not installed "
                          "(pip install ns3==3.44.post0)") from None
    root = Path(str(dist.locate_file("ns3")))
    if not (root / "include" / "ns3").is_dir():
        raise EngineError(f"ns3 engine: {root}/include/ns3 not found: the ns3 wheel has no "
                          "C++ headers")
    return root


def find_toolchain(compiler: str | None = None) -> Toolchain:
    """Locate g++ and the wheel's headers and libraries.

    Raises EngineError (one line) if the compiler or any ns-3 library is missing.
    """
    name = compiler or "g++"
    path = shutil.which(name)
    if path is None:
        raise EngineError(f"ns3 engine: no C++ compiler `{name}` on PATH "
                          "(install g++ ≥ 10 to build the ns-3 simulator)")
    try:
        version = subprocess.run([path, "-dumpfullversion", "-dumpversion"], check=True,
                                 capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise EngineError(f"ns3 engine: `{path}` does not run ({err})") from None
    root = wheel_root()
    lib_dir = root / "lib64"
    libraries = []
    ns3_version = ""
    for module in NS3_MODULES:
        found = sorted(lib_dir.glob(f"libns3.*-{module}.so"))
        if not found:
            raise EngineError(f"ns3 engine: {lib_dir}/libns3.*-{module}.so not found "
                              "(the ns3 wheel is incomplete)")
        lib = found[-1].name.removeprefix("lib").removesuffix(".so")  # ns3.44-core
        libraries.append(lib)
        ns3_version = lib.split("-", 1)[0].removeprefix("ns")
    return Toolchain(Path(path), version, root / "include", lib_dir, ns3_version,
                     tuple(libraries))


def read_sources() -> dict[str, bytes]:
    """The C++ sources shipped as package data."""
    pkg = resources.files("quiclab.sim.ns3")
    return {name: pkg.joinpath(name).read_bytes() for name in SOURCES}


def build_key(toolchain: Toolchain, sources: dict[str, bytes]) -> str:
    """16 hex digits naming a binary: sources, flags, compiler and ns-3 versions."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + sources[name] + b"\0")
    for part in (*CXXFLAGS, *NS3_DEFINES, *toolchain.libraries, toolchain.compiler_version,
                 toolchain.ns3_version, str(toolchain.lib_dir)):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _nice(cmd: list[str]) -> list[str]:
    # The machine is shared: compile at low priority.
    nice = shutil.which("nice")
    return [nice, "-n", "10", *cmd] if nice else cmd


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()[:200]
    lines = [line for line in log.splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else "no output"


def ensure_binary(cache_dir: Path, *, compiler: str | None = None, jobs: int = 2,
                  progress: Callable[[str], None] | None = None) -> tuple[Path, dict[str, object]]:
    """Return the simulator binary for the current sources, building it if needed.

    ``progress`` receives one line when a build starts. Returns the binary's
    path and its build record (``build_s``, ``key``, ``ns3_version``, …). Raises
    EngineError with one line if the compiler is missing or the build fails.
    """
    toolchain = find_toolchain(compiler)
    sources = read_sources()
    key = build_key(toolchain, sources)
    cache_dir = Path(cache_dir).expanduser()
    binary = cache_dir / f"{BINARY_STEM}-{key}"
    record_path = binary.with_suffix(".json")
    if binary.is_file() and os.access(binary, os.X_OK) and record_path.is_file():
        return binary, json.loads(record_path.read_text())
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise EngineError(f"ns3 engine: cannot create the build cache {cache_dir} "
                          f"({err})") from None
    with open(cache_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file() and record_path.is_file():  # built meanwhile by another process
            return binary, json.loads(record_path.read_text())
        if progress:
            progress(f"ns3: building the simulator against ns-{toolchain.ns3_version} "
                     f"({len(SOURCES)} files, about a minute, once) → {binary}")
        record = _build(toolchain, sources, cache_dir, binary, jobs)
        record["key"] = key
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return binary, record


def _build(toolchain: Toolchain, sources: dict[str, bytes], cache_dir: Path, binary: Path,
           jobs: int) -> dict[str, object]:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="build-", dir=cache_dir) as tmp:
        work = Path(tmp)
        for name, text in sources.items():
            (work / name).write_bytes(text)
        units = [work / name for name in SOURCES if name.endswith(".cc")]
        objects = [u.with_suffix(".o") for u in units]
        log_path = cache_dir / "build.log"
        pending = list(zip(units, objects, strict=True))
        running: list[tuple[subprocess.Popen[str], Path]] = []
        failed: list[str] = []
        while pending or running:
            while pending and len(running) < max(1, jobs):
                unit, obj = pending.pop(0)
                cmd = _nice(toolchain.compile_command(unit, obj))
                running.append((subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True), unit))
            proc, unit = running.pop(0)
            out, _ = proc.communicate()
            if proc.returncode != 0:
                failed.append(f"== {unit.name}\n{out}")
        if failed:
            log_path.write_text("\n".join(failed))
            raise EngineError(f"ns3 engine: build failed: {_first_error(failed[0])} "
                              f"(log: {log_path})")
        tmp_binary = work / binary.name
        link = subprocess.run(toolchain.link_command(objects, tmp_binary), capture_output=True,
                              text=True)
        if link.returncode != 0:
            log_path.write_text(link.stdout + link.stderr)
            raise EngineError(f"ns3 engine: link failed: {_first_error(link.stderr)} "
                              f"(log: {log_path})")
        os.replace(tmp_binary, binary)  # atomic: readers never see a partial file
    return {
        "build_s": round(time.perf_counter() - start, 2),
        "compiler": str(toolchain.compiler),
        "compiler_version": toolchain.compiler_version,
        "cxxflags": [*CXXFLAGS, *NS3_DEFINES],
        "libraries": list(toolchain.libraries),
        "lib_dir": str(toolchain.lib_dir),
        "ns3_version": toolchain.ns3_version,
    }
