"""Defects a bad-input campaign found in the catalog's commands, one test each.

Each reproduction gives one clear line and exit 2 or the right result: never a
traceback, a silent loss or output without end. Driven through
``quiclab.cli.main`` on small synthetic catalogs (no ../shared).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
import zstandard

from quiclab.cli import main
from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import published, qir10g
from quiclab.datasets.sources.perf import fold_zstd
from quiclab.errors import MAX_MESSAGE_CHARS, DataError

from . import fixtures as fx


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as done:  # argparse's own refusals
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("quiclab: error: "), err
    assert len(lines[0]) <= len("quiclab: error: ") + MAX_MESSAGE_CHARS
    return lines[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """A catalog holding the tiny published points (three rows)."""
    catalog = tmp_path / "catalog.duckdb"
    with Catalog(catalog) as cat:
        published.load(cat, fx.write_published(tmp_path / "pub").parent)
    return catalog


def _points(catalog: Path) -> int:
    with Catalog(catalog, read_only=True) as cat:
        return cat.count("published_points")


# 1 -- a source that yields nothing never replaces rows ------------------------------
def test_a_folder_of_other_csvs_does_not_replace_the_published_points(
        tmp_path: Path, built: Path, capsys: pytest.CaptureFixture[str]):
    """`printf 'a,b\\n1,2\\n' > DIR/y.csv; quiclab data ingest --source DIR` replaced the
    published points with none, exit 0."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "y.csv").write_text("a,b\n1,2\n")
    code, _, err = _run(capsys, "--catalog", str(built), "data", "ingest", "--source", str(other))
    line = _one_error_line(err)
    assert code == 2 and str(other) in line and "y.csv [header]: missing column(s)" in line
    assert "the catalog is unchanged" in line
    assert _points(built) == len(fx.PUBLISHED_ROWS)


def test_a_raw_folder_whose_every_run_is_unreadable_does_not_replace_the_runs(
        tmp_path: Path, catalog: Catalog):
    """The same guard for the raw source: results/ there, but no run could be read."""
    tree = fx.build_qir_tree(tmp_path / "qir")
    qir10g.load(catalog, tree.root, with_perf=False)
    runs = catalog.count("runs")
    assert runs > 0
    empty = tmp_path / "empty"
    (empty / "results" / "x").mkdir(parents=True)
    (empty / "results" / "x" / "notes.txt").write_text("nothing here\n")
    with pytest.raises(DataError, match=r"no qir10g rows could be read .*catalog is unchanged"):
        qir10g.load(catalog, empty, with_perf=False)
    assert catalog.count("runs") == runs


# 2 -- a perf trace cut short is refused, not folded as complete ------------------------
@pytest.mark.parametrize("fraction", [0.99, 0.9, 0.5, 0.01])
def test_a_cut_perf_trace_is_refused_as_truncated(fraction: float):
    text = fx.perf_script_text() * 50
    blob = zstandard.ZstdCompressor().compress(text.encode())
    whole = fold_zstd(blob, "out.perf.zst")
    assert whole
    with pytest.raises(DataError, match=r"^out\.perf\.zst \[zstd\]: truncated zstd stream"):
        fold_zstd(blob[: int(len(blob) * fraction)], "out.perf.zst")


def test_a_cut_perf_trace_in_a_dataset_is_a_skipped_file_not_missing_stacks(
        tmp_path: Path, catalog: Catalog):
    tree = fx.build_qir_tree(tmp_path / "qir")
    trace = tree.perf_rep / "server" / "out.perf.zst"
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) * 99 // 100])
    summary = qir10g.load(catalog, tree.root)
    assert summary.perf_stacks == 0
    assert any(path.endswith("out.perf.zst") and "truncated zstd stream" in reason
               for path, reason in summary.skipped)


# 3 -- tracebacks ------------------------------------------------------------------------
def test_a_word_in_a_numeric_column_of_processed_csv_is_a_skipped_row(
        tmp_path: Path, catalog: Catalog):
    tree = fx.build_qir_tree(tmp_path / "qir")
    rows = [fx.processed_row(1), {**fx.processed_row(2), "goodput": "fast"}]
    tree.processed_csv.write_text(fx.processed_csv_text(rows))
    summary = qir10g.load(catalog, tree.root, with_perf=False)
    assert summary.runs == 4  # every run is kept; only the bad cell is skipped
    assert any(path.endswith("processed.csv") and "'fast' is not a number" in reason
               for path, reason in summary.skipped)


def test_a_published_csv_that_is_not_utf8_is_one_line(tmp_path: Path, catalog: Catalog):
    folder = tmp_path / "pub"
    path = fx.write_published(folder)
    path.write_bytes(path.read_bytes().replace(b"Fig. 6", b"Fig. \xff6"))
    with pytest.raises(DataError, match=r"tiny\.csv: not UTF-8 text \(byte \d+\)"):
        published.load(catalog, folder, strict=True)


def test_export_to_a_path_under_a_file_is_one_line(
        tmp_path: Path, built: Path, capsys: pytest.CaptureFixture[str]):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    code, _, err = _run(capsys, "--catalog", str(built), "data", "export", "published_points",
                        "--to", str(blocker / "x.csv"))
    assert code == 2 and "[--to]: is a file, not a folder" in _one_error_line(err)


@pytest.mark.parametrize("cut", [0, 1000, 12288, 300_000, -4096])
def test_a_truncated_catalog_is_one_line_and_left_as_it_is(
        tmp_path: Path, built: Path, capsys: pytest.CaptureFixture[str], cut: int):
    """`data list`, `data sql` and `data ingest` on a cut catalog raised
    duckdb.IOException; they now refuse it and do not write to it."""
    damaged = tmp_path / "cut.duckdb"
    data = built.read_bytes()
    damaged.write_bytes(data[:cut] if cut >= 0 else data[:len(data) + cut])
    before = _digest(damaged)
    pub = fx.write_published(tmp_path / "pub2").parent
    for argv in (["data", "list"], ["data", "sql", "SELECT count(*) FROM published_points"],
                 ["data", "ingest", "--source", str(pub)]):
        code, _, err = _run(capsys, "--catalog", str(damaged), *argv)
        assert code == 2, (argv, err)
        assert str(damaged) in _one_error_line(err)
    assert _digest(damaged) == before


# 6 -- data sql: a row cap, and whole numbers printed as such ------------------------
def test_data_sql_prints_at_most_200_rows_and_says_so(
        built: Path, capsys: pytest.CaptureFixture[str]):
    code, out, err = _run(capsys, "--catalog", str(built), "data", "sql",
                          "SELECT * FROM range(1000)")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 200
    assert "showed the first 200 rows; more exist" in err
    code, out, _ = _run(capsys, "--catalog", str(built), "data", "sql",
                        "SELECT * FROM range(1000)", "--max-rows", "0", "--format", "csv")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 1000


def test_data_sql_prints_an_integer_sum_as_a_whole_number(
        built: Path, capsys: pytest.CaptureFixture[str]):
    code, out, _ = _run(capsys, "--catalog", str(built), "data", "sql",
                        "SELECT sum(range) AS total FROM range(1006)")
    assert code == 0 and out.split() == ["total", "505515"]  # not 5.055e+05


# 7 -- data export builds no SQL from its arguments -----------------------------------
def test_export_to_a_path_with_quotes_writes_exactly_that_file(
        tmp_path: Path, built: Path, capsys: pytest.CaptureFixture[str]):
    os.chdir(tmp_path)
    name = "x.csv' (FORMAT CSV); SELECT 1; --.csv"
    code, out, _ = _run(capsys, "--catalog", str(built), "data", "export", "published_points",
                        "--to", name)
    assert code == 0 and f"wrote 3 rows to {name}" in out
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == [name]
    assert (tmp_path / name).read_text().startswith("point_id,")


def test_export_refuses_a_table_argument_that_smuggles_statements(
        tmp_path: Path, built: Path, capsys: pytest.CaptureFixture[str]):
    os.chdir(tmp_path)
    before = _digest(built)
    table = "SELECT 1) TO 'f.csv' (FORMAT CSV); DROP TABLE published_points; --"
    code, _, err = _run(capsys, "--catalog", str(built), "data", "export", table,
                        "--to", "g.csv")
    assert code == 2
    _one_error_line(err)
    assert not list(tmp_path.glob("*.csv")) and _digest(built) == before


# 9 -- messages that say what was refused ----------------------------------------------
def test_with_delete_is_named_delete(built: Path, capsys: pytest.CaptureFixture[str]):
    code, _, err = _run(capsys, "--catalog", str(built), "data", "sql",
                        "WITH x AS (SELECT 1) DELETE FROM published_points")
    assert code == 2 and _one_error_line(err).startswith(
        "quiclab: error: sql: DELETE is not allowed")


def test_a_read_only_output_folder_is_one_line(tmp_path: Path, built: Path,
                                               capsys: pytest.CaptureFixture[str]):
    """`data export --to` on a read-only file system (a read-only tmpfs; needs root)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k",
                                            "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("mounting a read-only tmpfs needs root")
    try:
        code, _, err = _run(capsys, "--catalog", str(built), "data", "export",
                            "published_points", "--to", str(ro / "d" / "x.csv"))
        assert code == 2 and "Read-only file system" in _one_error_line(err)
    finally:
        subprocess.run(["umount", str(ro)], check=False)
