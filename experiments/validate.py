"""``quiclab validate``: how well each engine predicts every measurement the catalog holds.

Sources (the Evidence of :mod:`quiclab.calibration.evidence`, so validation
and calibration see the same scenarios):

- ``published`` — the seeds' stated bulk goodputs (``published_points``);
- ``dataset`` — medians of the QIR-10G cells (``runs`` with source ``qir10g``);
- ``fresh`` — cells of this host's testbed runs (``runs`` with source ``fresh``).

Each engine predicts each source's scenarios through the sweep runner
(cached, resumable). The report gives per source and engine the median and
95th-percentile absolute percentage error (APE = |predicted − observed| /
observed), the worst cases, and which seed findings are reproduced (from
``quiclab reproduce``'s ``findings.csv``): ``validation.md``,
``validation.html`` (plots embedded) and ``validation.csv``. Fresh goodput cells are
also summarised per engine, experiment and server stack, with the median noise CV
beside each error (``fresh-by-stack.csv`` and a section listing every cell).

Fresh request-workload runs (``workload`` = ``requests`` or ``handshakes``)
are not goodput cells: each cell (setting and pair, median over its
repetitions) is compared on requests/s, completion time and latency p50/p99
(:data:`REQUEST_QUANTITIES`), with the repetitions' coefficient of variation
beside each error, for every engine asked for; an engine that does not model
request workloads gives NaN and is counted as not predicted
(``requests.csv``, ``requests-summary.csv`` and a section of the report).
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quiclab.errors import DataError
from quiclab.experiments import runner

SOURCES = ("published", "dataset", "fresh")
WORST = 8
#: What a request-workload cell is compared on: (runs column, Prediction field).
REQUEST_QUANTITIES = (("requests_per_s", "requests_per_s"), ("runtime_s", "completion_s"),
                      ("latency_p50_ms", "latency_p50_ms"),
                      ("latency_p99_ms", "latency_p99_ms"))
REQUEST_ITEM_COLUMNS = ["source", "engine", "ident", "group", "scenario", "workload",
                        "quantity", "observed", "predicted", "ape_pct", "signed_error_pct",
                        "limit", "n", "noise_cv_pct"]


@dataclass(frozen=True)
class RequestEvidence:
    """A cell of fresh request-workload runs: the scenario run and the medians measured."""

    scenario: Any  # Scenario
    ident: str
    group: str
    n: int
    observed: dict[str, float]  # Prediction field → median over the repetitions
    cv: dict[str, float]  # Prediction field → coefficient of variation (NaN below 2 runs)


@dataclass
class SourceItems:
    source: str
    evidence: list[Any]  # calibration Evidence
    skipped: list[tuple[str, str]]
    requests: list[RequestEvidence] = field(default_factory=list)
    #: Fresh runs: the host's background load per experiment (fresh.background_load).
    load: pd.DataFrame | None = None
    #: Fresh cells: each one's session and probed state (fresh_sessions.probed_evidence),
    #: and the cells as predicted without the probe (``--probe-scaling both``).
    states: pd.DataFrame | None = None
    unscaled: list[Any] | None = None


def _is_bulk(runs: pd.DataFrame) -> pd.Series:
    """Which runs are bulk transfers (a catalog without the workload column has only those)."""
    if "workload" not in runs.columns:
        return pd.Series(True, index=runs.index)
    return runs["workload"].isna() | (runs["workload"] == "bulk")


def _sender_cc(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the controller each sender actually ran: a stack with only one
    (testbed/stacks.py; quic-go runs Reno, though its runs recorded before 2026-11-26
    say cubic) gets that one whatever the run recorded."""
    from quiclab.testbed.stacks import STACKS

    if "cc" not in runs.columns or "server_impl" not in runs.columns:
        return runs
    only = {name: stack.ccs[0] for name, stack in STACKS.items() if len(stack.ccs) == 1}
    actual = runs["server_impl"].map(only)
    if not actual.notna().any():
        return runs
    return runs.assign(cc=actual.where(actual.notna(), runs["cc"]))


def _fresh_bulk_cells(runs: pd.DataFrame, known: Any,
                      defaults: dict[str, Any] | None) -> list[Any]:
    """Goodput cells of fresh bulk runs, each with the congestion controller its runs used
    (x/net/quic and the Python stacks run NewReno, which the Scenario default, cubic,
    would contradict)."""
    from quiclab.calibration.evidence import dataset_cells

    runs = _sender_cc(runs)
    if "cc" not in runs.columns or runs["cc"].isna().all():
        out = dataset_cells(runs, source="fresh", known=known, defaults=defaults)
    else:
        out = []
        for cc, group in runs.groupby(runs["cc"].fillna(""), sort=True):
            cell_defaults = dict(defaults or {}) | ({"cc": cc} if cc else {})
            out += dataset_cells(group, source="fresh", known=known, defaults=cell_defaults)
    # veth hands the receiver what the sender wrote: a GSO super-packet arrives whole
    # (GRO's batch), single datagrams stay single (testbed README: ~1.0 packet per
    # receive without GSO, 10–44 with it). GRO without GSO batches nothing here.
    # (Kernel TCP's GRO is the veth's own, which the TCP models take as set.)
    tcp = {"tcp+tls", "tcp", "tcp+ktls"}
    return [replace(e, scenario=e.scenario.with_(gro=False))
            if e.scenario.gro and not e.scenario.gso and e.scenario.server not in tcp else e
            for e in out]


def request_cells(runs: pd.DataFrame, known: Any, defaults: dict[str, Any] | None,
                  source: str = "fresh") -> list[RequestEvidence]:
    """One :class:`RequestEvidence` per (experiment, setting, pair) of ok request runs.

    The Scenario is the one the testbed ran (workload, request size and count,
    connections, streams, path), on this host's CPU with ``defaults`` (the veth's
    base RTT and link) for what the runs leave empty.
    """
    from quiclab.sim.scenario import Scenario

    known = set(known)
    df = runs[(runs["status"] == "ok") & runs["requests_per_s"].notna()]
    out = []
    keys = ["experiment", "setting", "server_impl", "client_impl", "cc"]
    for (exp, setting, server, client, cc), cell in df.groupby(keys, dropna=False):
        if server not in known or client not in known:
            continue
        first = cell.iloc[0]
        # (The relay's capacity is for bulk cells through it: dataset_cells.)
        fields: dict[str, Any] = {k: v for k, v in (defaults or {}).items() if k != "relay_gbps"}
        fields.update({
            "server": server, "client": client, "app": "perf",
            "cpu": first["cpu"] if isinstance(first["cpu"], str) else "AMD EPYC 7543",
            "cipher": first["cipher"] if isinstance(first["cipher"], str) else "aes-ni",
            "workload": str(first["workload"]), "request_bytes": int(first["request_bytes"]),
            "requests": int(cell["requests"].median()),
            "connections": int(first["connections"]), "streams": int(first["streams"]),
            "transfer_bytes": int(first["filesize_bytes"]),
        })
        if isinstance(cc, str) and cc:
            fields["cc"] = cc
        for name in ("rcvbuf_bytes", "mtu_bytes"):
            if pd.notna(first[name]):
                fields[name] = int(first[name])
        for name in ("link_gbps", "rtt_ms", "loss_pct"):
            if cell[name].notna().any():
                fields[name] = float(cell[name].median())
        for name in ("gso", "gro"):
            if cell[name].notna().any():
                fields[name] = bool(cell[name].mode().iloc[0])
        observed, cv = {}, {}
        for column, quantity in REQUEST_QUANTITIES:
            values = pd.to_numeric(cell[column], errors="coerce").dropna()
            observed[quantity] = float(values.median()) if len(values) else math.nan
            cv[quantity] = float(values.std() / values.mean()) \
                if len(values) > 1 and values.mean() else math.nan
        out.append(RequestEvidence(Scenario.from_dict(fields), f"{exp}|{setting}", str(exp),
                                   len(cell), observed, cv))
    return out


def load_evidence(catalog_path: Path, sources: list[str] | None,
                  fresh_registry: Any = None, fresh_defaults: dict[str, Any] | None = None,
                  testbeds: Any = None, probe_scaling: str = "off") -> list[SourceItems]:
    """Evidence per source from the catalog; sources=None means every one with data.
    Published points sit on ``testbeds`` (the models' calibrated testbeds; the stated
    ones when None).

    Fresh runs are predicted with this host's models (``fresh_registry``), for
    the stacks those models cover, with the veth path's defaults; with
    ``probe_scaling`` "on" (or "both": also as the cells were, in ``unscaled``)
    each cell at its session's probed host state (fresh_sessions.probed_evidence).
    """
    from quiclab.calibration.evidence import dataset_cells, published_points
    from quiclab.calibration.fresh import background_load
    from quiclab.datasets.catalog import Catalog

    out = []
    with Catalog(catalog_path, read_only=True) as catalog:
        tables = catalog.tables()
        runs = catalog.df("SELECT * FROM runs") if "runs" in tables else pd.DataFrame()
        points = catalog.df("SELECT * FROM published_points") \
            if "published_points" in tables else pd.DataFrame()
    wanted = sources or list(SOURCES)
    for source in wanted:
        if source == "published":
            if points.empty:
                if sources:
                    raise DataError(catalog_path, "no published points (run `quiclab data "
                                                  "ingest`)", field="published_points")
                continue
            evidence, skipped = published_points(points, testbeds)
        else:
            kind = "qir10g" if source == "dataset" else "fresh"
            sub = runs[runs["source"] == kind] if not runs.empty else runs
            if sub.empty:
                if sources:
                    hint = "quiclab data ingest" if source == "dataset" else "quiclab testbed run"
                    raise DataError(catalog_path, f"no runs with source={kind!r} (run `{hint}`)",
                                    field="runs")
                continue
            if source == "fresh":
                if fresh_registry is None:
                    if sources:
                        raise DataError("--fresh-models", "no models for this host (run "
                                        "`quiclab calibrate --source fresh`)")
                    continue
                from quiclab.experiments.fresh_sessions import probed_evidence

                bulk = _is_bulk(sub)
                evidence = _fresh_bulk_cells(sub[bulk], fresh_registry.names(), fresh_defaults)
                requests = request_cells(sub[~bulk], fresh_registry.names(), fresh_defaults)
                missing = sorted(set(sub["server_impl"]) - set(fresh_registry.names()))
                skipped = [(name, "no fresh model for this stack") for name in missing]
                scaled, states = probed_evidence(evidence, sub[bulk], fresh_registry,
                                                 catalog_path)
                out.append(SourceItems(
                    source, scaled if probe_scaling in ("on", "both") else evidence, skipped,
                    requests, background_load(sub), states,
                    evidence if probe_scaling == "both" else None))
                continue
            else:
                evidence, skipped = dataset_cells(sub[_is_bulk(sub)], source=source), []
        out.append(SourceItems(source, evidence, skipped))
    return out


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
            # (unknown for a single run, whose Evidence carries cv = 0).
            "noise_cv_pct": e.cv * 100.0 if e.cv == e.cv and e.n > 1 else math.nan,
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
                "noise_cv_pct": e.cv[quantity] * 100.0})
    return pd.DataFrame(rows, columns=REQUEST_ITEM_COLUMNS), report.failed


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
    median/p95, signed error median and the median of the cells' noise CV."""
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


CONTROLLED_TEXT = (
    "Experiments that also ran each pair at the calibration setting in the same session "
    "(testbed/specs/fresh-validation-controlled.yaml) separate the host's state from the "
    "model: `control_ape_pct` is the control's error (drift between sessions on this shared "
    "machine, out of sample), `normalised_ape_pct` the knob cell's error after scaling a "
    "CPU-bound prediction by the CPU-bound control's observed / predicted goodput (other "
    "limits left as predicted) — the error of the model's response to the knob given the "
    "session's CPU speed. `ape_pct` is the plain error, as above. Cells whose setting the "
    "fresh calibration also runs (`calibrated`: GSO off alone, which fixes each stack's "
    "system-call share) are not held out in kind: the knob columns leave them out and "
    "`median_calibrated_ape_pct` shows them apart.")

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
    the repetitions' CV) and each engine's prediction."""
    fresh = items[items["source"] == "fresh"]
    if fresh.empty:
        return pd.DataFrame()
    shown = fresh.assign(setting=fresh["ident"].map(_setting_label))
    return shown[["engine", "group", "server", "client", "setting", "n", "observed_mbps",
                  "noise_cv_pct", "predicted_mbps", "signed_error_pct", "limit"]] \
        .sort_values(["group", "server", "client", "setting", "engine"])


def _fmt_table(frame: pd.DataFrame, floats: int = 1) -> str:
    from quiclab.experiments.reproduce import markdown_table

    shown = frame.copy()
    for c in shown.columns:
        if shown[c].dtype.kind == "f":
            shown[c] = shown[c].map(lambda x: "" if pd.isna(x) else f"{x:.{floats}f}")
    return markdown_table(shown, list(shown.columns), list(shown.columns))


def plot_items(items: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(items.groupby(["source", "engine"], sort=False))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for (source, engine), g in groups:
        ok = g.dropna(subset=["predicted_mbps"])
        axes[0].scatter(ok["observed_mbps"], ok["predicted_mbps"], s=12, alpha=0.7,
                        label=f"{source} · {engine}")
        ape = np.sort(ok["ape_pct"].to_numpy())
        if len(ape):
            axes[1].plot(ape, np.arange(1, len(ape) + 1) / len(ape), label=f"{source} · {engine}")
    lim = [max(10.0, float(items["observed_mbps"].min()) * 0.8),
           float(np.nanmax([items["observed_mbps"].max(), items["predicted_mbps"].max()])) * 1.2]
    axes[0].plot(lim, lim, "k--", lw=0.8)
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("observed goodput (Mbit/s)")
    axes[0].set_ylabel("predicted goodput (Mbit/s)")
    axes[0].legend(fontsize=7)
    axes[1].set_xscale("symlog", linthresh=1)
    axes[1].set_xlabel("absolute percentage error (%)")
    axes[1].set_ylabel("fraction of items")
    axes[1].axvline(10, color="grey", lw=0.5)
    axes[1].axvline(25, color="grey", lw=0.5)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'


def _requests_md(summary: pd.DataFrame, items: pd.DataFrame) -> list[str]:
    shown = items[["engine", "ident", "quantity", "observed", "predicted", "signed_error_pct",
                   "noise_cv_pct", "n", "limit"]]
    return ["## Request workloads (fresh)", "",
            "Fresh request and handshake runs per cell (median of its repetitions) against "
            "each engine's prediction; `noise_cv_pct` is the repetitions' coefficient of "
            "variation, `runtime_s` is compared with the predicted completion time.", "",
            _fmt_table(summary), "", _fmt_table(shown, floats=2), ""]


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


def _coverage_md(tables: dict[str, pd.DataFrame]) -> list[str]:
    from quiclab.calibration.intervals import COVERAGE_TEXT

    if not tables:
        return ["## Predictive intervals: coverage of held-out items", "",
                "No model set here carries held-out residuals (`intervals.json`): run "
                "`quiclab calibrate --cv all` (and `--source fresh` with two sessions).", ""]
    miss = tables["outside"]
    shown = ["source", "regime", "fold", "ident", "observed_mbps", "predicted_mbps",
             "lo_90", "hi_90", "extrapolated_fields"]
    bad = tables["degenerate"]
    return ["## Predictive intervals: coverage of held-out items", "", COVERAGE_TEXT, "",
            _fmt_table(tables["coverage"], floats=2), "",
            "Per engine (each engine's residuals: the held-out items predicted again by it "
            "with their fold's models):", "", _fmt_table(tables["engines"], floats=2), "",
            f"### Items outside their 90 % band ({len(miss)}, judged fold by fold)", "",
            _fmt_table(miss[shown], floats=1) if len(miss) else "None.", "",
            "### Widest and narrowest 90 % bands, with what set them", "",
            _fmt_table(tables["extremes"], floats=3), "",
            f"Degenerate bands (zero width, or beyond ×/÷ 10 of the prediction): {len(bad)}.",
            ""]


def _written(path: Path) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))


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


def write_report(out: Path, summary: pd.DataFrame, items: pd.DataFrame,
                 findings: pd.DataFrame | None, repro_dir: Path,
                 skipped: dict[str, list[tuple[str, str]]],
                 requests: pd.DataFrame | None = None,
                 requests_summary: pd.DataFrame | None = None,
                 stale: str | None = None,
                 coverage: dict[str, pd.DataFrame] | None = None) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    coverage = coverage or {}
    for name, table in coverage.items():
        table.to_csv(out / f"coverage-{name}.csv", index=False)
    items.to_csv(out / "validation.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    has_requests = requests is not None and requests_summary is not None and len(requests)
    if has_requests:
        assert requests is not None and requests_summary is not None
        requests.to_csv(out / "requests.csv", index=False)
        requests_summary.to_csv(out / "requests-summary.csv", index=False)
    by_stack = summarise_fresh(items)
    cells = fresh_cells(items)
    if len(by_stack):
        by_stack.to_csv(out / "fresh-by-stack.csv", index=False)
    knobs = controlled_knobs(items)
    controlled = summarise_controlled(knobs)
    if len(knobs):
        knobs.to_csv(out / "fresh-controlled.csv", index=False)
    png = out / "validation.png"
    if len(items.dropna(subset=["predicted_mbps"])):
        plot_items(items, png)
    worst = items.dropna(subset=["ape_pct"]).sort_values("ape_pct", ascending=False) \
        .groupby(["source", "engine"], sort=False).head(WORST)
    md = ["# Validation report", "",
          "Absolute percentage error (APE) of predicted goodput against every measurement of "
          "each source, per engine. `items`: the source's evidence; `predicted`: those "
          "with a point value, over which the APE columns are taken (a published bound is "
          "checked as a violation, a CPU figure as utilisation, neither as an APE).", "",
          _fmt_table(summary) if len(summary) else "No goodput measurements.", ""]
    md += ["## Worst cases", "", _fmt_table(worst[["source", "engine", "ident", "scenario",
                                                    "observed_mbps", "predicted_mbps",
                                                    "signed_error_pct", "limit"]]), ""]
    md += _coverage_md(coverage)
    if len(by_stack):
        md += ["## Fresh runs per engine, experiment and stack", "",
               "Goodput cells of this host's testbed runs (median of each cell's "
               "repetitions); `fresh-calibration` is what the fresh models were fitted on, "
               "`fresh-validation` the held-out settings. `median_noise_cv_pct` is the "
               "median of the cells' coefficients of variation over repetitions.", "",
               _fmt_table(by_stack), "",
               "### Every fresh cell", "", _fmt_table(cells), ""]
    if len(knobs):
        md += ["## Fresh knobs against a same-session control", "",
               CONTROLLED_TEXT, "", _fmt_table(controlled), "",
               _fmt_table(knobs[["engine", "server", "setting", "calibrated", "observed_mbps",
                                 "predicted_mbps", "normalised_mbps", "ape_pct",
                                 "normalised_ape_pct", "control_ape_pct"]]), ""]
    for source, reasons in skipped.items():
        if reasons:
            md += [f"{len(reasons)} {source} points are not validated (bounds, duplicates, "
                   "unmodelled conditions); see validation.html.", ""]
    if has_requests:
        assert requests is not None and requests_summary is not None
        md += _requests_md(requests_summary, requests)
    verdict_md = ""
    if findings is not None and not findings.empty:
        counts = findings["verdict"].value_counts().to_dict()
        verdict_md = (f"{len(findings)} findings: {counts.get('pass', 0)} pass, "
                      f"{counts.get('fail', 0)} fail, {counts.get('not covered', 0)} not covered")
        per = findings.groupby(["reproduction", "engine"])["verdict"].value_counts() \
            .unstack(fill_value=0).reset_index()
        if "band_90" in findings:
            # Beside the tolerance verdicts, not replacing them: how many findings'
            # published values lie within the prediction's 90 % band.
            band = findings["band_90"].fillna("")
            per = per.merge(findings.assign(band=band).groupby(["reproduction", "engine"])[
                "band"].agg(within_90_band=lambda b: int((b == "consistent").sum()),
                            outside_90_band=lambda b: int((b == "outside").sum()))
                .reset_index(), on=["reproduction", "engine"])
            verdict_md += (f"; consistent within the 90 % band: "
                           f"{int((band == 'consistent').sum())} of "
                           f"{int((band != '').sum())} with a predicted goodput value")
        md += ["## Seed findings reproduced", "",
               verdict_md + f" (from {repro_dir}, written {_written(repro_dir / 'findings.csv')})."
               + (f" **Stale:** {stale}." if stale else ""), "", _fmt_table(per), ""]
    else:
        md += ["## Seed findings reproduced", "",
               f"No reproduction results in {repro_dir}: run `quiclab reproduce --all` "
               "(or `quiclab validate --reproduce`).", ""]
    if png.is_file():
        md += [f"![validation]({png.name})", ""]
    md_path = out / "validation.md"
    md_path.write_text("\n".join(md) + "\n")
    # HTML: the same content with tables and every plot embedded.
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>quiclab validation"
             "</title><style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
             "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
             "padding:2px 6px}.pass{background:#dff0d8}.fail{background:#f2dede}</style>"
             "</head><body><h1>Validation report</h1>",
             summary.to_html(index=False, float_format=lambda x: f"{x:.1f}")]
    if png.is_file():
        parts.append(_img(png))
    parts += ["<h2>Worst cases</h2>", worst.to_html(index=False,
                                                    float_format=lambda x: f"{x:.1f}")]
    if coverage:
        from quiclab.calibration.intervals import COVERAGE_TEXT

        parts += ["<h2>Predictive intervals: coverage of held-out items</h2>",
                  f"<p>{html.escape(COVERAGE_TEXT)}</p>",
                  coverage["coverage"].to_html(index=False, float_format=lambda x: f"{x:.2f}"),
                  "<h3>Items outside their 90 % band</h3>",
                  coverage["outside"].to_html(index=False, float_format=lambda x: f"{x:.3g}"),
                  "<h3>Widest and narrowest 90 % bands</h3>",
                  coverage["extremes"].to_html(index=False, float_format=lambda x: f"{x:.3g}")]
    if len(by_stack):
        parts += ["<h2>Fresh runs per engine, experiment and stack</h2>",
                  by_stack.to_html(index=False, float_format=lambda x: f"{x:.1f}"),
                  "<h3>Every fresh cell</h3>",
                  cells.to_html(index=False, float_format=lambda x: f"{x:.1f}")]
    if len(knobs):
        parts += ["<h2>Fresh knobs against a same-session control</h2>",
                  f"<p>{html.escape(CONTROLLED_TEXT)}</p>",
                  controlled.to_html(index=False, float_format=lambda x: f"{x:.1f}"),
                  knobs.to_html(index=False, float_format=lambda x: f"{x:.1f}")]
    if has_requests:
        assert requests is not None and requests_summary is not None
        parts += ["<h2>Request workloads (fresh)</h2>",
                  requests_summary.to_html(index=False, float_format=lambda x: f"{x:.1f}"),
                  requests.to_html(index=False, float_format=lambda x: f"{x:.2f}")]
    for source, reasons in skipped.items():
        if reasons:
            parts.append(f"<h3>{html.escape(source)}: points not validated</h3>")
            parts.append(pd.DataFrame(reasons, columns=["point_id", "reason"])
                         .to_html(index=False))
    parts.append("<h2>Seed findings reproduced</h2>")
    if findings is not None and not findings.empty:
        parts.append(f"<p>{html.escape(verdict_md)}</p>")
        if stale:
            parts.append(f"<p><strong>Stale:</strong> {html.escape(stale)}.</p>")
        columns = ["reproduction", "finding", "engine", "tolerance", "predicted",
                   "published", "verdict"] + [c for c in ("band_90", "band") if c in findings]
        table = findings[columns].to_html(index=False)
        table = table.replace("<td>pass</td>", "<td class='pass'>pass</td>") \
            .replace("<td>fail</td>", "<td class='fail'>fail</td>")
        parts.append(table)
        for name in sorted(findings["reproduction"].unique()):
            image = repro_dir / name / f"{name}.png"
            if image.is_file():
                parts += [f"<h3>{html.escape(name)}</h3>", _img(image)]
    else:
        parts.append(f"<p>No reproduction results in {html.escape(str(repro_dir))}.</p>")
    parts.append("</body></html>")
    html_path = out / "validation.html"
    html_path.write_text("\n".join(parts))
    return md_path, html_path


def main_validate(args: argparse.Namespace) -> int:
    import json

    from quiclab.experiments.cli import _executor, runtime_options
    from quiclab.models.registry import Registry

    registry = Registry.load(args.paths.models)
    fresh_dir = Path(args.fresh_models) if getattr(args, "fresh_models", None) \
        else args.paths.data_dir / "models-fresh"
    fresh_registry = fresh_defaults = None
    if fresh_dir.is_dir() and any(p.name != "cpus.json" for p in fresh_dir.glob("*.json")):
        fresh_registry = Registry.load(fresh_dir)
        if (fresh_dir / "cpus.json").is_file():
            meta = json.loads((fresh_dir / "cpus.json").read_text())
            fresh_defaults = {"base_rtt_us": float(meta.get("base_rtt_us", 100.0)),
                              "link_gbps": float(meta.get("link_gbps", 40.0))}
            if meta.get("relay_gbps"):
                # Relayed cells' bottleneck (calibration/fresh.py relay_capacity).
                fresh_defaults["relay_gbps"] = float(meta["relay_gbps"])
    executor = _executor(args)
    repro_dir = Path(args.reproductions) if args.reproductions \
        else args.paths.reports / "reproductions"
    if getattr(args, "reproduce", False):
        from quiclab.experiments.reproduce import main_reproduce

        ns = argparse.Namespace(**{**vars(args), "name": None, "all": True, "list": False,
                                   "out": str(repro_dir), "no_catalog": False})
        main_reproduce(ns)
    probe_scaling = getattr(args, "probe_scaling", "on")
    sources = load_evidence(args.catalog, list(dict.fromkeys(args.source))
                            if args.source else None, fresh_registry, fresh_defaults,
                            registry.testbeds, probe_scaling=probe_scaling)
    engines = list(dict.fromkeys(args.engine)) if args.engine else ["analytic"]
    frames, request_frames, noprobe_frames = [], [], []
    for items in sources:
        for engine in engines:
            reg = fresh_registry if items.source == "fresh" else registry
            if items.evidence:
                frame, failed = predict_source(items, engine, reg, executor,
                                               args.paths.data_dir, runtime_options(args),
                                               not args.quiet)
                runner.print_failures(runner.RunReport(out=Path("."), failed=failed))
                frames.append(frame)
            if items.unscaled:
                frame, failed = predict_source(replace(items, evidence=items.unscaled),
                                               engine, reg, executor, args.paths.data_dir,
                                               runtime_options(args), not args.quiet)
                runner.print_failures(runner.RunReport(out=Path("."), failed=failed))
                noprobe_frames.append(frame)
            if items.requests:
                frame, failed = predict_requests(items, engine, reg, executor,
                                                 args.paths.data_dir, runtime_options(args),
                                                 not args.quiet)
                runner.print_failures(runner.RunReport(out=Path("."), failed=failed))
                request_frames.append(frame)
    if not frames and not request_frames:
        raise DataError(args.catalog, "nothing to validate (run `quiclab data ingest`)")
    items_df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["source", "engine", "ident", "group", "scenario", "server", "client",
                 "observed_mbps",
                 "predicted_mbps", "ape_pct", "signed_error_pct", "limit", "n",
                 "noise_cv_pct"])
    summary = summarise(items_df)
    requests_df = pd.concat(request_frames, ignore_index=True) if request_frames else None
    requests_summary = summarise_requests(requests_df) if requests_df is not None else None
    findings_path = repro_dir / "findings.csv"
    findings = pd.read_csv(findings_path) if findings_path.is_file() else None
    stale = stale_reason(repro_dir, registry) if findings is not None else None
    out = Path(args.out) if args.out else args.paths.reports / "validation"
    from quiclab.paths import writable_folder

    writable_folder(out, "--out")
    coverage = coverage_report({"main": registry, "fresh": fresh_registry},
                               [s.source for s in sources])
    md, html_path = write_report(out, summary, items_df, findings, repro_dir,
                                 {s.source: s.skipped for s in sources},
                                 requests_df, requests_summary, stale, coverage)
    from quiclab.stamp import write_stamp

    write_stamp(out)
    if len(summary):
        print(_fmt_table(summary))
    if coverage:
        print("\npredictive intervals: coverage of held-out items (cross-conformal; nominal "
              "50 and 90 %):\n" + _fmt_table(coverage["coverage"], floats=2))
        print(f"  {len(coverage['outside'])} items outside their 90 % band, "
              f"{len(coverage['degenerate'])} degenerate bands (coverage-*.csv)")
    by_stack = summarise_fresh(items_df)
    if len(by_stack):
        print("\nfresh runs per engine, experiment and stack:\n" + _fmt_table(by_stack))
    controlled = summarise_controlled(controlled_knobs(items_df))
    if len(controlled):
        print("\nfresh knobs against a same-session control (APE %: as predicted, scaled by "
              "the session's control, and the controls' own):\n" + _fmt_table(controlled))
    for s in sources:
        if s.load is not None and len(s.load):
            s.load.to_csv(out / "fresh-background.csv", index=False)
            print("\nbusy cores of this host before each fresh transfer (other work; CPU-bound "
                  "runs of a busy session are slower than any model says):\n"
                  + _fmt_table(s.load, floats=2))
    fresh_items = next((s for s in sources if s.source == "fresh"), None)
    if fresh_items is not None and fresh_items.states is not None and noprobe_frames:
        from quiclab.experiments.fresh_sessions import write_sessions

        print(write_sessions(out, items_df, pd.concat(noprobe_frames, ignore_index=True),
                             fresh_items.states, args.catalog))
    if requests_df is not None and requests_summary is not None:
        print("\nrequest workloads (fresh):\n" + _fmt_table(requests_summary) + "\n")
        print(_fmt_table(requests_df[["engine", "ident", "quantity", "observed", "predicted",
                                      "signed_error_pct", "noise_cv_pct", "n"]], floats=2))
    if findings is not None and not findings.empty:
        counts = findings["verdict"].value_counts().to_dict()
        band = findings["band_90"].fillna("") if "band_90" in findings else pd.Series([], dtype=str)
        within = (f"; within the 90 % band: {int((band == 'consistent').sum())} of "
                  f"{int((band != '').sum())}" if len(band) else "")
        print(f"\nseed findings: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
              f"{counts.get('not covered', 0)} not covered{within} ({findings_path}, written "
              f"{_written(findings_path)})" + (f"\n  stale: {stale}" if stale else ""))
    print(f"\nreport: {html_path}\n        {md}", file=sys.stdout)
    return 0
