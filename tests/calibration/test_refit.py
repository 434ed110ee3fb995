"""Refitting gives the same models, bit for bit (a calibration is reproducible)."""

from __future__ import annotations

import contextlib
import io

import pytest

from quiclab.paths import PROJECT_ROOT


@pytest.mark.slow
def test_calibrate_regenerates_the_committed_models(full_ingest, tmp_path):
    from quiclab.cli import main

    out = tmp_path / "models"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["--catalog", str(full_ingest.catalog), "calibrate", "--cv", "none",
                     "--out", str(out), "--report", str(tmp_path / "report")])
    assert code == 0
    committed = sorted((PROJECT_ROOT / "models" / "fitted").glob("*.json"))
    assert committed, "no committed models"
    for path in committed:
        assert (out / path.name).read_text() == path.read_text(), path.name
