"""What produced a set of predictions: git revision, package versions, models, spec.

Written beside every sweep's results (``provenance.json``) and into every
``predictions`` row of the catalog (docs/explanation/design.md, "Reproducibility and
provenance": Pantheon's ``pantheon_metadata.json`` with its git summary).
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from quiclab.paths import PROJECT_ROOT

#: Distributions whose versions can change a prediction or how it is stored.
PACKAGES = ("quiclab", "numpy", "scipy", "pandas", "simpy", "ns3", "pyarrow", "duckdb", "dask",
            "distributed", "statsmodels", "scikit-learn")


def git_state(repo: Path = PROJECT_ROOT) -> dict[str, Any]:
    """``{"revision": sha or None, "dirty": bool or None}`` of the checkout."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True,
                                  text=True, check=False, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    revision = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"revision": revision, "dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def collect(spec: dict[str, Any], model_versions: dict[str, str], models_source: str,
            engines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Provenance of one run of a spec (resolved spec, code, packages, models, engines)."""
    return {
        "spec": spec,
        "git": git_state(),
        "packages": package_versions(),
        "models": {"source": models_source, "versions": model_versions},
        "engines": engines,
    }
