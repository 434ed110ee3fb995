"""Build hook: the DES hot path compiled by mypyc (pyproject.toml holds everything else).

``pip install -e .`` (or a wheel build) compiles the modules of
``quiclab.sim.des`` named in ``sim/des/native.py`` to C extensions with mypyc,
from the ``mypy`` pinned in ``[build-system] requires``, and writes the
digests of the compiled sources next to them; ``quiclab.sim.des`` runs the
extensions only while its sources still match them, else the ``.py`` files
(the same results, slower). If mypyc or the C compiler fails, or
``QUICLAB_DES_PURE`` is set, the package installs without them: pure Python.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import traceback
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

# Every editable install (PEP 660) by setuptools ends with an informational notice
# ("InformationOnly": folders named like the package may shadow it on import). Here
# the folder of that name *is* the package, mapped by package-dir, so the notice can
# never apply; silenced by its exact summary so that real warnings still show.
warnings.filterwarnings("ignore", message=r"Editable installation\.")
#: quiclab's import layout for mypy (the repository maps packages to folders).
STAGE = ROOT / "build" / "mypyc-src"
#: mypyc's generated C.
TARGET = ROOT / "build" / "mypyc"


def _load_native() -> ModuleType:
    """``sim/des/native.py`` (standard library only) without importing quiclab."""
    spec = importlib.util.spec_from_file_location("_quiclab_des_native",
                                                  ROOT / "sim" / "des" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NATIVE = _load_native()
#: mypyc's extensions (None: not generated yet), why there are none, source digests.
_EXTENSIONS: list[Any] | None = None
_WHY = ""
_DIGESTS: dict[str, str] = {}


class BuildDesNative(build_ext):
    """Compile ``NATIVE.MODULES`` with mypyc; on any failure build nothing (pure Python)."""

    def finalize_options(self) -> None:
        # mypyc generates the C (and the extension list) before setuptools sets
        # the extensions up; once per build process.
        global _EXTENSIONS
        if _EXTENSIONS is None:
            _EXTENSIONS = self._mypyc_extensions()
        self.distribution.ext_modules = list(_EXTENSIONS)
        super().finalize_options()

    def run(self) -> None:
        if not self.extensions:
            self._pure(_WHY or "nothing to compile")
            return
        try:
            super().run()
        except Exception:  # the C compiler failed: install pure Python
            traceback.print_exc()
            self._pure("the C compiler failed (traceback above)")
            return
        self._write_manifest()

    def _stage(self) -> Path:
        """A tree where module names follow folders: quiclab/… as the package-dir map says,
        with a copy of sim/des (mypy names modules by their real path)."""
        shutil.rmtree(STAGE, ignore_errors=True)
        package_dir: dict[str, str] = self.distribution.package_dir or {}
        top = STAGE / "quiclab"
        top.mkdir(parents=True)
        for entry in (ROOT / package_dir.get("quiclab", "quiclab")).iterdir():
            if entry.suffix == ".py":
                (top / entry.name).symlink_to(entry)
        for package, folder in package_dir.items():
            parts = package.split(".")
            if len(parts) == 2 and parts[0] == "quiclab":
                (top / parts[1]).symlink_to(ROOT / folder)
        sim = ROOT / package_dir.get("quiclab.sim", "sim")
        (top / "sim").unlink()
        (top / "sim").mkdir()
        for entry in sim.iterdir():
            if entry.name != "des":
                (top / "sim" / entry.name).symlink_to(entry)
        des = top / "sim" / "des"
        des.mkdir()
        for source in (sim / "des").glob("*.py"):
            shutil.copy2(source, des / source.name)
        return des

    def _mypyc_extensions(self) -> list[Any]:
        """mypyc's extensions for ``NATIVE.MODULES``, or [] (and ``_WHY``) when it cannot."""
        global _WHY, _DIGESTS
        if os.environ.get(NATIVE.ENV_PURE, "") not in ("", "0"):
            _WHY = f"{NATIVE.ENV_PURE} is set"
            return []
        try:
            from mypyc.build import mypycify

            des = self._stage()
            _DIGESTS = NATIVE.source_digests(des)
            paths = [str(des / f"{m}.py") for m in NATIVE.MODULES]
            # The build environment holds setuptools and mypy only: numpy and simpy,
            # which the DES imports, are not there, so their imports are typed Any
            # here (the type check of `make lint` runs where they are installed).
            options = ["--config-file", str(ROOT / "pyproject.toml"),
                       "--follow-imports=silent", "--no-warn-unused-ignores",
                       "--ignore-missing-imports"]
            return list(mypycify(options + paths, opt_level="3", group_name=NATIVE.GROUP,
                                 target_dir=str(TARGET)))
        except (Exception, SystemExit):  # no mypyc, or it refused the code (mypy exits)
            traceback.print_exc()
            _WHY = "mypyc failed (traceback above)"
            return []

    def _out_dir(self) -> Path:
        return Path(self.get_ext_fullpath(f"{NATIVE.PACKAGE}.{NATIVE.MODULES[0]}")).parent

    def _write_manifest(self) -> None:
        import mypy.version

        manifest = {"sources": _DIGESTS, "mypy": mypy.version.__version__}
        (self._out_dir() / NATIVE.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")

    def _pure(self, why: str) -> None:
        print(f"quiclab: the DES hot path stays pure Python ({why})")
        none: list[Extension] = []
        self.extensions = none
        if self.inplace:  # no stale extensions in the source tree
            out = self._out_dir()
            for path in [*NATIVE.compiled_files(out), out / NATIVE.MANIFEST,
                         *out.glob("native__mypyc.*")]:
                path.unlink(missing_ok=True)


# Placeholders: BuildDesNative replaces them with mypyc's extensions.
setup(ext_modules=[Extension(f"{NATIVE.PACKAGE}.{m}", sources=[]) for m in NATIVE.MODULES],
      cmdclass={"build_ext": BuildDesNative})
