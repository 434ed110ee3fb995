"""Predictive intervals from held-out residuals, on synthetic residuals (no shared data)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.intervals import (
    IntervalCalibrator,
    coverage_table,
    cross_conformal,
    degenerate,
    extremes,
    outside,
    residual_frame,
    stored_residuals,
)
from quiclab.models.intervals import IntervalModel, Situation, check_level

#: Error scale (log units) per regime and the factor an extrapolated item's error has.
SCALE = {"sender_cpu": 0.05, "cwnd": 0.3, "interop": 0.15, "link": 0.03}
EXTRAPOLATED = 3.0


def synthetic(seed: int = 1, folds: int = 12, per_fold: int = 24) -> pd.DataFrame:
    """Held-out rows shaped like calibration/cv.py's: four regimes, every fifth item
    extrapolated (pair never measured, RTT outside) with errors three times larger,
    cwnd errors biased towards over-prediction."""
    rng = np.random.default_rng(seed)
    rows = []
    for fold in range(folds):
        for k in range(per_fold):
            limit = list(SCALE)[k % 4]
            far = k % 5 == 0
            scale = SCALE[limit] * (EXTRAPOLATED if far else 1.0)
            log_ratio = rng.normal(0.1 if limit == "cwnd" else 0.0, scale)
            rows.append({
                "ident": f"item{fold}-{k}", "source": "dataset" if fold < 8 else "published",
                "fold": f"fold{fold}", "fold_kind": "experiments", "engine": "analytic",
                "limit": limit, "observed_mbps": 1000.0,
                "predicted_mbps": 1000.0 * float(np.exp(log_ratio)),
                "pair_in_evidence": not far, "cpu_in_evidence": True,
                "extrapolated_fields": "rtt_ms,pair" if far else "", "pair_fields": "",
                "extrapolation": 2.0 if far else 0.0, "bound": ""})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def residuals() -> pd.DataFrame:
    return residual_frame([synthetic()])


@pytest.fixture(scope="module")
def judged(residuals: pd.DataFrame) -> pd.DataFrame:
    return cross_conformal(residuals, IntervalCalibrator())


def test_nominal_levels_cover_held_out_items(judged: pd.DataFrame):
    table = coverage_table(judged)
    for source in ("dataset", "published"):
        row = table[(table["source"] == source) & (table["regime"] == "(all)")].iloc[0]
        assert 85.0 <= row["coverage_90_pct"] <= 95.0
        assert 40.0 <= row["coverage_50_pct"] <= 60.0
        assert row["median_width_90"] > row["median_width_50"] > 1.0
    assert table.iloc[-1]["source"] == "ALL" and table.iloc[-1]["items"] == len(judged)


def test_bands_follow_what_drives_error(residuals: pd.DataFrame):
    """The cwnd regime's band is wider than the link's, an extrapolated item's wider
    than the same regime inside the evidence, by about what their residuals showed."""
    model = IntervalCalibrator().fit(residuals).model_
    inside, far = model.bands(
        [100.0, 100.0], [Situation("cpu", "analytic"),
                         Situation("cpu", "analytic", pair_measured=False, knobs_outside=1,
                                   distance=2.0)])
    ratio = np.log(far.hi_mbps / far.lo_mbps) / np.log(inside.hi_mbps / inside.lo_mbps)
    assert 2.0 < ratio < 4.5  # residuals three times larger
    cwnd, link = model.bands([100.0, 100.0], [Situation("window", "analytic"),
                                              Situation("link", "analytic")])
    assert cwnd.hi_mbps / cwnd.lo_mbps > 3 * (link.hi_mbps / link.lo_mbps - 1) + 1
    assert "pair never measured" in far.source and "held-out residuals" in far.source
    # With a Mondrian bin per regime, the window regime's over-prediction shows: its
    # band sits mostly below the prediction.
    binned = IntervalCalibrator(bin_by="regime").fit(residuals).model_
    window = binned.bands([100.0], [Situation("window", "analytic")])[0]
    assert window.bin == "window" and 100.0 / window.lo_mbps > window.hi_mbps / 100.0


def test_a_fold_is_judged_by_a_model_that_never_saw_it():
    """One fold whose predictions are all 5× too high: were its own residuals in the
    model that judges it, a wide enough band would cover them; they are not."""
    frame = synthetic(folds=10)
    bad = frame["fold"] == "fold3"
    frame.loc[bad, "predicted_mbps"] = 5000.0
    judged = cross_conformal(residual_frame([frame]), IntervalCalibrator())
    assert not judged[judged["fold"] == "fold3"]["inside_90"].any()
    assert len(outside(judged)) >= bad.sum()


def test_another_residual_of_the_same_measurement_stays_out_of_its_judge():
    """An item held out by two fold kinds (an experiment and a pair) has two residuals;
    the one of the other kind must not calibrate the band that judges it."""
    frame = synthetic(folds=10)
    twin = frame[frame["fold"] == "fold2"].assign(fold_kind="pairs", fold="lsquic|quiche")
    twin["predicted_mbps"] = 9000.0
    both = residual_frame([frame.assign(predicted_mbps=np.where(
        frame["fold"] == "fold2", 9000.0, frame["predicted_mbps"])), twin])
    judged = cross_conformal(both, IntervalCalibrator())
    assert not judged[judged["ident"].str.startswith("item2-")]["inside_90"].any()


def test_no_band_has_zero_width_and_no_unjustified_factor_of_ten():
    """Residuals of exactly zero still give a band (the σ floor); ordinary residuals
    give none beyond ×/÷ 10."""
    frame = synthetic(folds=6).assign(predicted_mbps=1000.0)
    judged = cross_conformal(residual_frame([frame]), IntervalCalibrator())
    assert (judged["width_90"] > 1.0).all()
    assert degenerate(judged).empty
    ends = extremes(judged, n=3)
    assert list(ends["end"]) == ["widest"] * 3 + ["narrowest"] * 3


def test_features_beyond_the_residuals_are_clipped(residuals: pd.DataFrame):
    """A scenario 100 log units out gets the band of the furthest held-out item, not
    an extrapolated error model."""
    model = IntervalCalibrator().fit(residuals).model_
    seen, beyond = model.bands([100.0, 100.0], [
        Situation("cpu", "analytic", pair_measured=False, knobs_outside=1, distance=2.0),
        Situation("cpu", "analytic", pair_measured=False, knobs_outside=9, distance=100.0)])
    assert beyond.lo_mbps == pytest.approx(seen.lo_mbps)
    assert beyond.hi_mbps == pytest.approx(seen.hi_mbps)


def test_the_stored_model_is_deterministic_and_round_trips(residuals: pd.DataFrame):
    a = IntervalCalibrator().fit(residuals).model_
    b = IntervalCalibrator().fit(residuals).model_
    assert a.dumps() == b.dumps()
    again = IntervalModel.from_json(a.to_json(), "test")
    s = [Situation("window", "analytic", pair_measured=False)]
    assert again.bands([50.0], s)[0] == a.bands([50.0], s)[0]
    assert len(stored_residuals(again)) == len(residuals)
    assert a.provenance["residuals"] == len(residuals)
    assert a.provenance["fold_kinds"] == {"experiments": len(residuals)}
    # The stored percentiles are crepes' own, so a loaded model answers at the usual
    # levels without recomputing them, and with the same numbers.
    assert set(again.precomputed) >= {0.5, 0.9, 0.95}
    fresh = IntervalModel.from_json({k: v for k, v in a.to_json().items()
                                     if k != "percentiles"}, "test")
    for level in (0.5, 0.9):
        assert again.alphas(level) == fresh.alphas(level)
        assert again.bands([50.0], s, level)[0] == fresh.bands([50.0], s, level)[0]


def test_levels_and_thin_bins(residuals: pd.DataFrame):
    model = IntervalCalibrator().fit(residuals).model_
    s = [Situation("cpu", "analytic")]
    narrow, wide = model.bands([100.0], s, 0.5)[0], model.bands([100.0], s, 0.95)[0]
    assert wide.lo_mbps < narrow.lo_mbps < 100.0 < narrow.hi_mbps < wide.hi_mbps
    # Too few residuals per bin for 99.9 %: the widest seen, and the band says so.
    extreme = model.bands([100.0], s, 0.999)[0]
    assert np.isfinite(extreme.lo_mbps) and np.isfinite(extreme.hi_mbps)
    assert "too few residuals" in extreme.source
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="level"):
            check_level(bad)


def test_residual_frames_are_checked_and_bounds_left_out():
    frame = synthetic(folds=4)
    frame.loc[0, "bound"] = "lower"
    assert len(residual_frame([frame])) == len(frame) - 1
    with pytest.raises(ValueError, match="extrapolation"):
        residual_frame([frame.drop(columns="extrapolation")])
    with pytest.raises(ValueError, match="at least"):
        IntervalCalibrator().fit(residual_frame([frame.head(19)]))


def test_another_engine_predicts_the_held_out_items_with_their_folds_models(tmp_path):
    """engine_residuals: each held-out item predicted again by the DES with the models
    of the fold that held it out (written by calibration/cv.py), rows kept alike."""
    import json

    from quiclab.calibration.intervals import engine_residuals
    from quiclab.models.testing import synthetic_model
    from quiclab.sim.scenario import Scenario

    folds = {}
    for fold, ns in (("a", 3000.0), ("b", 6000.0)):
        folder = tmp_path / fold
        folder.mkdir()
        (folder / "fast.json").write_text(synthetic_model("fast", sender_ns=ns,
                                                          receiver_ns=ns / 2).dumps())
        folds[fold] = folder
    scenario = Scenario(server="fast", client="fast", transfer_bytes=5_000_000)
    held = pd.DataFrame([{**synthetic(folds=1).iloc[0].to_dict(), "ident": f"x{fold}",
                          "fold": fold, "fold_models": str(folder),
                          "scenario": json.dumps(scenario.to_dict())}
                         for fold, folder in folds.items()])
    des = engine_residuals(held, "des", granularity="batch")
    assert list(des["engine"]) == ["des", "des"] and list(des["ident"]) == ["xa", "xb"]
    # Twice the per-packet cost in fold b: about half the goodput.
    ratio = des["predicted_mbps"].iloc[0] / des["predicted_mbps"].iloc[1]
    assert 1.7 < ratio < 2.3
    assert (des["limit"] == "sender_cpu").all()
    with pytest.raises(ValueError, match="fold_models"):
        engine_residuals(held.drop(columns="fold_models"), "des")
