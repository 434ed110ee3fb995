"""Prospective validation: the append-only ledger, its tamper checks, outcomes, the cells."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from quiclab.datasets.catalog import Catalog
from quiclab.experiments import prospective as ledger
from quiclab.experiments.prospective_cli import compare, planned_evidence, report


def _entry(i: int, predicted: float = 100.0) -> dict:
    content = {"registration": "r@p", "experiment": "exp", "cell": f"exp|cell{i}",
               "engine": "des", "predicted_mbps": predicted, "predicted_lo_mbps": 90.0,
               "predicted_hi_mbps": 110.0, "limit_resource": "sender_cpu", "probe_id": "p",
               "predicted_noprobe_mbps": 120.0, "run_prefix": f"fresh-exp-k{i}-r",
               "server": "quiche", "client": "quiche", "engine_version": "des-1",
               "code": {"revision": "abc", "dirty": False}}
    return {**{k: content[k] for k in ledger.MIRRORED[ledger.PREDICTIONS]}, "content": content}


@pytest.fixture
def cat(tmp_path: Path) -> Path:
    path = tmp_path / "c.duckdb"
    ledger.append(path, ledger.PREDICTIONS, [_entry(1), _entry(2), _entry(3)])
    return path


def test_append_chains_and_verifies(cat: Path) -> None:
    assert ledger.append(cat, ledger.PREDICTIONS, [_entry(4)]) == [4]
    verdict = ledger.verify(cat)
    assert verdict.ok and verdict.rows[ledger.PREDICTIONS] == 4, verdict.describe()
    assert len(ledger.anchor_path(cat).read_text().splitlines()) == 4


@pytest.mark.parametrize("sql, why", [
    ("UPDATE registered_predictions SET predicted_mbps = 50 WHERE seq = 2",
     "column predicted_mbps"),
    ("UPDATE registered_predictions SET content = replace(content, '100', '50') WHERE seq = 2",
     "content does not match its hash"),
    ("DELETE FROM registered_predictions WHERE seq = 2", "expected seq 2"),
    ("DELETE FROM registered_predictions WHERE seq = 3", "anchored"),
])
def test_tampering_is_detected(cat: Path, sql: str, why: str) -> None:
    con = duckdb.connect(str(cat))
    con.execute(sql)
    con.close()
    verdict = ledger.verify(cat)
    assert not verdict.ok
    assert why in verdict.describe()


def test_a_rewritten_chain_is_caught_by_the_anchor(cat: Path) -> None:
    # Rewriting the content and every later hash consistently still leaves the anchor.
    con = duckdb.connect(str(cat))
    rows = con.execute("SELECT seq, content FROM registered_predictions ORDER BY seq").fetchall()
    prev = ledger.GENESIS
    for seq, text in rows:
        content = json.loads(text)
        if seq == 2:
            content["predicted_mbps"] = 50.0
        new = ledger.canonical(content)
        digest = ledger.row_hash(prev, new)
        con.execute("UPDATE registered_predictions SET content = ?, row_sha256 = ?, "
                    "prev_sha256 = ?, predicted_mbps = ? WHERE seq = ?",
                    [new, digest, prev, content["predicted_mbps"], seq])
        prev = digest
    con.close()
    assert "replaced" in ledger.verify(cat).describe()


def _runs(cat: Path, goodputs: list[float], start_ns: int) -> None:
    rows = [{"run_id": f"fresh-exp-k1-r{i}", "source": "fresh", "experiment": "exp",
             "server_impl": "quiche", "client_impl": "quiche", "status": "ok",
             "goodput_mbps": g, "start_ns": start_ns + i} for i, g in enumerate(goodputs)]
    with Catalog(cat) as c:
        c.upsert("runs", rows)


def test_compare_appends_outcomes_once_per_new_run(cat: Path, tmp_path: Path) -> None:
    future = pd.Timestamp.now("UTC").value + 10**9
    _runs(cat, [80.0, 100.0], future)
    assert compare(cat) == 1
    assert compare(cat) == 0  # nothing new
    _runs(cat, [80.0, 100.0, 90.0], future)
    assert compare(cat) == 1
    table = ledger.registered(cat)
    row = table[table["seq"] == 1].iloc[0]
    assert row["runs"] == 3 and row["observed_mbps"] == 90.0
    assert row["ape_pct"] == pytest.approx((100 / 90 - 1) * 100)
    assert bool(row["within_interval"])
    assert ledger.verify(cat).ok
    text = report(cat, tmp_path / "rep")
    assert "ledger intact" in text
    md = (tmp_path / "rep" / "prospective.md").read_text()
    assert "quiche" in md and "r@p" in md


def test_runs_before_the_registration_do_not_count(cat: Path) -> None:
    _runs(cat, [80.0], 0)
    assert compare(cat) == 0


def test_planned_evidence_matches_the_testbed_plan(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: plan\nbase: {transfer_bytes: 200000000}\n"
                    "axes: {implementation: [quiche, msquic]}\n"
                    "zip: {link_gbps: [null, 1], rtt_ms: [null, null], loss_pct: [null, 1]}\n")
    exp, evidence, cells = planned_evidence(spec, "plan.s2", ["quiche", "msquic"],
                                            {"base_rtt_us": 70.0, "link_gbps": 40.0}, "host: x")
    assert exp == "plan.s2" and len(evidence) == len(cells) == 4
    by = {(e.scenario.server, e.scenario.link_gbps, e.scenario.loss_pct): e for e in evidence}
    limited = by[("quiche", 1.0, 1.0)].scenario
    # The tbf queue the testbed applies (at least 136 KiB) and loss without GRO batches.
    assert limited.queue_bytes == 136 * 1024 and limited.gro is False
    assert by[("quiche", 40.0, 0.0)].scenario.cpu == "host: x"
    assert all(c["prefix"].startswith("fresh-plan.s2-") for c in cells)
