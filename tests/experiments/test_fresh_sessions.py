"""Fresh cells at their session's probed state; the session table and drift explained."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from quiclab.calibration.evidence import Evidence
from quiclab.experiments import fresh_sessions as fs
from quiclab.models.cpus import CpuCatalog
from quiclab.models.registry import Registry
from quiclab.sim.scenario import Scenario
from quiclab.testbed import probe_store
from quiclab.testbed.probe import Figure, HostProbe, HostState

STATE = HostState(wall_s=1.0, cores=2, busy_cores=0.5, other_busy_cores=0.1, steal_cores=0.0,
                  per_core_busy={}, per_core_steal={}, clock_mhz={}, clock_source="t",
                  loadavg_1m=0.0)


def _probe(when: str, session: str, scale: float) -> HostProbe:
    return HostProbe(taken_at=when, host="h", cpu="host: cal", session=session,
                     figures={"quic_packet": Figure(1000.0 * scale, 0.01, ()),
                              "udp_send": Figure(9000.0 * scale, 0.02, ())},
                     state=STATE, rounds=1, duration_s=1.0)


def test_probed_evidence_gives_each_cell_its_sessions_state(tmp_path: Path) -> None:
    cat = tmp_path / "c.duckdb"
    for p in (_probe("2026-11-28T08:00:00Z", "s1", 1.0), _probe("2026-11-28T08:20:00Z", "s1",
                                                                 2.0)):
        probe_store.store(cat, p)
    host = replace(CpuCatalog.packaged().find("EPYC 7543"), name="host: cal",
                   probe=(("quic_packet", 1000.0, 0.0), ("udp_send", 9000.0, 0.0)))
    registry = Registry.packaged()
    registry.cpus = registry.cpus.with_cpu(host)
    t = 1795852800 + 600  # 08:10
    runs = pd.DataFrame([
        {"experiment": "fresh-validation-controlled.x", "setting": "a", "status": "ok",
         "start_ns": t * 10**9, "extra": json.dumps({"provenance": {"session": "s1"}})},
        {"experiment": "old", "setting": "b", "status": "ok", "start_ns": t * 10**9,
         "extra": json.dumps({})}])
    ev = [Evidence(Scenario(server="quiche", client="quiche", cpu="host: cal"), 100.0, "x",
                   "fresh", "fresh-validation-controlled.x|a"),
          Evidence(Scenario(server="quiche", client="quiche", cpu="host: cal"), 100.0, "old",
                   "fresh", "old|b")]
    scaled, states = fs.probed_evidence(ev, runs, registry, cat)
    assert scaled[1].scenario.cpu == "host: cal"  # no session, no scaling
    name = scaled[0].scenario.cpu
    assert name.startswith("host: cal @ s1 08:10")
    assert states.iloc[0]["session"] == "s1" and states.iloc[0]["probes"] == 2
    scale = registry.cpus.scaling("host: cal", name)
    assert scale.part("protocol") == pytest.approx(math.sqrt(2))
    assert scale.part("call:sender") == pytest.approx(math.sqrt(2))


def _items(pred: list[float]) -> pd.DataFrame:
    obs = [100.0, 150.0, 80.0, 120.0]
    return pd.DataFrame({
        "source": "fresh", "engine": "des", "group": "fresh-validation-controlled.x",
        "ident": [f"fresh-validation-controlled.x|q{i} → q{i} [transfer_bytes=200000000]"
                  for i in range(4)],
        "server": "q", "observed_mbps": obs, "predicted_mbps": pred,
        "ape_pct": [abs(p - o) / o * 100 for p, o in zip(pred, obs, strict=True)],
        "limit": "sender_cpu"})


def test_drift_explained_and_session_table() -> None:
    states = pd.DataFrame({"ident": [f"fresh-validation-controlled.x|q{i} → q{i} "
                                     "[transfer_bytes=200000000]" for i in range(4)],
                           "session": ["s1", "s1", "s2", "s2"]})
    unscaled = fs.classify(_items([110.0, 110.0, 110.0, 110.0]), states)
    scaled = fs.classify(_items([101.0, 148.0, 82.0, 119.0]), states)
    # Every cell is at the calibration setting: all four are controls.
    assert set(scaled["kind"]) == {"control"}
    drift = fs.drift_explained(scaled, unscaled)
    assert drift.iloc[0]["controls"] == 4 and drift.iloc[0]["explained_pct"] > 95
    table = fs.session_table(scaled, unscaled, states, pd.DataFrame(
        {"session": ["s1"], "taken_at": ["2026-11-28T08:00:00Z"], "quic_packet": [1.0],
         "other_busy_cores": [0.1], "steal_cores": [0.0]}))
    s1 = table[table["session"] == "s1"].iloc[0]
    assert s1["controls"] == 2 and s1["control_median_probe"] < s1["control_median_noprobe"]
    assert s1["probes"] == 1 and s1["quic_packet_ns"] == 1.0
