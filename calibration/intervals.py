"""Fitting the predictive intervals from held-out residuals, and measuring their coverage.

``IntervalCalibrator().fit(residuals)`` learns :class:`~quiclab.models.intervals.IntervalModel`
from the held-out items that cross-validation produced (``quiclab.calibration.cv``:
leave one experiment out, leave one pair out, and any other fold kind such as
leave one testbed out or fresh sessions predicted by another session's models):

1. residuals in log ratio, ``r = log(measured / predicted)``; one-sided points
   (bounds) and items without a prediction are left out;
2. a difficulty model σ(x): a ridge regression of log |r| on the features of
   :mod:`quiclab.models.intervals` (regime, engine, pair/CPU/model/knobs inside
   the evidence or not, how far outside, another CPU than the reference), so σ
   is the typical error's size (robust to the heavy tail); the coefficients of
   being outside the evidence are bounded at 0 from below (:data:`MONOTONE`:
   further out is never surer), so it is scipy's bounded least squares rather
   than scikit-learn's ``Ridge``; its features are clipped at prediction time to
   the range the residuals cover;
3. the normalised residuals r / σ (per Mondrian bin, if any: :data:`BINS`), from
   which ``crepes``' conformal predictive system takes the percentiles of any
   level at prediction time.

Why crepes and not MAPIE: the predictor here is a simulation engine, not a
scikit-learn estimator, and its residuals are already held out; crepes'
``ConformalPredictiveSystem`` takes residuals directly, with difficulty
estimates (normalisation) and Mondrian categories, and gives asymmetric
percentiles — the model errs more one way than the other in some regimes.
MAPIE 1.x wraps an estimator, has no Mondrian regression, and its normalised
score is symmetric.

:func:`cross_conformal` measures coverage honestly: the interval model that
judges the items of one fold is fitted without that fold's residuals, and
without any other residual of the same measurement (an item held out by two
fold kinds has two residuals).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quiclab.models.intervals import (
    DEFAULT_LEVEL,
    FEATURES,
    REGIMES,
    IntervalModel,
    Situation,
    bin_label,
    feature_row,
)

#: Levels the coverage report measures.
REPORT_LEVELS = (0.5, 0.9)
#: Least normalised-residual count for a Mondrian bin of its own (else pooled): a
#: two-sided 90 % interval needs 19 (crepes' finite-sample percentiles).
MIN_BIN = 20
#: The difficulty never falls below this (log units ≈ 1 %: repetitions of one
#: QIR-10G cell vary by ~1 %, seed 002 §3): no band is of zero width.
SIGMA_FLOOR = 0.01
#: The L2 penalty of the difficulty model per residual (alpha / n of a ridge); see BIN_BY.
ALPHA = 0.1
#: What the Mondrian bins of the normalised residuals are (models/intervals.py
#: BIN_BY). One pooled bin, chosen with ALPHA by the mean 90 % interval score
#: (Gneiting and Raftery 2007) of the leave-one-experiment-out items of the analytic
#: engine and the DES (262 residuals), each judged fold by fold: 1.678 at alpha 0.1
#: against 1.704 (0.05) and 1.803 (0.02); bins by σ tercile 1.87–1.88; on the
#: analytic residuals alone a bin for predictions on another CPU than the reference
#: 1.95 against 1.69 pooled (its 28 residuals put the two-sided 90 % percentiles at
#: their extremes, a ×25 miss).
BIN_BY = "none"
#: Columns every residual frame needs.
COLUMNS = ("ident", "source", "fold", "fold_kind", "engine", "limit", "observed_mbps",
           "predicted_mbps", "pair_in_evidence", "cpu_in_evidence", "extrapolated_fields",
           "pair_fields", "extrapolation")


def residual_frame(held: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate held-out frames into the residuals an interval model learns from.

    Keeps items with a value (no one-sided bound) and a positive prediction, adds
    ``log_ratio`` = log(predicted / measured) and ``r`` = −log_ratio. ValueError
    naming the column when a frame lacks one of :data:`COLUMNS`."""
    frames = []
    for frame in held:
        missing = [c for c in COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"held-out frame lacks column(s) {', '.join(missing)}")
        frames.append(frame)
    if not frames:
        raise ValueError("no held-out residuals")
    df = pd.concat(frames, ignore_index=True)
    if "bound" in df.columns:
        df = df[df["bound"].fillna("").astype(str) == ""]
    ok = (df["observed_mbps"] > 0) & (df["predicted_mbps"] > 0) \
        & np.isfinite(df["predicted_mbps"])
    df = df[ok].copy()
    df["log_ratio"] = np.log(df["predicted_mbps"] / df["observed_mbps"])
    df["r"] = -df["log_ratio"]
    df["regime"] = df["limit"].map(lambda k: REGIMES.get(str(k), "cpu"))
    df["group"] = df["fold_kind"].astype(str) + ":" + df["fold"].astype(str)
    return df.sort_values(["fold_kind", "fold", "ident", "engine"]).reset_index(drop=True)


def situation_of(row: Any) -> Situation:
    """The :class:`Situation` of one residual row."""
    fields = [f for f in str(row.extrapolated_fields or "").split(",") if f]
    knobs = sum(1 for f in fields if f not in ("cpu", "pair", "model", "testbed"))
    pair_fields = [f for f in str(row.pair_fields or "").split(",") if f]
    return Situation(REGIMES.get(str(row.limit), "cpu"), str(row.engine),
                     bool(row.pair_in_evidence), bool(row.cpu_in_evidence),
                     "model" not in fields, knobs, float(row.extrapolation or 0.0),
                     len(pair_fields), bool(getattr(row, "cpu_scaled", False)),
                     bool(getattr(row, "testbed_in_evidence", True)))


def situations_scaled(df: pd.DataFrame) -> list[bool]:
    """Per residual: whether its CPU was another than the models' reference."""
    if "cpu_scaled" not in df.columns:
        return [False] * len(df)
    return [bool(v) for v in df["cpu_scaled"].fillna(False)]


def features_of(df: pd.DataFrame) -> np.ndarray:
    return np.array([feature_row(situation_of(r)) for r in df.itertuples(index=False)],
                    dtype=float).reshape(len(df), len(FEATURES))


class IntervalCalibrator:
    """Learn an :class:`IntervalModel` from residuals (scikit-learn style: ``fit`` → ``model_``)."""

    def __init__(self, level: float = DEFAULT_LEVEL, alpha: float = ALPHA,
                 bin_by: str = BIN_BY, min_bin: int = MIN_BIN,
                 sigma_floor: float = SIGMA_FLOOR, features: Sequence[str] | None = None):
        self.level = level
        self.alpha = alpha
        #: What the Mondrian bins are (none, regime, cpu); a bin needs MIN_BIN residuals.
        self.bin_by = bin_by
        self.min_bin = min_bin
        self.sigma_floor = sigma_floor
        #: Features the difficulty model may use (None: all of FEATURES); the others
        #: get coefficient 0.
        self.features = tuple(features) if features is not None else FEATURES

    def fit(self, residuals: pd.DataFrame, provenance: dict[str, Any] | None = None,
            models_digest: str = "") -> IntervalCalibrator:
        if len(residuals) < MIN_BIN:
            raise ValueError(f"{len(residuals)} held-out residuals: an interval model "
                             f"needs at least {MIN_BIN} (a two-sided 90 % band, 19)")
        x = features_of(residuals)
        use = np.array([f in self.features for f in FEATURES])
        r = residuals["r"].to_numpy(dtype=float)
        # The typical size of the error in log units: log |r| is robust to the heavy
        # tail (a few items wrong by ×3 or more), which the conformal percentiles of
        # r / σ then carry, asymmetric where the model errs more one way.
        y = np.log(np.maximum(np.abs(r), self.sigma_floor))
        coef = np.zeros(len(FEATURES))
        # Features the residuals never vary carry no information: coefficient 0.
        varied = use & (x.max(axis=0) > x.min(axis=0))
        if varied.any():
            coef[varied], intercept = _bounded_ridge(
                x[:, varied], y, self.alpha * len(r),
                np.array([MONOTONE.get(f, -np.inf) for f, v in zip(FEATURES, varied,
                                                                   strict=True) if v]))
        else:
            intercept = float(y.mean())
        clip = {f: (float(x[:, j].min()), float(x[:, j].max())) for j, f in enumerate(FEATURES)}
        sigma = np.maximum(np.exp(intercept + np.clip(x, [c[0] for c in clip.values()],
                                                      [c[1] for c in clip.values()]) @ coef),
                           self.sigma_floor)
        score = r / sigma
        labels = np.array([bin_label(self.bin_by, g, s) for g, s in
                           zip(residuals["regime"], situations_scaled(residuals), strict=True)])
        scores: dict[str, tuple[float, ...]] = {"all": tuple(np.sort(score))}
        for name in sorted(set(labels) - {"all"}):
            members = labels == name
            if members.sum() >= self.min_bin:
                scores[name] = tuple(np.sort(score[members]))
        kinds = residuals.groupby("fold_kind").size().to_dict()
        prov = {"residuals": len(residuals),
                "fold_kinds": {str(k): int(v) for k, v in sorted(kinds.items())},
                "folds": sorted(residuals["group"].unique().tolist()),
                "sources": {str(k): int(v) for k, v in
                            residuals.groupby("source").size().sort_index().items()},
                "engines": {str(k): int(v) for k, v in
                            residuals.groupby("engine").size().sort_index().items()},
                **(provenance or {})}
        self.model_ = IntervalModel(
            level=self.level, features=FEATURES, intercept=intercept, coef=tuple(coef),
            clip=clip, sigma_floor=self.sigma_floor, bin_by=self.bin_by, scores=scores,
            provenance=prov, residuals=_residual_records(residuals, sigma),
            estimator=(f"difficulty: ridge regression (alpha={self.alpha:g} × residuals; "
                       "scipy lsq_linear, extrapolation coefficients ≥ 0) of "
                       "log |log(measured/predicted)|; percentiles: crepes "
                       "ConformalPredictiveSystem of r / sigma"
                       + (f" (Mondrian bins by {self.bin_by})" if len(scores) > 1 else "")),
            models_digest=models_digest)
        return self


#: Features whose coefficient may not be negative: being further outside the evidence,
#: or on a pair, CPU or model it never measured, cannot make a prediction surer. (On
#: the leave-one-experiment-out residuals an unconstrained fit gave the log distance
#: −0.13: its largest distances are seed 000's, a testbed whose other errors the
#: CPU features already carry.)
MONOTONE: dict[str, float] = {name: 0.0 for name in FEATURES
                              if not name.startswith(("regime:", "engine:"))}


def _bounded_ridge(x: np.ndarray, y: np.ndarray, alpha: float, lower: np.ndarray
                   ) -> tuple[np.ndarray, float]:
    """Ridge regression (unpenalised intercept) with lower bounds on the coefficients:
    scipy's bounded least squares on the centred data, augmented by √alpha·I rows."""
    from scipy.optimize import lsq_linear

    mx, my = x.mean(axis=0), y.mean()
    a = np.vstack([x - mx, math.sqrt(alpha) * np.eye(x.shape[1])])
    b = np.concatenate([y - my, np.zeros(x.shape[1])])
    fit = lsq_linear(a, b, bounds=(lower, np.full(x.shape[1], np.inf)), method="bvls",
                     tol=1e-12)
    coef = fit.x
    return coef, float(my - mx @ coef)


def _residual_records(df: pd.DataFrame, sigma: np.ndarray) -> list[dict[str, Any]]:
    """The residuals as provenance (which items, which fold, what error, what the
    difficulty saw), enough to judge them again (:func:`stored_residuals`)."""
    out = []
    for row, s in zip(df.itertuples(index=False), sigma, strict=True):
        out.append({"ident": row.ident, "source": row.source, "fold_kind": row.fold_kind,
                    "fold": str(row.fold), "engine": row.engine, "limit": row.limit,
                    "observed_mbps": float(row.observed_mbps),
                    "predicted_mbps": float(row.predicted_mbps),
                    "log_ratio": round(float(row.log_ratio), 5),
                    "sigma": round(float(s), 5),
                    "pair_in_evidence": bool(row.pair_in_evidence),
                    "cpu_in_evidence": bool(row.cpu_in_evidence),
                    "extrapolated_fields": str(row.extrapolated_fields or ""),
                    "pair_fields": str(row.pair_fields or ""),
                    "extrapolation": min(float(row.extrapolation or 0.0), 50.0),
                    "cpu_scaled": bool(getattr(row, "cpu_scaled", False)),
                    "extrapolated": str(getattr(row, "extrapolated", "") or ""),
                    "scenario": str(getattr(row, "scenario", "") or "")})
    return out


def stored_residuals(model: IntervalModel) -> pd.DataFrame:
    """The residual frame an interval model was fitted on, from its provenance."""
    if not model.residuals:
        raise ValueError("the interval model stores no residuals")
    frame = pd.DataFrame(model.residuals)
    return residual_frame([frame])


#: How the judging interval models are nested (:func:`cross_conformal`).
NESTS = ("fold", "items")
#: Folds of the ``items`` nesting (measurements dealt round-robin in ident order).
ITEM_FOLDS = 10


def cross_conformal(residuals: pd.DataFrame, calibrator: IntervalCalibrator,
                    levels: Sequence[float] = REPORT_LEVELS, nest: str = "fold"
                    ) -> pd.DataFrame:
    """Every residual judged by an interval model that never saw it.

    ``nest="fold"``: for each cross-validation fold (``group``: fold kind and fold,
    e.g. one experiment, one seed's testbed, one pair, one session) the model is
    fitted without that fold's residuals — the coverage a new experiment, testbed,
    pair or session gets. ``nest="items"``: the measurements are dealt into
    :data:`ITEM_FOLDS` folds and each is judged by a model fitted on the others
    (cross-conformal prediction over items; other items of the same experiment
    may calibrate it). Either way every other residual of the same measurement
    (``ident``: an item held out by two fold kinds has two) is left out too.
    Returns the residual rows with ``lo_<L>``/``hi_<L>`` (Mbit/s), ``inside_<L>``
    and ``width_<L>`` (hi / lo) per level, ``sigma`` and ``nest``."""
    if nest not in NESTS:
        raise ValueError(f"nest={nest!r}: allowed {' | '.join(NESTS)}")
    if nest == "items":
        idents = sorted(residuals["ident"].unique())
        deal = {ident: str(k % ITEM_FOLDS) for k, ident in enumerate(idents)}
        residuals = residuals.assign(group=residuals["ident"].map(deal))
    out = []
    for group in sorted(residuals["group"].unique()):
        test = residuals[residuals["group"] == group]
        train = residuals[(residuals["group"] != group)
                          & ~residuals["ident"].isin(set(test["ident"]))]
        model = IntervalCalibrator(level=calibrator.level, alpha=calibrator.alpha,
                                   bin_by=calibrator.bin_by, min_bin=calibrator.min_bin,
                                   sigma_floor=calibrator.sigma_floor,
                                   features=calibrator.features).fit(train).model_
        judged = test.copy()
        situations = [situation_of(r) for r in test.itertuples(index=False)]
        link = _link_rates(test)
        for level in levels:
            # As at prediction time (sim/bands.py), no band reaches above the link.
            bands = model.bands(test["predicted_mbps"].to_numpy(), situations, level, link)
            tag = _tag(level)
            judged[f"lo_{tag}"] = [b.lo_mbps for b in bands]
            judged[f"hi_{tag}"] = [b.hi_mbps for b in bands]
            judged[f"inside_{tag}"] = ((judged["observed_mbps"] >= judged[f"lo_{tag}"])
                                       & (judged["observed_mbps"] <= judged[f"hi_{tag}"]))
            judged[f"width_{tag}"] = judged[f"hi_{tag}"] / judged[f"lo_{tag}"]
            judged["sigma"] = [b.sigma for b in bands]
            judged[f"bin_{tag}"] = [b.bin for b in bands]
        out.append(judged.assign(nest=nest))
    return pd.concat(out, ignore_index=True)


def _link_rates(df: pd.DataFrame) -> np.ndarray | None:
    """Each item's nominal link rate (Mbit/s, the Scenario's ``link_gbps``), or None
    when the frame carries no scenario; an item without one gets no cap."""
    import json

    if "scenario" not in df.columns:
        return None
    out = []
    for text in df["scenario"]:
        try:
            out.append(float(json.loads(text)["link_gbps"]) * 1e3)
        except (TypeError, ValueError, KeyError):
            out.append(math.inf)
    return np.array(out)


def _tag(level: float) -> str:
    return f"{round(level * 100):d}"


def coverage_table(judged: pd.DataFrame, by: Sequence[str] = ("source", "regime"),
                   levels: Sequence[float] = REPORT_LEVELS) -> pd.DataFrame:
    """Per nesting (``nest``, when the items were judged several ways), per group (and
    per ``by[0]`` alone, and ALL): items, coverage (% inside) and the median width
    (hi / lo) at each level."""
    if "nest" in judged.columns and judged["nest"].nunique() > 1:
        return pd.concat([coverage_table(judged[judged["nest"] == n], by, levels)
                          for n in NESTS if (judged["nest"] == n).any()], ignore_index=True)
    rows = []

    def row(keys: dict[str, str], g: pd.DataFrame) -> dict[str, Any]:
        out: dict[str, Any] = {**keys, "items": len(g)}
        for level in levels:
            tag = _tag(level)
            out[f"coverage_{tag}_pct"] = float(g[f"inside_{tag}"].mean() * 100)
            out[f"median_width_{tag}"] = float(g[f"width_{tag}"].median())
        return out

    by = list(by)
    for keys, g in judged.groupby(by, sort=True):
        keys = keys if isinstance(keys, tuple) else (keys,)
        rows.append(row(dict(zip(by, map(str, keys), strict=True)), g))
    if len(by) > 1:
        for key, g in judged.groupby(by[0], sort=True):
            rows.append(row({by[0]: str(key), **{b: "(all)" for b in by[1:]}}, g))
    rows.append(row({b: "ALL" for b in by}, judged))
    table = pd.DataFrame(rows)
    if "nest" in judged.columns and len(judged):
        table.insert(0, "nest", str(judged["nest"].iloc[0]))
    return table


def extremes(judged: pd.DataFrame, level: float = 0.9, n: int = 5) -> pd.DataFrame:
    """The ``n`` widest and ``n`` narrowest bands at ``level`` with what set them."""
    tag = _tag(level)
    cols = ["ident", "source", "fold", "regime", "engine", "predicted_mbps", "observed_mbps",
            f"lo_{tag}", f"hi_{tag}", f"width_{tag}", "sigma", "extrapolated_fields"]
    ordered = judged.sort_values([f"width_{tag}", "ident"])
    low = ordered.head(n).assign(end="narrowest")
    high = ordered.tail(n).iloc[::-1].assign(end="widest")
    return pd.concat([high, low])[["end", *cols]].reset_index(drop=True)


def outside(judged: pd.DataFrame, level: float = 0.9) -> pd.DataFrame:
    """The items outside their band at ``level``, largest miss first."""
    tag = _tag(level)
    miss = judged[~judged[f"inside_{tag}"]].copy()
    miss["miss"] = np.where(miss["observed_mbps"] > miss[f"hi_{tag}"],
                            np.log(miss["observed_mbps"] / miss[f"hi_{tag}"]),
                            np.log(miss[f"lo_{tag}"] / miss["observed_mbps"]))
    return miss.sort_values("miss", ascending=False)


def degenerate(judged: pd.DataFrame, level: float = 0.9, span: float = 10.0) -> pd.DataFrame:
    """Bands of zero width, or spanning more than ×/÷ ``span`` around the prediction."""
    tag = _tag(level)
    ratio = np.maximum(judged[f"hi_{tag}"] / judged["predicted_mbps"],
                       judged["predicted_mbps"] / judged[f"lo_{tag}"])
    bad = (judged[f"width_{tag}"] <= 1.0 + 1e-9) | (ratio > span)
    return judged[bad]


def nan_to_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def engine_residuals(held: pd.DataFrame, engine: str, progress: Any = None,
                     **options: Any) -> pd.DataFrame:
    """Held-out items predicted by another engine with their fold's own models.

    ``held`` must carry ``fold_models`` (the fold's model directory, written by
    :mod:`quiclab.calibration.cv` with ``models_dir``) and ``scenario`` (JSON).
    Returns the same rows with ``engine``, ``predicted_mbps``, ``limit`` and
    ``ape_pct`` of ``engine``; items it fails on are dropped (with a progress line).
    """
    import json

    from quiclab.errors import QuiclabError
    from quiclab.models.registry import Registry
    from quiclab.sim.engine import get_engine
    from quiclab.sim.scenario import Scenario

    if "fold_models" not in held.columns:
        raise ValueError("held-out frame has no fold_models column (run the folds with "
                         "models_dir)")
    out = []
    for models, rows in held.groupby("fold_models", sort=True):
        registry = Registry.load(Path(str(models)))
        eng = get_engine(engine, registry, **options)
        scenarios = [Scenario.from_dict(json.loads(s)) for s in rows["scenario"]]
        for (_, row), scenario in zip(rows.iterrows(), scenarios, strict=True):
            try:
                pred = eng.predict(scenario)
            except (QuiclabError, ValueError) as err:
                if progress:
                    progress(f"{engine}: {row['ident']} not predicted ({err})")
                continue
            new = row.copy()
            new["engine"] = engine
            new["predicted_mbps"] = pred.goodput_mbps
            new["limit"] = pred.limit
            new["ape_pct"] = abs(pred.goodput_mbps / row["observed_mbps"] - 1.0) * 100.0
            out.append(new)
        if progress:
            progress(f"{engine}: predicted the held-out items of {Path(str(models)).name}")
    return pd.DataFrame(out).reset_index(drop=True) if out else held.iloc[0:0]


def write_intervals(held: Sequence[pd.DataFrame], models_dir: Path, report_dir: Path,
                    level: float = DEFAULT_LEVEL, provenance: dict[str, Any] | None = None
                    ) -> tuple[IntervalModel, pd.DataFrame]:
    """Fit the interval model on the held-out frames, measure its coverage by
    cross-conformal folds, write ``intervals.json`` into ``models_dir`` and the
    coverage report (``coverage.csv``, ``coverage_items.csv``) into ``report_dir``.
    Returns the model and the judged items."""
    from quiclab.models.intervals import FILE, models_digest

    residuals = residual_frame(held)
    calibrator = IntervalCalibrator(level=level)
    judged = pd.concat([cross_conformal(residuals, calibrator, nest=n) for n in NESTS],
                       ignore_index=True)
    table = coverage_table(judged)
    model = calibrator.fit(residuals, provenance, models_digest(models_dir)).model_
    model.coverage = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                      for r in table.to_dict("records")]
    (Path(models_dir) / FILE).write_text(model.dumps())
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(report_dir / "coverage.csv", index=False)
    coverage_table(judged, by=("source", "engine")).to_csv(report_dir / "coverage_engines.csv",
                                                           index=False)
    judged.to_csv(report_dir / "coverage_items.csv", index=False)
    return model, judged


def judge_stored(model: IntervalModel) -> pd.DataFrame:
    """The cross-conformal judgement of the residuals an interval model stores (the
    same folds and settings ``quiclab calibrate`` measured its coverage with)."""
    residuals = stored_residuals(model)
    calibrator = IntervalCalibrator(level=model.level)
    return pd.concat([cross_conformal(residuals, calibrator, nest=n) for n in NESTS],
                     ignore_index=True)


COVERAGE_TEXT = (
    "Coverage is measured, not claimed: every held-out item (a prediction by models that "
    "never saw it: leave one experiment out, leave one pair out, other fold kinds where "
    "present, fresh sessions predicted by another session's models) is judged by an "
    "interval model that never saw its residual, nor any other residual of the same "
    "measurement. `nest` fold: the judging model is fitted without the item's whole fold "
    "(a new experiment, testbed, pair or session); items: without the item's tenth of the "
    "measurements (cross-conformal over items). `coverage_50_pct` / `coverage_90_pct`: "
    "share of items inside their 50 % / 90 % band (nominal 50 and 90); `median_width_*`: "
    "median of hi / lo.")
