"""Behaviour identified from traces: features of synthetic sawtooth traces, the
identification table, and how identified values reach a model's Behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration import traces
from quiclab.cli import main
from quiclab.datasets import qlog
from quiclab.models.costmodel import Behaviour

RS = "\x1e"
MSS = 1200


def _sawtooth(beta: float, growth: float, cycles: int = 40, rtt_ms: float = 10.0,
              every: int = 50) -> list[dict]:
    """A sender trace: Reno-like cycles (grow ``growth`` datagrams per RTT, a loss, ×β),
    ``every`` packets between losses, one ACK per two packets, one metrics per ACK."""
    events: list[dict] = []
    t, pn, cwnd = 0.0, 0, 20.0 * MSS
    for _ in range(cycles):
        for _k in range(every):
            events.append({"time": t, "name": "transport:packet_sent", "data": {
                "header": {"packet_number": pn}, "raw": {"length": MSS},
                "frames": [{"frame_type": "stream", "stream_id": 0, "length": MSS - 40}]}})
            if pn % 2:
                events.append({"time": t + rtt_ms, "name": "transport:packet_received",
                               "data": {"frames": [{"frame_type": "ack", "ack_delay": 1.0,
                                                    "acked_ranges": [[0, pn - 4]]}]}})
                cwnd += growth * MSS * 2 * MSS / cwnd
                events.append({"time": t + rtt_ms, "name": "recovery:metrics_updated",
                               "data": {"congestion_window": cwnd, "smoothed_rtt": rtt_ms,
                                        "min_rtt": rtt_ms, "bytes_in_flight": 0}})
            pn += 1
            t += rtt_ms * MSS / cwnd
        events.append({"time": t + rtt_ms, "name": "recovery:packet_lost", "data": {
            "header": {"packet_number": pn - 4}, "trigger": "reordering_threshold"}})
        cwnd *= beta
        events.append({"time": t + rtt_ms, "name": "recovery:metrics_updated",
                       "data": {"congestion_window": cwnd, "smoothed_rtt": rtt_ms}})
    events.sort(key=lambda e: e["time"])
    return events


def _write(path: Path, events: list[dict]) -> Path:
    header = {"qlog_version": "0.3", "trace": {"vantage_point": {"type": "server"}}}
    path.write_text(RS + json.dumps(header) + "\n"
                    + "".join(RS + json.dumps(e) + "\n" for e in events))
    return path


@pytest.mark.parametrize("beta", [0.5, 0.7])
def test_features_recover_the_reduction_factor(tmp_path: Path, beta: float) -> None:
    ev = qlog.parse(_write(tmp_path / "s.sqlog", _sawtooth(beta, 1.0))).events
    f = traces.features(ev)
    assert len(f.reductions) >= 35
    assert np.median(f.reductions) == pytest.approx(beta, abs=0.01)
    assert f.reductions_per_epoch == pytest.approx(1.0, abs=0.05)
    assert f.loss_event_rate == pytest.approx(1 / 50, rel=0.05)
    assert f.packets_per_ack == pytest.approx(2.0, rel=0.05)


def test_summary_says_what_it_cannot_identify() -> None:
    ev = pd.DataFrame({"t_ms": [0.0, 1.0], "seq": [0, 1], "event": ["packet_sent"] * 2,
                       **{c: [None, None] for c, _ in qlog.EVENT_COLUMNS
                          if c not in ("t_ms", "seq", "event", "trace_id")}})
    table = traces.summarise([traces.features(ev)])
    assert table["reduction_factor"]["value"] is None
    assert "no cwnd reduction" in table["reduction_factor"]["why"]
    assert "MAX_DATA" in table["fc_credit_kb"]["why"]


def test_identified_beta_reaches_behaviour_with_provenance() -> None:
    entry = {"quic-go": {"cc": "reno", "runs": ["fresh-a-r0", "fresh-b-r0"], "parameters": {
        "reduction_factor": {"value": 0.7, "lo": 0.69, "hi": 0.71, "traces": 2, "events": 120},
        "packet_threshold": {"value": 3.0, "lo": 3.0, "hi": 3.0, "traces": 2, "events": 80},
        "growth_per_rtt": {"value": None, "lo": None, "hi": None, "traces": 0, "events": 0}}}}
    beh, prov = traces.apply("quic-go", Behaviour(), entry)
    assert beh.reno_beta == 0.7
    assert prov["reno_beta"].startswith("trace: 0.7 [0.69, 0.71] from 120 events")
    assert "fresh-a-r0" in prov["reno_beta"]
    assert "trace:packet_threshold" in prov and "trace:growth_per_rtt" not in prov
    # A CUBIC stack's β is not NewReno's; too few reductions change nothing.
    entry["quic-go"]["cc"] = "cubic"
    assert traces.apply("quic-go", Behaviour(), entry)[0].reno_beta == 0.5
    entry["quic-go"]["cc"] = "reno"
    entry["quic-go"]["parameters"]["reduction_factor"]["events"] = 5
    assert traces.apply("quic-go", Behaviour(), entry)[0].reno_beta == 0.5
    assert traces.apply("lsquic", Behaviour(), entry) == (Behaviour(), {})


def test_identified_ack_floor_is_recorded_not_applied() -> None:
    entry = {"quiche": {"cc": "cubic", "runs": ["r1", "r2"], "parameters": {
        "ack_floor_packets": {"value": 21.85, "lo": 18.9, "hi": 52.3, "traces": 5,
                              "events": 5}}}}
    beh, prov = traces.apply("quiche", Behaviour(), entry)
    assert beh == Behaviour()
    assert prov["trace:ack_floor_packets"].startswith("trace: 21.9 [18.9, 52.3]")


def test_cli_ingest_list_identify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "run1_server.sqlog", _sawtooth(0.7, 1.0))
    cat = str(tmp_path / "c.duckdb")
    assert main(["--catalog", cat, "trace", "ingest", str(path), "--stack", "x",
                 "--origin", "fresh"]) == 0
    assert main(["--catalog", cat, "trace", "list"]) == 0
    assert main(["--catalog", cat, "trace", "identify", "--stack", "x", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    beta = next(r for r in rows if r["parameter"] == "reduction_factor")
    assert beta["value"] == pytest.approx(0.7, abs=0.01)
    bad = tmp_path / "bad.sqlog"
    bad.write_text("not qlog")
    assert main(["--catalog", cat, "trace", "ingest", str(bad)]) == 0
    assert "record 0" in capsys.readouterr().out
