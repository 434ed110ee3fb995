"""The pure parts of the explorer's views, on small synthetic predictions: engines'
disagreements, what a band says it covers, the CPU breakdown's groups, the
matrix's shape and heatmap, labels, time series and their qlog, and the
packet-level results kept by scenario across sessions and restarts.
"""

from __future__ import annotations

import json
import math
import pickle
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

import altair as alt
import pandas as pd
import pytest

from quiclab.app import breakdown, engines, jobs, labels, matrix, panels, timeseries
from quiclab.app.urlstate import (
    MAX_PAIRS,
    Selection,
    decode,
    matrix_shape,
    with_workload_defaults,
)
from quiclab.models.registry import Registry
from quiclab.sim.engine import get_engine
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

from .appdata import AppData


def _prediction(engine: str, goodput: float, lo: float, hi: float, limit: str,
                **fields: object) -> Prediction:
    return Prediction(scenario=Scenario(**fields), engine=engine, engine_version=f"{engine} 1",
                      goodput_mbps=goodput, limit=limit, goodput_lo_mbps=lo,
                      goodput_hi_mbps=hi)


# -- engines side by side -----------------------------------------------------------


def test_engines_whose_bands_do_not_overlap_disagree_and_are_named() -> None:
    analytic = _prediction("analytic", 1619.0, 1471.0, 1798.0, "receiver_cpu", rtt_ms=20.0)
    des = _prediction("des", 968.0, 968.0, 968.0, "rcvbuf", rtt_ms=20.0)
    found = engines.disagreements([des, analytic])
    assert len(found) == 1
    item = found[0]
    assert (item.first.engine, item.second.engine) == ("analytic", "des")
    assert item.ratio == pytest.approx(1619.0 / 968.0)
    text = item.text()
    assert "limited by **client CPU (receiver)** (`receiver_cpu`)" in text
    assert "limited by **receive-buffer drops** (`rcvbuf`)" in text
    assert "the DES models receive-buffer drops as the socket buffer filling" in text
    assert "rtt_ms=20" in item.link and "engines=analytic%2Cdes%2Cns3" in item.link


def test_overlapping_bands_and_other_scenarios_do_not_disagree() -> None:
    analytic = _prediction("analytic", 1619.0, 1471.0, 1798.0, "receiver_cpu")
    touching = _prediction("des", 1500.0, 1400.0, 1471.0, "receiver_cpu")
    assert engines.disagreements([analytic, touching]) == []
    # The same numbers for another scenario are not a disagreement of the engines.
    elsewhere = _prediction("des", 500.0, 500.0, 500.0, "rcvbuf", rtt_ms=40.0)
    assert engines.disagreements([analytic, elsewhere]) == []
    # An engine without a band is its point.
    bare = _prediction("ns3", 2000.0, math.nan, math.nan, "link")
    assert engines.band(bare) == (2000.0, 2000.0)
    assert len(engines.disagreements([analytic, bare])) == 1


# -- what the band covers -------------------------------------------------------------


def test_the_band_says_whether_it_is_predictive_or_the_parameters_only() -> None:
    p = _prediction("analytic", 1000.0, 900.0, 1100.0, "sender_cpu")
    assert "covers the fitted parameters only, not the model's error" in \
        panels.band_coverage(p)
    predictive = replace(p, interval_level=0.9, goodput_lo_mbps=800.0,
                         goodput_hi_mbps=1250.0)
    text = panels.band_coverage(predictive)
    assert text.startswith("90 % predictive band 800 … 1,250 Mbit/s (-20.0 % … +25.0 %)")
    assert "model error included, learned from held-out residuals" in text
    assert panels.band_coverage(replace(p, goodput_lo_mbps=math.nan)).startswith("no interval")


def test_the_measured_spread_is_counted_against_the_band() -> None:
    p = replace(_prediction("analytic", 1000.0, 900.0, 1100.0, "sender_cpu"),
                interval_level=0.9, interval_source="held-out residuals, bin cpu")
    values = [850.0, 950.0, 1000.0, 1050.0, 1200.0]
    measured = pd.DataFrame({"source": "qir10g", "id": [f"r{i}" for i in range(5)],
                             "server": "lsquic", "client": "lsquic", "goodput_mbps": values,
                             "bound": None})
    (line,) = panels.uncertainty_lines([p], measured)
    assert "Measured (qir10g): 5 value(s), median 1,000" in line
    assert "60 % of them inside the band" in line
    assert line.endswith("— *held-out residuals, bin cpu*")


# -- CPU breakdown ----------------------------------------------------------------------


def test_predicted_shares_add_up_per_side_and_are_written_out(appdata: AppData) -> None:
    r = resolve(Scenario(client="quiche"), Registry.load(appdata.models))
    shares = breakdown.predicted_shares(r, acks_per_packet=0.5)
    for side, part in shares.groupby("side"):
        assert part["share"].sum() == pytest.approx(1.0), side
    acks = shares[(shares["side"] == "server") & (shares["component"] == "ACKs")]
    assert acks["ns_per_packet"].iloc[0] == pytest.approx(0.5 * r.sender.ns_per_ack)
    lines = breakdown.shares_text(shares)
    assert [line.split(":")[0] for line in lines] == ["server (lsquic)", "client (quiche)"]


def test_measured_profiles_meet_the_model_in_three_groups() -> None:
    predicted = pd.DataFrame({"side": "server", "stack": "lsquic",
                              "component": ["a", "b", "c"],
                              "group": ["packet I/O", "crypto", "protocol"],
                              "share": [0.5, 0.2, 0.3]})
    perf = breakdown.perf_shares(pd.DataFrame({
        "run_id": "r1", "side": "server", "stack": "lsquic",
        "category": ["PACKET_IO", "CRYPTO", "CONN_MGMT", "IO", "GENERAL"],
        "share": [0.3, 0.1, 0.2, 0.1, 0.3], "source": "qir10g perf"}))
    published = breakdown.published_shares(pd.DataFrame({
        "point_id": ["p1", "p2", "p3", "p4"], "server": "quicly", "value": [40, 30, 30, 5],
        "conditions": ["component=io; side=sender", "component=crypto; side=sender",
                       "component=protocol; side=sender", "component=io; dup_of=p1"]}))
    assert list(published["group"]) == ["packet I/O", "crypto", "protocol"]
    table = breakdown.grouped(predicted, pd.concat([perf, published], ignore_index=True))
    measured = table[table["what"] == "qir10g perf: lsquic (r1)"]
    # IO and GENERAL have no model component: left out, the rest renormalised.
    assert list(measured["share"]) == pytest.approx([0.5, 1 / 6, 1 / 3])
    for _, part in table.groupby("what"):
        assert part["share"].sum() == pytest.approx(1.0)


# -- the matrix ------------------------------------------------------------------------


def test_many_names_make_a_server_by_client_matrix_not_a_ragged_list() -> None:
    names = tuple(f"impl{i}" for i in range(36))
    selection = Selection(Scenario(), names, names)
    pairs = selection.pairs()
    assert len(pairs) == MAX_PAIRS
    assert sorted({s for s, _ in pairs}) == sorted(names[:6])
    assert sorted({c for _, c in pairs}) == sorted(names[:6])
    assert matrix_shape(1, 40) == (1, 36)
    assert matrix_shape(40, 3) == (12, 3)
    assert matrix_shape(4, 5) == (4, 5)


def test_the_heatmap_is_valid_and_greys_what_it_cannot_colour(appdata: AppData) -> None:
    table = pd.DataFrame({
        "server": ["a", "a", "b", "b"], "client": ["a", "b", "a", "b"],
        "pair": ["a → a", "a → b", "b → a", "b → b"],
        "goodput_mbps": [3000.0, 2000.0, math.nan, 500.0],
        "goodput_lo_mbps": [2800.0, 1900.0, math.nan, 450.0],
        "goodput_hi_mbps": [3200.0, 2100.0, math.nan, 550.0],
        "limit": ["sender_cpu", "link", "refused", "cwnd"],
        "limit_name": ["server CPU (sender)", "link rate", "the models refuse this pair",
                       "congestion window"],
        "extrapolated": "", "measured_n": [2, 0, 0, 1],
        "measured_median_mbps": [3100.0, math.nan, math.nan, 480.0]})
    table["ratio"] = table["goodput_mbps"] / table["measured_median_mbps"]
    for colour in matrix.COLOURS:
        spec = matrix.heatmap(table, colour, ["a", "b"])
        alt.LayerChart.from_dict(spec, validate=True)
        grey, coloured, text, ring = spec["layer"]
        assert text["encoding"]["text"]["field"] == "text"
        assert grey["mark"]["fill"] == "#d9d9d9" and "transform" not in grey
        assert "isValid" in coloured["transform"][0]["filter"]
        assert ring["transform"] == [{"filter": "datum.measured_n > 0"}]
    texts = [v["text"] for v in matrix.heatmap(table, "predicted", ["a", "b"])["data"]["values"]]
    assert texts == ["3", "2", "—", "0.5"]


# -- labels, URL, workloads ------------------------------------------------------------


@pytest.mark.parametrize(("headroom", "text"), [
    (0.19, "+19 %"), (0.0, "+0 %"), (1.5, "×2.5"), (196.47, "×197"), (math.inf, "∞")])
def test_headroom_is_a_percentage_then_a_factor(headroom: float, text: str) -> None:
    assert labels.headroom_text(headroom) == text


def test_cpu_is_a_percentage_of_one_core_everywhere() -> None:
    assert labels.cpu_pct_text(0.863) == "86.3 %"
    assert labels.cpu_pct_text(2.0) == "200 %"
    assert labels.cpu_pct_text(math.nan) == "—"
    assert labels.limit_name("rcvbuf") == "receive-buffer drops"
    assert "engine name `rcvbuf`" in labels.limit_help("rcvbuf")
    assert labels.limit_name("something_new") == "something_new"


def test_a_request_workload_alone_is_a_scenario() -> None:
    fields = with_workload_defaults({"workload": "requests"})
    assert Scenario(**fields).request_bytes == 630
    # A value the URL gives, even an impossible one, is kept (and reported).
    assert with_workload_defaults({"workload": "requests", "requests": 0})["requests"] == 0
    selection, _, problems = decode({"workload": "handshakes"}, ["lsquic"])
    assert (selection.base.workload, problems) == ("handshakes", [])


def test_a_url_warning_names_the_field_left_out() -> None:
    selection, _, problems = decode({"udp_payload_bytes": "1400", "mtu_bytes": "1280"},
                                    ["lsquic"])
    assert (selection.base.mtu_bytes, selection.base.udp_payload_bytes) == (1500, 1400)
    assert len(problems) == 1 and problems[0].startswith("URL: mtu_bytes=1280 was left out")


# -- time series -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def des_run(tmp_path_factory: pytest.TempPathFactory) -> Prediction:
    from .appdata import build

    data = build(tmp_path_factory.mktemp("views"))
    engine = get_engine("des", Registry.load(data.models), timeseries=True,
                        timeseries_interval_s=0.002)
    return engine.predict(Scenario(transfer_bytes=20_000_000))


def test_a_runs_series_become_long_rows_and_a_qlog(des_run: Prediction) -> None:
    ts = des_run.timeseries or {}
    rows = timeseries.simulated(des_run)
    n = len(ts["t_s"])
    assert n > 5
    goodput = rows[rows["metric"] == "goodput_mbps"]
    assert list(goodput["value"]) == pytest.approx(ts["goodput_mbps"])
    cpu = rows[(rows["metric"] == "cpu_pct") & (rows["series"] == "des · server")]
    assert list(cpu["value"]) == pytest.approx([v * 100 for v in ts["sender_cpu_busy"]])
    records = [r for r in timeseries.to_qlog(des_run).split(timeseries.RS) if r.strip()]
    header = json.loads(records[0])
    assert header["qlog_format"] == "JSON-SEQ" and header["qlog_version"] == "0.3"
    events = [json.loads(r) for r in records[1:]]
    updates = [e for e in events if e["name"] == "recovery:metrics_updated"]
    assert len(updates) == n
    assert [e["data"]["congestion_window"] for e in updates] == \
        [round(v) for v in ts["cwnd_bytes"]]
    assert [e["time"] for e in updates] == pytest.approx([t * 1e3 for t in ts["t_s"]])
    # Thinning keeps at most about the asked number of points per series.
    assert len(timeseries.thin(rows, points=10)) <= 11 * rows.groupby(
        ["metric", "series"]).ngroups
    alt.FacetChart.from_dict(timeseries.chart(rows), validate=True)


# -- packet-level results kept by scenario ---------------------------------------------


def test_results_survive_a_restart_and_ignore_foreign_files(tmp_path: Path) -> None:
    p = _prediction("des", 968.0, 968.0, 968.0, "rcvbuf")
    key = ("des", p.scenario.key())
    store = jobs.Results(tmp_path, "models-1|code-1")
    future: Future = Future()
    store.put(key, future)
    assert isinstance(store.get(key), Future)
    future.set_result(p)
    assert store.get(key) is p
    # Another server process (a restart) with the same models and code finds it on disk.
    again = jobs.Results(tmp_path, "models-1|code-1").get(key)
    assert isinstance(again, Prediction) and again.to_dict() == p.to_dict()  # NaN → None
    # Other models or code: not the same result.
    assert jobs.Results(tmp_path, "models-2|code-1").get(key) is None
    # A damaged or foreign file is as if absent.
    path = store.path(key)
    path.write_bytes(b"not a pickle")
    assert jobs.Results(tmp_path, "models-1|code-1").get(key) is None
    path.write_bytes(pickle.dumps({"goodput_mbps": 1}))
    assert jobs.Results(tmp_path, "models-1|code-1").get(key) is None
    # An error line is kept in memory only, and forgotten to try again.
    other = ("ns3", p.scenario.key())
    store.put(other, "ns3: the worker process died during the run")
    assert not store.path(other).exists()
    jobs.forget_errors([("ns3", p.scenario)], store)
    assert store.get(other) is None


def test_a_sweep_lists_the_points_where_engines_part() -> None:
    from quiclab.app.sweep import SweepParams, sweep_disagreements

    params = SweepParams("rtt_ms", 0.0, 40.0, 3, False, None, (), ("analytic", "des"))
    table = pd.DataFrame({
        "pair": "lsquic → quiche", "rtt_ms": [0.0, 20.0, 40.0, 0.0, 20.0, 40.0],
        "engine": ["analytic"] * 3 + ["des"] * 3,
        "goodput_mbps": [3000.0, 480.0, 440.0, 2950.0, 1300.0, 1290.0],
        "goodput_lo_mbps": [2700.0, 360.0, 330.0, 2950.0, 1300.0, 1290.0],
        "goodput_hi_mbps": [3300.0, 560.0, 510.0, 2950.0, 1300.0, 1290.0],
        "limit": ["sender_cpu", "rcvbuf", "rcvbuf", "sender_cpu", "interop", "interop"]})
    found = sweep_disagreements(table, params)
    assert list(found["rtt_ms"]) == [20.0, 40.0]
    assert set(found["engines"]) == {"analytic vs des"}
    assert list(found["first_limit"]) == ["rcvbuf", "rcvbuf"]
    assert list(found["second_limit"]) == ["interop", "interop"]
