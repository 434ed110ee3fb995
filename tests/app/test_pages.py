"""The Sweep, Reproductions and Data pages under AppTest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from quiclab.app import labels
from quiclab.app.reproductions import VERDICTS

from .appdata import RUNS, AppData, tiny_png
from .conftest import SCRIPT

Predict = Callable[..., dict[str, Any]]


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    for frame in at.dataframe:
        if column in frame.value.columns:
            return frame.value
    raise AssertionError(f"no dataframe with a {column!r} column")


def sweep_caption(at: AppTest) -> str:
    """The sweep's one caption line that counts its predictions."""
    lines = [c.value for c in at.caption if " predictions (" in c.value]
    assert len(lines) == 1, [c.value for c in at.caption]
    return lines[0]


def open_page(app: AppTest, page: str, **params: str) -> AppTest:
    app.query_params.update({"page": page, **params})
    app.run()
    assert not app.exception, app.exception
    return app


# -- Sweep -----------------------------------------------------------------------------


def test_sweep_default_rtt_axis_equals_the_cli(app: AppTest, predict: Predict) -> None:
    open_page(app, "sweep")
    assert not app.error
    table = frame_with(app, "rtt_ms")
    assert len(table) == 25
    assert list(table["rtt_ms"].iloc[[0, -1]]) == [0.0, 100.0]
    for row in (0, 7, 24):
        expected = predict(rtt_ms=float(table["rtt_ms"].iloc[row]))
        assert table["goodput_mbps"].iloc[row] == pytest.approx(expected["goodput_mbps"],
                                                                rel=1e-12)
        assert table["limit"].iloc[row] == expected["limit"]
    assert len(app.get("vega_lite_chart")) == 1
    assert len(app.get("download_button")) >= 2


def test_sweep_two_axes_and_two_pairs(app: AppTest, predict: Predict) -> None:
    open_page(app, "sweep", server="lsquic,quiche")
    app.selectbox(key="w.sweep.axis").set_value("mtu_bytes").run()
    app.number_input(key="w.sweep.points").set_value(3)
    app.selectbox(key="w.sweep.axis2").set_value("gso").run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    table = frame_with(app, "mtu_bytes")
    assert len(table) == 2 * 2 * 3  # pairs × gso values × points
    assert sorted(set(table["mtu_bytes"])) == [1280, 5140, 9000]
    row = table[(table["pair"] == "quiche → lsquic") & (table["gso"] == False)  # noqa: E712
                & (table["mtu_bytes"] == 9000)].iloc[0]
    expected = predict(server="quiche", mtu_bytes=9000, gso=False)
    assert row["goodput_mbps"] == pytest.approx(expected["goodput_mbps"], rel=1e-12)


def test_sweep_overlays_the_measured_points_of_the_axis(app: AppTest) -> None:
    open_page(app, "sweep")
    app.selectbox(key="w.sweep.axis").set_value("rcvbuf_bytes").run()
    assert not app.error
    # t-base-1, t-base-2 (212992), t-bigbuf and t-pub-002 (6815744); t-pub-001 states
    # no buffer, so it has no place on this axis.
    assert sweep_caption(app) == ("25 predictions (analytic) · 4 measured points with every "
                                  "other condition as in the sidebar")


def test_sweep_on_the_send_buffer_skips_points_that_state_none(app: AppTest) -> None:
    """Published points state no send buffer (NULL, read as pd.NA): they have no place on
    the sndbuf_bytes axis, and the page draws the runs that do state one."""
    open_page(app, "sweep")
    app.selectbox(key="w.sweep.axis").set_value("sndbuf_bytes").run()
    assert not app.exception, app.exception
    assert not app.error, [e.value for e in app.error]
    assert len(frame_with(app, "sndbuf_bytes")) == 25
    # No run of the test catalog states one.
    assert sweep_caption(app) == ("25 predictions (analytic) · 0 measured points with every "
                                  "other condition as in the sidebar")


def test_sweep_second_axis_cc_defaults_to_what_the_stack_runs(app: AppTest) -> None:
    """cc as second axis offers the congestion controllers the chosen server's model
    allows (cubic, reno), not bbr, which every cost model refuses."""
    open_page(app, "sweep", server="lsquic,quiche")
    app.selectbox(key="w.sweep.axis2").set_value("cc").run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert app.text_input(key="w.sweep.values.cc").value == "cubic, reno"
    assert set(frame_with(app, "cc")["cc"]) == {"cubic", "reno"}


@pytest.mark.parametrize("mtu", [1500, 9000])
def test_sweep_udp_payload_axis_ends_at_the_sidebar_mtu(app: AppTest, mtu: int) -> None:
    """The UDP payload axis runs from 1200 to the largest payload the sidebar's MTU
    carries (MTU − 28), not to 8972 whatever the MTU."""
    open_page(app, "sweep", mtu_bytes=str(mtu))
    app.selectbox(key="w.sweep.axis").set_value("udp_payload_bytes").run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    payload = frame_with(app, "udp_payload_bytes")["udp_payload_bytes"]
    assert (payload.min(), payload.max()) == (1200, mtu - 28)


def test_sweep_caps_the_number_of_points(app: AppTest) -> None:
    """9 pairs × 3 MTUs × 200 RTTs = 5,400 predictions: refused with the reason, at once."""
    from quiclab.app.sweep import MAX_SWEEP_POINTS

    app.query_params["app"] = "perf"  # which quicly implements
    open_page(app, "sweep", server="lsquic,quiche,quicly", client="lsquic,quiche,quicly",
              sweep_points="200", sweep_axis2="mtu_bytes", sweep_values="1500,4000,9000")
    assert MAX_SWEEP_POINTS == 2400
    assert [w.value for w in app.warning] == [
        "This sweep has 5,400 points (9 pair(s) × 3 second-axis value(s) × 200 axis values): "
        "the app draws at most 2,400. Fewer points, pairs or values, or `quiclab sweep` from "
        "the command line."]
    assert not app.dataframe and not app.get("vega_lite_chart")
    app.text_input(key="w.sweep.values.mtu_bytes").set_value("1500").run()  # 1,800 points
    assert not app.warning
    assert len(frame_with(app, "mtu_bytes")) == 9 * 200


def test_sweep_keeps_the_pairs_the_models_accept(app: AppTest, predict: Predict,
                                                 app_env: AppData) -> None:
    """quicly has no HTTP/3: one error line, the other pair's curve is drawn, and the
    table names the engine's and the models' versions."""
    from quiclab.models.registry import Registry

    open_page(app, "sweep", server="lsquic,quicly", sweep_points="3")
    assert [e.value for e in app.error] == [
        "quicly → lsquic: app='h3' is impossible: allowed perf | hq (quicly as server has no h3)"]
    table = frame_with(app, "rtt_ms")
    assert list(table["pair"]) == ["lsquic → lsquic"] * 3
    expected = predict(rtt_ms=50.0)
    assert table["goodput_mbps"].iloc[1] == pytest.approx(expected["goodput_mbps"], rel=1e-12)
    versions = Registry.load(app_env.models).versions()
    assert set(table["engine_version"]) == {expected["engine_version"]}
    assert set(table["server_model"]) == {f"lsquic {versions['lsquic']}"}
    assert set(table["client_model"]) == {f"lsquic {versions['lsquic']}"}


def test_sweep_says_why_no_point_can_match(app: AppTest) -> None:
    open_page(app, "sweep", pipeline="mukherjee-best", sweep_points="3")
    assert sweep_caption(app) == (
        "3 predictions (analytic) · 0 measured points with every other condition as in the "
        "sidebar (the catalog does not record pipeline=mukherjee-best: its measurements are "
        "taken at the default (pipeline=none), so none can match)")


def test_sweep_refuses_an_empty_range(app: AppTest) -> None:
    open_page(app, "sweep")
    app.number_input(key="w.sweep.hi.rtt_ms").set_value(0.0).run()
    assert not app.exception
    assert any("range is empty" in e.value for e in app.error)


@pytest.mark.timeout(300)
def test_sweep_with_the_des_on_a_button(app: AppTest, predict: Predict) -> None:
    open_page(app, "sweep", transfer_bytes="20000000")
    app.number_input(key="w.sweep.points").set_value(2)
    app.multiselect(key="w.sweep.engines").set_value(["des"]).run()
    assert any("No des result yet" in i.value for i in app.info)
    app.button(key="run_sweep.des").click().run(timeout=240)
    assert not app.exception and not app.error, [e.value for e in app.error]
    table = frame_with(app, "rtt_ms")
    assert list(table["engine"]) == ["des", "des"]
    expected = predict(engine="des", transfer_bytes=20_000_000, rtt_ms=100.0)
    assert table["goodput_mbps"].iloc[1] == pytest.approx(expected["goodput_mbps"], rel=1e-12)


@pytest.mark.timeout(300)
def test_a_sweep_of_two_engines_says_where_they_part(app: AppTest, predict: Predict) -> None:
    """lsquic → quiche over 100 MB, +0 and +20 ms: at +20 ms the analytic engine finds
    the client's CPU, the DES receive-buffer drops, and their bands part."""
    open_page(app, "sweep", client="quiche", transfer_bytes="100000000")
    app.number_input(key="w.sweep.hi.rtt_ms").set_value(20.0)
    app.number_input(key="w.sweep.points").set_value(2)
    app.multiselect(key="w.sweep.engines").set_value(["analytic", "des"]).run()
    app.button(key="run_sweep.des").click().run(timeout=240)
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert list(frame_with(app, "rtt_ms")["engine"]) == ["analytic"] * 2 + ["des"] * 2
    fields = {"client": "quiche", "transfer_bytes": 100_000_000, "rtt_ms": 20.0}
    analytic, des = predict(**fields), predict(engine="des", **fields)
    (note,) = [w.value for w in app.warning if "engines disagree" in w.value]
    assert "**lsquic → quiche**, analytic vs des: bands do not overlap at" in note
    assert f"analytic limited by {labels.limit_name(analytic['limit'])} " \
        f"(`{analytic['limit']}`)" in note
    assert f"des by {labels.limit_name(des['limit'])} (`{des['limit']}`)" in note
    assert "[open this scenario](" in note


# -- Reproductions ---------------------------------------------------------------------


def test_reproductions_say_when_there_are_none(app: AppTest, app_env: AppData) -> None:
    open_page(app, "reproductions")
    text = " ".join(i.value for i in app.info)
    assert "No reproduction results" in text
    # Where, without the machine's folders: relative to the data dir.
    assert "<data dir>/reports/reproductions" in text
    assert str(app_env.data_dir) not in text


def repro_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[AppTest, Path]:
    """An app whose data dir is ``tmp_path/data``; returns it and the reproductions folder."""
    root = tmp_path / "data" / "reports" / "reproductions"
    root.mkdir(parents=True)
    monkeypatch.setenv("QUICLAB_DATA_DIR", str(tmp_path / "data"))
    return AppTest.from_file(str(SCRIPT), default_timeout=60), root


def test_reproductions_show_findings_checks_and_figure(
        app_env: AppData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, root = repro_app(tmp_path, monkeypatch)
    # The layout `quiclab reproduce` writes (experiments/reproduce.py).
    pd.DataFrame({
        "reproduction": ["repro-a", "repro-a", "repro-b"], "finding": ["gain", "acks", "pin"],
        "claim": ["+7 %", "fewer ACKs", "pinning helps"], "engine": ["analytic"] * 3,
        "tolerance": ["±5 pp", "±30 %", "±5 pp"], "published": ["7", "180000", "20"],
        "predicted": ["7.1", "90000", ""], "checks": [1, 1, 1], "passed": [1, 0, 0],
        "failed": [0, 1, 0], "verdict": ["pass", "fail", "not covered"],
        "reason": ["", "", "pinning is not modelled"]}).to_csv(root / "findings.csv",
                                                               index=False)
    (root / "repro-a").mkdir()
    pd.DataFrame({"finding": ["gain", "acks"], "check": ["kempf24-011", "kempf24-012"],
                  "published": [7.0, 180000.0], "predicted": [7.1, 90000.0],
                  "status": ["pass", "fail"]}).to_csv(root / "repro-a" / "repro-a.csv",
                                                      index=False)
    tiny_png(root / "repro-a" / "repro-a.png")
    open_page(app, "reproductions")
    metrics = {m.label: m.value for m in app.metric}
    assert metrics == {"Findings": "3", "Verdicts (finding × engine)": "3", "Pass": "1",
                       "Fail": "1", "Not covered": "1"}
    assert list(frame_with(app, "claim")["finding"]) == ["gain", "acks"]  # pass and fail
    assert list(frame_with(app, "check")["predicted"]) == [7.1, 90000.0]
    assert len(app.get("image")) == 1
    app.multiselect(key="w.repro.verdicts").set_value(list(VERDICTS))
    app.selectbox(key="w.repro.name").set_value("repro-b").run()
    assert not app.exception
    assert len(frame_with(app, "claim")) == 3
    assert any("pinning is not modelled" in c.value for c in app.caption)
    assert any("No repro-b.csv" in i.value for i in app.info)


def test_reproductions_fall_back_to_any_result_files(
        app_env: AppData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, root = repro_app(tmp_path, monkeypatch)
    folder = root / "repro-kempf24-fig3-buffers"
    folder.mkdir()
    pd.DataFrame({"finding": ["32x goodput", "ACKs at 1x"], "predicted": [3300.0, 2.0e5],
                  "published": [3250.0, 1.8e5], "pass": [True, False]}
                 ).to_csv(folder / "findings.csv", index=False)
    tiny_png(folder / "fig3.png")
    open_page(app, "reproductions")
    metrics = {m.label: m.value for m in app.metric}
    assert metrics == {"Reproductions": "1", "Findings passed": "1", "Findings failed": "1"}
    assert list(frame_with(app, "finding")["published"]) == [3250.0, 1.8e5]
    assert len(app.get("image")) == 1


# -- Data --------------------------------------------------------------------------------


def run_sql(app: AppTest, sql: str) -> AppTest:
    app.text_area(key="w.data.sql").set_value(sql)
    app.button(key="w.data.run").click().run()
    assert not app.exception, app.exception
    return app


def test_data_page_lists_and_browses_tables(app: AppTest) -> None:
    open_page(app, "data")
    tables = frame_with(app, "table")
    counts = dict(zip(tables["table"], tables["rows"], strict=True))
    assert counts["runs"] == len(RUNS) and counts["published_points"] == 3
    assert len(frame_with(app, "run_id")) == len(RUNS)  # "runs" is browsed first
    app.selectbox(key="w.data.table").set_value("published_points").run()
    assert len(frame_with(app, "point_id")) == 3


def test_data_page_runs_sql_and_draws_a_chart(app: AppTest) -> None:
    open_page(app, "data")
    run_sql(app, "SELECT source, count(*) AS n, avg(goodput_mbps) AS mean_mbps "
                 "FROM runs GROUP BY source ORDER BY source")
    result = frame_with(app, "n")
    assert list(result["source"]) == ["fresh", "qir10g"]
    fresh = sum(r["source"] == "fresh" for r in RUNS)
    assert list(result["n"]) == [fresh, len(RUNS) - fresh]
    assert len(app.get("vega_lite_chart")) == 1
    app.selectbox(key="w.data.kind").set_value("bar").run()
    assert not app.exception and len(app.get("vega_lite_chart")) == 1


@pytest.mark.parametrize(("sql", "message"), [
    ("SELEC 1", "Parser Error"),
    ("SELECT nosuch FROM runs", "Binder Error"),
    ("CREATE TABLE evil (a INTEGER)", "read-only"),
    ("DROP TABLE runs", "read-only"),
    ("COPY runs TO 'stolen.csv'", "Permission Error"),
    ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
])
def test_a_bad_query_shows_duckdbs_message(app: AppTest, app_env: AppData, sql: str,
                                           message: str) -> None:
    open_page(app, "data")
    run_sql(app, sql)
    errors = [e.value for e in app.error]
    assert errors and errors[0].startswith("DuckDB: ") and message in errors[0], errors
    assert not Path("stolen.csv").exists()
    run_sql(app, "SELECT count(*) AS n FROM runs")  # the catalog is intact
    assert frame_with(app, "n")["n"].iloc[0] == len(RUNS)


# -- without models or catalog -----------------------------------------------------------


def test_without_models_the_data_page_still_works(
        app_env: AppData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUICLAB_MODELS", str(tmp_path / "no-models"))
    app = AppTest.from_file(str(SCRIPT), default_timeout=60)
    app.run()
    assert not app.exception
    assert any("No cost models" in e.value for e in app.error)
    app.radio(key="w.page").set_value("data").run()
    assert not app.exception and not app.error
    assert len(frame_with(app, "run_id")) == len(RUNS)


def test_without_a_catalog_the_what_if_still_predicts(
        app_env: AppData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        predict: Predict) -> None:
    monkeypatch.setenv("QUICLAB_CATALOG", str(tmp_path / "none.duckdb"))
    app = AppTest.from_file(str(SCRIPT), default_timeout=60)
    app.run()
    assert not app.exception and not app.error
    shown = next(m.value for m in app.metric if m.label == "Predicted goodput (analytic)")
    assert shown == f"{predict()['goodput_mbps']:,.0f} Mbit/s"
    assert any("catalog does not exist" in i.value for i in app.info)
    app.radio(key="w.page").set_value("data").run()
    assert any("catalog does not exist" in w.value for w in app.warning)


def test_a_sweep_is_shared_through_the_url(app: AppTest, predict: Predict) -> None:
    open_page(app, "sweep", server="quiche", sweep_axis="mtu_bytes", sweep_from="1500",
              sweep_to="9000", sweep_points="4", sweep_axis2="gso", sweep_values="false")
    assert not app.error and not app.warning
    table = frame_with(app, "mtu_bytes")
    assert list(table["mtu_bytes"]) == [1500, 4000, 6500, 9000]
    assert set(table["gso"]) == {False}
    expected = predict(server="quiche", mtu_bytes=6500, gso=False)
    assert table["goodput_mbps"].iloc[2] == pytest.approx(expected["goodput_mbps"], rel=1e-12)
    params = app.query_params
    assert (params["sweep_axis"], params["sweep_points"], params["sweep_values"]) == (
        "mtu_bytes", "4", "false")
    # Away and back: the sweep is as it was.
    app.radio(key="w.page").set_value("data").run()
    app.radio(key="w.page").set_value("sweep").run()
    assert list(frame_with(app, "mtu_bytes")["mtu_bytes"]) == [1500, 4000, 6500, 9000]


def test_a_bad_sweep_url_is_a_warning(app: AppTest) -> None:
    open_page(app, "sweep", sweep_axis="warp", sweep_points="many", sweep_engine="x")
    text = " ".join(w.value for w in app.warning)
    assert "sweep_axis='warp'" in text and "sweep_points='many'" in text
    assert "sweep_engine='x'" in text
    assert len(frame_with(app, "rtt_ms")) == 25  # the default sweep


def test_a_catalog_held_by_a_writer_is_reported_not_waited_for(
        app_env: AppData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While `quiclab data ingest` (here: another process) writes, the app says so at once."""
    import shutil
    import subprocess
    import sys

    catalog = tmp_path / "busy.duckdb"
    shutil.copy(app_env.catalog, catalog)
    monkeypatch.setenv("QUICLAB_CATALOG", str(catalog))
    writer = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time\n"
         f"con = duckdb.connect({str(catalog)!r})\nprint('held', flush=True)\n"
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "held"
        app = AppTest.from_file(str(SCRIPT), default_timeout=60)
        open_page(app, "data")
        assert any("a writer may hold it" in w.value for w in app.warning)
    finally:
        writer.communicate("")
    app.run()  # the writer is gone: the catalog opens again
    assert not app.warning
    assert len(frame_with(app, "run_id")) == len(RUNS)


@pytest.mark.timeout(300)
def test_reproductions_page_reads_what_quiclab_reproduce_writes(
        app_env: AppData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real writer, not a copy of its format: `quiclab reproduce` with the shipped models."""
    import contextlib
    import io

    from quiclab.cli import main

    app, root = repro_app(tmp_path, monkeypatch)
    monkeypatch.delenv("QUICLAB_MODELS")  # the packaged fitted models
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["reproduce", "--list"])
    assert code == 0
    name = out.getvalue().split()[0]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["reproduce", name, "--engine", "analytic", "--no-catalog", "--quiet",
                     "--jobs", "1"]) == 0
    findings = pd.read_csv(root / "findings.csv")
    open_page(app, "reproductions")
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Findings"] == str(len(findings.drop_duplicates(["reproduction",
                                                                     "finding"])))
    assert metrics["Verdicts (finding × engine)"] == str(len(findings))
    assert metrics["Pass"] == str(int((findings["verdict"] == "pass").sum()))
    assert app.selectbox(key="w.repro.name").value == name
    checks = pd.read_csv(root / name / f"{name}.csv")
    shown = frame_with(app, "check")
    assert list(shown["check"]) == list(checks["check"])
    assert len(app.get("image")) == int((root / name / f"{name}.png").is_file())


def test_bench_app_times_what_if_changes(app_env: Any) -> None:
    """`quiclab bench app` drives the real page: every change reruns it without error and
    the page's own analytic-answer time is read back (a figure, not a timed assertion)."""
    from quiclab.bench import bench_app
    from quiclab.paths import Paths

    paths = Paths.resolve(models=str(app_env.models), catalog=str(app_env.catalog),
                          data_dir=str(app_env.data_dir))
    result = bench_app(paths, changes=6, browser=False)  # Chromium: test_bench.py
    assert result["changes"] == 6
    assert result["analytic_answer_median_ms"] > 0
    assert result["page_rerun_median_ms"] > 0
