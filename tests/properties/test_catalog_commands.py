"""Properties of the catalog's commands: any damage to the catalog file, any
``data sql`` query and any ``data export`` arguments give a result or one bounded line
(exit 2), and a refusal leaves the catalog as it was."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import published
from tests.datasets import fixtures as fx

from .conftest import examples
from .harness import assert_clean, digest, run_cli
from .strategies import damaged

pytestmark = pytest.mark.properties


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small catalog: the schema, the tiny published points and two runs tables' rows."""
    folder = tmp_path_factory.mktemp("built")
    pub = fx.write_published(folder / "pub").parent
    catalog = folder / "catalog.duckdb"
    with Catalog(catalog) as cat:
        published.load(cat, pub)
    return catalog


@pytest.fixture(scope="module")
def published_dir(built: Path) -> Path:
    return built.parent / "pub"


COMMANDS = [["data", "list"], ["data", "info", "published_points"], ["data", "summary"],
            ["data", "sql", "SELECT count(*), sum(value) FROM published_points"],
            ["data", "export", "published_points", "--to", "out.csv"]]


def _damaged_catalog(tmp_path_factory, built: Path, published_dir: Path, data) -> None:
    folder = tmp_path_factory.mktemp("damaged")
    path = folder / "catalog.duckdb"
    path.write_bytes(data.draw(damaged(built.read_bytes())))
    before = digest(path)
    command = data.draw(st.sampled_from([*COMMANDS, ["data", "ingest", "--source",
                                                     str(published_dir)]]))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        outcome = run_cli("--catalog", str(path), *command)
    finally:
        os.chdir(cwd)
    if assert_clean(outcome, (str(path), "sql", "published_points")):
        assert digest(path) == before, "a refused command changed the catalog"


@settings(max_examples=examples(15))
@given(data=st.data())
def test_a_damaged_catalog_is_read_or_refused_and_kept(tmp_path_factory, built,
                                                      published_dir, data):
    _damaged_catalog(tmp_path_factory, built, published_dir, data)


@pytest.mark.slow
@settings(max_examples=examples(15, 200))
@given(data=st.data())
def test_a_damaged_catalog_is_read_or_refused_and_kept_long(tmp_path_factory, built,
                                                           published_dir, data):
    _damaged_catalog(tmp_path_factory, built, published_dir, data)


SQL_BITS = st.sampled_from([
    "SELECT", "WITH x AS (SELECT 1)", "DELETE FROM published_points", "DROP TABLE runs",
    "COPY published_points TO 'x.csv'", "ATTACH 'x.db'", "INSTALL httpfs", "SET threads=1",
    "PRAGMA table_info('runs')", "CALL pragma_version()", "EXPLAIN ANALYZE", "CHECKPOINT",
    "*", "FROM published_points", "range(10)", "sum(value)", ";", "--", "/*", "*/", "'",
    '"', "(", ")", "1e400", "9" * 60, "LIMIT", "UNION ALL", "read_csv('/etc/passwd')",
    "EXPORT DATABASE 'd'", "INSERT INTO runs VALUES (1)", "UPDATE cpus SET year = 1",
    "CREATE TABLE t AS SELECT 1", "VACUUM", "DETACH", "USE", "LOAD x", "SUMMARIZE"])
QUERIES = st.one_of(st.lists(st.one_of(SQL_BITS, st.text(max_size=6)), max_size=10)
                    .map(" ".join), st.text(max_size=60))


@settings(max_examples=examples(40))
@given(query=QUERIES, fmt=st.sampled_from(["table", "csv", "json"]),
       cap=st.sampled_from(["0", "1", "200", "-1", "x"]))
def test_any_query_is_answered_or_refused_and_the_catalog_is_unchanged(
        tmp_path_factory, built, query, fmt, cap):
    path = tmp_path_factory.mktemp("sql") / "catalog.duckdb"
    shutil.copy(built, path)
    before = digest(path)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        outcome = run_cli("--catalog", str(path), "data", "sql", query, "--format", fmt,
                          "--max-rows", cap)
    finally:
        os.chdir(cwd)
    assert_clean(outcome, ("sql", "--max-rows"))
    assert digest(path) == before, "data sql changed the catalog"
    assert sorted(p.name for p in path.parent.iterdir()) == ["catalog.duckdb"]


NAMES = st.one_of(st.text(max_size=20).filter(lambda n: not n.startswith(("/", "~"))),
                  st.sampled_from(
    ["x.csv", "x.parquet", "x.txt", "a/b.csv", "../up.csv", "x.csv' (FORMAT CSV); --.csv",
     "it's.parquet", ".csv", "/dev/null/x.csv", "out", "a b.csv", "\\.csv"]))
TABLES = st.one_of(st.sampled_from(
    ["published_points", "runs", "perf_categories", "meta", "nope", 'pu"blished_points',
     "SELECT 1 AS a", "SELECT * FROM published_points WHERE value > 10",
     "SELECT 1) TO 'f.csv' (FORMAT CSV); DROP TABLE runs; --", "WITH x AS (SELECT 1) "
     "SELECT * FROM x", "COPY runs TO 'y.csv'"]), QUERIES)


@settings(max_examples=examples(50))
@given(table=TABLES, name=NAMES)
def test_export_writes_exactly_its_file_or_is_refused(tmp_path_factory, built, table, name):
    work = tmp_path_factory.mktemp("export")
    path = work / "catalog.duckdb"
    shutil.copy(built, path)
    before = digest(path)
    (work / "run").mkdir()
    cwd = os.getcwd()
    os.chdir(work / "run")
    try:
        outcome = run_cli("--catalog", str(path), "data", "export", table, "--to", name)
    finally:
        os.chdir(cwd)
    refused = assert_clean(outcome, ("--to", "export", "sql", "table", str(path)))
    assert digest(path) == before, "data export changed the catalog"
    written = sorted(str(p.relative_to(work)) for p in work.rglob("*")
                     if p.is_file() and p != path)
    if refused:
        assert written == [], written
    else:
        target = (work / "run" / name).resolve()
        assert written == [str(target.relative_to(work))], (written, name)
