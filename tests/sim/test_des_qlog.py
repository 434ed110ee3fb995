"""The DES's qlog: schema, bounds, and that the ingest and the identification read it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quiclab.calibration import traces
from quiclab.datasets import qlog
from quiclab.datasets.catalog import Catalog
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.des import DesEngine
from quiclab.sim.scenario import Scenario

RS = "\x1e"
#: Event names and the data fields each must carry (qlog 0.3, quic-events -03).
SCHEMA = {
    "transport:packet_sent": {"header", "raw", "frames"},
    "transport:packet_received": {"header", "frames"},
    "recovery:metrics_updated": {"congestion_window", "bytes_in_flight", "smoothed_rtt",
                                 "latest_rtt", "min_rtt", "rtt_variance"},
    "recovery:packet_lost": {"header", "trigger"},
    "recovery:congestion_state_updated": {"old", "new", "trigger"},
    "recovery:loss_timer_updated": {"timer_type", "event_type"},
}
STATES = {"slow_start", "congestion_avoidance", "recovery", "application_limited"}
TRIGGERS = {"reordering_threshold", "time_threshold", "pto_expired"}


@pytest.fixture(scope="module")
def registry():
    return synthetic_registry(synthetic_model("fast", sender_ns=1000, receiver_ns=800))


def _run(registry, tmp: Path, **knobs) -> tuple[Path, object]:
    path = tmp / "des.sqlog"
    s = Scenario(server="fast", client="fast", link_gbps=1.0, rtt_ms=10.0, loss_pct=1.0,
                 transfer_bytes=20_000_000, **knobs)
    pred = DesEngine(registry, max_packets=0, qlog_path=str(path)).predict(s)
    return path, pred


def test_des_qlog_follows_the_schema(registry, tmp_path: Path) -> None:
    path, pred = _run(registry, tmp_path)
    records = path.read_text().split(RS)[1:]
    header = json.loads(records[0])
    assert header["qlog_version"] == "0.3" and header["qlog_format"] == "JSON-SEQ"
    assert header["trace"]["vantage_point"]["type"] == "server"
    last = -1.0
    seen: set[str] = set()
    for rec in records[1:]:
        ev = json.loads(rec)
        assert set(ev) == {"time", "name", "data"}
        assert ev["time"] >= last - 1e-6  # in time order
        last = ev["time"]
        assert ev["name"] in SCHEMA, ev["name"]
        assert SCHEMA[ev["name"]] <= set(ev["data"]), ev
        seen.add(ev["name"])
        if ev["name"] == "recovery:congestion_state_updated":
            assert {ev["data"]["old"], ev["data"]["new"]} <= STATES
        if ev["name"] == "recovery:packet_lost":
            assert ev["data"]["trigger"] in TRIGGERS
        if ev["name"] == "transport:packet_received":
            for lo, hi in ev["data"]["frames"][0]["acked_ranges"]:
                assert lo <= hi
    assert {"transport:packet_sent", "transport:packet_received", "recovery:metrics_updated",
            "recovery:packet_lost", "recovery:congestion_state_updated"} <= seen
    assert any("qlog:" in n for n in pred.notes)


def test_des_qlog_loads_in_the_ingest_and_identifies_cubic(registry, tmp_path: Path) -> None:
    path, _pred = _run(registry, tmp_path)
    trace = qlog.parse(path)
    assert not trace.problems
    f = traces.features(trace.events)
    # CUBIC's β = 0.7 (RFC 9438 §4.6), one reduction per recovery epoch (RFC 9002 §7.3.2).
    assert len(f.reductions) >= 10
    assert abs(sorted(f.reductions)[len(f.reductions) // 2] - 0.7) < 0.02
    assert f.reductions_per_epoch is not None and f.reductions_per_epoch < 1.2
    # RFC 9002 §6.1.1: nothing is declared lost by the packet threshold short of 3.
    assert min(d for d in f.reorder_distance) >= 3 or not f.reorder_distance
    with Catalog(tmp_path / "c.duckdb") as cat:
        row = qlog.store(cat, trace, run_id="des-x", side="server", stack="fast", origin="des",
                         parquet_dir=None)
        assert row["events"] > 1000
        table = traces.identify(cat, "fast", origin="des")
        beta = table.set_index("parameter").loc["reduction_factor"]
        assert abs(beta.value - 0.7) < 0.02 and beta.lo <= beta.value <= beta.hi


def test_des_qlog_is_bounded(registry, tmp_path: Path) -> None:
    path = tmp_path / "small.sqlog"
    s = Scenario(server="fast", client="fast", link_gbps=1.0, rtt_ms=10.0, loss_pct=1.0,
                 transfer_bytes=20_000_000)
    pred = DesEngine(registry, max_packets=0, qlog_path=str(path),
                     qlog_max_events=500).predict(s)
    records = path.read_text().split(RS)[2:]
    assert len(records) <= 1000
    assert any("left out" in n for n in pred.notes)


def test_des_qlog_does_not_change_the_run(registry, tmp_path: Path) -> None:
    s = Scenario(server="fast", client="fast", link_gbps=1.0, rtt_ms=2.0, loss_pct=0.5,
                 transfer_bytes=5_000_000)
    plain = DesEngine(registry, max_packets=0).predict(s)
    traced = DesEngine(registry, max_packets=0, qlog_path=str(tmp_path / "t.sqlog")).predict(s)
    assert traced.goodput_mbps == plain.goodput_mbps and traced.losses == plain.losses


def test_qlog_refused_at_batch_granularity(registry) -> None:
    with pytest.raises(ValueError, match="packet"):
        DesEngine(registry, granularity="batch", qlog_path="/tmp/x.sqlog")
