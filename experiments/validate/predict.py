"""Predicting a source's evidence with one engine through the sweep runner
(cached, resumable): one row per goodput item, or per request cell and quantity."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from quiclab.experiments import runner
from quiclab.experiments.validate.evidence import REQUEST_QUANTITIES, SourceItems

REQUEST_ITEM_COLUMNS = ["source", "engine", "ident", "group", "scenario", "workload",
                        "quantity", "observed", "predicted", "ape_pct", "signed_error_pct",
                        "limit", "n", "noise_cv_pct"]


def predict_source(items: SourceItems, engine: str, registry: Any, executor: Any,
                   data_dir: Path, runtime: dict[str, dict[str, Any]], progress: bool
                   ) -> tuple[pd.DataFrame, list[tuple[str, str, str]]]:
    """One row per evidence item: observed, predicted, APE (NaN if the engine failed)."""
    scenarios = [e.scenario for e in items.evidence]
    spec = {"kind": "validation", "source": items.source,
            "points": sorted({runner.scenario_key(s) for s in scenarios})}
    chash = runner.content_hash(spec, registry.versions())
    out = runner.default_out(data_dir, "validation", f"validate-{items.source}", chash)
    report = runner.run_points(
        name=f"validate-{items.source}", kind="validation", spec=spec, scenarios=scenarios,
        engines=[engine], engine_options={engine: runtime.get(engine, {})},
        registry=registry, out=out, executor=executor, progress=progress, chash=chash)
    table = report.table.to_pylist() if report.table is not None else []
    by_key = {r["scenario_key"]: r for r in table}
    rows = []
    for e in items.evidence:
        row = by_key.get(runner.scenario_key(e.scenario))
        predicted = float(row["goodput_mbps"]) if row else math.nan
        rows.append({
            "source": items.source, "engine": engine, "ident": e.ident, "group": e.group,
            "scenario": e.scenario.describe(), "server": e.scenario.server,
            "client": e.scenario.client, "observed_mbps": e.goodput_mbps,
            "predicted_mbps": predicted,
            # One-sided points: no absolute error, the signed one is the violation.
            "ape_pct": e.errors_pct(predicted)[0],
            "signed_error_pct": e.errors_pct(predicted)[1],
            "bound": e.bound,
            "limit": row.get("limit_resource") if row else None, "n": e.n,
            # Noise of the measurement itself: coefficient of variation over repetitions
            # (unknown for a single run, whose Evidence carries variation = 0).
            "noise_cv_pct": e.variation * 100.0 if e.variation == e.variation and e.n > 1
            else math.nan,
        })
    return pd.DataFrame(rows), report.failed


def predict_requests(items: SourceItems, engine: str, registry: Any, executor: Any,
                     data_dir: Path, runtime: dict[str, dict[str, Any]], progress: bool
                     ) -> tuple[pd.DataFrame, list[tuple[str, str, str]]]:
    """One row per request cell and quantity: observed, predicted, APE, noise (NaN where
    the engine does not model request workloads or failed)."""
    scenarios = [e.scenario for e in items.requests]
    spec = {"kind": "validation", "source": f"{items.source}-requests",
            "points": sorted({runner.scenario_key(s) for s in scenarios})}
    chash = runner.content_hash(spec, registry.versions())
    name = f"validate-{items.source}-requests"
    out = runner.default_out(data_dir, "validation", name, chash)
    report = runner.run_points(
        name=name, kind="validation", spec=spec, scenarios=scenarios, engines=[engine],
        engine_options={engine: runtime.get(engine, {})}, registry=registry, out=out,
        executor=executor, progress=progress, chash=chash)
    table = report.table.to_pylist() if report.table is not None else []
    by_key = {r["scenario_key"]: r for r in table}
    rows = []
    for e in items.requests:
        row = by_key.get(runner.scenario_key(e.scenario)) or {}
        for _, quantity in REQUEST_QUANTITIES:
            observed = e.observed[quantity]
            value = row.get(quantity)
            predicted = float(value) if isinstance(value, int | float) else math.nan
            valid = observed > 0 and math.isfinite(predicted)
            rows.append({
                "source": items.source, "engine": engine, "ident": e.ident, "group": e.group,
                "scenario": e.scenario.describe(), "workload": e.scenario.workload,
                "quantity": quantity, "observed": observed, "predicted": predicted,
                "ape_pct": abs(predicted - observed) / observed * 100.0 if valid else math.nan,
                "signed_error_pct": (predicted / observed - 1.0) * 100.0 if valid else math.nan,
                "limit": row.get("limit_resource"), "n": e.n,
                "noise_cv_pct": e.variation[quantity] * 100.0})
    return pd.DataFrame(rows, columns=REQUEST_ITEM_COLUMNS), report.failed
