"""The sweep runner: parts, resume, failures, catalog rows, the CLI, and the Dask executor."""

from __future__ import annotations

import json
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
    path = write(tmp_path / "sweep-a.yaml", SPEC.replace("{chunk}", "1"))
    out = tmp_path / "out"
    first = _run(path, registry, out, LocalExecutor(1))
    assert (first.points, first.computed, first.reused, first.failed) == (12, 12, 0, [])
    table = first.table
    assert table is not None and table.num_rows == 12
    assert len(set(table.column("scenario_key").to_pylist())) == 12
    assert {"goodput_mbps", "limit_resource", "server_cpu_util", "rtt_ms", "model_versions"} \
        <= set(table.column_names)
    assert not list(out.glob("parts/*/.*"))  # no temporaries left
    store = PartStore(out)
    parts = store.part_files("analytic")
    assert len(parts) == 12  # chunk 1: one part per point, named by its key
    again = _run(path, registry, out, LocalExecutor(1))
    assert (again.computed, again.reused) == (0, 12)
    assert again.table is not None and again.table.equals(table)
    # Delete one part: exactly that point is computed again.
    gone = parts[5]
    gone.unlink()
    resumed = _run(path, registry, out, LocalExecutor(1))
    assert (resumed.computed, resumed.reused, resumed.failed) == (1, 11, [])
    assert gone.is_file() and len(store.part_files("analytic")) == 12  # that point's part
    assert resumed.table is not None and resumed.table.equals(table)


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


def test_cli_spec_not_utf8_is_one_line(tmp_path: Path, models_dir: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sweep-latin1.yaml"
    path.write_bytes(b"kind: sweep\ndescription: caf\xe9\n")
    for command in ("sweep", "reproduce"):
        assert main(["--models", str(models_dir), command, str(path), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err == f"quiclab: error: {path}: not UTF-8 text (byte 28)\n"


# -- what the content hash covers -----------------------------------------------------

CPU_SPEC = """\
kind: sweep
base: {cpu: Test CPU X}
axes:
  - {field: implementation, values: [fast, slow]}
"""


def _cpus_json(folder: Path, max_ghz: float) -> None:
    """A cpus.json beside the models (as for models fitted on another host)."""
    packaged = json.loads((Path(runner.__file__).parents[1] / "models" / "cpus.json")
                          .read_text())
    cpu = {**next(c for c in packaged["cpus"] if c["name"] == "AMD EPYC 7543"),
           "name": "Test CPU X", "max_ghz": max_ghz}
    (folder / "cpus.json").write_text(json.dumps({"schema": "quiclab.cpus/1", "cpus": [cpu]}))


def test_a_changed_cpu_catalog_recomputes_a_resumed_sweep(
        tmp_path: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Halving a CPU's clock in the models' cpus.json changes every prediction on it:
    the rerun must compute again (new content hash, new folder), not reuse."""
    _cpus_json(models_dir, 3.7)
    path = write(tmp_path / "sweep-cpu.yaml", CPU_SPEC)
    args = ["--models", str(models_dir), "--catalog", str(tmp_path / "c.duckdb"), "sweep",
            str(path), "--quiet"]
    assert main(args) == 0
    assert "2 computed, 0 reused" in capsys.readouterr().out
    assert main(args) == 0
    assert "0 computed, 2 reused" in capsys.readouterr().out  # unchanged: resumed
    _cpus_json(models_dir, 3.7 / 2)
    assert main(args) == 0
    assert "2 computed, 0 reused" in capsys.readouterr().out
    with Catalog(tmp_path / "c.duckdb", read_only=True) as cat:
        rows = cat.df("SELECT server, goodput_mbps, model_versions, content_hash "
                      "FROM predictions WHERE sweep = 'sweep-cpu' ORDER BY server")
    assert len(rows) == 2 and rows["content_hash"].nunique() == 1
    assert json.loads(rows["model_versions"].iloc[0])["cpus"] == \
        Registry.load(models_dir).versions()["cpus"]


def test_model_versions_cover_cpus_testbeds_and_the_models_code(models_dir: Path) -> None:
    """What the content hash, the reproduction cache and validate's staleness check
    compare: besides the cost models, the CPU catalog, pipelines.json, the testbeds and
    the Python of quiclab.models."""
    from quiclab.experiments.validate import stale_reason

    before = Registry.load(models_dir).versions()
    assert {"cpus", "pipelines", "testbeds", "models-code"} <= set(before)
    _cpus_json(models_dir, 2.0)
    with_cpu = Registry.load(models_dir).versions()
    assert with_cpu["cpus"] != before["cpus"]
    assert runner.content_hash({}, with_cpu) != runner.content_hash({}, before)
    repro = models_dir.parent / "repro"
    repro.mkdir()
    (repro / "models.json").write_text(json.dumps({"versions": with_cpu}))
    assert stale_reason(repro, Registry.load(models_dir)) is None
    _cpus_json(models_dir, 2.5)
    assert "1 differ: cpus" in str(stale_reason(repro, Registry.load(models_dir)))
    testbeds = json.loads((Path(runner.__file__).parents[1] / "models" / "fitted"
                           / "testbeds.json").read_text())
    (models_dir / "testbeds.json").write_text(json.dumps(testbeds))
    fitted = Registry.load(models_dir).versions()
    testbeds["testbeds"]["koenig25"]["fields"]["base_rtt_us"] += 10
    (models_dir / "testbeds.json").write_text(json.dumps(testbeds))
    assert Registry.load(models_dir).versions()["testbeds"] != fitted["testbeds"]


# -- failures of one engine or point keep the rest ---------------------------------------

@pytest.mark.parametrize("jobs", [1, 2])
def test_an_engine_that_cannot_be_built_fails_its_points_only(
        tmp_path: Path, registry: Registry, jobs: int) -> None:
    """Options the spec did not give (runtime ones) can still break an engine: its
    points fail with the reason, the other engine's results are kept and written."""
    path = write(tmp_path / "s.yaml", "kind: sweep\nbase: {transfer_bytes: 1000000}\naxes:\n"
                 "  - {field: implementation, values: [fast, slow]}\n")
    spec = load_sweep(path)
    report = runner.run_points(
        name="s", kind="sweep", spec=spec.resolved(), scenarios=spec.scenarios(),
        engines=("analytic", "des"), engine_options={"des": {"granularity": "banana"}},
        registry=registry, out=tmp_path / "out", executor=LocalExecutor(jobs), chunk=1,
        progress=False)
    assert report.computed == 2 and report.computed_by["analytic"] == 2
    assert [(e, r) for e, _, r in report.failed] == \
        [("des", "ValueError: granularity='banana': allowed \"packet\" | \"batch\"")] * 2
    assert report.table is not None
    assert set(report.table.column("engine").to_pylist()) == {"analytic"}
    written = runner.to_catalog(tmp_path / "c.duckdb", report.table, name="s", kind="sweep",
                                provenance=report.provenance)
    assert written == (2, 0)


# -- damaged part files ----------------------------------------------------------------

def test_a_truncated_part_is_set_aside_and_its_point_recomputed(
        tmp_path: Path, registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "sweep-t.yaml", SPEC.replace("{chunk}", "1"))
    out = tmp_path / "out"
    first = _run(path, registry, out, LocalExecutor(1))
    part = PartStore(out).part_files("analytic")[3]
    part.write_bytes(part.read_bytes()[:100])  # a full disk or a cut copy
    again = _run(path, registry, out, LocalExecutor(1))
    assert (again.computed, again.reused, again.failed) == (1, 11, [])
    assert again.table is not None and first.table is not None
    assert again.table.equals(first.table)
    corrupt = part.with_name(part.name + ".corrupt")
    assert part.is_file() and corrupt.is_file()
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"{part}: unreadable part (ArrowInvalid: ")
    assert err.endswith(f"moved aside to {corrupt.name}, its points are computed again")
    last = _run(path, registry, out, LocalExecutor(1))
    assert (last.computed, last.reused) == (0, 12) and not capsys.readouterr().err


def test_a_part_damaged_inside_is_set_aside_when_read(tmp_path: Path,
                                                      registry: Registry) -> None:
    """A batch part whose keys still read (intact footer and key column) but whose results
    do not: it is found when all rows are read, moved aside, and its points computed;
    points that fail are still tried once a run."""
    import pyarrow.parquet as pq

    path = write(tmp_path / "sweep-b.yaml", SPEC.replace("{chunk}", "0")
                 .replace("values: [fast, slow]", "values: [fast, slow, nope]"))
    out = tmp_path / "out"
    first = _run(path, registry, out, LocalExecutor(1))
    assert (first.computed, len(first.failed)) == (12, 6)
    (part,) = PartStore(out).part_files("analytic")
    meta = pq.ParquetFile(part).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    chunk = meta.row_group(0).column(names.index("goodput_mbps"))
    data = bytearray(part.read_bytes())
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    part.write_bytes(bytes(data))
    assert len(PartStore(out).done_keys("analytic")) == 12  # the keys still read
    again = _run(path, registry, out, LocalExecutor(1))
    assert (again.computed, again.reused, len(again.failed)) == (12, 0, 6)
    assert again.table is not None and first.table is not None
    assert again.table.equals(first.table)
    assert part.with_name(part.name + ".corrupt").is_file()


# -- the catalog holds one version of a sweep ---------------------------------------------

def test_a_rerun_of_an_edited_spec_replaces_the_sweeps_old_rows(
        tmp_path: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "sweep-ed.yaml", SPEC.replace("{chunk}", "0"))
    catalog = tmp_path / "catalog.duckdb"
    args = ["--models", str(models_dir), "--catalog", str(catalog), "sweep", str(path),
            "--quiet"]
    other = write(tmp_path / "sweep-other.yaml", "kind: sweep\naxes:\n"
                  "  - {field: implementation, values: [fast]}\n")
    assert main(["--models", str(models_dir), "--catalog", str(catalog), "sweep", str(other),
                 "--quiet"]) == 0
    assert main(args) == 0
    assert "catalog: 12 rows in predictions —" in capsys.readouterr().out
    write(path, SPEC.replace("{chunk}", "0").replace("[0, 1, 5]", "[0, 10]"))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "catalog: 8 rows in predictions, replacing 12 rows of an earlier spec or model " \
           "set —" in out
    with Catalog(catalog, read_only=True) as cat:
        rows = cat.df("SELECT sweep, rtt_ms, content_hash FROM predictions")
    edited = rows[rows["sweep"] == "sweep-ed"]
    assert len(edited) == 8 and edited["content_hash"].nunique() == 1
    assert sorted(set(edited["rtt_ms"])) == [0.0, 10.0]
    assert (rows["sweep"] == "sweep-other").sum() == 1  # other sweeps are left alone
    assert main(args) == 0  # the same spec again: nothing to replace
    assert "replacing" not in capsys.readouterr().out


def test_a_part_the_os_cannot_read_is_not_set_aside() -> None:
    """Only a damaged part is renamed: an OS error with an errno (permissions, a
    full disk) is the machine's, and the part may be fine."""
    import errno

    import pyarrow as pa

    from quiclab.experiments.store import damaged

    assert damaged(pa.ArrowInvalid("Parquet magic bytes not found"))
    assert damaged(OSError("Couldn't deserialize thrift"))
    assert not damaged(PermissionError(errno.EACCES, "Permission denied"))
    assert not damaged(OSError(errno.ENOSPC, "No space left on device"))
