"""Summarising predicted items: errors per source and engine, fresh cells per
stack and against a same-session control, request workloads, the predictive
intervals' coverage and whether the reproductions are stale."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def summarise_requests(items: pd.DataFrame) -> pd.DataFrame:
    """Per source, engine and quantity: cells, cells predicted, APE median/p95, noise."""
    rows = []
    for (source, engine, quantity), g in items.groupby(["source", "engine", "quantity"],
                                                       sort=False):
        ape = g["ape_pct"].dropna()
        rows.append({"source": source, "engine": engine, "quantity": quantity,
                     "items": len(g), "predicted": len(ape),
                     "median_ape_pct": float(np.median(ape)) if len(ape) else math.nan,
                     "p95_ape_pct": float(np.percentile(ape, 95)) if len(ape) else math.nan,
                     "median_noise_cv_pct": float(g["noise_cv_pct"].median())
                     if g["noise_cv_pct"].notna().any() else math.nan})
    return pd.DataFrame(rows)


def summarise(items: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (source, engine), g in items.groupby(["source", "engine"], sort=False):
        ape = g["ape_pct"].dropna()
        rows.append({"source": source, "engine": engine, "items": len(g),
                     "predicted": len(ape),
                     "median_ape_pct": float(np.median(ape)) if len(ape) else math.nan,
                     "p95_ape_pct": float(np.percentile(ape, 95)) if len(ape) else math.nan,
                     "within_10_pct": float((ape <= 10).mean() * 100) if len(ape) else math.nan,
                     "within_25_pct": float((ape <= 25).mean() * 100) if len(ape) else math.nan,
                     "median_noise_cv_pct": float(g["noise_cv_pct"].median())
                     if "noise_cv_pct" in g and g["noise_cv_pct"].notna().any() else math.nan})
    return pd.DataFrame(rows)


def _setting_label(ident: str) -> str:
    """A fresh cell's setting without its pair: ``exp|a→b [mtu_bytes=9000, …]`` →
    ``mtu_bytes=9000, …`` (``base`` when nothing changed but the transfer size)."""
    _, _, setting = ident.partition("|")
    inside = setting[setting.find("[") + 1:setting.rfind("]")] if "[" in setting else ""
    parts = [p for p in inside.split(", ") if p and not p.startswith("transfer_bytes=")]
    return ", ".join(parts) or "base"


def summarise_fresh(items: pd.DataFrame) -> pd.DataFrame:
    """Fresh goodput cells per engine, experiment and server stack (error per
    engine and per stack, with the noise beside it): cells, cells predicted, APE
    median/p95, signed error median and the median of the cells' noise (coefficient
    of variation)."""
    fresh = items[items["source"] == "fresh"]
    rows = []
    for (engine, group, stack), g in fresh.groupby(["engine", "group", "server"], sort=True):
        ape = g["ape_pct"].dropna()
        rows.append({"engine": engine, "experiment": group, "stack": stack, "items": len(g),
                     "predicted": len(ape),
                     "median_ape_pct": float(np.median(ape)) if len(ape) else math.nan,
                     "p95_ape_pct": float(np.percentile(ape, 95)) if len(ape) else math.nan,
                     "median_signed_error_pct": float(g["signed_error_pct"].median())
                     if len(ape) else math.nan,
                     "median_noise_cv_pct": float(g["noise_cv_pct"].median())
                     if g["noise_cv_pct"].notna().any() else math.nan})
    for (engine, group), g in fresh.groupby(["engine", "group"], sort=True):
        ape = g["ape_pct"].dropna()
        rows.append({"engine": engine, "experiment": group, "stack": "(all)", "items": len(g),
                     "predicted": len(ape),
                     "median_ape_pct": float(np.median(ape)) if len(ape) else math.nan,
                     "p95_ape_pct": float(np.percentile(ape, 95)) if len(ape) else math.nan,
                     "median_signed_error_pct": float(g["signed_error_pct"].median())
                     if len(ape) else math.nan,
                     "median_noise_cv_pct": float(g["noise_cv_pct"].median())
                     if g["noise_cv_pct"].notna().any() else math.nan})
    return pd.DataFrame(rows, columns=["engine", "experiment", "stack", "items", "predicted",
                                       "median_ape_pct", "p95_ape_pct",
                                       "median_signed_error_pct", "median_noise_cv_pct"])


#: Limits whose rate scales with the speed of the host's CPU.
CPU_LIMITS = ("sender_cpu", "receiver_cpu")

#: Fresh experiments designed with a control: every pair also ran the calibration
#: setting in the same session (a cell labelled ``base`` elsewhere may differ from it
#: in a knob the Scenario does not name, e.g. knob-coverage's veth segmentation). An
#: experiment whose name starts with one of these counts (one name per session).
CONTROLLED_EXPERIMENTS = ("fresh-validation-controlled", "tcp-validation")

#: Knob settings the fresh calibration itself runs (testbed/specs/fresh-calibration.yaml:
#: GSO off fixes each stack's system-call share), so not held out in kind.
CALIBRATED_SETTINGS = ("gso=False",)


def controlled_knobs(items: pd.DataFrame) -> pd.DataFrame:
    """Held-out fresh cells against a control run in the same session.

    In the experiments of :data:`CONTROLLED_EXPERIMENTS` every pair also ran the
    calibration setting itself (setting ``base``,
    ``testbed/specs/fresh-validation-controlled.yaml``), which gives that pair a
    control: when the control is predicted CPU-bound, its observed / predicted
    goodput is the session's CPU speed relative to the calibration session's
    (load on a shared machine, which no model knows). Each knob cell predicted
    CPU-bound is scaled by it, other limits are left as predicted
    (``normalised_mbps``, first order: a scaled rate is not re-checked against
    the cell's other limits), so ``normalised_ape_pct`` is the error of the
    model's response to the knob given the session's CPU speed; ``control_ape_pct`` is
    the control's own error (session drift, out of sample). One row per engine and
    knob cell; empty when no experiment has controls.
    """
    fresh = items[(items["source"] == "fresh")
                  & items["group"].map(lambda g: str(g).startswith(CONTROLLED_EXPERIMENTS))
                  ].copy()
    columns = ["engine", "group", "server", "client", "setting", "calibrated", "observed_mbps",
               "predicted_mbps", "normalised_mbps", "ape_pct", "normalised_ape_pct",
               "control_observed_mbps", "control_predicted_mbps", "control_ape_pct"]
    if fresh.empty:
        return pd.DataFrame(columns=columns)
    fresh["setting"] = fresh["ident"].map(_setting_label)
    rows = []
    for (_engine, _group, _server, _client), g in fresh.groupby(
            ["engine", "group", "server", "client"], sort=True):
        # The control is the calibration setting: "base", or the spec's base fields
        # alone when it sets some (testbed/specs/tcp-validation.yaml pins: "pin=True").
        base = "base" if (g["setting"] == "base").any() else min(
            g["setting"], key=lambda label: (label.count(", "), len(label)))
        control = g[g["setting"] == base]
        if control.empty:
            continue
        c = control.iloc[0]
        if not (c["predicted_mbps"] > 0 and c["observed_mbps"] > 0) \
                or c["limit"] not in CPU_LIMITS:
            continue
        # The control is CPU-bound: observed / predicted is this session's CPU speed
        # relative to the calibration session's. It moves CPU-bound predictions only.
        factor = c["observed_mbps"] / c["predicted_mbps"]
        for _, r in g[g["setting"] != base].iterrows():
            normalised = r["predicted_mbps"] * (factor if r["limit"] in CPU_LIMITS else 1.0)
            rows.append({**{k: r[k] for k in ("engine", "group", "server", "client", "setting",
                                                "observed_mbps", "predicted_mbps", "ape_pct")},
                         "calibrated": r["setting"] in CALIBRATED_SETTINGS,
                         "normalised_mbps": normalised,
                         "normalised_ape_pct": abs(normalised - r["observed_mbps"])
                         / r["observed_mbps"] * 100,
                         "control_observed_mbps": c["observed_mbps"],
                         "control_predicted_mbps": c["predicted_mbps"],
                         "control_ape_pct": c["ape_pct"]})
    return pd.DataFrame(rows, columns=columns)


def summarise_controlled(knobs: pd.DataFrame) -> pd.DataFrame:
    """Per engine: the held-out knob cells' APE as predicted and against the session's
    control, the controls' own APE (median / p95), and the median APE of the cells
    whose setting the fresh calibration also runs (:data:`CALIBRATED_SETTINGS`)."""
    rows = []
    for engine, every in knobs.groupby("engine", sort=True):
        calibrated = every[every["calibrated"].astype(bool)]
        g = every[~every["calibrated"].astype(bool)]
        if g.empty:
            continue
        controls = every.drop_duplicates(["group", "server", "client"])["control_ape_pct"]
        rows.append({"engine": engine, "knob_cells": len(g), "controls": len(controls),
                     "median_ape_pct": float(g["ape_pct"].median()),
                     "p95_ape_pct": float(np.percentile(g["ape_pct"], 95)),
                     "median_normalised_ape_pct": float(g["normalised_ape_pct"].median()),
                     "p95_normalised_ape_pct": float(np.percentile(g["normalised_ape_pct"],
                                                                   95)),
                     "median_control_ape_pct": float(controls.median()),
                     "p95_control_ape_pct": float(np.percentile(controls, 95)),
                     "calibrated_cells": len(calibrated),
                     "median_calibrated_ape_pct": float(calibrated["ape_pct"].median())
                     if len(calibrated) else math.nan})
    return pd.DataFrame(rows)


def fresh_cells(items: pd.DataFrame) -> pd.DataFrame:
    """Every fresh goodput cell: stack pair and setting, measured (median of n, with
    the repetitions' coefficient of variation) and each engine's prediction."""
    fresh = items[items["source"] == "fresh"]
    if fresh.empty:
        return pd.DataFrame()
    shown = fresh.assign(setting=fresh["ident"].map(_setting_label))
    return shown[["engine", "group", "server", "client", "setting", "n", "observed_mbps",
                  "noise_cv_pct", "predicted_mbps", "signed_error_pct", "limit"]] \
        .sort_values(["group", "server", "client", "setting", "engine"])


def coverage_report(registries: dict[str, Any], sources: list[str]) -> dict[str, pd.DataFrame]:
    """Coverage of the predictive intervals on held-out items, per source and regime.

    ``registries``: the model sets whose ``intervals.json`` to judge (``main``: the
    published and dataset evidence; ``fresh``: this host's sessions). Each stored
    residual set is judged again by cross-conformal folds
    (:func:`quiclab.calibration.intervals.judge_stored`). Returns the tables
    ``coverage`` (source × regime), ``outside`` (items outside their 90 % band),
    ``extremes`` (widest and narrowest 90 % bands) and ``degenerate`` (zero width
    or beyond ×/÷ 10); empty frames when no model set carries intervals."""
    from quiclab.calibration.intervals import (
        coverage_table,
        degenerate,
        extremes,
        judge_stored,
        outside,
    )

    judged = []
    for registry in registries.values():
        model = getattr(registry, "intervals", None) if registry is not None else None
        if model is None or not model.residuals:
            continue
        items = judge_stored(model)
        judged.append(items[items["source"].isin(sources)])
    if not judged or not sum(len(j) for j in judged):
        return {}
    items = pd.concat(judged, ignore_index=True)
    strict = items[items["nest"] == "fold"] if "nest" in items.columns else items
    return {"coverage": coverage_table(items),
            "engines": coverage_table(items, by=("source", "engine")), "outside": outside(strict),
            "extremes": extremes(strict), "degenerate": degenerate(strict), "items": items}


def stale_reason(repro_dir: Path, registry: Any) -> str | None:
    """Why the reproductions in ``repro_dir`` may not describe ``registry``'s models:
    the model versions ``quiclab reproduce`` recorded differ (or were not recorded)."""
    from quiclab.experiments.reproduce import MODELS_FILE

    path = repro_dir / MODELS_FILE
    rerun = "rerun `quiclab reproduce --all` or `quiclab validate --reproduce`"
    if not path.is_file():
        return f"no {MODELS_FILE} says which models these reproductions used; {rerun}"
    try:
        recorded = json.loads(path.read_text()).get("versions", {})
    except (ValueError, AttributeError):
        return f"{path} is not a JSON object of model versions; {rerun}"
    now = registry.versions()
    changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
    if not changed:
        return None
    return (f"computed with other models ({len(changed)} differ: "
            f"{', '.join(changed[:4])}{' …' if len(changed) > 4 else ''}); {rerun}")
