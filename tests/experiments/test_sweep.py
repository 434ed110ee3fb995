"""The sweep runner: parts, resume, failures, catalog rows, the CLI, and the Dask executor."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from quiclab.cli import main
from quiclab.datasets.catalog import Catalog
from quiclab.errors import SpecError
from quiclab.experiments import runner
from quiclab.experiments.executors import DaskExecutor, LocalExecutor
from quiclab.experiments.spec import load_sweep
from quiclab.experiments.store import PartStore
from quiclab.models.registry import Registry
from quiclab.sim.engine import get_engine
from quiclab.sim.scenario import Scenario

from .conftest import write

SPEC = """\
kind: sweep
axes:
  - {field: implementation, values: [fast, slow]}
  - {field: rtt_ms, values: [0, 1, 5]}
  - {field: mtu_bytes, values: [1500, 9000]}
chunk: {chunk}
record: [goodput_mbps, limit, server_cpu_util]
"""


def _run(spec_path: Path, registry: Registry, out: Path, executor: object,
         engines: tuple[str, ...] = ("analytic",)) -> runner.RunReport:
    spec = load_sweep(spec_path)
    return runner.run_points(name=spec.name, kind="sweep", spec=spec.resolved(),
                             scenarios=spec.scenarios(), engines=engines, engine_options={},
                             registry=registry, out=out, executor=executor,  # type: ignore[arg-type]
                             record=spec.record, chunk=spec.chunk, progress=False)


def test_resume_computes_only_missing_points(tmp_path: Path, registry: Registry) -> None:
    path = write(tmp_path / "sweep-a.yaml", SPEC.replace("{chunk}", "0"))
    out = tmp_path / "out"
    first = _run(path, registry, out, LocalExecutor(1))
    assert (first.points, first.computed, first.reused, first.failed) == (12, 12, 0, [])
    table = first.table
    assert table is not None and table.num_rows == 12
    assert len(set(table.column("scenario_key").to_pylist())) == 12
    assert {"goodput_mbps", "limit_resource", "server_cpu_util", "rtt_ms", "model_versions"} \
        <= set(table.column_names)
    assert not list(out.glob("parts/*/.*"))  # no temporaries left
    # Delete one part: exactly that point is computed again.
    store = PartStore(out)
    parts = store.part_files("analytic")
    assert len(parts) == 1  # the analytic engine: one batch, one part
    again = _run(path, registry, out, LocalExecutor(1))
    assert (again.computed, again.reused) == (0, 12)
    assert again.table is not None and again.table.equals(table)


def test_prediction_row_is_to_row(registry: Registry) -> None:
    pred = get_engine("analytic", registry).predict(Scenario(server="fast", client="slow"))
    row = runner.prediction_row(pred)
    full = pred.to_row()
    full["limit_resource"] = full.pop("limit")
    assert row == full
    assert runner.scenario_key(pred.scenario) == pred.scenario.key()


def test_failures_are_reported_and_retried(tmp_path: Path, registry: Registry) -> None:
    path = write(tmp_path / "s.yaml", "kind: sweep\naxes:\n"
                 "  - {field: implementation, values: [fast, nope]}\n")
    out = tmp_path / "out"
    report = _run(path, registry, out, LocalExecutor(1))
    assert report.computed == 1 and len(report.failed) == 1
    engine, label, reason = report.failed[0]
    assert engine == "analytic" and "nope" in label and "nope" in reason
    assert _run(path, registry, out, LocalExecutor(1)).failed  # retried, fails again


def test_out_folder_of_another_spec_is_refused(tmp_path: Path, registry: Registry) -> None:
    out = tmp_path / "out"
    _run(write(tmp_path / "a.yaml", SPEC.replace("{chunk}", "0")), registry, out,
         LocalExecutor(1))
    other = write(tmp_path / "b.yaml", "kind: sweep\naxes:\n"
                  "  - {field: implementation, values: [fast]}\n")
    with pytest.raises(SpecError, match="holds results of another spec"):
        _run(other, registry, out, LocalExecutor(1))


def test_cli_sweep_writes_parts_and_catalog(tmp_path: Path, models_dir: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "sweep-cli.yaml", SPEC.replace("{chunk}", "5"))
    catalog = tmp_path / "catalog.duckdb"
    args = ["--models", str(models_dir), "--catalog", str(catalog), "sweep", str(path),
            "--quiet", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "12 computed, 0 reused, 0 failed" in out
    assert main(args) == 0
    assert "0 computed, 12 reused" in capsys.readouterr().out
    with Catalog(catalog, read_only=True) as cat:
        rows = cat.df("SELECT server, engine, limit_resource, git_revision, spec_json "
                      "FROM predictions WHERE sweep = 'sweep-cli'")
    assert len(rows) == 12 and set(rows["engine"]) == {"analytic"}
    assert rows["spec_json"].str.contains('"points": 12').all()
    assert main(["--catalog", str(catalog), "data", "sql",
                 "SELECT count(*) AS n FROM predictions"]) == 0
    assert "12" in capsys.readouterr().out


def test_cli_spec_typo_is_one_line(tmp_path: Path, models_dir: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "sweep-typo.yaml", "kind: sweep\nengines: [analytic]\nrecrd: []\n")
    assert main(["--models", str(models_dir), "sweep", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert str(path) in err and "recrd" in err and "allowed: kind, name" in err


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("engine", "ascending"), ("scenario_key", "ascending")])


def test_dask_local_cluster_gives_the_same_table(tmp_path: Path, registry: Registry) -> None:
    path = write(tmp_path / "sweep-d.yaml", SPEC.replace("{chunk}", "4"))
    local = _run(path, registry, tmp_path / "local", LocalExecutor(1))
    dask = _run(path, registry, tmp_path / "dask", DaskExecutor(jobs=2))
    assert dask.computed == 12 and not dask.failed
    assert local.table is not None and dask.table is not None
    assert _sorted(dask.table).equals(_sorted(local.table))
    assert len(PartStore(tmp_path / "dask").part_files("analytic")) == 3  # 3 tasks of 4
