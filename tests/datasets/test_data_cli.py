"""`quiclab data sql` and `quiclab data ingest --source`: bad input is one error line.

Driven through ``quiclab.cli.main`` on a fresh catalog in tmp_path (no ../shared).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from quiclab.cli import main
from quiclab.datasets import cli as data_cli
from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import qir10g
from quiclab.errors import DataError

from . import fixtures as fx


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def error(self) -> str:
        """The one ``quiclab: error:`` line (exit 2, no traceback)."""
        assert self.code == 2, (self.code, self.out, self.err)
        assert "Traceback" not in self.err
        lines = self.err.strip().splitlines()
        errors = [line for line in lines if line.startswith("quiclab: error: ")]
        assert len(errors) == 1 and lines[-1] == errors[0], self.err
        return errors[0]


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    catalog = tmp_path / "catalog.duckdb"
    with Catalog(catalog) as cat:  # the schema, with one published point
        cat.upsert("published_points", [{"point_id": "p-1", "document": "002",
                                         "quantity": "goodput", "value": 1.0,
                                         "unit": "Gbit/s"}])

    def run(*args: str) -> Result:
        code = main(["--catalog", str(catalog), *args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    run.catalog = catalog  # type: ignore[attr-defined]
    return run


# -- data sql ---------------------------------------------------------------------
@pytest.mark.parametrize("query", ["", "   ", "-- just a comment", ";", "/* x */ ; ;"])
def test_an_empty_query_is_one_line(cli, query: str):
    assert cli("data", "sql", query).error == (
        "quiclab: error: sql: empty query (no statement to run)")


def test_several_statements_are_refused(cli):
    assert cli("data", "sql", "SELECT 1; SELECT 2").error == (
        "quiclab: error: sql: 2 statements given: run one query at a time "
        "(no ';' between statements)")
    # One statement with a trailing ';' (or comment) is still one.
    assert cli("data", "sql", "SELECT 41 + 1 AS x; -- done").out.split() == ["x", "42"]


def test_copy_is_refused_and_writes_nothing(cli, tmp_path: Path):
    target = tmp_path / "x.csv"
    for query in (f"COPY published_points TO '{target}'",
                  f"EXPLAIN ANALYZE COPY published_points TO '{target}'",
                  f"COPY (SELECT 1) TO '{target}'"):
        line = cli("data", "sql", query).error
        assert line.startswith("quiclab: error: sql: COPY is not allowed: ")
        assert "read-only" in line and "quiclab data export" in line
    assert cli("data", "sql", f"EXPORT DATABASE '{tmp_path / 'dump'}'").error.startswith(
        "quiclab: error: sql: EXPORT is not allowed: ")
    assert not target.exists() and not (tmp_path / "dump").exists()


@pytest.mark.parametrize("query", [
    "DROP TABLE published_points", "INSERT INTO cpus (name) VALUES ('x')",
    "DELETE FROM published_points", "UPDATE cpus SET year = 1", "CREATE TABLE t (x INT)",
    "CREATE TEMP TABLE t AS SELECT 1", "ATTACH 'other.duckdb' AS other", "DETACH other",
    "SET threads = 1", "RESET threads", "INSTALL httpfs", "LOAD httpfs", "CHECKPOINT",
    "VACUUM", "PRAGMA force_checkpoint", "PRAGMA threads = 1", "CALL checkpoint()",
    "COPY FROM DATABASE a TO b", "UPDATE EXTENSIONS", "BEGIN", "PREPARE p AS SELECT 1",
    "USE memory"])
def test_statements_that_are_not_read_only_queries_are_refused(cli, query: str):
    word = query.split()[0].upper()
    line = cli("data", "sql", query).error
    assert line.startswith(f"quiclab: error: sql: {word} is not allowed: "), line
    assert "read-only" in line
    assert cli("data", "sql", "SELECT count(*) AS n FROM published_points").out.split() == [
        "n", "1"]


@pytest.mark.parametrize("query", [
    "SELECT * FROM published_points", "WITH a AS (SELECT 1 AS x) SELECT x FROM a",
    "FROM published_points", "VALUES (1)", "EXPLAIN SELECT 1", "EXPLAIN ANALYZE SELECT 1",
    "DESCRIBE runs", "SHOW TABLES", "SHOW runs", "SUMMARIZE cpus",
    "PRAGMA table_info('runs')", "PRAGMA show_tables", "CALL pragma_table_info('runs')",
    "CALL duckdb_tables()", "-- a comment first\nSELECT 1"])
def test_read_only_queries_still_run(cli, query: str):
    result = cli("data", "sql", query, "--format", "csv")
    assert result.code == 0, result.err


def test_a_syntax_error_is_still_one_line(cli):
    assert cli("data", "sql", "SELEC nonsense").error.startswith(
        "quiclab: error: sql: Parser Error: ")
    with pytest.raises(DataError, match=r"^sql: empty query"):
        data_cli.read_only_statement("")
    assert data_cli.read_only_statement("SELECT 1") == "SELECT 1"


# -- data ingest --source ------------------------------------------------------------
def test_an_empty_source_folder_is_refused_and_keeps_the_catalog(cli, tmp_path: Path):
    tree = fx.build_qir_tree(tmp_path / "qir")
    assert cli("data", "ingest", "--source", str(tree.root), "--no-perf").code == 0
    empty = tmp_path / "empty"
    (empty / "notes").mkdir(parents=True)
    (empty / "notes" / "readme.txt").write_text("nothing here")
    for args in ([], ["--strict"]):
        assert cli("data", "ingest", *args, "--source", str(empty)).error == (
            f"quiclab: error: {empty}: no QIR-10G results/ or published-point CSVs found")
        # Also when a good source comes first: nothing is ingested at all.
        assert cli("data", "ingest", "--source", str(tree.root), "--source", str(empty)
                   ).error.endswith("no QIR-10G results/ or published-point CSVs found")
    with Catalog(cli.catalog, read_only=True) as cat:
        assert cat.count("runs") == 4


def test_a_dataset_without_results_keeps_the_runs(qir_tree: fx.QirTree, tmp_path: Path,
                                                  catalog: Catalog):
    qir10g.load(catalog, qir_tree.root)
    only_mappings = tmp_path / "only-mappings"
    (only_mappings / fx.MAPPING_DIR).mkdir(parents=True)
    (only_mappings / fx.MAPPING_DIR / "lsquic.json").write_text("{}")
    with pytest.raises(DataError) as err:
        qir10g.load(catalog, only_mappings)
    assert str(err.value) == f"{only_mappings}: no QIR-10G results/ found"
    assert catalog.count("runs") == 4
