"""Fixtures for the dataset tests: the synthetic QIR tree, a fresh catalog, and
the full ingest of the shared data (once per session)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quiclab.datasets.catalog import Catalog

from .fixtures import QirTree, build_qir_tree


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

# `full_ingest` (the shared data ingested once per session) lives in tests/conftest.py,
# so that calibration and engine tests share the same catalog.
