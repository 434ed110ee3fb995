"""The What-if page under AppTest: the numbers shown are `quiclab predict`'s."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from quiclab.app.labels import limit_name
from quiclab.app.whatif import GOODPUT_LABEL
from quiclab.models.registry import Registry

from .appdata import AppData

Predict = Callable[..., dict[str, Any]]


def predictions(at: AppTest) -> pd.DataFrame:
    """The page's prediction table (the dataframe with an ``engine`` column)."""
    for frame in at.dataframe:
        if "engine" in frame.value.columns and "goodput_mbps" in frame.value.columns:
            return frame.value
    raise AssertionError("no prediction table on the page")


def measured(at: AppTest) -> pd.DataFrame:
    """The page's table of measured points (the dataframe with a ``source`` column)."""
    for frame in at.dataframe:
        if "source" in frame.value.columns:
            return frame.value
    raise AssertionError("no measured-points table on the page")


def metric(at: AppTest, label: str) -> str:
    return str(next(m.value for m in at.metric if m.label == label))


def three(value: float) -> str:
    """How the page writes a number: three significant digits, whole above 100."""
    return f"{value:,.0f}" if value == 0 or abs(value) >= 100 else f"{value:.3g}"


def caption_lines(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


def provenance_block(at: AppTest, head: str) -> list[str]:
    """The lines of the one prediction's provenance that starts with ``head``."""
    blocks = [b.splitlines() for m in at.markdown for b in m.value.split("\n\n")]
    found = [b for b in blocks if b and b[0].startswith(head)]
    assert len(found) == 1, blocks
    return found[0]


def answer_ms(at: AppTest) -> float:
    """The response time the page states (its whole script run)."""
    found = [re.fullmatch(r"Analytic answer in (\d+) ms(?: \(first run: models and catalog "
                          r"loaded\))?: the whole script run on the server "
                          r"\(sidebar, predictions, measured points, charts\), before the "
                          r"browser draws it · models: .*", c) for c in caption_lines(at)]
    values = [float(m.group(1)) for m in found if m]
    assert len(values) == 1, caption_lines(at)
    return values[0]


def assert_shows(at: AppTest, expected: dict[str, Any], row: int = 0) -> None:
    """Table row ``row`` (and for row 0 the metrics) equal a `quiclab predict --json` result."""
    assert not at.exception
    got = predictions(at).iloc[row]
    assert got["pair"] == f"{expected['scenario']['server']} → {expected['scenario']['client']}"
    assert got["engine"] == expected["engine"]
    for column, key, scale in (("goodput_mbps", "goodput_mbps", 1),
                               ("goodput_lo_mbps", "goodput_lo_mbps", 1),
                               ("goodput_hi_mbps", "goodput_hi_mbps", 1),
                               ("server_cpu_pct", "server_cpu_util", 100),
                               ("client_cpu_pct", "client_cpu_util", 100)):
        if expected[key] is None:
            assert pd.isna(got[column]), column
        else:
            assert got[column] == pytest.approx(expected[key] * scale, rel=1e-12), column
    assert got["limit"] == expected["limit"]
    if row == 0:
        assert metric(at, GOODPUT_LABEL) == f"{three(expected['goodput_mbps'])} Mbit/s"
        assert metric(at, "Limit") == limit_name(expected["limit"])
        assert metric(at, "Server CPU") == f"{three(expected['server_cpu_util'] * 100)} %"
        assert metric(at, "Client CPU") == f"{three(expected['client_cpu_util'] * 100)} %"


def test_default_scenario_equals_quiclab_predict(app: AppTest, predict: Predict) -> None:
    app.run()
    assert not app.error
    assert_shows(app, predict())
    assert app.query_params["page"] == "whatif"
    assert answer_ms(app) > 0


def test_the_page_names_the_models_of_each_side(app: AppTest, app_env: AppData) -> None:
    """Which model served each side, its version and the sources of its parameters."""
    app.query_params.update({"server": "quiche", "client": "lsquic"})
    app.run()
    versions = Registry.load(app_env.models).versions()
    table = predictions(app)
    assert (table["server_model"].iloc[0], table["client_model"].iloc[0]) == (
        f"quiche {versions['quiche']}", f"lsquic {versions['lsquic']}")
    provenance = next(f.value for f in app.dataframe if "parameter" in f.value.columns)
    assert list(provenance.columns) == ["side", "model", "version", "parameter", "value",
                                        "unit", "source"]
    first = provenance.groupby("side", sort=False).head(1).to_dict("records")
    assert first == [
        {"side": "server", "model": "quiche", "version": versions["quiche"],
         "parameter": "sender.ns_per_packet", "value": 4500.0, "unit": "ns",
         "source": "assumed: synthetic test model"},
        {"side": "client", "model": "lsquic", "version": versions["lsquic"],
         "parameter": "receiver.ns_per_packet", "value": 2500.0, "unit": "ns",
         "source": "assumed: synthetic test model"}]
    assert list(provenance[provenance["side"] == "server"]["parameter"]) == [
        "sender.ns_per_packet", "sender.ns_per_byte", "sender.ns_per_syscall",
        "sender.ns_per_segment", "sender.ns_per_ack", "sender.app_ns_per_byte.h3",
        "crypto.aes-ni.ns_per_packet"]
    # The analytic engine draws no random numbers: no seed line.
    analytic = provenance_block(app, "**quiche → lsquic · analytic ")
    assert not [line for line in analytic if line.startswith("- seed")]


@pytest.mark.parametrize(("kind", "key", "value", "fields"), [
    ("number_input", "w.mtu_bytes", 9000, {"mtu_bytes": 9000}),
    ("number_input", "w.rtt_ms", 20.0, {"rtt_ms": 20.0}),
    ("number_input", "w.loss_pct", 0.5, {"loss_pct": 0.5}),
    ("number_input", "w.link_gbps", 1.0, {"link_gbps": 1.0}),
    ("number_input", "w.rcvbuf_bytes", 6656, {"rcvbuf_bytes": 6815744}),
    ("number_input", "w.sndbuf_bytes", 416, {"sndbuf_bytes": 425984}),
    ("number_input", "w.streams", 4, {"streams": 4}),
    ("number_input", "w.transfer_bytes", 10**8, {"transfer_bytes": 10**8}),
    ("checkbox", "w.gso", False, {"gso": False}),
    ("checkbox", "w.gro", False, {"gro": False}),
    ("selectbox", "w.cipher", "chacha20", {"cipher": "chacha20"}),
    ("selectbox", "w.app", "perf", {"app": "perf"}),
    ("selectbox", "w.cc", "reno", {"cc": "reno"}),
    ("selectbox", "w.cpu", "Intel Xeon W-2145", {"cpu": "Intel Xeon W-2145"}),
    ("selectbox", "w.pipeline", "mukherjee-best", {"pipeline": "mukherjee-best"}),
    ("selectbox", "w.pipeline", "msquic", {"pipeline": "msquic"}),
    ("checkbox", "w.pin", True, {"pin": True}),
    ("number_input", "w.server_core", 0, {"server_core": 0}),
    ("number_input", "w.client_core", 16, {"client_core": 16}),
])
def test_each_widget_matches_the_cli(app: AppTest, predict: Predict, kind: str, key: str,
                                     value: Any, fields: dict[str, Any]) -> None:
    app.run()
    before = metric(app, GOODPUT_LABEL)
    assert before == f"{three(predict()['goodput_mbps'])} Mbit/s"
    getattr(app, kind)(key=key).set_value(value).run()
    assert not app.error, [e.value for e in app.error]
    assert_shows(app, predict(**fields))
    # The URL carries the change.
    name, raw = next(iter(fields.items()))
    assert app.query_params[name] == (str(raw).lower() if isinstance(raw, bool) else str(raw))


def test_changing_mtu_changes_the_goodput(app: AppTest, predict: Predict) -> None:
    app.run()
    before = metric(app, GOODPUT_LABEL)
    app.number_input(key="w.mtu_bytes").set_value(9000).run()
    after = metric(app, GOODPUT_LABEL)
    assert before != after
    assert after == f"{predict(mtu_bytes=9000)['goodput_mbps']:,.0f} Mbit/s"


def test_several_pairs_each_equal_the_cli(app: AppTest, predict: Predict) -> None:
    app.run()
    app.multiselect(key="w.servers").set_value(["lsquic", "quiche"])
    app.multiselect(key="w.clients").set_value(["lsquic", "quiche"]).run()
    table = predictions(app)
    assert list(table["pair"]) == ["lsquic → lsquic", "lsquic → quiche", "quiche → lsquic",
                                   "quiche → quiche"]
    for row, (server, client) in enumerate([("lsquic", "lsquic"), ("lsquic", "quiche"),
                                            ("quiche", "lsquic"), ("quiche", "quiche")]):
        assert_shows(app, predict(server=server, client=client), row=row)
    assert app.query_params["server"] == "lsquic,quiche"


def test_the_url_sets_the_scenario(app: AppTest, predict: Predict) -> None:
    app.query_params.update({"page": "whatif", "server": "quiche", "client": "lsquic",
                             "mtu_bytes": "9000", "rtt_ms": "10", "gso": "false"})
    app.run()
    assert not app.error
    assert app.number_input(key="w.mtu_bytes").value == 9000
    assert app.checkbox(key="w.gso").value is False
    assert_shows(app, predict(server="quiche", client="lsquic", mtu_bytes=9000, rtt_ms=10.0,
                              gso=False))


def test_a_bad_url_value_is_a_warning_not_a_crash(app: AppTest, predict: Predict) -> None:
    app.query_params.update({"mtu_bytes": "100", "server": "nosuch", "engines": "warp"})
    app.run()
    assert not app.exception
    warnings = " ".join(w.value for w in app.warning)
    assert "mtu_bytes=100 is impossible" in warnings
    assert "server='nosuch' is impossible" in warnings
    assert "engines='warp' is impossible" in warnings
    assert_shows(app, predict())


def test_an_impossible_combination_names_the_field(app: AppTest) -> None:
    app.run()
    app.number_input(key="w.udp_payload_bytes").set_value(1472)
    app.number_input(key="w.mtu_bytes").set_value(1300).run()
    assert not app.exception
    assert any("udp_payload_bytes=1472 is impossible" in e.value for e in app.error)


def test_measured_points_match_the_conditions(app: AppTest) -> None:
    app.run()
    rows = measured(app)
    # Default buffer: the two ok baseline runs and the published point that states no buffer.
    assert sorted(rows["id"]) == ["t-base-1", "t-base-2", "t-pub-001"]
    assert rows.set_index("id").loc["t-pub-001", "goodput_mbps"] == 3200.0
    app.number_input(key="w.rcvbuf_bytes").set_value(6656).run()
    assert sorted(measured(app)["id"]) == ["t-bigbuf", "t-pub-001", "t-pub-002"]
    assert ("Measured points matching the conditions (a condition a source leaves unstated "
            "does not exclude it) — published: 2 (median 3,225 Mbit/s); qir10g: 1 (median "
            "3,300 Mbit/s)") in caption_lines(app)


@pytest.mark.parametrize(("params", "why"), [
    ({"pipeline": "mukherjee-best"},
     "the catalog does not record pipeline=mukherjee-best: its measurements are taken at "
     "the default (pipeline=none), so none can match"),
    ({"queue_bdp": "0.5", "cpu_ghz": "2"},
     "the catalog does not record cpu_ghz=2.0, queue_bdp=0.5: its measurements are taken at "
     "the default (cpu_ghz=0.0, queue_bdp=1.0), so none can match"),
    ({"client": "quiche", "transfer_bytes": "100000000"},
     "the catalog has points under these conditions at another transfer size: "
     "8,589,934,592 bytes"),
])
def test_no_measured_point_says_why(app: AppTest, params: dict[str, str], why: str) -> None:
    app.query_params.update(params)
    app.run()
    assert not app.error and not app.warning
    assert measured(app).empty
    assert f"No measured point in the catalog matches these conditions: {why}." in \
        caption_lines(app)
    assert "Measured points matching these conditions (0)" in [e.label for e in app.expander]


def test_charts_are_drawn(app: AppTest) -> None:
    app.run()
    charts = app.get("vega_lite_chart")
    # goodput vs measured, CPU per side, limits and headroom, the CPU breakdown: the
    # model's components, and beside them t-base-1's perf profile of lsquic
    assert len(charts) == 5


@pytest.mark.timeout(300)
def test_des_runs_on_the_button_and_equals_the_cli(app: AppTest, predict: Predict) -> None:
    app.query_params.update({"seed": "7", "run": "2"})
    app.run()
    app.number_input(key="w.transfer_bytes").set_value(20_000_000)
    app.multiselect(key="w.engines").set_value(["analytic", "des"]).run()
    assert not app.exception
    assert len(predictions(app)) == 1  # DES has not run yet
    app.button(key="run_packet").click().run(timeout=240)
    assert not app.exception
    assert not app.error, [e.value for e in app.error]
    table = predictions(app)
    assert list(table["engine"]) == ["analytic", "des"]
    assert_shows(app, predict(engine="des", transfer_bytes=20_000_000, seed=7, run=2), row=1)
    assert any(c.startswith("des: all 1 run(s) done for this scenario")
               for c in caption_lines(app))
    # The packet-level engine's provenance names its seed and run.
    des = provenance_block(app, "**lsquic → lsquic · des ")
    assert des[1] == "- seed 7 · run 2"


def test_every_answer_states_its_time(app: AppTest) -> None:
    """Each rerun's caption states the whole script run's time (what `quiclab bench
    app` reads and compares with the 200 ms target; a unit test does not time)."""
    app.run()
    times = []
    for mtu in (9000, 1500, 4000, 1400, 8000, 3000, 1280):
        app.number_input(key="w.mtu_bytes").set_value(mtu).run()
        times.append(answer_ms(app))
    assert len(times) == 7 and all(t >= 1 for t in times), times


def test_the_answer_time_covers_the_whole_run(app: AppTest,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The caption's time ends after the last element (the provenance), not at the table."""
    from quiclab.app import whatif

    provenance = whatif.prediction_provenance

    def slow(*args: Any) -> str:
        time.sleep(0.3)
        return provenance(*args)

    monkeypatch.setattr(whatif, "prediction_provenance", slow)
    app.run()
    app.number_input(key="w.mtu_bytes").set_value(9000).run()
    assert answer_ms(app) >= 300


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ns3_runs_on_the_button_and_equals_the_cli(app: AppTest, predict: Predict) -> None:
    """ns-3 through the app (builds the simulator into the test's data dir first)."""
    app.run()
    app.number_input(key="w.transfer_bytes").set_value(20_000_000)
    app.multiselect(key="w.engines").set_value(["analytic", "ns3"]).run()
    app.button(key="run_packet").click().run(timeout=840)
    assert not app.exception
    assert not app.error, [e.value for e in app.error]
    table = predictions(app)
    assert list(table["engine"]) == ["analytic", "ns3"]
    assert_shows(app, predict(engine="ns3", transfer_bytes=20_000_000), row=1)


def test_pipeline_presets_and_core_placement(app: AppTest, predict: Predict) -> None:
    """The explorer offers every preset; a pipeline shows its cores, pinning its node."""
    from quiclab.models.pipelines import preset_names

    app.run()
    assert list(app.selectbox(key="w.pipeline").options) == list(preset_names())
    app.selectbox(key="w.pipeline").set_value("mukherjee-simple")
    app.number_input(key="w.server_core").set_value(16)
    app.number_input(key="w.client_core").set_value(0).run()
    assert not app.error, [e.value for e in app.error]
    fields = {"pipeline": "mukherjee-simple", "server_core": 16, "client_core": 0}
    expected = predict(**fields)
    assert_shows(app, expected)
    notes = " ".join(m.value for m in app.markdown)
    assert "sender pipeline mukherjee-simple" in notes and "per core" in notes
    assert "pinned to core 16 (NUMA node 2, NIC on node 2: near)" in notes
    assert "pinned to core 0 (NUMA node 0, NIC on node 2: far)" in notes
    assert {app.query_params[k] for k in fields} == {"mukherjee-simple", "16", "0"}


def test_a_core_the_cpu_lacks_is_one_error_line(app: AppTest) -> None:
    app.run()
    app.number_input(key="w.server_core").set_value(64).run()
    assert not app.exception
    errors = [e.value for e in app.error]
    assert errors and "server_core=64 is impossible" in errors[0]
    assert "AMD EPYC 7543 has 32 cores" in errors[0]


def test_a_request_workload_from_the_url_equals_the_cli(app: AppTest, predict: Predict) -> None:
    """The app's own URL for a request workload (workload first) opens it, with the
    request rates and latencies `quiclab predict` prints."""
    app.query_params.update({"workload": "requests", "request_bytes": "10000",
                             "requests": "1000"})
    app.run()
    assert not app.error and not app.warning, [w.value for w in app.warning]
    expected = predict(workload="requests", request_bytes=10000, requests=1000)
    assert_shows(app, expected)
    assert metric(app, "Requests/s") == three(expected["requests_per_s"])
    assert metric(app, "Completion") == f"{three(expected['completion_s'])} s"
    assert metric(app, "Latency p50") == f"{three(expected['latency_p50_ms'])} ms"
    assert metric(app, "Latency p99") == f"{three(expected['latency_p99_ms'])} ms"
    row = predictions(app).iloc[0]
    for column in ("requests_per_s", "completion_s", "latency_p50_ms", "latency_p99_ms"):
        assert row[column] == pytest.approx(expected[column], rel=1e-12), column
    assert (app.selectbox(key="w.workload").value, app.number_input(key="w.request_bytes").value,
            app.number_input(key="w.requests").value) == ("requests", 10000, 1000)
    assert {k: app.query_params[k] for k in ("workload", "request_bytes", "requests")} == {
        "workload": "requests", "request_bytes": "10000", "requests": "1000"}


def test_the_workload_widgets_match_the_cli(app: AppTest, predict: Predict) -> None:
    app.run()
    assert [m.label for m in app.metric] == [GOODPUT_LABEL, "Limit", "Server CPU", "Client CPU"]
    assert app.number_input(key="w.request_bytes").disabled  # bulk: no request fields
    app.selectbox(key="w.workload").set_value("handshakes").run()
    # The workload's defaults fill its unset fields: an answer, not a refusal.
    assert not app.error, [e.value for e in app.error]
    assert (app.number_input(key="w.request_bytes").value,
            app.number_input(key="w.requests").value) == (1024, 1000)
    app.number_input(key="w.request_bytes").set_value(1000)
    app.number_input(key="w.requests").set_value(500)
    app.number_input(key="w.connections").set_value(4).run()
    assert not app.error, [e.value for e in app.error]
    expected = predict(workload="handshakes", request_bytes=1000, requests=500, connections=4)
    assert_shows(app, expected)
    assert metric(app, "Requests/s") == three(expected["requests_per_s"])
    assert app.query_params["workload"] == "handshakes"
    assert app.query_params["connections"] == "4"


def test_a_pair_the_models_refuse_leaves_the_others(app: AppTest, predict: Predict) -> None:
    """quicly has no HTTP/3: its pair is one error line, lsquic's is still predicted."""
    app.query_params.update({"server": "lsquic,quicly,quiche"})
    app.run()
    assert not app.exception
    assert [e.value for e in app.error] == [
        "quicly → lsquic: app='h3' is impossible: allowed perf | hq (quicly as server has no h3)"]
    assert list(predictions(app)["pair"]) == ["lsquic → lsquic", "quiche → lsquic"]
    assert_shows(app, predict())
    assert_shows(app, predict(server="quiche"), row=1)


def test_url_values_are_kept_exactly(app: AppTest, predict: Predict) -> None:
    """100000 bytes is no whole number of KiB: kept until the widget is edited, and said."""
    app.query_params.update({"rcvbuf_bytes": "100000", "sndbuf_bytes": "5000", "rtt_ms": "20",
                             "seed": str(2**53 + 1)})
    app.run()
    assert not app.error and not app.warning
    assert_shows(app, predict(rcvbuf_bytes=100000, sndbuf_bytes=5000, rtt_ms=20.0))
    assert (app.query_params["rcvbuf_bytes"], app.query_params["sndbuf_bytes"],
            app.query_params["seed"]) == ("100000", "5000", "9007199254740993")
    notes = [c for c in caption_lines(app) if " exactly (the widget shows " in c]
    assert notes == [
        "rcvbuf_bytes=100000 exactly (the widget shows 98 KiB; editing it replaces the value)",
        "sndbuf_bytes=5000 exactly (the widget shows 5 KiB; editing it replaces the value)",
        "seed=9007199254740993 exactly (the widget shows 9007199254740991; editing it "
        "replaces the value)"]
    # Another widget's change keeps them; editing the widget replaces the value.
    app.number_input(key="w.mtu_bytes").set_value(9000).run()
    assert app.query_params["rcvbuf_bytes"] == "100000"
    app.number_input(key="w.rcvbuf_bytes").set_value(100).run()
    assert_shows(app, predict(rcvbuf_bytes=102400, sndbuf_bytes=5000, rtt_ms=20.0,
                              mtu_bytes=9000))
    assert app.query_params["rcvbuf_bytes"] == "102400"
    assert [c for c in caption_lines(app) if c.startswith("rcvbuf_bytes=")] == []


def test_a_rate_under_one_mbit_keeps_three_digits(app: AppTest, predict: Predict) -> None:
    app.query_params.update({"link_gbps": "0.001", "rtt_ms": "300"})
    app.run()
    expected = predict(link_gbps=0.001, rtt_ms=300.0)
    assert 0 < expected["goodput_mbps"] < 1
    shown = metric(app, GOODPUT_LABEL)
    assert shown == f"{expected['goodput_mbps']:.3g} Mbit/s" and shown != "0 Mbit/s"
    assert re.fullmatch(r"0\.\d{3} Mbit/s", shown) or re.fullmatch(r"0\.0+\d{3} Mbit/s", shown)
    cpu = expected["server_cpu_util"] * 100
    assert cpu < 1 and metric(app, "Server CPU") == f"{cpu:.3g} %"
