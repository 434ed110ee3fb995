"""``quiclab report`` builds docs/results/ from reports and the catalog, each table under
the stamp (date, host, code version) of the report it came from; a missing report is
said to be missing, never filled in."""

from __future__ import annotations

import json
from pathlib import Path

from quiclab.report import write
from quiclab.stamp import read_stamp, write_stamp


def _reports(root: Path) -> Path:
    reports = root / "reports"
    (reports / "calibration").mkdir(parents=True)
    (reports / "calibration" / "headline.json").write_text(json.dumps(
        {"in_sample_dataset_median_ape_pct": 1.91, "cv_experiments_dataset_median_ape_pct": 3.2}))
    write_stamp(reports / "calibration", command="quiclab calibrate --cv experiments")
    (reports / "validation").mkdir()
    (reports / "validation" / "summary.csv").write_text(
        "source,engine,items,predicted,median_ape_pct\npublished,analytic,83,33,1.9\n")
    (reports / "bench").mkdir()
    (reports / "bench" / "cli.json").write_text(json.dumps(
        {"stamp": {"date": "2026-11-28 10:00 UTC", "host": "h", "cpu": "c", "cores": 2,
                   "quiclab": "0.1.0", "git": {"revision": "abcdef1234567", "dirty": False},
                   "command": "quiclab bench cli"},
         "result": {"benchmark": "cli", "predict_wall_median_s": 0.31, "target_met": True}}))
    return reports


def test_each_table_says_where_and_with_what_it_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "results"
    write(out, _reports(tmp_path), tmp_path / "no-catalog.duckdb")
    accuracy = (out / "accuracy.md").read_text()
    stamp = read_stamp(tmp_path / "reports" / "calibration")
    assert stamp is not None and stamp["command"] == "quiclab calibrate --cv experiments"
    assert f"*Measured {stamp['date']} on {stamp['host']}" in accuracy
    assert "| in sample dataset median APE % | 1.91 |" in accuracy
    assert "| cross-validated experiments dataset median APE % | 3.2 |" in accuracy
    # The validation summary has no stamp: said so, not invented.
    assert "*Not stamped" in accuracy and "| published | analytic | 83 | 33 | 1.9 |" in accuracy
    speed = (out / "speed.md").read_text()
    assert "2026-11-28 10:00 UTC on h (c, 2 cores), quiclab 0.1.0 at abcdef1234;" in speed
    assert "| predict_wall_median_s | 0.31 |" in speed


def test_missing_reports_and_catalog_are_named_with_the_command_that_makes_them(
        tmp_path: Path) -> None:
    out = tmp_path / "results"
    (tmp_path / "reports").mkdir()
    write(out, tmp_path / "reports", tmp_path / "none.duckdb")
    assert "`quiclab reproduce --all`" in (out / "reproductions.md").read_text()
    assert "`quiclab bench` writes it" in (out / "speed.md").read_text()
    assert "`quiclab data ingest`" in (out / "fresh.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == [
        "accuracy.md", "fresh.md", "index.md", "reproductions.md", "speed.md"]


def test_leave_one_testbed_out_comes_first_then_coverage(tmp_path: Path) -> None:
    reports = _reports(tmp_path)
    (reports / "calibration" / "cv_testbeds.csv").write_text(
        "fold,items,median_ape_pct,p95_ape_pct\nuclouvain,46,21.94,42.41\nALL,46,21.94,42.41\n")
    (reports / "calibration" / "coverage.csv").write_text(
        "source,regime,items,coverage_90,coverage_50,median_width_90\n"
        "dataset,all,262,0.912,0.51,1.21\n")
    out = tmp_path / "results"
    write(out, reports, tmp_path / "no-catalog.duckdb")
    accuracy = (out / "accuracy.md").read_text()
    assert "| uclouvain | 46 | 21.9 | 42.4 |" in accuracy
    assert "| dataset | all | 262 | 0.912 | 0.51 | 1.21 |" in accuracy
    testbed, coverage, headline = (accuracy.index("Leave one testbed out"),
                                   accuracy.index("Coverage of the predictive"),
                                   accuracy.index("in sample dataset median"))
    assert testbed < coverage < headline
