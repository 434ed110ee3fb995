#!/usr/bin/env python3
"""Type-check quiclab as it is imported: ``quiclab.sim.scenario``, not ``sim.scenario``.

pyproject maps each subpackage to a top-level folder (``quiclab.sim`` → ``sim/``),
which an install honours and mypy cannot: run on the folders, mypy names their
modules ``sim.scenario`` and every ``from quiclab.sim… import`` would be unresolved.
So this script stages ``build/typecheck/quiclab/``, a tree of symbolic links laid out
as the package-dir map says (the same staging ``setup.py`` does for mypyc), runs
mypy on the package there, and prints mypy's report with the real paths.

    python .ci/typecheck.py             # the whole package (make lint, CI)
    python .ci/typecheck.py FILE...     # only FILE..., imports resolved the same way

Exit status is mypy's (0 clean, 1 type errors, 2 usage). Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "build" / "typecheck"


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """``[tool.setuptools.package-dir]`` of ``pyproject.toml``: package → folder."""
    with open(root / "pyproject.toml", "rb") as f:
        config = tomllib.load(f)
    return dict(config["tool"]["setuptools"]["package-dir"])


def stage(root: Path = ROOT, out: Path = STAGE) -> dict[str, Path]:
    """Build ``out/quiclab`` (links only) and return staged prefix → real folder."""
    mapping = package_dirs(root)
    shutil.rmtree(out, ignore_errors=True)
    top = out / "quiclab"
    top.mkdir(parents=True)
    for entry in (root / mapping.get("quiclab", "quiclab")).iterdir():
        if entry.suffix in (".py", ".pyi"):
            (top / entry.name).symlink_to(entry)
    real: dict[str, Path] = {}
    for package, folder in mapping.items():
        parts = package.split(".")
        if len(parts) == 2 and parts[0] == "quiclab":
            (top / parts[1]).symlink_to(root / folder, target_is_directory=True)
            real[f"quiclab/{parts[1]}/"] = root / folder
    return real


def _real_paths(text: str, real: dict[str, Path]) -> str:
    """mypy's ``build/typecheck/quiclab/sim/x.py:3:`` → ``sim/x.py:3:`` (relative to ROOT)."""
    staged = re.escape(os.path.relpath(STAGE, ROOT) + os.sep)

    def one(match: re.Match[str]) -> str:
        path = match.group(1)
        for prefix, folder in real.items():
            if path.startswith(prefix):
                return os.path.relpath(folder / path[len(prefix):], ROOT)
        return path  # quiclab/*.py: the top package's folder is quiclab/ itself

    return re.sub(rf"(?m)^(?:{staged})?(quiclab/[^:\s]+)", one, text)


def main(argv: list[str]) -> int:
    real = stage()
    env = dict(os.environ, MYPYPATH=str(STAGE))
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    if argv:
        # Only these files: what they import is analysed, its errors are not reported.
        command += ["--follow-imports=silent", *argv]
    else:
        command += ["-p", "quiclab"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    sys.stdout.write(_real_paths(done.stdout, real))
    sys.stderr.write(_real_paths(done.stderr, real))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
