"""One Paths object for every location quiclab reads or writes.

Only the CLI (and the app's entry point) build it, from flags and environment
variables; library code receives paths as arguments (docs/explanation/design.md: "Library code
never reads files or environment variables on its own"). Nothing is created
at import time.

Environment variables (each overridden by its flag):

- ``QUICLAB_DATA_DIR`` (``--data-dir``): where the catalog, build caches and
  reports live. Default: ``$XDG_DATA_HOME/quiclab`` or ``~/.local/share/quiclab``.
- ``QUICLAB_CATALOG`` (``--catalog``): the DuckDB catalog file. Default:
  ``<data dir>/catalog.duckdb``.
- ``QUICLAB_SHARED`` (``--shared``): the shared folder with ``datasets/`` and
  ``seeds/``. Default: ``../shared`` beside the project checkout (or beside
  the current directory).
- ``QUICLAB_MODELS`` (``--models``): the fitted model directory. Default: the
  package's ``models/fitted``.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: The project checkout (this file is quiclab/paths.py inside it).
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Paths:
    data_dir: Path
    catalog: Path
    shared: Path
    models: Path

    @classmethod
    def resolve(cls, *, data_dir: str | None = None, catalog: str | None = None,
                shared: str | None = None, models: str | None = None,
                env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Paths:
        env = os.environ if env is None else env
        cwd = cwd or Path.cwd()
        if data_dir or env.get("QUICLAB_DATA_DIR"):
            data = Path(data_dir or env["QUICLAB_DATA_DIR"]).expanduser()
        else:
            base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
            data = Path(base).expanduser() / "quiclab"
        cat = Path(catalog or env.get("QUICLAB_CATALOG") or data / "catalog.duckdb").expanduser()
        if shared or env.get("QUICLAB_SHARED"):
            shared_dir = Path(shared or env["QUICLAB_SHARED"]).expanduser()
        else:
            candidates = [PROJECT_ROOT.parent / "shared", cwd.parent / "shared", cwd / "shared"]
            shared_dir = next((c for c in candidates if c.is_dir()), candidates[0])
        model_dir = Path(models or env.get("QUICLAB_MODELS") or PROJECT_ROOT / "models" / "fitted")
        return cls(data_dir=data.resolve(), catalog=cat.resolve(), shared=shared_dir.resolve(),
                   models=model_dir.expanduser().resolve())

    @property
    def qir_dataset(self) -> Path:
        """The QIR-10G calibration subset tarball (tumi8/quic-10g-paper)."""
        folder = self.shared / "datasets" / "tumi8-quic-10g-paper"
        return folder / "tumi8-quic-10g-calibration.tar.xz"

    @property
    def uclouvain_dataset(self) -> Path:
        """The UCLouvain picoquic-DPDK experiments tarball
        (UCLouvain-ENSG/picoquic-dpdk-experiments)."""
        folder = self.shared / "datasets" / "picoquic-dpdk-experiments"
        return folder / "picoquic-dpdk-experiments.tar.xz"

    @property
    def seeds(self) -> Path:
        return self.shared / "seeds"

    @property
    def reports(self) -> Path:
        return self.data_dir / "reports"

    @property
    def cache(self) -> Path:
        return self.data_dir / "cache"


@functools.cache
def tree_digest(root: Path, suffixes: tuple[str, ...]) -> str:
    """SHA-256 (hex) of the files under ``root`` with these suffixes: each one's
    path relative to ``root`` and its bytes, in sorted order; read once per process."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in suffixes and path.is_file():
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def writable_folder(folder: Path, flag: str) -> Path:
    """Create ``folder`` (and its parents) and check that files can be written in it.

    Raises DataError naming ``folder`` and ``flag`` (``--out``, ``--to``) in one line
    when a file is in the way, the file system is read-only or permission is
    missing — before any work whose results would then have nowhere to go.
    """
    from quiclab.errors import DataError

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DataError(folder, "is a file, not a folder", field=flag) from None
    except NotADirectoryError:
        raise DataError(folder, "a file is in the way (one of its parents is not a folder)",
                        field=flag) from None
    except OSError as err:
        raise DataError(folder, f"cannot be created ({err.strerror or err})",
                        field=flag) from None
    if not folder.is_dir():
        raise DataError(folder, "is not a folder", field=flag)
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        raise DataError(folder, "cannot be written (Read-only file system)", field=flag)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DataError(folder, "cannot be written (Permission denied)", field=flag)
    return folder
