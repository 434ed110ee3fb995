"""The `quiclab` command, driven through ``quiclab.cli.main`` on the synthetic QIR tree.

Every catalog lives in tmp_path; QUICLAB_DATA_DIR points there too, so the
user's own catalog is never touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from quiclab.cli import main
from tests.datasets import fixtures as fx


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``cli(*args)`` runs ``quiclab --catalog <tmp> *args`` and captures its output."""
    monkeypatch.setenv("QUICLAB_DATA_DIR", str(tmp_path / "data-dir"))
    monkeypatch.delenv("QUICLAB_CATALOG", raising=False)
    catalog = tmp_path / "catalog.duckdb"

    def run(*args: str, catalog_path: Path | None = catalog) -> Result:
        argv = ["--catalog", str(catalog_path), *args] if catalog_path else list(args)
        code = main(argv)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    run.catalog = catalog  # type: ignore[attr-defined]
    return run


@pytest.fixture
def tree(tmp_path: Path) -> fx.QirTree:
    return fx.build_qir_tree(tmp_path / "qir")


@pytest.fixture
def ingested(cli, tree: fx.QirTree):
    result = cli("data", "ingest", "--source", str(tree.root))
    assert result.code == 0, result.err
    return cli


def _one_error_line(result: Result) -> str:
    """Exit 2 and one ``quiclab: error:`` line, the last on stderr (progress
    lines such as "ingesting …" may come before it), and no traceback."""
    assert result.code == 2
    lines = result.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("quiclab: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.err
    assert "Traceback" not in result.err
    return errors[0]


# -- ingest -----------------------------------------------------------------
def test_ingest_fixture_folder(cli, tree: fx.QirTree):
    result = cli("data", "ingest", "--source", str(tree.root))
    assert result.code == 0
    assert "QIR-10G raw data: 4 runs (baseline 1, buffer 2, perf 1)" in result.out
    assert "skipped 0 file(s)" in result.out
    assert "raw vs processed.csv: 2 rows compared" in result.out
    assert f"catalog: {cli.catalog}" in result.out
    assert cli.catalog.is_file()


def test_ingest_tarball_and_published_points_together(cli, tree: fx.QirTree, tmp_path: Path):
    tarball = fx.pack_tarball(tree, tmp_path / "qir.tar.xz")
    points = tmp_path / "published"
    fx.write_published(points)
    result = cli("data", "ingest", "--source", str(tarball), "--source", str(points))
    assert result.code == 0, result.err
    assert "4 runs" in result.out
    assert f"published points: {len(fx.PUBLISHED_ROWS)} rows from {points}, skipped 0" \
        in result.out
    listed = cli("data", "list").out
    assert any(line.split() == ["published_points", "3"] for line in listed.splitlines())


def test_ingest_default_catalog_goes_to_the_data_dir(cli, tree: fx.QirTree, tmp_path: Path):
    result = cli("data", "ingest", "--source", str(tree.root), catalog_path=None)
    assert result.code == 0
    assert (tmp_path / "data-dir" / "catalog.duckdb").is_file()


def test_ingest_broken_file_is_one_line_and_strict_makes_it_an_error(cli, tree: fx.QirTree):
    pidstat = tree.buffer_rep(2) / "server" / "pidstat.txt"
    pidstat.write_text(pidstat.read_text() + "@@ garbage @@\n")
    result = cli("data", "ingest", "--source", str(tree.root))
    assert result.code == 0
    assert "skipped 1 file(s):" in result.out
    assert f"    {tree.rel(pidstat)}: [pidstat] line " in result.out
    line = _one_error_line(cli("data", "ingest", "--strict", "--source", str(tree.root)))
    assert tree.rel(pidstat) in line and "not a pidstat line" in line


def test_ingest_bad_published_csv(cli, tmp_path: Path):
    points = tmp_path / "published"
    fx.write_published(points, [*fx.PUBLISHED_ROWS, "t-004,002,4.6,text,goodput,fast,%,,,h3,"
                                                    "text,"])
    result = cli("data", "ingest", "--source", str(points))
    assert result.code == 0
    assert "rows from" in result.out and "skipped 1" in result.out
    assert "[value] 'fast' is not a number" in result.out
    line = _one_error_line(cli("data", "ingest", "--strict", "--source", str(points)))
    assert "tiny.csv:5 [value]" in line


def test_ingest_corrupt_tarball_and_missing_source(cli, tmp_path: Path):
    bogus = tmp_path / "bogus.tar.xz"
    bogus.write_bytes(b"no archive here" * 50)
    assert str(bogus) in _one_error_line(cli("data", "ingest", "--source", str(bogus)))
    line = _one_error_line(cli("data", "ingest", "--source", str(tmp_path / "nowhere")))
    assert "dataset source not found" in line


# -- list, info, sql, export, summary -------------------------------------------
def test_list(ingested):
    counts = {}
    for line in ingested("data", "list").out.splitlines():
        name, count = line.split()
        counts[name] = int(count.replace(",", ""))
    assert counts["runs"] == 4 and counts["cpu_samples"] == 30 and counts["perf_stacks"] == 5
    assert {"perf_categories", "processed_check", "sources", "files", "ingest_issues"} <= set(
        counts)


def test_info(ingested):
    result = ingested("data", "info", "runs")
    assert result.code == 0
    assert result.out.splitlines()[0] == "runs: 4 rows"
    columns = dict(line.split() for line in result.out.splitlines()[1:])
    assert columns["goodput_mbps"] == "DOUBLE" and columns["run_id"] == "VARCHAR"
    assert "no table 'nope'" in _one_error_line(ingested("data", "info", "nope"))


QUERY = ("SELECT experiment, count(*) AS runs, round(median(goodput_mbps), 1) AS goodput "
         "FROM runs GROUP BY 1 ORDER BY 1")


def test_sql_table(ingested):
    result = ingested("data", "sql", QUERY)
    assert result.code == 0
    lines = result.out.strip().splitlines()
    assert lines[0].split() == ["experiment", "runs", "goodput"]
    assert [line.split()[:2] for line in lines[1:]] == [["baseline", "1"], ["buffer", "2"],
                                                         ["perf", "1"]]


def test_sql_csv(ingested):
    result = ingested("data", "sql", QUERY, "--format", "csv")
    lines = result.out.strip().splitlines()
    assert lines[0] == "experiment,runs,goodput"
    assert lines[1] == f"baseline,1,{round(fx.goodput_mbps(fx.BASELINE_RUNTIME_S), 1)}"


def test_sql_json(ingested):
    rows = json.loads(ingested("data", "sql", QUERY, "--format", "json").out)
    assert [(r["experiment"], r["runs"]) for r in rows] == [("baseline", 1), ("buffer", 2),
                                                            ("perf", 1)]
    assert rows[2]["goodput"] == round(fx.goodput_mbps(fx.PERF_RUNTIME_S), 1)


@pytest.mark.parametrize("query", ["SELEC nonsense", "SELECT no_such_column FROM runs",
                                   "SELECT * FROM no_such_table"])
def test_bad_sql_is_one_error_line(ingested, query: str):
    line = _one_error_line(ingested("data", "sql", query))
    assert line.startswith("quiclab: error: sql: ")


def test_sql_is_read_only(ingested):
    line = _one_error_line(ingested("data", "sql", "DELETE FROM runs"))
    assert "read-only" in line.lower()
    assert "4 runs" not in line and ingested("data", "info", "runs").out.startswith("runs: 4")


def test_sql_without_a_catalog(cli):
    assert "catalog does not exist" in _one_error_line(cli("data", "sql", "SELECT 1"))


def test_export_parquet_and_csv(ingested, tmp_path: Path):
    target = tmp_path / "out" / "x.parquet"
    result = ingested("data", "export", "runs", "--to", str(target))
    assert result.code == 0 and f"wrote 4 rows to {target}" in result.out
    table = pq.read_table(target)
    assert table.num_rows == 4
    assert {"run_id", "goodput_mbps", "server_cpu_pct"} <= set(table.column_names)
    assert sorted(table.column("experiment").to_pylist()) == ["baseline", "buffer", "buffer",
                                                              "perf"]
    csv_target = tmp_path / "shares.csv"
    result = ingested("data", "export", "SELECT category, share FROM perf_categories",
                      "--to", str(csv_target))
    assert result.code == 0
    assert csv_target.read_text().splitlines()[0] == "category,share"
    assert "choose a .parquet or .csv" in _one_error_line(
        ingested("data", "export", "runs", "--to", str(tmp_path / "x.xlsx")))
    assert "no table 'nope'" in _one_error_line(
        ingested("data", "export", "nope", "--to", str(tmp_path / "y.parquet")))


def test_summary(ingested):
    result = ingested("data", "summary")
    assert result.code == 0
    assert "buffer" in result.out and "lsquic" in result.out
    assert "runs: 4  cpu_samples: 30  perf_stacks: 5" in result.out


# -- the other command groups -----------------------------------------------------
def test_predict_help(cli, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        main(["predict", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: quiclab predict")


@pytest.mark.parametrize(("argv", "line"), [
    (["predict", "--runs", "abc"], "quiclab: error: predict: argument --runs: expected a "
                                   "whole number 1 … 10000, got 'abc' "
                                   "(see `quiclab predict --help`)"),
    (["data", "sql"], "quiclab: error: data sql: the following arguments are required: query "
                      "(see `quiclab data sql --help`)"),
])
def test_a_usage_error_is_one_line_without_the_usage_dump(
        argv: list[str], line: str, capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == line + "\n"


@pytest.mark.parametrize(("text", "extra", "first"), [
    ("server: nosuch\n", [], "sc.yaml: server='nosuch' is impossible: allowed one of: "),
    ("server: quiche\ncpu: Nosuch\n", [], "sc.yaml: cpu='Nosuch' is impossible: "),
    # a value given on the command line is not blamed on the file
    ("server: quiche\n", ["--server", "nosuch"], "--server: server='nosuch' is impossible: "),
    ("cpu: Nosuch\n", ["--set", "cpu=Foo"], "--set: cpu='Foo' is impossible: "),
])
def test_predict_unknown_name_from_a_scenario_file_names_the_file(
        cli, tmp_path: Path, text: str, extra: list[str], first: str):
    spec = tmp_path / "sc.yaml"
    spec.write_text(text)
    result = cli("predict", "--scenario", str(spec), *extra, catalog_path=None)
    assert result.code == 2 and result.out == ""
    line = result.err.removeprefix("quiclab: error: ")
    assert "\n" not in line.rstrip("\n")
    assert line.removeprefix(str(tmp_path) + "/").startswith(first)


@pytest.mark.parametrize(("text", "args", "first"), [
    # each value is blamed on where it came from: the --set item, the flag, the file
    ("server: quiche\n", ["--set", "mtu_bytes=100"], "--set: mtu_bytes=100 is impossible"),
    ("server: quiche\n", ["--client", ""], "--client: client='' is impossible"),
    ("mtu_bytes: 100\n", [], "sc.yaml: mtu_bytes=100 is impossible"),
    # PyYAML keeps the last of two equal keys without a word; a scenario file may not
    ("mtu_bytes: 1500\nmtu_bytes: 9000\n", [], "sc.yaml: not valid YAML: line 2, column 1: "
                                               "duplicate key 'mtu_bytes'"),
    ("server: [lsquic\n", [], "sc.yaml: not valid YAML: line 2, column 1: "),
])
def test_predict_names_the_argument_or_file_and_line_of_a_bad_value(
        cli, tmp_path: Path, text: str, args: list[str], first: str):
    spec = tmp_path / "sc.yaml"
    spec.write_text(text)
    result = cli("predict", "--scenario", str(spec), *args, catalog_path=None)
    line = _one_error_line(result).removeprefix("quiclab: error: ")
    assert line.removeprefix(str(tmp_path) + "/").startswith(first), line


@pytest.mark.parametrize(("text", "first"), [
    ('{"mtu_bytes": 9000,}', "sc.json: not valid JSON: line 1, column 20: "),
    ('{"mtu_bytes": 1500, "mtu_bytes": 9000}',
     "sc.json: not valid JSON: duplicate key 'mtu_bytes'"),
    ('[1, 2]', "sc.json: expected an object of Scenario fields"),
])
def test_predict_reads_a_json_scenario_as_strict_json(cli, tmp_path: Path, text: str, first: str):
    spec = tmp_path / "sc.json"
    spec.write_text(text)
    line = _one_error_line(cli("predict", "--scenario", str(spec), catalog_path=None))
    assert line.removeprefix("quiclab: error: " + str(tmp_path) + "/").startswith(first), line


def test_predict_refuses_a_scenario_file_that_is_not_utf8(cli, tmp_path: Path):
    spec = tmp_path / "sc.yaml"
    spec.write_bytes(b"mtu_bytes: 9000\n\xff\xfe garbage\n")
    result = cli("predict", "--scenario", str(spec), catalog_path=None)
    assert _one_error_line(result) == f"quiclab: error: {spec}: not UTF-8 text (byte 16)"


def test_predict_refuses_a_directory_as_scenario_file(cli, tmp_path: Path):
    result = cli("predict", "--scenario", str(tmp_path), catalog_path=None)
    assert _one_error_line(result) == (f"quiclab: error: {tmp_path}: "
                                       "is a directory, not a scenario file")


def test_predict_runs_summarises_the_des_runs(cli):
    """--runs N simulates runs 0 … N−1 and prints their goodput's mean and spread;
    --json gives every run and the summary."""
    from quiclab.models.registry import Registry
    from quiclab.sim.des import DesEngine
    from quiclab.sim.scenario import Scenario

    fields = ["--set", "transfer_bytes=5000000", "loss_pct=1", "rtt_ms=1"]
    result = cli("predict", "--engine", "des", "--runs", "3", "--json", *fields,
                 catalog_path=None)
    assert result.code == 0, result.err
    data = json.loads(result.out)
    engine = DesEngine(Registry.packaged())
    base = Scenario(transfer_bytes=5_000_000, loss_pct=1.0, rtt_ms=1.0)
    goodput = [engine.predict(base.with_(run=r)).goodput_mbps for r in range(3)]
    assert [p["goodput_mbps"] for p in data["predictions"]] == pytest.approx(goodput)
    assert data["runs"] == 3 and data["goodput_mean_mbps"] == pytest.approx(sum(goodput) / 3)
    assert data["goodput_min_mbps"] == min(goodput) and data["goodput_sd_mbps"] > 0
    text = cli("predict", "--engine", "des", "--runs", "3", *fields, catalog_path=None).out
    assert f"runs      3 (run 0–2): goodput mean {sum(goodput) / 3:.1f}" in text


def test_predict_runs_is_checked_and_ignored_by_the_analytic_engine(cli):
    with pytest.raises(SystemExit) as done:  # argparse's one line: 1 … 10000
        cli("predict", "--runs", "0", catalog_path=None)
    assert done.value.code == 2
    result = cli("predict", "--runs", "3", catalog_path=None)
    assert result.code == 0 and "the analytic engine is deterministic; one run" in result.err
    assert "runs " not in result.out


def test_no_command_prints_help(cli):
    result = cli(catalog_path=None)
    assert result.code == 0 and result.out.startswith("usage: quiclab")
