"""Which build of the DES hot path runs: compiled by mypyc, or the pure-Python sources.

``pip install -e .`` compiles :data:`MODULES` (the per-packet loops and what
they call) to C extension modules with mypyc (``setup.py``; mypyc comes with
the ``mypy`` pinned in pyproject's ``[build-system]``) and writes
:data:`MANIFEST` next to them: the SHA-256 of each module's source at build
time. The compiled modules are the same code, so they give the same results
bit for bit (``tests/sim/test_des_native.py``); they only run faster.

A compiled module shadows its ``.py`` file, so an edited source would be
ignored. :func:`select` (run by ``quiclab.sim.des`` before anything else of
the package is imported) therefore uses the compiled modules only if every
source still has the digest of the build and ``QUICLAB_DES_PURE`` is not set;
otherwise a meta-path finder loads every module of :data:`MODULES` from its
``.py`` file, all or none (compiled modules call each other's native code).
:data:`STATUS` says which build runs and why (``quiclab bench des`` prints it).

This module uses the standard library only: ``setup.py`` loads it by path.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

#: The package whose modules are compiled.
PACKAGE = "quiclab.sim.des"
#: Modules compiled by mypyc (one group: they call each other natively).
MODULES = ("cc", "host", "link", "pipeline", "recovery", "sender", "receiver")
#: mypyc's group name; its shared library is ``native__mypyc`` in this package.
GROUP = f"{PACKAGE}.native"
#: Source digests of the build, written by ``setup.py`` next to the extensions.
MANIFEST = "_native.json"
#: Set (to anything but "" or "0") to run the pure-Python modules.
ENV_PURE = "QUICLAB_DES_PURE"

HERE = Path(__file__).resolve().parent

#: Which build runs: "compiled (mypyc)" or "pure Python (<why>)".
STATUS = "pure Python (not selected yet)"
#: True when the compiled modules run.
COMPILED = False


def source_digests(directory: Path = HERE) -> dict[str, str]:
    """SHA-256 of each module of :data:`MODULES` in ``directory`` (hex)."""
    return {m: hashlib.sha256((directory / f"{m}.py").read_bytes()).hexdigest()
            for m in MODULES}


def compiled_files(directory: Path = HERE) -> list[Path]:
    """The extension modules of :data:`MODULES` in ``directory`` for this interpreter."""
    return [directory / f"{m}{suffix}" for m in MODULES
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
            if (directory / f"{m}{suffix}").is_file()]


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Loads the modules of :data:`MODULES` from their ``.py`` files."""

    def __init__(self, directory: Path):
        self.directory = directory

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, self.directory / f"{name}.py")


def _use_sources(why: str) -> None:
    global STATUS, COMPILED
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder(HERE))
    for m in MODULES:  # a partly imported compiled group goes
        sys.modules.pop(f"{PACKAGE}.{m}", None)
    STATUS = f"pure Python ({why})"
    COMPILED = False


def select() -> str:
    """Choose the build (see the module docstring); returns :data:`STATUS`."""
    global STATUS, COMPILED
    if not compiled_files():
        STATUS = "pure Python (no compiled modules: pip install -e . builds them)"
        return STATUS
    if os.environ.get(ENV_PURE, "") not in ("", "0"):
        _use_sources(f"{ENV_PURE} is set")
        return STATUS
    try:
        built = json.loads((HERE / MANIFEST).read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        built = None
    if built != source_digests():
        _use_sources("sources changed since the build: pip install -e . recompiles")
        return STATUS
    try:
        for m in MODULES:
            module = importlib.import_module(f"{PACKAGE}.{m}")
            if not str(module.__file__).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                raise ImportError(f"{m} is not the compiled module")
    except ImportError as err:
        _use_sources(f"the compiled modules do not load: {err}")
        return STATUS
    STATUS = "compiled (mypyc)"
    COMPILED = True
    return STATUS
