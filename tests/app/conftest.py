"""Fixtures of the app tests: the setup of :mod:`appdata`, the app under AppTest, the CLI."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from .appdata import AppData, build

SCRIPT = Path(__file__).resolve().parents[2] / "app" / "streamlit_app.py"


@pytest.fixture(scope="session")
def appdata(tmp_path_factory: pytest.TempPathFactory) -> AppData:
    return build(tmp_path_factory.mktemp("app"))


@pytest.fixture
def app_env(appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> AppData:
    """The app's locations in the environment (as ``quiclab app`` would pass them)."""
    for key, value in appdata.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("QUICLAB_SHARED", raising=False)
    return appdata


@pytest.fixture
def app(app_env: AppData) -> AppTest:
    """The app, not yet run (``app.query_params`` can be set first)."""
    return AppTest.from_file(str(SCRIPT), default_timeout=60)


@pytest.fixture
def predict(app_env: AppData, tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """``predict(engine="des", mtu_bytes=9000, server="quiche")``: ``quiclab predict --json``.

    The fields go through a ``--scenario`` file, so that values with spaces
    (CPU names) need no quoting; the models are the app's (``--models``).
    """
    from quiclab.cli import main

    def run(engine: str = "analytic", **fields: Any) -> dict[str, Any]:
        spec = tmp_path / "predict-scenario.json"
        spec.write_text(json.dumps(fields))
        argv = ["--models", str(app_env.models), "predict", "--json", "--engine", engine,
                "--scenario", str(spec)]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        result: dict[str, Any] = json.loads(out.getvalue())
        return result

    return run
