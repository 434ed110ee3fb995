"""Cross-validation of the calibration: held-out error, not only in-sample error.

Splits come from scikit-learn's :class:`~sklearn.model_selection.LeaveOneGroupOut`
over evidence groups:

- **leave one experiment out** (``experiments``): each dataset experiment
  (baseline, baseline-optimized, buffer, crypto, perf) and each seed's
  published points in turn is removed from the fit — *including* from the
  stage-A CPU regressions — and predicted by models fitted on the rest;
- **leave one implementation pair out** (``pairs``): each (server, client)
  pair's cells are removed and predicted from the others, so the pair's own
  interplay effect is unknown to the model (it falls back to the server and
  client effects) — the honest error for a pair never measured.

Folds start from the full fit (warm start) and run fewer iterations, except
the parameters that no remaining evidence informs (a variant or a pair effect
only held-out items involve): those start from their priors, so the fold does
not inherit what the full fit learnt from the items it holds out. The perf
traces, being runs of the ``perf`` experiment, leave with it. The result is the
absolute percentage error of every held-out item.

One input stays in every fold: seed 001's Table 3, which shapes the crypto
cost by packet size for every stack (no other evidence separates crypto per
packet from per byte). Seed 001's held-out goodputs are therefore predicted
with their own document's crypto table; its Table 3 findings are checked
separately (``repro-mukherjee25-table3-crypto``), not here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from quiclab.calibration.fit import Calibrator, Frames


def _fold(frames: Frames, full: Calibrator, exclude: tuple[str, ...], max_nfev: int,
          drop_pair: str | None = None, fold_kind: str = "",
          models_dir: Path | None = None) -> pd.DataFrame:
    # requests=False: the folds score bulk goodput only; request terms add nothing here.
    cal = Calibrator(cpus=full.cpus, exclude=exclude, max_nfev=max_nfev,
                     warm_start={k: v for k, v in full.theta_by_name_.items()
                                 if not (drop_pair and k == f"P|{drop_pair}")},
                     requests=False)
    cal.fit(frames)
    ev = cal.report_.evidence
    held = ev[~ev["in_fit"]].copy()
    held["fold_kind"] = fold_kind
    _describe_held(cal, held)
    if models_dir is not None:
        # The fold's own models, so that other engines can predict its held-out
        # items later (quiclab.calibration.intervals: residuals per engine).
        cal.write(models_dir)
        held["fold_models"] = str(models_dir)
    return held


def _describe_held(cal: Calibrator, held: pd.DataFrame) -> None:
    """Add to ``held`` (in place) what the fold's model said about each held-out item:
    the engine, its limiting resource (the regime), every resource's rate and the
    Scenario it predicted (JSON), and which of the item's conditions lie inside the
    fold's own evidence (:mod:`quiclab.models.domain`)."""
    from quiclab.models.domain import Domain
    from quiclab.sim.analytic import AnalyticEngine
    from quiclab.sim.analytic.core import LIMIT_NAMES, RESOURCES

    items = [e for e in cal.all_evidence_ if cal._excluded(e)]
    scenarios = cal._scenarios(cal.theta_, items)
    resolved, out = AnalyticEngine(cal.registry_).evaluate(scenarios)
    held["engine"] = "analytic"
    held["limit"] = [LIMIT_NAMES[int(k)] for k in out.limit]
    held["rates_mbps"] = [json.dumps({name: float(out.rates_bps[i, k]) / 1e6
                                      for k, name in enumerate(RESOURCES)}, sort_keys=True)
                          for i in range(len(items))]
    held["scenario"] = [json.dumps(s.to_dict(), sort_keys=True) for s in scenarios]
    domain = Domain.from_scenarios(cal._scenarios(cal.theta_, cal.evidence_), cal.cpus)
    checks = [domain.check(s, cal.cpus) for s in scenarios]
    held["pair_in_evidence"] = [c.pair_measured for c in checks]
    held["cpu_in_evidence"] = [c.cpu_measured for c in checks]
    held["extrapolated"] = [c.line() for c in checks]
    held["extrapolated_fields"] = [",".join(c.names) for c in checks]
    held["pair_fields"] = [",".join(c.pair_fields) for c in checks]
    held["extrapolation"] = [c.distance for c in checks]
    held["cpu_scaled"] = [r.cpu.target != r.cpu.reference for r in resolved]


def leave_one_experiment_out(frames: Frames, full: Calibrator, max_nfev: int = 60,
                             progress: Callable[[str], None] | None = None,
                             models_dir: Path | None = None) -> pd.DataFrame:
    """Held-out APE per item when each evidence group is left out in turn.

    ``models_dir``: write each fold's models to ``models_dir/<group>``."""
    from sklearn.model_selection import LeaveOneGroupOut

    groups = np.array([e.group for e in full.all_evidence_])
    out = []
    for _train, test in LeaveOneGroupOut().split(groups, groups=groups):
        group = str(groups[test[0]])
        if progress:
            progress(f"cross-validation: leaving out {group} ({len(test)} items)")
        held = _fold(frames, full, (group,), max_nfev, fold_kind="experiments",
                     models_dir=models_dir / group if models_dir else None)
        held["fold"] = group
        out.append(held)
    return pd.concat(out, ignore_index=True)


def leave_one_pair_out(frames: Frames, full: Calibrator, max_nfev: int = 25,
                       progress: Callable[[str], None] | None = None,
                       models_dir: Path | None = None) -> pd.DataFrame:
    """Held-out APE of each dataset pair's cells with the pair's effect unknown.

    ``models_dir``: write each fold's models to ``models_dir/<server>_<client>``."""
    from sklearn.model_selection import LeaveOneGroupOut

    cells = [e for e in full.all_evidence_ if e.source == "dataset"]
    pairs = np.array([f"{e.scenario.server.split('@')[0]}|{e.scenario.client.split('@')[0]}"
                      for e in cells])
    out = []
    splits = list(LeaveOneGroupOut().split(pairs, groups=pairs))
    for i, (_train, test) in enumerate(splits, 1):
        pair = str(pairs[test[0]])
        if progress:
            progress(f"cross-validation: leaving out pair {pair} ({i}/{len(splits)})")
        held = _fold(frames, full, (f"pair:{pair}",), max_nfev, drop_pair=pair,
                     fold_kind="pairs",
                     models_dir=models_dir / pair.replace("|", "_").replace("+", "_")
                     if models_dir else None)
        held["fold"] = pair
        out.append(held)
    return pd.concat(out, ignore_index=True)


def summarise(held: pd.DataFrame, by: str = "fold") -> pd.DataFrame:
    """Median and 95th-percentile APE per fold and overall."""
    rows = []
    for key, g in held.groupby(by):
        rows.append({by: key, "items": len(g), "median_ape_pct": g["ape_pct"].median(),
                     "p95_ape_pct": g["ape_pct"].quantile(0.95)})
    rows.append({by: "ALL", "items": len(held), "median_ape_pct": held["ape_pct"].median(),
                 "p95_ape_pct": held["ape_pct"].quantile(0.95)})
    return pd.DataFrame(rows)
