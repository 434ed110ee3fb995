"""The curated published points: the packaged CSVs, and malformed ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import published
from quiclab.errors import DataError

from . import fixtures as fx


def _issues(catalog: Catalog) -> list[tuple[str, str | None, str]]:
    return catalog.con.execute("SELECT path, field, reason FROM ingest_issues "
                               "WHERE source = 'published' ORDER BY path").fetchall()


def test_packaged_points_load_with_provenance(catalog: Catalog):
    n = published.load(catalog)
    assert n == catalog.count("published_points") > 100
    documents = {r[0] for r in catalog.con.execute(
        "SELECT DISTINCT document FROM published_points").fetchall()}
    assert documents == {"000", "001", "002", "003", "004"}
    source = catalog.con.execute("SELECT runs, skipped, parser_version FROM sources "
                                 "WHERE source = 'published'").fetchone()
    assert source == (n, 0, published.PARSER_VERSION)
    files = {r[0] for r in catalog.con.execute(
        "SELECT path FROM files WHERE source = 'published'").fetchall()}
    assert files == {p.name for p in published.packaged_dir().glob("*.csv")}
    # Typed columns: numbers are numbers, booleans booleans, unknowns NULL.
    row = catalog.con.execute("SELECT value, link_gbps, transfer_bytes, source_file "
                              "FROM published_points WHERE point_id = 'kempf24-001'").fetchone()
    assert row == (50.0, 10.0, 8589934592, "kempf24.csv")


def test_read_csv_types_and_empty_cells(tmp_path: Path):
    path = fx.write_published(tmp_path, [
        "t-001,002,4.6,Fig. 6,goodput,3250,Mbit/s,lsquic,,h3,text,"])
    (row,) = published.read_csv(path)
    assert row["value"] == 3250.0 and row["client"] is None and row["gso"] is None
    assert row["source_file"] == "tiny.csv"


BAD_ROWS = {
    "bad number": ("t-002,002,4.6,text,goodput,fast,Mbit/s,,,h3,text,", "value",
                   "'fast' is not a number"),
    "not finite": ("t-002,002,4.6,text,goodput,nan,Mbit/s,,,h3,text,", "value",
                   "not a finite number"),
    "empty required cell": ("t-002,002,4.6,text,,1,Mbit/s,,,h3,text,", "quantity",
                            "required cell is empty"),
    "unknown unit": ("t-002,002,4.6,text,goodput,1,Mbit/fortnight,,,h3,text,", "unit",
                     "'Mbit/fortnight' is not a known unit: allowed Mbit/s, Gbit/s, %"),
    # csv.DictReader would silently drop the cells beyond the header.
    "more cells than the header": ("t-002,002,4.6,text,goodput,1,Mbit/s,,,h3,text,,x,y", None,
                                   "14 fields, header has 12"),
    # ... and would read the cells a cut row lacks as empty: a bound as exact.
    "fewer cells than the header": ("t-002,002,4.6,text,goodput,1,Mbit/s,,,h3", "stated",
                                    "10 fields, header has 12 (a cut row?)"),
    "negative magnitude": ("t-002,002,4.6,text,goodput,-4819,Mbit/s,,,h3,text,", "value",
                           "-4819 is negative, which a 'goodput' cannot be"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_a_bad_row_is_skipped_alone_or_refused_when_strict(case: str, tmp_path: Path,
                                                           catalog: Catalog):
    line, field, reason = BAD_ROWS[case]
    rows = [fx.PUBLISHED_ROWS[0], line, fx.PUBLISHED_ROWS[2]]
    path = fx.write_published(tmp_path, rows)
    with pytest.raises(DataError) as err:
        published.load(catalog, tmp_path, strict=True)
    assert err.value.path == f"{path}:3" and err.value.field == field
    assert reason in err.value.reason
    assert catalog.count("published_points") == 0

    assert published.load(catalog, tmp_path, strict=False) == 2
    assert _issues(catalog) == [(f"{path}:3", field, err.value.reason)]
    assert catalog.con.execute("SELECT skipped FROM sources WHERE source = 'published'"
                               ).fetchone() == (1,)


def test_unknown_column_skips_the_file(tmp_path: Path, catalog: Catalog):
    fx.write_published(tmp_path, name="a.csv")
    bad = fx.write_published(tmp_path, ["x-001,002,4.6,text,goodput,1,%,,,h3,text,,oops"],
                             name="b.csv", header=fx.PUBLISHED_HEADER + ",colour")
    with pytest.raises(DataError, match="unknown column"):
        published.load(catalog, tmp_path, strict=True)
    assert published.load(catalog, tmp_path, strict=False) == len(fx.PUBLISHED_ROWS)
    ((path, field, reason),) = _issues(catalog)
    assert (path, field) == (str(bad), "header") and "unknown column(s) colour" in reason
    files = [r[0] for r in catalog.con.execute("SELECT path FROM files WHERE source = "
                                               "'published'").fetchall()]
    assert files == ["a.csv"]  # the skipped file is not recorded as ingested


def test_duplicate_point_id_skips_the_repeat(tmp_path: Path, catalog: Catalog):
    fx.write_published(tmp_path, name="a.csv")
    repeat = fx.write_published(
        tmp_path, ["t-002,001,2.3,text,goodput,9,Gbit/s,,,perf,text,",
                   "u-001,001,2.3,text,goodput,8,Gbit/s,,,perf,text,"], name="b.csv")
    with pytest.raises(DataError) as err:
        published.load(catalog, tmp_path, strict=True)
    # The repeat is named with its line, and so is the first one.
    assert err.value.path == f"{repeat}:2" and err.value.field == "point_id"
    assert "'t-002' repeats (first at a.csv:3)" in err.value.reason
    assert published.load(catalog, tmp_path, strict=False) == len(fx.PUBLISHED_ROWS) + 1
    assert catalog.con.execute("SELECT value FROM published_points WHERE point_id = 't-002'"
                               ).fetchone() == (37.0,)  # the first one is kept
    assert len(_issues(catalog)) == 1


def test_empty_file_and_empty_folder(tmp_path: Path, catalog: Catalog):
    fx.write_published(tmp_path, name="a.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="empty file"):
        published.load(catalog, tmp_path)
    assert published.load(catalog, tmp_path, strict=False) == len(fx.PUBLISHED_ROWS)
    assert [i[0] for i in _issues(catalog)] == [str(tmp_path / "empty.csv")]
    with pytest.raises(DataError, match=r"no \*\.csv files"):
        published.load(catalog, tmp_path / "nothing-here")


def test_reloading_replaces_points_and_issues(tmp_path: Path, catalog: Catalog):
    fx.write_published(tmp_path, [*fx.PUBLISHED_ROWS, BAD_ROWS["bad number"][0]])
    for _ in range(2):
        published.load(catalog, tmp_path, strict=False)
        assert catalog.count("published_points") == len(fx.PUBLISHED_ROWS)
        assert len(_issues(catalog)) == 1
    # Fixed on disk: the issue goes away on the next ingest.
    fx.write_published(tmp_path)
    published.load(catalog, tmp_path, strict=False)
    assert _issues(catalog) == []


RANGED_HEADER = fx.PUBLISHED_HEADER + ",mtu_bytes,link_gbps"


@pytest.mark.parametrize(("cells", "field", "reason"), [
    ("100,10", "mtu_bytes", "100 is impossible: allowed 1228 … 65535"),
    ("70000,10", "mtu_bytes", "70000 is impossible: allowed 1228 … 65535"),
    ("1500,-10", "link_gbps", "-10 is impossible: allowed 0.001 … 400"),
    # a whole-number column is not silently cut ("1500.5" → 1500) nor overflowed
    ("1500.5,10", "mtu_bytes", "'1500.5' is not a whole number"),
    ("inf,10", "mtu_bytes", "'inf' is not a whole number"),
])
def test_an_impossible_condition_is_refused_with_the_scenario_bounds(
        cells: str, field: str, reason: str, tmp_path: Path, catalog: Catalog):
    good = "t-001,002,4.6,Fig. 6,goodput,3250,Mbit/s,lsquic,lsquic,h3,text,,9000,10"
    path = fx.write_published(tmp_path, [good, f"t-002,002,4.6,text,goodput,1,Mbit/s,,,h3,text,,"
                                               f"{cells}"], header=RANGED_HEADER)
    with pytest.raises(DataError) as err:
        published.load(catalog, tmp_path, strict=True)
    assert str(err.value) == f"{path}:3 [{field}]: {reason}"
    assert catalog.count("published_points") == 0
    assert published.load(catalog, tmp_path, strict=False) == 1
    assert _issues(catalog) == [(f"{path}:3", field, reason)]


def test_every_packaged_unit_and_condition_is_allowed():
    for path in sorted(published.packaged_dir().glob("*.csv")):
        rows = published.read_csv(path)  # strict: raises on the first bad cell
        assert {r["unit"] for r in rows} <= set(published.UNITS)


def test_a_change_may_be_negative_and_a_file_without_conditions_is_refused(
        tmp_path: Path, catalog: Catalog):
    fx.write_published(tmp_path, [*fx.PUBLISHED_ROWS,
                                  "t-004,002,4.1,text,change_pct,-40,%,quiche,quiche,h3,text,"])
    assert published.load(catalog, tmp_path, strict=True) == len(fx.PUBLISHED_ROWS) + 1
    header = fx.PUBLISHED_HEADER.removesuffix(",conditions")
    bad = fx.write_published(tmp_path, [r.removesuffix(",") for r in fx.PUBLISHED_ROWS],
                             name="b.csv", header=header)
    with pytest.raises(DataError) as err:
        published.read_csv(bad)
    assert str(err.value) == f"{bad} [header]: missing column(s) conditions"

