"""Session fixtures shared by every test package."""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from quiclab.paths import Paths


@dataclass
class FullIngest:
    """The shared data ingested once into a temporary catalog."""

    catalog: Path
    output: str  # what `quiclab data ingest` printed
    seconds: float


@pytest.fixture(scope="session")
def full_ingest(tmp_path_factory: pytest.TempPathFactory) -> FullIngest:
    """``quiclab data ingest`` of ../shared (the QIR-10G tarball and the published
    points) into a temporary catalog; skipped when the shared data is absent."""
    from quiclab.cli import main

    data_dir = tmp_path_factory.mktemp("full-ingest")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUICLAB_DATA_DIR", str(data_dir))
        mp.delenv("QUICLAB_CATALOG", raising=False)
        paths = Paths.resolve()
        if not paths.qir_dataset.is_file():
            pytest.skip(f"shared QIR-10G data absent ({paths.qir_dataset}); "
                        "these tests need ../shared")
        catalog = data_dir / "catalog.duckdb"
        out = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = main(["--catalog", str(catalog), "data", "ingest"])
        seconds = time.perf_counter() - started
    assert code == 0, out.getvalue()
    return FullIngest(catalog, out.getvalue(), seconds)
