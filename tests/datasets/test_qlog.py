"""qlog ingest: the formats the stacks write, damage, storage and sampling (synthetic traces)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quiclab.datasets import qlog
from quiclab.datasets.catalog import Catalog

RS = "\x1e"


def _seq(path: Path, events: list[dict], header: dict | None = None, tail: str = "") -> Path:
    header = header or {"qlog_version": "0.3", "qlog_format": "JSON-SEQ",
                        "trace": {"vantage_point": {"type": "server"},
                                  "common_fields": {"time_format": "relative"}}}
    text = RS + json.dumps(header) + "\n" + "".join(RS + json.dumps(e) + "\n" for e in events)
    path.write_text(text + tail)
    return path


def _events(new_names: bool = False) -> list[dict]:
    sent = "quic:packet_sent" if new_names else "transport:packet_sent"
    recv = "quic:packet_received" if new_names else "transport:packet_received"
    metrics = "quic:recovery_metrics_updated" if new_names else "recovery:metrics_updated"
    lost = "quic:packet_lost" if new_names else "recovery:packet_lost"
    out = []
    for pn in range(10):
        out.append({"time": 10.0 + pn, "name": sent, "data": {
            "header": {"packet_type": "1RTT", "packet_number": pn}, "raw": {"length": 1252},
            "frames": [{"frame_type": "stream", "stream_id": 0, "offset": pn * 1200,
                        "length": 1200}]}})
    out.append({"time": 25.0, "name": recv, "data": {"header": {"packet_type": "1RTT"},
               "frames": [{"frame_type": "ack", "ack_delay": 0.5,
                           "acked_ranges": [[0, 3], [5, 9]]}]}})
    out.append({"time": 25.0, "name": lost, "data": {
        "header": {"packet_type": "1RTT", "packet_number": 4}, "trigger": "reordering_threshold"}})
    out.append({"time": 25.0, "name": metrics, "data": {
        "congestion_window": 7000, "bytes_in_flight": 0, "smoothed_rtt": 12.5,
        "min_rtt": 10.0, "latest_rtt": 15.0}})
    return out


@pytest.mark.parametrize("new_names", [False, True])
def test_json_seq_both_event_generations(tmp_path: Path, new_names: bool) -> None:
    trace = qlog.parse(_seq(tmp_path / "server.sqlog", _events(new_names)))
    ev = trace.events
    assert trace.format == "JSON-SEQ" and not trace.truncated
    assert list(ev.event.value_counts().sort_index().items()) == [
        ("metrics_updated", 1), ("packet_lost", 1), ("packet_received", 1), ("packet_sent", 10)]
    assert ev.t_ms.min() == 0.0  # relative to the first event
    ack = ev[ev.event == "packet_received"].iloc[0]
    assert ack.acked_packets == 9 and ack.largest_acked == 9 and ack.ack_delay_ms == 0.5
    m = ev[ev.event == "metrics_updated"].iloc[0]
    assert (m.cwnd_bytes, m.smoothed_rtt_ms, m.min_rtt_ms) == (7000, 12.5, 10.0)
    assert ev[ev.event == "packet_lost"].iloc[0].trigger == "reordering_threshold"
    summary = qlog.summarise(ev)
    assert summary["packets_sent"] == 10 and summary["packets_lost"] == 1
    assert summary["loss_by_threshold"] == 1 and summary["acks_received"] == 1
    assert summary["stream_bytes_sent"] == 12000


def test_single_json_document_like_aioquic(tmp_path: Path) -> None:
    doc = {"qlog_format": "JSON", "qlog_version": "0.3",
           "traces": [{"vantage_point": {"type": "client"}, "events": _events()}]}
    path = tmp_path / "conn.qlog"
    path.write_text(json.dumps(doc))
    trace = qlog.parse(path)
    assert trace.format == "JSON" and len(trace.events) == 13
    assert qlog.guess_side(path, trace.vantage, trace.title) == "client"


def test_draft01_event_fields(tmp_path: Path) -> None:
    doc = {"qlog_version": "draft-01", "traces": [{
        "event_fields": ["relative_time", "category", "event", "data"],
        "events": [[0, "transport", "packet_sent", {"header": {"packet_number": 1}}],
                   [5, "recovery", "metrics_updated", {"cwnd": 12000}]]}]}
    path = tmp_path / "old.qlog"
    path.write_text(json.dumps(doc))
    ev = qlog.parse(path).events
    assert list(ev.event) == ["packet_sent", "metrics_updated"]
    assert ev.cwnd_bytes.iloc[1] == 12000


def test_truncated_trace_keeps_what_came_before(tmp_path: Path) -> None:
    path = _seq(tmp_path / "cut.sqlog", _events(), tail=RS + '{"time": 30, "name": "transport:pa')
    trace = qlog.parse(path)
    assert trace.truncated and len(trace.events) == 13
    assert len(trace.problems) == 1 and "not JSON" in trace.problems[0]


@pytest.mark.parametrize("text, needle", [
    ("", "empty file"),
    ("this is not qlog", "record 0"),
    ('{"something": 1}', "traces"),
])
def test_unreadable_trace_is_one_clear_error(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "bad.qlog"
    path.write_text(text)
    with pytest.raises(qlog.QlogError, match=needle) as err:
        qlog.parse(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_ingest_run_stores_tables_parquet_and_issues(tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    (logdir / "qlog-server").mkdir(parents=True)
    (logdir / "qlog-client").mkdir()
    _seq(logdir / "qlog-server" / "abc_server.sqlog", _events())
    (logdir / "qlog-client" / "broken.sqlog").write_text("garbage")
    with Catalog(tmp_path / "c.duckdb") as cat:
        rows = qlog.ingest_run(cat, "fresh-x-r0", logdir, server="quic-go", client="quinn",
                               parquet_root=tmp_path / "pq")
        assert len(rows) == 1 and rows[0]["side"] == "server" and rows[0]["stack"] == "quic-go"
        assert cat.con.execute("SELECT count(*) FROM qlog_events").fetchone()[0] == 13
        conn = cat.df("SELECT * FROM qlog_connections")
        assert conn.packets_sent.iloc[0] == 10
        issues = cat.df("SELECT * FROM ingest_issues WHERE source = 'qlog'")
        assert len(issues) == 1 and "broken.sqlog" in issues.path.iloc[0]
        tid = rows[0]["trace_id"]
        assert Path(rows[0]["parquet_path"]).exists()
        assert len(qlog.events(cat, tid)) == 13
        assert len(qlog.events(cat, tid, every=5)) == 3
        assert set(qlog.events(cat, tid, names=("packet_lost",)).event) == {"packet_lost"}
        # Ingesting again replaces, never duplicates.
        qlog.ingest_run(cat, "fresh-x-r0", logdir, server="quic-go", client="quinn",
                        parquet_root=tmp_path / "pq")
        assert cat.con.execute("SELECT count(*) FROM qlog_events").fetchone()[0] == 13


def test_large_trace_is_sampled_in_the_catalog_but_whole_in_parquet(tmp_path: Path) -> None:
    logdir = tmp_path / "run"
    logdir.mkdir()
    _seq(logdir / "server.sqlog", _events() * 5)
    with Catalog(tmp_path / "c.duckdb") as cat:
        trace = qlog.parse(logdir / "server.sqlog")
        row = qlog.store(cat, trace, run_id="r", side="server", stack="s", origin="fresh",
                         parquet_dir=tmp_path / "pq", max_events=20)
        assert row["sampled"] and row["events"] == 65 and row["events_in_catalog"] <= 25
        kept = cat.df("SELECT event FROM qlog_events")
        assert (kept.event == "packet_lost").sum() == 5  # recovery events all kept
        assert len(qlog.events(cat, row["trace_id"])) == 65
