"""Fixtures for the experiments tests: synthetic cost models on disk, a private data dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab.models.registry import Registry
from quiclab.models.testing import synthetic_model, synthetic_registry

#: Synthetic stand-ins: "fast"/"slow" for sweeps, real names for evidence and findings.
MODELS = {
    "fast": dict(sender_ns=2000, receiver_ns=1500),
    "slow": dict(sender_ns=8000, receiver_ns=6000),
    "lsquic": dict(sender_ns=3300, receiver_ns=2500),
    "quiche": dict(sender_ns=4300, receiver_ns=3000),
}


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's data dir or catalog."""
    monkeypatch.setenv("QUICLAB_DATA_DIR", str(tmp_path / "data-dir"))
    monkeypatch.delenv("QUICLAB_CATALOG", raising=False)
    monkeypatch.delenv("QUICLAB_MODELS", raising=False)


@pytest.fixture
def registry() -> Registry:
    return synthetic_registry(*(synthetic_model(n, **kw) for n, kw in MODELS.items()))


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    """The synthetic models as JSON files, loadable with ``--models``."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name, kw in MODELS.items():
        (folder / f"{name}.json").write_text(synthetic_model(name, **kw).dumps())
    return folder


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
