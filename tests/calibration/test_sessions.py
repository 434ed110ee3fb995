"""Fresh sessions as folds: each predicted by another session's models, the fresh models'
intervals learned from them, and their coverage reported — on a synthetic fresh catalog
(no root, no runs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.sessions import session_labels, session_residuals
from quiclab.datasets.sources.published import packaged_dir, read_csv
from quiclab.models.cpus import CpuCatalog, host_cpu_from_cpuinfo

CPUINFO = ("vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n"
           "model name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: 2300.000\n"
           "flags\t\t: aes avx2\nprocessor\t: 0\nprocessor\t: 1\n")
HOUR_NS = 3600 * 10**9
#: Knob settings of the validation experiment (field → value) and the goodput factor
#: the synthetic host shows there against the calibration setting.
KNOBS = [({"mtu_bytes": 9000}, 1.5), ({"link_gbps": 1.0}, 0.3), ({"gso": False}, 0.6),
         ({"rcvbuf_bytes": 65536}, 0.7), ({"loss_pct": 1.0}, 0.2), ({"mtu_bytes": 4000}, 1.2),
         ({"link_gbps": 2.0}, 0.55), ({"rcvbuf_bytes": 131072}, 0.85)]


def _run(session: int, i: int, stack: str, experiment: str, goodput: float,
         knobs: dict | None = None) -> dict:
    packets = 140_000
    knobs = knobs or {}
    setting = f"{stack}→{stack}" + (" [" + ", ".join(f"{k}={v}" for k, v in knobs.items())
                                    + "]" if knobs else "")
    return {"run_id": f"s{session}-{experiment}-{stack}-{setting}-{i}", "source": "fresh",
            "experiment": experiment, "setting": setting, "status": "ok",
            "server_impl": stack, "client_impl": stack, "server_build": "", "client_build": "",
            "cipher": "aes-ni", "cpu": None, "app": "perf", "workload": "bulk",
            "start_ns": session * 24 * HOUR_NS + i * 60 * 10**9,
            "filesize_bytes": 200_000_000, "data_packets": packets,
            "ack_packets": packets // 25, "server_udp_sent": packets // 10,
            "client_udp_received": packets, "client_udp_rcvbuf_errors": 0,
            "server_cpu_s": 0.5 + 0.01 * i, "client_cpu_s": 0.5, "goodput_mbps": goodput,
            "goodput_reported_mbps": None, "rcvbuf_bytes": knobs.get("rcvbuf_bytes", 212992),
            "mtu_bytes": knobs.get("mtu_bytes", 1500), "gso": knobs.get("gso", True),
            "gro": knobs.get("gso", True), "link_gbps": knobs.get("link_gbps"),
            "loss_pct": knobs.get("loss_pct", 0.0), "rtt_ms": 0.0, "cc": "cubic",
            "veth_segmentation": True,
            "extra": json.dumps({"server_report": {"min_rtt_ms": 0.05}})}


def synthetic_runs(sessions: int = 3, seed: int = 7) -> pd.DataFrame:
    """Three sessions a day apart; in each, quic-go and quiche at the calibration setting
    and at eight knob settings, the host a little faster or slower each day."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sessions):
        speed = float(np.exp(rng.normal(0.0, 0.1)))
        for stack, base in (("quic-go", 2000.0), ("quiche", 3000.0)):
            for i in range(3):
                rows.append(_run(s, i, stack, "fresh-calibration", base * speed))
            for k, (knobs, factor) in enumerate(KNOBS):
                g = base * speed * factor * float(np.exp(rng.normal(0.0, 0.15)))
                for i in range(2):
                    rows.append(_run(s, 10 + 2 * k + i, stack, "fresh-validation", g, knobs))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def host():
    return host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    return pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))


def test_sessions_are_separated_by_pauses():
    runs = synthetic_runs()
    labels = session_labels(runs)
    assert labels.nunique() == 3
    assert labels.groupby(runs["start_ns"] // (24 * HOUR_NS)).nunique().eq(1).all()
    undated = runs.drop(columns="start_ns")
    assert session_labels(undated).nunique() == 1


def test_each_session_is_predicted_by_another_sessions_models(host, points):
    runs = synthetic_runs()
    held = session_residuals(runs, points, host)
    assert set(held["fold_kind"]) == {"sessions"} and set(held["source"]) == {"fresh"}
    assert held["fold"].nunique() == 3
    assert (held["fold"] != held["fitted_on"]).all()
    # The calibration cells of a session are out of sample too (another day's models);
    # the knob cells lie outside the fitting session's evidence and say so.
    knob = held[held["ident"].str.contains("mtu_bytes=9000")]
    assert len(knob) and knob["extrapolated_fields"].str.contains("mtu_bytes").all()
    base = held[held["ident"].str.contains("fresh-calibration")]
    assert (base["extrapolated_fields"] == "").all()


def test_calibrate_fresh_writes_intervals_and_validate_reports_their_coverage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The whole path on a synthetic fresh catalog: calibrate --source fresh writes this
    host's models with domain.json and intervals.json; validate --source fresh reports
    the coverage of the fresh source per regime, with the items outside."""
    from quiclab.cli import main
    from quiclab.datasets.catalog import Catalog

    catalog = tmp_path / "fresh.duckdb"
    with Catalog(catalog) as c:
        c.upsert("runs", synthetic_runs().to_dict("records"))
        c.upsert("published_points", read_csv(packaged_dir() / "mukherjee25.csv"))
    models = tmp_path / "models-fresh"
    common = ["--catalog", str(catalog), "--data-dir", str(tmp_path / "data")]
    assert main([*common, "calibrate", "--source", "fresh", "--out", str(models),
                 "--report", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    assert (models / "domain.json").is_file() and (models / "intervals.json").is_file()
    assert "held-out residuals of 3 sessions" in out
    stored = json.loads((models / "intervals.json").read_text())
    assert stored["provenance"]["fold_kinds"] == {"sessions": len(stored["residuals"])}
    assert main([*common, "validate", "--source", "fresh", "--fresh-models", str(models),
                 "--out", str(tmp_path / "validation"), "--jobs", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "coverage of held-out items" in out
    table = pd.read_csv(tmp_path / "validation" / "coverage-coverage.csv")
    fresh = table[(table["source"] == "fresh") & (table["regime"] == "(all)")].iloc[0]
    assert fresh["items"] == len(stored["residuals"])
    assert 0.0 < fresh["coverage_90_pct"] <= 100.0 and fresh["median_width_90"] > 1.0
    report = (tmp_path / "validation" / "validation.md").read_text()
    assert "Items outside their 90 % band" in report
