"""The fresh part of ``quiclab validate``'s report: errors per engine, experiment and
stack with the noise beside them, and every cell with its setting (issue 8)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from quiclab.experiments.validate import _setting_label, fresh_cells, summarise_fresh


def _item(engine: str, group: str, server: str, setting: str, observed: float,
          predicted: float, cv: float) -> dict:
    return {"source": "fresh", "engine": engine, "ident": f"{group}|{server}→{server} {setting}",
            "group": group, "scenario": "", "server": server, "client": server,
            "observed_mbps": observed, "predicted_mbps": predicted,
            "ape_pct": abs(predicted - observed) / observed * 100,
            "signed_error_pct": (predicted / observed - 1) * 100, "limit": "cpu", "n": 3,
            "noise_cv_pct": cv}


def test_setting_labels_drop_the_pair_and_the_transfer_size():
    assert _setting_label("fresh-validation|quinn→quinn [mtu_bytes=9000, gso=False, "
                          "transfer_bytes=200000000]") == "mtu_bytes=9000, gso=False"
    assert _setting_label("fresh-calibration|quinn→quinn [transfer_bytes=200000000]") == "base"
    assert _setting_label("noise|quinn→quinn") == "base"


def test_fresh_summary_per_engine_experiment_and_stack():
    items = pd.DataFrame([
        _item("analytic", "fresh-validation", "quinn", "[rtt_ms=10.0]", 100.0, 110.0, 5.0),
        _item("analytic", "fresh-validation", "quinn", "[link_gbps=1.0]", 100.0, 70.0, 15.0),
        _item("analytic", "fresh-validation", "quic-go", "[rtt_ms=10.0]", 200.0, 200.0, 1.0),
        _item("des", "fresh-validation", "quinn", "[rtt_ms=10.0]", 100.0, math.nan, 5.0),
        {**_item("analytic", "x", "lsquic", "", 1.0, 1.0, 0.0), "source": "published"},
    ])
    summary = summarise_fresh(items)
    quinn = summary[(summary["engine"] == "analytic") & (summary["stack"] == "quinn")].iloc[0]
    assert quinn["items"] == 2 and quinn["predicted"] == 2
    assert quinn["median_ape_pct"] == pytest.approx(20.0)
    assert quinn["median_signed_error_pct"] == pytest.approx(-10.0)
    assert quinn["median_noise_cv_pct"] == pytest.approx(10.0)
    every = summary[(summary["engine"] == "analytic") & (summary["stack"] == "(all)")].iloc[0]
    assert every["items"] == 3 and every["p95_ape_pct"] >= every["median_ape_pct"]
    des = summary[(summary["engine"] == "des") & (summary["stack"] == "quinn")].iloc[0]
    assert des["predicted"] == 0 and math.isnan(des["median_ape_pct"])
    assert "lsquic" not in set(summary["stack"])  # only the fresh source
    cells = fresh_cells(items)
    assert len(cells) == 4 and set(cells["setting"]) == {"rtt_ms=10.0", "link_gbps=1.0"}


def test_knob_cells_against_a_same_session_control():
    """A pair's control (the calibration setting, run in the knob cells' session) scales
    its knob predictions: the model's response to the knob is scored apart from the
    host's drift between sessions; experiments without controls and the calibration
    experiment itself are left out."""
    from quiclab.experiments.validate import controlled_knobs, summarise_controlled

    group = "fresh-validation-controlled"
    items = pd.DataFrame([
        # the host ran at half the predicted rate in this session
        _item("analytic", group, "quinn", "[transfer_bytes=200000000]", 1000.0, 2000.0, 2.0),
        # the knob halves goodput, as the model says: 100 % off as predicted, exact scaled
        _item("analytic", group, "quinn", "[rtt_ms=10.0, transfer_bytes=200000000]",
              500.0, 1000.0, 2.0),
        _item("analytic", group, "quinn", "[link_gbps=1.0, transfer_bytes=200000000]",
              400.0, 1000.0, 2.0),
        _item("analytic", "fresh-validation", "quic-go", "[rtt_ms=10.0]", 100.0, 300.0, 2.0),
        _item("analytic", "fresh-calibration", "quinn", "[transfer_bytes=200000000]",
              2000.0, 2000.0, 2.0),
    ])
    knobs = controlled_knobs(items)
    assert sorted(knobs["setting"]) == ["link_gbps=1.0", "rtt_ms=10.0"]
    rtt = knobs[knobs["setting"] == "rtt_ms=10.0"].iloc[0]
    assert rtt["ape_pct"] == pytest.approx(100.0)
    assert rtt["normalised_mbps"] == pytest.approx(500.0)
    assert rtt["normalised_ape_pct"] == pytest.approx(0.0)
    assert rtt["control_ape_pct"] == pytest.approx(100.0)
    link = knobs[knobs["setting"] == "link_gbps=1.0"].iloc[0]
    assert link["normalised_ape_pct"] == pytest.approx(25.0)
    summary = summarise_controlled(knobs).iloc[0]
    assert summary["knob_cells"] == 2 and summary["controls"] == 1
    assert summary["median_normalised_ape_pct"] == pytest.approx(12.5)
    assert summary["median_control_ape_pct"] == pytest.approx(100.0)
    assert controlled_knobs(items[items["group"] != group]).empty
