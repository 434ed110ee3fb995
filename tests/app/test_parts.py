"""The app's parts without Streamlit: URL state, matching, charts, result files, the CLI."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import altair as alt
import duckdb
import numpy as np
import pandas as pd
import pytest

from quiclab.app import cli as app_cli
from quiclab.app.charts import (
    cpu_chart,
    goodput_chart,
    limits_chart,
    limits_table,
    measured_summary,
    prediction_table,
    sweep_chart,
)
from quiclab.app.config import parse_config, script_arguments
from quiclab.app.explore import ChartParams, quick_chart
from quiclab.app.labels import limit_name
from quiclab.app.measured import (
    COLUMNS,
    index_rows,
    match,
    measured_points,
    pair_rows,
    unrecorded,
    unrecorded_reason,
)
from quiclab.app.reproductions import find_reproductions, read_table, verdicts
from quiclab.app.urlstate import Selection, decode, encode
from quiclab.cli import build_parser
from quiclab.errors import ScenarioError
from quiclab.models.registry import Registry
from quiclab.paths import Paths
from quiclab.sim.engine import get_engine
from quiclab.sim.scenario import Scenario

from .appdata import CPU, AppData

# -- URL state ------------------------------------------------------------------


def test_url_round_trip_keeps_every_changed_field() -> None:
    base = Scenario(server="quiche", client="lsquic", mtu_bytes=9000, rtt_ms=12.5, gso=False,
                    cipher="chacha20", cpu="Intel Xeon W-2145", transfer_bytes=10**9)
    selection = Selection(base, ("quiche", "lsquic"), ("lsquic",), ("analytic", "des"))
    params = encode(selection, "sweep")
    assert params["server"] == "quiche,lsquic"
    assert params["mtu_bytes"] == "9000" and params["gso"] == "false"
    assert "loss_pct" not in params  # defaults stay out of the URL
    back, page, problems = decode(params, ["lsquic", "quiche"])
    assert (back, page, problems) == (selection, "sweep", [])


def test_url_round_trip_of_a_request_workload() -> None:
    """encode writes ``workload`` before ``request_bytes``: decode applies them together."""
    base = Scenario(workload="requests", request_bytes=10000, requests=1000, connections=4,
                    streams=8, rcvbuf_bytes=100000, seed=2**53 + 1)
    selection = Selection(base, ("lsquic",), ("lsquic",), ("analytic",))
    params = encode(selection)
    assert list(params)[4:] == ["rcvbuf_bytes", "streams", "workload", "request_bytes",
                                "requests", "connections", "seed"]
    assert (params["workload"], params["request_bytes"], params["seed"]) == (
        "requests", "10000", "9007199254740993")
    back, page, problems = decode(params, ["lsquic"])
    assert (back, page, problems) == (selection, "whatif", [])


def test_url_fields_are_applied_together_then_one_by_one() -> None:
    """A refused value is one warning of its own, naming the field left out and the one
    it conflicts with; the fields that need each other stay."""
    selection, _, problems = decode({"workload": "requests", "request_bytes": "10000",
                                     "requests": "0", "mtu_bytes": "9000",
                                     "udp_payload_bytes": "8000"}, ["lsquic"])
    assert problems == ["URL: workload=requests was left out: with it, requests=0 is "
                        "impossible: allowed > 0 when workload=requests"]
    base = selection.base
    assert (base.workload, base.request_bytes, base.requests) == ("bulk", 10000, 0)
    assert (base.mtu_bytes, base.udp_payload_bytes) == (9000, 8000)


def test_url_problems_are_reported_and_the_rest_kept() -> None:
    selection, page, problems = decode(
        {"page": "nowhere", "mtu_bytes": "100", "rtt_ms": "abc", "loss_pct": "1",
         "server": "lsquic,ghost", "engines": "des,warp", "embed": "true"},
        ["lsquic", "quiche"])
    assert page == "whatif"
    assert selection.base.loss_pct == 1.0 and selection.base.mtu_bytes == 1500
    assert selection.servers == ("lsquic",)
    assert selection.engines == ("analytic", "des")
    text = "\n".join(problems)
    for expected in ("page='nowhere'", "mtu_bytes=100 is impossible", "rtt_ms='abc'",
                     "server='ghost'", "engines='warp'"):
        assert expected in text
    assert "embed" not in text


def test_selection_pairs_every_server_with_every_client() -> None:
    selection = Selection(Scenario(), ("a", "b"), ("c", "d"))
    assert selection.pairs() == [("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")]
    assert [s.server + s.client for s in selection.scenarios()] == ["ac", "ad", "bc", "bd"]


# -- configuration and the command ------------------------------------------------


def test_config_prefers_script_arguments_then_environment(tmp_path: Path) -> None:
    env = {"QUICLAB_DATA_DIR": str(tmp_path / "env-data"), "QUICLAB_MODELS": str(tmp_path / "m")}
    config = parse_config([], env=env)
    assert config.models_dir == str((tmp_path / "m").resolve())
    assert config.catalog == str((tmp_path / "env-data" / "catalog.duckdb").resolve())
    assert config.reports_dir == str((tmp_path / "env-data" / "reports").resolve())
    config = parse_config(["--catalog", str(tmp_path / "c.duckdb")], env=env)
    assert config.catalog == str((tmp_path / "c.duckdb").resolve())


def test_quiclab_app_passes_streamlit_options_through(tmp_path: Path) -> None:
    parser = build_parser()
    args = parser.parse_args(["--models", str(tmp_path), "--data-dir", str(tmp_path / "d"),
                              "app", "--server.port", "8599", "--server.headless", "true"])
    assert args.streamlit_args == ["--server.port", "8599", "--server.headless", "true"]
    args.paths = Paths.resolve(models=str(tmp_path), data_dir=str(tmp_path / "d"))
    command = app_cli.command(args)
    assert command[1:5] == ["-m", "streamlit", "run", str(app_cli.SCRIPT)]
    separator = command.index("--")
    assert command[5:separator] == ["--server.port", "8599", "--server.headless", "true"]
    assert command[separator + 1:] == script_arguments(args.paths)
    # What the script gets back is what the command resolved.
    config = parse_config(command[separator + 1:], env={})
    assert config.models_dir == str(tmp_path.resolve())


def test_quiclab_app_help(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["app", "--help"])
    args.paths = Paths.resolve()
    assert app_cli.run_app(args) == 0
    assert "streamlit run" in capsys.readouterr().out


def test_quiclab_app_starts_streamlit_with_the_defaults(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """A real child in place of Streamlit (a Python one-liner) records the environment
    it was given and whether it leads a process group of its own (so that a stop
    signal reaches it and everything it starts)."""
    out = tmp_path / "child.json"
    child = ("import json, os, sys; json.dump({'env': dict(os.environ), "
             "'own_group': os.getpgid(0) == os.getpid()}, open(sys.argv[1], 'w'))")
    monkeypatch.setattr(app_cli, "command", lambda args: [sys.executable, "-c", child,
                                                          str(out)])
    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS", raising=False)
    args = argparse.Namespace(streamlit_args=["--server.port", "1"], paths=Paths.resolve())
    assert app_cli.run_app(args) == 0
    started = json.loads(out.read_text())
    assert started["env"]["STREAMLIT_SERVER_ADDRESS"] == "localhost"
    assert started["env"]["STREAMLIT_BROWSER_GATHER_USAGE_STATS"] == "false"
    assert started["own_group"]


def test_quiclab_app_command_runs_the_script_with_the_paths() -> None:
    args = argparse.Namespace(streamlit_args=["--server.port", "1"], paths=Paths.resolve())
    argv = app_cli.command(args)
    assert argv[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert argv[4].endswith("streamlit_app.py") and argv[5:8] == ["--server.port", "1", "--"]


# -- matching measured points ------------------------------------------------------


@pytest.fixture
def con(appdata: AppData) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect(str(appdata.catalog), read_only=True)
    yield connection
    connection.close()


def ids(frame: pd.DataFrame) -> list[str]:
    return sorted(frame["id"])


def test_matching_runs_and_published_points(con: duckdb.DuckDBPyConnection) -> None:
    found = measured_points(con, Scenario(), CPU)
    assert list(found.columns) == COLUMNS
    # Failed runs never; other buffers, builds and pairs not; the unstated buffer matches.
    assert ids(found) == ["t-base-1", "t-base-2", "t-pub-001"]
    assert found.set_index("id").loc["t-pub-001", "goodput_mbps"] == 3200.0  # Gbit/s → Mbit/s
    bigger = measured_points(con, Scenario(rcvbuf_bytes=6815744), CPU)
    assert ids(bigger) == ["t-bigbuf", "t-pub-001", "t-pub-002"]
    assert bigger.set_index("id").loc["t-pub-002", "bound"] == "upper_limit"


def test_matching_compares_size_packet_cores_and_workload(
        con: duckdb.DuckDBPyConnection) -> None:
    """Transfer size, packet size, cores and workload are conditions too."""
    small = Scenario(transfer_bytes=209715200)
    assert ids(measured_points(con, small, CPU)) == ["t-200mib", "t-pub-001"]
    # The fresh run used 8952-byte datagrams: the default (the stack's own) accepts it.
    assert ids(measured_points(con, Scenario(mtu_bytes=9000, udp_payload_bytes=8952),
                               CPU)) == ["t-fresh"]
    assert ids(measured_points(con, Scenario(mtu_bytes=9000, udp_payload_bytes=8000),
                               CPU)) == []
    # t-base-2 ran on core 16; a scenario pinned elsewhere does not match it.
    assert ids(measured_points(con, Scenario(server_core=16), CPU)) == [
        "t-base-1", "t-base-2", "t-pub-001"]
    assert ids(measured_points(con, Scenario(server_core=0), CPU)) == ["t-base-1",
                                                                      "t-pub-001"]
    requests = Scenario(workload="requests", request_bytes=10000, requests=1000)
    assert ids(measured_points(con, requests, CPU)) == ["t-requests"]
    assert ids(measured_points(con, requests.with_(connections=4), CPU)) == []
    assert ids(measured_points(con, requests.with_(request_bytes=1000), CPU)) == []


@pytest.mark.parametrize(("fields", "why"), [
    ({"pipeline": "mukherjee-best"}, "pipeline=mukherjee-best"),
    ({"cpu_ghz": 2.0}, "cpu_ghz=2.0"),
    ({"base_rtt_us": 100.0}, "base_rtt_us=100.0"),
    ({"queue_bdp": 0.5}, "queue_bdp=0.5"),
    ({"queue_bytes": 100000}, "queue_bytes=100000"),
])
def test_settings_the_catalog_cannot_record_match_nothing(
        con: duckdb.DuckDBPyConnection, fields: dict, why: str) -> None:
    scenario = Scenario(**fields)
    assert measured_points(con, scenario, CPU).empty
    assert unrecorded(scenario) == [why]
    name = why.split("=")[0]
    assert unrecorded_reason([why]) == (
        f"the catalog does not record {why}: its measurements are taken at the default "
        f"({name}={getattr(Scenario(), name)}), so none can match")
    # A sweep along that setting does not exclude them (the sweep says why it draws none).
    assert unrecorded(scenario, free=(name,)) == []


def test_matching_builds_fresh_runs_and_free_axes(con: duckdb.DuckDBPyConnection) -> None:
    march = measured_points(con, Scenario(server="lsquic@march", client="lsquic@march"), CPU)
    assert ids(march) == ["t-march"]
    # The fresh run states MTU 9000 and no link rate.
    assert ids(measured_points(con, Scenario(mtu_bytes=9000), CPU)) == ["t-fresh"]
    free = measured_points(con, Scenario(), CPU, free=("mtu_bytes", "rcvbuf_bytes"))
    assert ids(free) == ["t-base-1", "t-base-2", "t-bigbuf", "t-fresh", "t-pub-001",
                         "t-pub-002"]
    assert ids(measured_points(con, Scenario(gso=False), CPU)) == ["t-pub-001"]
    assert ids(measured_points(con, Scenario(), "Intel Xeon W-2145")) == []  # all state the CPU
    mixed = measured_points(con, Scenario(client="quiche"), CPU)
    assert ids(mixed) == ["t-mixed"]


def test_match_accepts_a_plain_frame(con: duckdb.DuckDBPyConnection) -> None:
    frame = pair_rows(con, "lsquic", "lsquic")
    assert ids(match(frame, Scenario(), CPU)) == ids(match(index_rows(frame), Scenario(), CPU))


def test_a_catalog_without_tables_has_no_points(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "empty.duckdb")) as empty:
        assert measured_points(empty, Scenario(), CPU).empty


# -- charts ------------------------------------------------------------------------


@pytest.fixture
def predictions(appdata: AppData) -> list:
    engine = get_engine("analytic", Registry.load(appdata.models))
    return engine.predict_batch([Scenario(), Scenario(server="quiche", mtu_bytes=9000)])


def test_limits_table_marks_the_limit_and_the_headroom(predictions: list) -> None:
    table = limits_table(predictions)
    for p in predictions:
        rows = table[table["pair"] == f"{p.scenario.server} → {p.scenario.client}"]
        limit = rows[rows["role"] == "limit"]
        assert list(limit["code"]) == [p.limit]
        assert list(limit["resource"]) == [limit_name(p.limit)]
        assert limit["rate_mbps"].iloc[0] == pytest.approx(p.rates_mbps.get(p.limit,
                                                                            p.goodput_mbps))
        for _, row in rows[rows["role"] == "headroom"].iterrows():
            assert row["headroom_pct"] == pytest.approx(
                (row["rate_mbps"] / p.goodput_mbps - 1) * 100)
            assert math.isfinite(row["rate_mbps"])


def test_a_limit_outside_the_evaluated_resources_gets_its_own_bar(predictions: list) -> None:
    from dataclasses import replace

    p = replace(predictions[0], limit="rcvbuf")  # as the DES names receive-buffer drops
    table = limits_table([p])
    limit = table[table["role"] == "limit"]
    assert list(limit["code"]) == ["rcvbuf"]
    assert list(limit["resource"]) == ["receive-buffer drops"]
    assert limit["rate_mbps"].iloc[0] == p.goodput_mbps
    assert len(table) == 1 + sum(math.isfinite(v) for v in p.rates_mbps.values())


def vega_lite_valid(spec: dict) -> None:
    """Validate a spec against the Vega-Lite schema that Altair ships (raises if invalid)."""
    kind = alt.FacetChart if "facet" in spec else alt.LayerChart if "layer" in spec else alt.Chart
    kind.from_dict(spec, validate=True)


def test_charts_are_valid_vega_lite(predictions: list, con: duckdb.DuckDBPyConnection) -> None:
    table = prediction_table(predictions)
    measured = measured_points(con, Scenario(), CPU, free=("rtt_ms",))
    for spec in (goodput_chart(table, measured), cpu_chart(table),
                 limits_chart(limits_table(predictions)),
                 goodput_chart(table, measured.iloc[:0])):
        vega_lite_valid(spec)
    # Valid is not enough: the goodput chart draws each prediction at its goodput (x)
    # on its pair's row (y), its interval as a rule from lo to hi, and each measured
    # point at its own goodput.
    spec = goodput_chart(table, measured)
    rule, diamond, params, points, whiskers, box, median = spec["layer"]
    assert diamond["encoding"]["x"]["field"] == "goodput_mbps"
    assert diamond["encoding"]["y"]["field"] == "pair"
    assert (rule["encoding"]["x"]["field"], rule["encoding"]["x2"]["field"]) == (
        "goodput_lo_mbps", "goodput_hi_mbps")
    drawn = sorted((v["pair"], v["engine"], v["goodput_mbps"]) for v in diamond["data"]["values"])
    want = sorted(zip(table["pair"], table["engine"], table["goodput_mbps"], strict=True))
    assert [d[:2] for d in drawn] == [w[:2] for w in want]
    assert [d[2] for d in drawn] == pytest.approx([w[2] for w in want], rel=1e-9)
    for v in rule["data"]["values"]:
        assert v["goodput_lo_mbps"] <= v["goodput_mbps"] <= v["goodput_hi_mbps"]
    assert (params["encoding"]["x"]["field"], params["encoding"]["x2"]["field"]) == (
        "param_lo_mbps", "param_hi_mbps")
    # Every measured value is drawn, on its own row beside the engines' (not under the
    # predicted marker), and its spread as a box: quartiles, 5–95 % whiskers, median.
    assert not measured.empty
    assert sorted(v["goodput_mbps"] for v in points["data"]["values"]) == pytest.approx(
        sorted(measured["goodput_mbps"]), rel=1e-9)
    assert all(v["row"].startswith("measured · ") for v in points["data"]["values"])
    assert points["encoding"]["yOffset"]["field"] == "row"
    summary = measured_summary(measured)
    for layer, (lo, hi) in ((whiskers, ("p5", "p95")), (box, ("q1", "q3"))):
        assert (layer["encoding"]["x"]["field"], layer["encoding"]["x2"]["field"]) == (lo, hi)
    assert median["encoding"]["x"]["field"] == "median"
    exact = measured[measured["bound"].isna()]
    for v in median["data"]["values"]:
        values = exact[exact["source"] == v["source"]]["goodput_mbps"].astype(float)
        assert v["median"] == pytest.approx(float(np.median(values)), rel=1e-9)
        assert v["n"] == len(values)
    assert len(median["data"]["values"]) == len(summary)
    sweep = table.assign(rtt_ms=[0.0, 1.0])
    vega_lite_valid(sweep_chart(sweep, measured, "rtt_ms", None))
    vega_lite_valid(sweep_chart(sweep.assign(gso=[True, False]), measured, "rtt_ms", "gso",
                                log_x=True))
    frame = pd.DataFrame({"a": [1, 2], "b": [3.0, None], "c": ["x", "y"]})
    for kind in ("points", "line", "bar"):
        vega_lite_valid(quick_chart(frame, ChartParams(kind, "a", "b", "c")))


# -- reproduction results ----------------------------------------------------------


def test_reproduction_files_are_found_and_judged(tmp_path: Path) -> None:
    root = tmp_path / "reproductions"
    one = root / "repro-one"
    one.mkdir(parents=True)
    pd.DataFrame({"finding": ["a", "b", "c"], "predicted": [1.0, 2.0, 3.0],
                  "published": [1.0, 2.5, 3.0], "pass": [True, False, True]}
                 ).to_csv(one / "findings.csv", index=False)
    (one / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (one / "provenance.json").write_text("{}")
    two = root / "repro-two"
    two.mkdir()
    (two / "result.json").write_text(json.dumps({"findings": [{"name": "x", "ok": "fail"}]}))
    found = find_reproductions(root)
    assert [r.name for r in found] == ["repro-one", "repro-two"]
    assert [p.name for p in found[0].tables] == ["findings.csv"]  # provenance is no table
    assert [p.name for p in found[0].images] == ["figure.png"]
    assert verdicts(read_table(found[0].tables[0])) == (2, 1)
    assert verdicts(read_table(found[1].tables[0])) == (0, 1)
    assert find_reproductions(tmp_path / "missing") == []


# -- the Data page's SQL ---------------------------------------------------------------


def test_user_sql_is_capped_and_interrupted(appdata: AppData) -> None:
    from quiclab.app.resources import run_user_sql

    catalog = str(appdata.catalog)
    frame, more = run_user_sql(catalog, "SELECT * FROM range(5000)", max_rows=100)
    assert (len(frame), more) == (100, True)
    frame, more = run_user_sql(catalog, "SELECT * FROM range(50)", max_rows=100)
    assert (len(frame), more) == (50, False)
    with pytest.raises(duckdb.InterruptException):
        run_user_sql(catalog, "SELECT count(*) FROM range(100000000) a, range(100000) b",
                     timeout_s=0.5)


# -- the sweep's table and downloads -----------------------------------------------------


def test_sweep_grid_table_and_downloads(appdata: AppData) -> None:
    import io

    from quiclab.app.sweep import (
        SweepParams,
        _download,
        axis_values,
        full_rows,
        grid,
        point_count,
        sweep_table,
    )
    from quiclab.app.urlstate import Selection

    params = SweepParams("mtu_bytes", 1280, 9000, 5, False, "gso", (True, False), "analytic")
    assert axis_values(params) == [1280, 3210, 5140, 7070, 9000]
    log = SweepParams("rcvbuf_bytes", 106496, 6815744, 7, True, None, (), "analytic")
    assert axis_values(log) == [106496, 212992, 425984, 851968, 1703936, 3407872, 6815744]
    selection = Selection(Scenario(), ("lsquic", "quiche"), ("lsquic",))
    scenarios = grid(selection, params)
    assert len(scenarios) == point_count(selection, params) == 2 * 2 * 5
    registry = Registry.load(appdata.models)
    predictions = get_engine("analytic", registry).predict_batch(scenarios)
    table = sweep_table(predictions)
    assert list(table["pair"].unique()) == ["lsquic → lsquic", "quiche → lsquic"]
    assert table["goodput_lo_mbps"].notna().all()
    # Column by column, the same values as each Prediction's own row.
    rows = full_rows(predictions)
    for column in ("pair", "mtu_bytes", "gso", "goodput_mbps", "limit", "server_cpu_util",
                   "engine_version", "requests_per_s"):
        assert list(table[column].fillna(-1)) == list(rows[column].fillna(-1)), column
    rates = [json.loads(r) for r in rows["rates_mbps"]]
    assert list(table["rate_link_mbps"]) == [r["link"] for r in rates]
    versions = registry.versions()
    assert list(table["server_model"].unique()) == [f"lsquic {versions['lsquic']}",
                                                    f"quiche {versions['quiche']}"]
    assert set(table["client_model"]) == {f"lsquic {versions['lsquic']}"}
    # Downloads are made on a click: every field of every prediction.
    back = pd.read_parquet(io.BytesIO(_download(lambda: rows, "parquet")()))
    pd.testing.assert_frame_equal(back, rows, check_dtype=False)
    csv = pd.read_csv(io.StringIO(_download(lambda: rows, "csv")().decode()))
    assert list(csv["goodput_mbps"]) == pytest.approx(list(table["goodput_mbps"]))
    assert list(csv.columns) == list(rows.columns)
    assert list(csv["scenario_key"]) == [s.key() for s in scenarios]


def test_sweep_point_count_is_pairs_values_and_points() -> None:
    from quiclab.app.sweep import SweepParams, point_count
    from quiclab.app.urlstate import Selection

    six = tuple(f"s{i}" for i in range(6))
    params = SweepParams("rtt_ms", 0, 100, 200, False, "mtu_bytes", (1500, 4000, 9000),
                         "analytic")
    assert point_count(Selection(Scenario(), six, six), params) == 36 * 3 * 200
    log = SweepParams("streams", 1, 4, 50, True, None, (), "analytic")
    assert point_count(Selection(Scenario(), ("a",), ("b",)), log) == 4  # whole numbers


# -- formatting, pairs the models refuse, provenance ---------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (3084.85, "3,085"), (522.1, "522"), (99.96, "100"), (52.23, "52.2"), (7.864, "7.86"),
    (0.5123, "0.512"), (0.002666, "0.00267"), (0.0, "0"), (float("nan"), "—"),
])
def test_three_significant_digits(value: float, text: str) -> None:
    from quiclab.app.charts import three_digits

    assert three_digits(value) == text


def test_a_pair_the_models_refuse_is_one_line(appdata: AppData) -> None:
    from quiclab.app.resources import predict_by_pair

    engine = get_engine("analytic", Registry.load(appdata.models))
    scenarios = [Scenario(server=s) for s in ("lsquic", "quicly", "quiche")]
    with pytest.raises(ScenarioError):
        engine.predict_batch(scenarios)
    predictions, errors = predict_by_pair(engine.predict_batch, scenarios)
    assert [p.scenario.server for p in predictions] == ["lsquic", "quiche"]
    assert errors == ["quicly → lsquic: app='h3' is impossible: allowed perf | hq "
                      "(quicly as server has no h3)"]


def test_sweep_chart_colours_measured_points_by_curve(predictions: list,
                                                     con: duckdb.DuckDBPyConnection) -> None:
    from quiclab.app.charts import measured_curves

    measured = measured_points(con, Scenario(), CPU, free=("link_gbps", "gso"))
    assert ids(measured) == ["t-base-1", "t-base-2", "t-pub-001"]  # the last states no gso
    measured.loc[measured["id"] == "t-base-2", "gso"] = False
    sweep = pd.concat([prediction_table(predictions).assign(link_gbps=10.0, gso=g)
                       for g in (True, False)], ignore_index=True)
    curves = sweep.assign(curve=sweep["pair"] + " · gso=" + sweep["gso"].astype(str))
    assert measured_curves(measured, curves, "gso") == [
        "lsquic → lsquic · gso=True", "lsquic → lsquic · gso=False", None]
    assert measured_curves(measured, curves, None) == ["lsquic → lsquic"] * 3
    spec = sweep_chart(sweep, measured, "link_gbps", "gso")
    vega_lite_valid(spec)
    coloured = [layer for layer in spec["layer"] if "shape" in layer["encoding"]]
    assert [len(layer["data"]["values"]) for layer in coloured] == [2, 1]
    assert {v["curve"] for v in coloured[0]["data"]["values"]} <= set(curves["curve"])
    assert "color" not in coloured[1]["encoding"]  # grey, not a legend entry


def test_findings_are_counted_apart_from_their_verdicts() -> None:
    from quiclab.app.reproductions import finding_count

    findings = pd.DataFrame({"reproduction": ["a", "a", "a", "b"],
                             "finding": ["x", "x", "y", "x"],
                             "engine": ["analytic", "des", "analytic", "analytic"]})
    assert (finding_count(findings), len(findings)) == (3, 4)
