"""The What-if page under AppTest: the numbers shown are `quiclab predict`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from quiclab.app.whatif import GOODPUT_LABEL

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
        assert metric(at, GOODPUT_LABEL) == f"{expected['goodput_mbps']:,.0f} Mbit/s"
        assert metric(at, "Limit") == expected["limit"]
        assert metric(at, "Server CPU") == f"{expected['server_cpu_util'] * 100:.1f} %"
        assert metric(at, "Client CPU") == f"{expected['client_cpu_util'] * 100:.1f} %"


def test_default_scenario_equals_quiclab_predict(app: AppTest, predict: Predict) -> None:
    app.run()
    assert not app.error
    assert_shows(app, predict())
    assert app.query_params["page"] == "whatif"
    assert any("Analytic answer in" in c.value for c in app.caption)


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
    getattr(app, kind)(key=key).set_value(value).run()
    assert not app.error, [e.value for e in app.error]
    assert_shows(app, predict(**fields))
    # The URL carries the change.
    name, raw = next(iter(fields.items()))
    assert app.query_params[name] == (str(raw).lower() if isinstance(raw, bool) else str(raw))
    assert before  # the page showed a number before the change too


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
    caption = " ".join(c.value for c in app.caption)
    assert "published: 2" in caption and "qir10g: 1" in caption


def test_charts_are_drawn(app: AppTest) -> None:
    app.run()
    charts = app.get("vega_lite_chart")
    assert len(charts) == 3  # goodput vs measured, CPU per side, limits and headroom


@pytest.mark.timeout(300)
def test_des_runs_on_the_button_and_equals_the_cli(app: AppTest, predict: Predict) -> None:
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
    assert_shows(app, predict(engine="des", transfer_bytes=20_000_000), row=1)
    assert any("all 1 run(s) done" in c.value for c in app.caption)


def test_analytic_answers_in_under_200_ms(app: AppTest) -> None:
    """The page's own measure, from the script's start to the answer drawn (warm caches)."""
    app.run()
    times = []
    for mtu in (9000, 1500, 4000, 1400, 8000, 3000, 1280):
        app.number_input(key="w.mtu_bytes").set_value(mtu).run()
        caption = next(c.value for c in app.caption if c.value.startswith("Analytic answer"))
        times.append(float(caption.split()[3]))
    times.sort()
    assert times[len(times) // 2] < 200, times


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
