"""``quiclab validate`` on a tiny catalog: published points and fresh runs of two stacks."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from quiclab.cli import main
from quiclab.datasets.catalog import Catalog
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.engine import get_engine
from quiclab.sim.scenario import Scenario

from .conftest import MODELS


def _point(pid: str, server: str, client: str, value: float, conditions: str = "") -> dict:
    return {"point_id": pid, "document": "002", "quantity": "goodput", "value": value,
            "unit": "Mbit/s", "server": server, "client": client, "app": "h3",
            "conditions": conditions, "stated": "text"}


def _run(i: int, server: str, goodput: float) -> dict:
    return {"run_id": f"fresh-{server}-{i}", "source": "fresh", "experiment": "fresh-demo",
            "server_impl": server, "client_impl": server, "status": "ok",
            "goodput_mbps": goodput, "cipher": "aes-ni", "rcvbuf_bytes": 212992,
            "cpu": "AMD EPYC 7543", "app": "h3", "filesize_bytes": 100_000_000}


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.duckdb"
    with Catalog(path) as cat:
        cat.upsert("published_points", [
            _point("x-001", "lsquic", "lsquic", 3000.0),
            _point("x-002", "quiche", "quiche", 2000.0),
            _point("x-003", "quiche", "lsquic", 9000.0, "bound=upper_limit"),  # not validated
        ])
        cat.upsert("runs", [_run(i, s, g) for i in range(3)
                            for s, g in (("lsquic", 2900.0 + i), ("quiche", 2600.0 + i))])
    return path


def test_validate_tiny_catalog(tmp_path: Path, catalog: Path, models_dir: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "validation"
    assert main(["--models", str(models_dir), "--catalog", str(catalog), "validate",
                 "--quiet", "--out", str(out), "--reproductions", str(tmp_path / "none"),
                 "--fresh-models", str(models_dir)]) == 0
    printed = capsys.readouterr().out
    assert "median_ape_pct" in printed and "published" in printed and "fresh" in printed
    items = pd.read_csv(out / "validation.csv")
    assert sorted(items["source"].unique()) == ["fresh", "published"]
    assert set(items["ident"][items["source"] == "published"]) == {"x-001", "x-002"}
    # The APE is that of the analytic engine on the same scenario.
    registry = synthetic_registry(*(synthetic_model(n, **kw) for n, kw in MODELS.items()))
    row = items[items["ident"] == "x-001"].iloc[0]
    scenario = Scenario(server="lsquic", client="lsquic", cpu="AMD EPYC 7543", link_gbps=10.0)
    predicted = get_engine("analytic", registry).predict(scenario).goodput_mbps
    assert row["predicted_mbps"] == pytest.approx(predicted)
    assert row["ape_pct"] == pytest.approx(abs(predicted - 3000) / 3000 * 100)
    summary = pd.read_csv(out / "summary.csv")
    fresh = summary[summary["source"] == "fresh"].iloc[0]
    assert fresh["items"] == 2 and fresh["engine"] == "analytic"
    assert fresh["p95_ape_pct"] >= fresh["median_ape_pct"]
    md = (out / "validation.md").read_text()
    assert "## Worst cases" in md and "No reproduction results" in md
    html = (out / "validation.html").read_text()
    assert "data:image/png;base64" in html and "x-003" in html  # the skipped bound point


def test_validate_missing_source_is_one_line(tmp_path: Path, catalog: Path, models_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--models", str(models_dir), "--catalog", str(catalog), "validate",
                 "--source", "dataset", "--quiet", "--out", str(tmp_path / "v")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "no runs with source='qir10g'" in err and "quiclab data ingest" in err


def test_validate_flags_reproductions_of_other_models(
        tmp_path: Path, catalog: Path, models_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Reproductions are stale unless the model versions ``reproduce`` recorded next to
    findings.csv are those validate loads."""
    import json

    from quiclab.models.registry import Registry

    repro = tmp_path / "repro"
    repro.mkdir()
    (repro / "findings.csv").write_text(
        "reproduction,finding,engine,tolerance,predicted,published,verdict\n"
        "repro-x,f,analytic,±10 %,1,1,pass\n")
    args = ["--models", str(models_dir), "--catalog", str(catalog), "validate", "--quiet",
            "--out", str(tmp_path / "v"), "--reproductions", str(repro),
            "--source", "published"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "seed findings: 1 pass" in printed and "stale: no models.json" in printed
    versions = Registry.load(models_dir).versions()
    (repro / "models.json").write_text(json.dumps({"versions": {**versions,
                                                               "lsquic": "0+other"}}))
    assert main(args) == 0
    assert "stale: computed with other models (1 differ: lsquic)" in capsys.readouterr().out
    assert "**Stale:**" in (tmp_path / "v" / "validation.md").read_text()
    (repro / "models.json").write_text(json.dumps({"versions": versions}))
    assert main(args) == 0
    assert "stale" not in capsys.readouterr().out.lower()
