"""The fresh part of ``quiclab validate``'s report: errors per engine, experiment and
stack with the noise beside them, and every cell with its setting."""

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


def test_a_sender_with_one_controller_is_simulated_with_it():
    """quic-go runs Reno only (testbed/stacks.py); its runs recorded before that was read
    say cubic, and validation takes the controller the sender actually ran."""
    from quiclab.experiments.validate import _sender_cc

    runs = pd.DataFrame({"server_impl": ["quic-go", "quiche", "xnet-quic"],
                         "cc": ["cubic", "cubic", "reno"]})
    assert list(_sender_cc(runs)["cc"]) == ["reno", "cubic", "reno"]
    assert _sender_cc(runs.drop(columns="cc")).equals(runs.drop(columns="cc"))


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
    """A pair's CPU-bound control (the calibration setting, run in the knob cells'
    session) gives the session's CPU speed; it scales the pair's CPU-bound knob
    predictions and leaves other limits alone. Pairs whose control is not CPU-bound,
    experiments without designed controls and the calibration itself are left out."""
    from quiclab.experiments.validate import controlled_knobs, summarise_controlled

    group = "fresh-validation-controlled"

    def item(server: str, setting: str, observed: float, predicted: float, limit: str,
             grp: str = group) -> dict:
        return {**_item("analytic", grp, server, setting, observed, predicted, 2.0),
                "limit": limit}

    items = pd.DataFrame([
        # this session's host ran at half the predicted CPU rate
        item("quinn", "[transfer_bytes=200000000]", 1000.0, 2000.0, "sender_cpu"),
        # CPU-bound knob: scaled by 0.5, 1000 → 500 against 400 observed (25 %)
        item("quinn", "[gso=False, transfer_bytes=200000000]", 400.0, 1000.0, "sender_cpu"),
        # window-bound knob: left as predicted (100 % off either way)
        item("quinn", "[rtt_ms=10.0, transfer_bytes=200000000]", 500.0, 1000.0, "cwnd"),
        # a control limited by something else says nothing about the CPU
        item("quiche", "[transfer_bytes=200000000]", 1000.0, 2000.0, "link"),
        item("quiche", "[gso=False, transfer_bytes=200000000]", 400.0, 1000.0, "sender_cpu"),
        item("quic-go", "[rtt_ms=10.0]", 100.0, 300.0, "cwnd", "fresh-validation"),
        item("quic-go", "[transfer_bytes=200000000]", 100.0, 300.0, "sender_cpu",
             "fresh-calibration"),
    ])
    knobs = controlled_knobs(items)
    assert sorted(knobs["setting"]) == ["gso=False", "rtt_ms=10.0"]
    assert set(knobs["server"]) == {"quinn"}
    gso = knobs[knobs["setting"] == "gso=False"].iloc[0]
    assert gso["ape_pct"] == pytest.approx(150.0)
    assert gso["normalised_mbps"] == pytest.approx(500.0)
    assert gso["normalised_ape_pct"] == pytest.approx(25.0)
    assert gso["control_ape_pct"] == pytest.approx(100.0)
    rtt = knobs[knobs["setting"] == "rtt_ms=10.0"].iloc[0]
    assert rtt["normalised_mbps"] == pytest.approx(1000.0)
    assert rtt["normalised_ape_pct"] == pytest.approx(100.0)
    # GSO off alone is a setting the fresh calibration runs (the system-call share):
    # shown apart, not counted as a held-out knob.
    assert list(knobs.sort_values("setting")["calibrated"]) == [True, False]
    summary = summarise_controlled(knobs).iloc[0]
    assert summary["knob_cells"] == 1 and summary["controls"] == 1
    assert summary["median_normalised_ape_pct"] == pytest.approx(100.0)
    assert summary["median_control_ape_pct"] == pytest.approx(100.0)
    assert summary["calibrated_cells"] == 1
    assert summary["median_calibrated_ape_pct"] == pytest.approx(150.0)
    assert controlled_knobs(items[items["group"] != group]).empty  # no designed control


def test_a_tcp_session_takes_its_pinned_base_cell_as_its_control():
    """The TCP validation pins every cell (testbed/specs/tcp-validation.yaml): its
    control is the cell with the spec's base fields alone ("pin=True")."""
    from quiclab.experiments.validate import controlled_knobs

    def item(setting: str, observed: float, predicted: float) -> dict:
        return {**_item("analytic", "tcp-validation", "tcp+tls", setting, observed, predicted,
                        2.0), "limit": "sender_cpu"}

    items = pd.DataFrame([
        item("[pin=True, transfer_bytes=400000000]", 3000.0, 4000.0),
        item("[gso=False, pin=True, transfer_bytes=400000000]", 2000.0, 3000.0),
    ])
    knobs = controlled_knobs(items)
    assert list(knobs["setting"]) == ["gso=False, pin=True"]
    assert knobs.iloc[0]["normalised_mbps"] == pytest.approx(2250.0)
    assert knobs.iloc[0]["control_observed_mbps"] == pytest.approx(3000.0)
