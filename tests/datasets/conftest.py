"""Fixtures for the dataset tests: the synthetic QIR tree, a fresh catalog, and
the full ingest of the shared data (once per session)."""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from quiclab.datasets.catalog import Catalog

from quiclab.paths import Paths

from .fixtures import FullIngest, QirTree, build_qir_tree


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's catalog: every default location points into tmp_path."""
    monkeypatch.setenv("QUICLAB_DATA_DIR", str(tmp_path / "data-dir"))
    monkeypatch.delenv("QUICLAB_CATALOG", raising=False)


@pytest.fixture
def qir_tree(tmp_path: Path) -> QirTree:
    return build_qir_tree(tmp_path / "qir")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with Catalog(tmp_path / "catalog.duckdb") as cat:
        yield cat


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
                        "the full-ingest tests need ../shared")
        catalog = data_dir / "catalog.duckdb"
        out = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = main(["--catalog", str(catalog), "data", "ingest"])
        seconds = time.perf_counter() - started
    assert code == 0, out.getvalue()
    return FullIngest(catalog, out.getvalue(), seconds)
