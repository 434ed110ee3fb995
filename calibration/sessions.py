"""Fresh sessions as folds: each session predicted by models fitted on another session.

A *session* is a run of the testbed on this host without a long pause: fresh runs
whose start times (``start_ns``) follow each other within :data:`SESSION_GAP_S`.
Sessions differ in what no model input knows (the shared machine's load, the
kernel's state), so the honest error of this host's models on a new day is
that of a session predicted by models fitted on another one. For every session
with bulk cells, :func:`session_residuals` fits this host's models
(:func:`quiclab.calibration.fresh.fit_fresh`) on the calibration runs of the
nearest other session (the previous one when there is one), predicts the
session's cells with the analytic engine and returns held-out rows in the
shape :mod:`quiclab.calibration.cv` gives (``fold_kind`` = ``sessions``), with
each cell's place in the fitting session's evidence (:mod:`quiclab.models.domain`).
``quiclab calibrate --source fresh`` turns them into the fresh models'
``intervals.json`` (:mod:`quiclab.calibration.intervals`).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: A pause longer than this between two fresh runs starts a new session (s).
SESSION_GAP_S = 2 * 3600.0


def session_labels(runs: pd.DataFrame, gap_s: float = SESSION_GAP_S) -> pd.Series:
    """A session label per run (``session-<first start, UTC>``), from ``start_ns``.

    Runs without a start time belong to the session of the run before them in
    ``run_id`` order (one session when none has a start time)."""
    if runs.empty:
        return pd.Series([], dtype=str, index=runs.index)
    start = pd.to_numeric(runs.get("start_ns", pd.Series(np.nan, index=runs.index)),
                          errors="coerce")
    order = pd.DataFrame({"start": start, "run_id": runs["run_id"].astype(str)},
                         index=runs.index)
    order["filled"] = order.sort_values("run_id")["start"].ffill().bfill()
    order = order.sort_values(["filled", "run_id"], na_position="first")
    labels = {}
    current, last = "", None
    for idx, value in order["filled"].items():
        if last is None or (np.isfinite(value) and np.isfinite(last)
                            and (value - last) / 1e9 > gap_s) or not current:
            stamp = pd.to_datetime(value, unit="ns", utc=True).strftime("%Y-%m-%dT%H:%M") \
                if np.isfinite(value) else "undated"
            current = f"session-{stamp}"
        labels[idx] = current
        last = value if np.isfinite(value) else last
    return pd.Series(labels).reindex(runs.index)


def session_residuals(runs: pd.DataFrame, points: pd.DataFrame, host: Any,
                      progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Held-out rows: every session's bulk cells predicted by another session's models.

    Empty when fewer than two sessions exist or no other session has calibration
    runs. ``points``: the published points (seed 001 Table 3 shapes crypto)."""
    from quiclab.calibration.fresh import CALIBRATION_EXPERIMENT, fit_fresh, write_fresh
    from quiclab.experiments.validate import _fresh_bulk_cells, _is_bulk
    from quiclab.models.domain import Domain
    from quiclab.models.registry import Registry
    from quiclab.sim.analytic import AnalyticEngine
    from quiclab.sim.analytic.core import LIMIT_NAMES

    if runs.empty:
        return pd.DataFrame()
    runs = runs.assign(session=session_labels(runs))
    calibration = runs[(runs["experiment"] == CALIBRATION_EXPERIMENT)
                       & (runs["status"] == "ok")]
    fitted_on = sorted(calibration["session"].unique())
    sessions = sorted(runs["session"].unique())
    out = []
    for session in sessions:
        others = [s for s in fitted_on if s != session]
        if not others:
            continue
        earlier = [s for s in others if s < session]
        source = earlier[-1] if earlier else others[0]
        try:
            fit = fit_fresh(runs[runs["session"] == source], points, host)
        except ValueError as err:
            if progress:
                progress(f"sessions: {source} cannot fit models ({err})")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            write_fresh(fit, Path(tmp))
            registry = Registry.load(Path(tmp))
        defaults = {"base_rtt_us": fit.base_rtt_us, "link_gbps": 40.0}
        if fit.relay_gbps:
            defaults["relay_gbps"] = fit.relay_gbps
        held_runs = runs[(runs["session"] == session) & _is_bulk(runs)]
        cells = _fresh_bulk_cells(held_runs, registry.names(), defaults)
        if not cells:
            continue
        basis = calibration[calibration["session"] == source]
        evidence = _fresh_bulk_cells(basis[_is_bulk(basis)], registry.names(), defaults)
        domain = Domain.from_evidence(evidence, registry.cpus)
        _resolved, predicted = AnalyticEngine(registry).evaluate([e.scenario for e in cells])
        for k, e in enumerate(cells):
            check = domain.check(e.scenario, registry.cpus)
            goodput = float(predicted.goodput_bps[k]) / 1e6
            out.append({
                "ident": f"{session}|{e.ident}", "source": "fresh", "group": e.group,
                "server": e.scenario.server, "client": e.scenario.client,
                "observed_mbps": e.goodput_mbps, "predicted_mbps": goodput,
                "ape_pct": abs(goodput / e.goodput_mbps - 1.0) * 100.0, "bound": "",
                "n": e.n, "cv": e.cv, "in_fit": False, "fold_kind": "sessions",
                "fold": session, "fitted_on": source, "engine": "analytic",
                "limit": LIMIT_NAMES[int(predicted.limit[k])],
                "scenario": json.dumps(e.scenario.to_dict(), sort_keys=True),
                "pair_in_evidence": check.pair_measured, "cpu_in_evidence": check.cpu_measured,
                "extrapolated": check.line(), "extrapolated_fields": ",".join(check.names),
                "pair_fields": ",".join(check.pair_fields), "extrapolation": check.distance,
                # This host's models are fitted on this host's CPU.
                "cpu_scaled": False})
        if progress:
            progress(f"sessions: {session} ({len(cells)} cells) predicted by models of {source}")
    return pd.DataFrame(out)
