"""Every Prediction carries a predictive band, its parameter interval apart, and the
fields on which it lies outside the evidence (synthetic domain and residuals)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.intervals import IntervalCalibrator, residual_frame
from quiclab.models.cpus import CpuCatalog
from quiclab.models.domain import Domain
from quiclab.models.intervals import models_digest
from quiclab.models.registry import Registry
from quiclab.sim.scenario import Scenario


def _residuals() -> pd.DataFrame:
    """Held-out rows: CPU-bound items inside the evidence err by ~5 %, cwnd-bound and
    extrapolated ones by ~30 % (log units)."""
    rng = np.random.default_rng(3)
    rows = []
    for fold in range(8):
        for k in range(30):
            far = k % 3 == 0
            limit = "cwnd" if k % 2 else "sender_cpu"
            scale = (0.3 if limit == "cwnd" else 0.05) * (2.0 if far else 1.0)
            rows.append({"ident": f"i{fold}-{k}", "source": "dataset", "fold": f"f{fold}",
                         "fold_kind": "experiments", "engine": "analytic", "limit": limit,
                         "observed_mbps": 500.0,
                         "predicted_mbps": 500.0 * float(np.exp(rng.normal(0.0, scale))),
                         "pair_in_evidence": not far, "cpu_in_evidence": not far,
                         "extrapolated_fields": "rtt_ms,pair,cpu" if far else "",
                         "pair_fields": "", "extrapolation": 4.0 if far else 0.0})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged models with a synthetic domain (lsquic and quiche at the QIR-10G
    baseline) and an interval model fitted on synthetic residuals."""
    packaged = Path(__file__).resolve().parents[2] / "models" / "fitted"
    out = tmp_path_factory.mktemp("models")
    for path in packaged.glob("*.json"):
        if path.name not in ("domain.json", "intervals.json"):
            shutil.copy(path, out / path.name)
    cpus = CpuCatalog.packaged()
    Domain.from_scenarios([Scenario(server="lsquic", client="lsquic"),
                           Scenario(server="quiche", client="quiche"),
                           Scenario(server="lsquic", client="quiche")], cpus).dump(
        out / "domain.json")
    model = IntervalCalibrator().fit(residual_frame([_residuals()]),
                                     models_digest=models_digest(out)).model_
    (out / "intervals.json").write_text(model.dumps())
    return out


@pytest.fixture(scope="module")
def registry(models_dir: Path) -> Registry:
    return Registry.load(models_dir)


def test_an_in_evidence_prediction_has_a_band_and_names_nothing(registry: Registry):
    from quiclab.sim.analytic import AnalyticEngine

    p = AnalyticEngine(registry).predict(Scenario(server="lsquic", client="lsquic"))
    assert p.extrapolated == ""
    assert p.interval_level == 0.9
    assert p.goodput_lo_mbps < p.goodput_mbps < p.goodput_hi_mbps
    assert p.param_lo_mbps <= p.goodput_mbps <= p.param_hi_mbps
    # The predictive band includes model error: wider than the parameters' alone.
    assert p.goodput_hi_mbps / p.goodput_lo_mbps > p.param_hi_mbps / p.param_lo_mbps
    assert "held-out residuals" in p.interval_source and "σ" in p.interval_source


def test_a_far_out_prediction_names_its_fields_and_widens(registry: Registry):
    """100 Gbit/s, 200 ms RTT, a Zen 4 CPU no evidence ran: each extrapolated field in
    the line, and a band as wide as the extrapolated residuals showed."""
    from quiclab.sim.analytic import AnalyticEngine

    engine = AnalyticEngine(registry)
    base = engine.predict(Scenario(server="lsquic", client="quiche", rtt_ms=0.0))
    far = engine.predict(Scenario(server="lsquic", client="quiche", link_gbps=100.0,
                                  rtt_ms=200.0, cpu="EPYC 9354"))
    for field in ("link_gbps=100", "rtt_ms=200", "cpu=zen4"):
        assert field in far.extrapolated
    assert np.log(far.goodput_hi_mbps / far.goodput_lo_mbps) > \
        1.5 * np.log(base.goodput_hi_mbps / base.goodput_lo_mbps)
    assert "×" in far.interval_source  # what widened it


def test_the_level_sets_the_width_and_the_batch_matches_single(registry: Registry):
    from quiclab.sim.analytic import AnalyticEngine

    scenarios = [Scenario(server="lsquic", client="lsquic", rtt_ms=r) for r in (0, 5, 50)]
    engine = AnalyticEngine(registry)
    batch = engine.predict_batch(scenarios)
    for s, p in zip(scenarios, batch, strict=True):
        one = engine.predict(s)
        assert (one.goodput_lo_mbps, one.goodput_hi_mbps, one.extrapolated) == \
            (p.goodput_lo_mbps, p.goodput_hi_mbps, p.extrapolated)
    registry.interval_level = 0.5
    try:
        narrow = engine.predict(scenarios[0])
        assert narrow.interval_level == 0.5
        assert batch[0].goodput_lo_mbps < narrow.goodput_lo_mbps
        assert narrow.goodput_hi_mbps < batch[0].goodput_hi_mbps
        assert registry.versions()["interval-level"] == "0.5"
    finally:
        registry.interval_level = 0.9
    with pytest.raises(ValueError, match="level"):
        registry.interval_level = 1.2


def test_the_des_attaches_the_same_kind_of_band(registry: Registry):
    from quiclab.sim.des import DesEngine

    p = DesEngine(registry, granularity="batch", max_packets=20_000).predict(
        Scenario(server="lsquic", client="lsquic", transfer_bytes=20_000_000, rtt_ms=30.0))
    assert p.engine == "des" and p.interval_level == 0.9
    assert p.goodput_lo_mbps < p.goodput_mbps < p.goodput_hi_mbps
    assert "rtt_ms=30.05" in p.extrapolated


def test_models_without_intervals_keep_the_parameter_interval(models_dir: Path,
                                                              tmp_path: Path):
    from quiclab.sim.analytic import AnalyticEngine

    bare = tmp_path / "bare"
    shutil.copytree(models_dir, bare)
    (bare / "intervals.json").unlink()
    (bare / "domain.json").unlink()
    p = AnalyticEngine(Registry.load(bare)).predict(Scenario())
    assert np.isnan(p.interval_level)
    assert (p.goodput_lo_mbps, p.goodput_hi_mbps) == (p.param_lo_mbps, p.param_hi_mbps)
    assert "no intervals.json" in p.interval_source and "no domain.json" in p.interval_source


def test_intervals_fitted_for_other_models_say_so(models_dir: Path, tmp_path: Path):
    from quiclab.sim.analytic import AnalyticEngine

    other = tmp_path / "other"
    shutil.copytree(models_dir, other)
    data = json.loads((other / "lsquic.json").read_text())
    data["version"] = str(data.get("version", "")) + "-changed"
    (other / "lsquic.json").write_text(json.dumps(data))
    registry = Registry.load(other)
    assert "fitted for other models" in registry.intervals_stale
    p = AnalyticEngine(registry).predict(Scenario())
    assert "re-run `quiclab calibrate" in p.interval_source


def test_predict_prints_the_band_and_what_lies_outside(models_dir: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    from quiclab.cli import main

    args = ["--models", str(models_dir), "predict", "--server", "lsquic", "--client",
            "quiche", "--set", "mtu_bytes=9000", "--set", "rtt_ms=20", "--set", "loss_pct=0.1"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "90 % band [" in text and "fitted parameters alone" in text
    assert "outside: mtu_bytes=9000" in text and "rtt_ms=20.05" in text
    assert main([*args, "--level", "50", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interval_level"] == 0.5
    assert data["goodput_lo_mbps"] < data["goodput_mbps"] < data["goodput_hi_mbps"]
    assert "loss_pct=0.1" in data["extrapolated"]
    assert data["param_lo_mbps"] is not None and "held-out" in data["interval_source"]
    assert main(["--models", str(models_dir), "predict"]) == 0
    assert "inside the evidence of its models and pair" in capsys.readouterr().out
