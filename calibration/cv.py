"""Cross-validation of the calibration: held-out error, not only in-sample error.

Splits come from scikit-learn's :class:`~sklearn.model_selection.LeaveOneGroupOut`
over evidence groups:

- **leave one experiment out** (``experiments``): each dataset experiment
  (baseline, baseline-optimized, buffer, crypto, perf) and each seed's
  published points in turn is removed from the fit — *including* from the
  stage-A CPU regressions — and predicted by models fitted on the rest;
- **leave one testbed out** (``testbeds``): each testbed's runs and points
  (QIR-10G's hosts with seed 002, seed 000's, seed 001's, UCLouvain's, this
  host's fresh runs) in turn, with everything only they inform — the honest
  error for a user's own testbed, and the headline figure;
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
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from quiclab.calibration.fit import Calibrator, Frames


def _fold(frames: Frames, full: Calibrator, exclude: tuple[str, ...], max_nfev: int,
          drop_pair: str | None = None, fold_kind: str = "",
          models_dir: Path | None = None) -> pd.DataFrame:
    return _fit_fold(frames, full, exclude, max_nfev, drop_pair, fold_kind, models_dir)[0]


def _fit_fold(frames: Frames, full: Calibrator, exclude: tuple[str, ...], max_nfev: int,
              drop_pair: str | None = None, fold_kind: str = "",
              models_dir: Path | None = None) -> tuple[pd.DataFrame, Calibrator]:
    # requests=False: the folds score bulk goodput only; request terms add nothing here.
    cal = Calibrator(cpus=full.cpus, exclude=exclude, max_nfev=max_nfev,
                     warm_start={k: v for k, v in full.theta_by_name_.items()
                                 if not (drop_pair and k == f"P|{drop_pair}")},
                     requests=False)
    cal.fit(frames)
    ev = cal.report_.evidence
    # The fold's held-out items: what its exclusion removed (evidence no fit uses is held
    # out of every fold, but belongs to the fold that names its group or testbed).
    held = ev[ev["held_out"]].copy()
    # Whether the fit saw both ends' implementations (any build or version) on other
    # evidence: an item whose stack only held-out evidence measured tests a new
    # stack, not (only) a new testbed or experiment.
    seen = {name.split("@")[0] for e in cal.evidence_
            for name in (e.scenario.server, e.scenario.client)}
    held["stacks_seen"] = (held["server"].str.split("@").str[0].isin(seen)
                           & held["client"].str.split("@").str[0].isin(seen))
    held["fold_kind"] = fold_kind
    _describe_held(cal, held)
    if models_dir is not None:
        # The fold's own models, so that other engines can predict its held-out
        # items later (quiclab.calibration.intervals: residuals per engine).
        cal.write(models_dir)
        held["fold_models"] = str(models_dir)
    return held, cal


def _describe_held(cal: Calibrator, held: pd.DataFrame) -> None:
    """Add to ``held`` (in place) what the fold's model said about each held-out item:
    the engine, its limiting resource (the regime), every resource's rate and the
    Scenario it predicted (JSON), and which of the item's conditions lie inside the
    fold's own evidence (:mod:`quiclab.models.domain`)."""
    from quiclab.models.domain import Domain
    from quiclab.sim.analytic import AnalyticEngine
    from quiclab.sim.analytic.core import LIMIT_NAMES, RESOURCES

    items = [e for e in cal.all_evidence_ if cal.held_out(e)]
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
    held["testbed_in_evidence"] = [c.testbed_measured for c in checks]
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


def leave_one_testbed_out(frames: Frames, full: Calibrator, max_nfev: int = 60,
                          progress: Callable[[str], None] | None = None,
                          models_dir: Path | None = None) -> pd.DataFrame:
    """Held-out APE per item when each testbed is left out in turn: its runs (from
    the stage-A regressions on), its published points and everything fitted to
    them alone (its pair interplay, its hosts' speed, its variants) — the error a
    user should expect on their own, unseen testbed.

    ``models_dir``: write each fold's models to ``models_dir/<testbed>``."""
    from sklearn.model_selection import LeaveOneGroupOut

    groups = np.array([e.testbed for e in full.all_evidence_])
    out = []
    splits = list(LeaveOneGroupOut().split(groups, groups=groups))
    for i, (_train, test) in enumerate(splits, 1):
        testbed = str(groups[test[0]])
        if progress:
            progress(f"cross-validation: leaving out testbed {testbed} ({len(test)} items, "
                     f"{i}/{len(splits)})")
        held, cal = _fit_fold(frames, full, (f"testbed:{testbed}",), max_nfev,
                              fold_kind="testbeds",
                              models_dir=models_dir / testbed if models_dir else None)
        held["fold"] = testbed
        if cal.testbeds_.get(testbed).speed is not None:
            held = _with_reference(held, cal, testbed)
        out.append(held)
    return pd.concat(out, ignore_index=True)


def _reference_item(held: pd.DataFrame, cal: Calibrator, testbed: str) -> str | None:
    """The held-out item that stands for a reference run on a testbed of unknown CPU:
    of the stack the fold's evidence measures most, at default conditions (no
    pinning, offloads on, the stack's own packets), the cell of most repetitions."""
    counts: dict[str, int] = {}
    for seen in cal.evidence_:
        for name in {seen.scenario.server.split("@")[0], seen.scenario.client.split("@")[0]}:
            counts[name] = counts.get(name, 0) + 1
    by_ident = {e.ident: e for e in cal.all_evidence_ if e.testbed == testbed}
    best: tuple[int, int, str] | None = None
    for ident in held["ident"]:
        e = by_ident.get(ident)
        if e is None or e.bound or e.scenario.server != e.scenario.client:
            continue
        s = e.scenario
        if s.server_core >= 0 or s.client_core >= 0 or not (s.gso and s.gro):
            continue
        key = (counts.get(s.server.split("@")[0], 0), e.n, ident)
        if best is None or key > best:
            best = key
    return best[2] if best else None


def _with_reference(held: pd.DataFrame, cal: Calibrator, testbed: str) -> pd.DataFrame:
    """``held`` with ``predicted_ref_mbps`` / ``ape_ref_pct``: the held-out testbed's
    items predicted with its hosts' speed set from one reference item (as a user
    of hosts whose CPU no catalog holds would measure one reference transfer), the
    reference itself left out of the error (NaN)."""
    from scipy.optimize import brentq

    from quiclab.models.registry import Registry
    from quiclab.models.testbeds import Speed
    from quiclab.sim.analytic import AnalyticEngine

    held = held.copy()
    ref = _reference_item(held, cal, testbed)
    held["reference"] = held["ident"] == ref
    held["predicted_ref_mbps"] = np.nan
    held["ape_ref_pct"] = np.nan
    if ref is None:
        return held
    items = {e.ident: e for e in cal.all_evidence_ if e.testbed == testbed}
    scenarios = [items[i].scenario for i in held["ident"]]

    def predict(speed: float) -> np.ndarray:
        tb = cal.testbeds_.with_speed(testbed, Speed(speed, speed, speed, "reference"))
        reg = Registry(cal.models_, cal.cpus, cal.interop_, source="cv", track_versions=False,
                       host=cal.host_.params_, testbeds=tb)
        return AnalyticEngine(reg).evaluate(scenarios)[1].goodput_bps / 1e6

    at = list(held["ident"]).index(ref)
    target = math.log(items[ref].goodput_mbps)

    def miss(log_speed: float) -> float:
        return math.log(max(predict(math.exp(log_speed))[at], 1e-9)) - target

    lo, hi = math.log(0.3), math.log(30.0)
    if miss(lo) > 0 or miss(hi) < 0:
        return held  # no speed reproduces the reference: leave the columns empty
    speed = math.exp(brentq(miss, lo, hi, xtol=1e-4))
    pred = predict(speed)
    held["predicted_ref_mbps"] = pred
    held["reference_speed"] = speed
    for i, e in enumerate(items[x] for x in held["ident"]):
        if e.ident != ref:
            held.iloc[i, held.columns.get_loc("ape_ref_pct")] = e.errors_pct(float(pred[i]))[0]
    return held


def summarise(held: pd.DataFrame, by: str = "fold") -> pd.DataFrame:
    """Median and 95th-percentile APE per fold and overall; where the folds record
    it, also over the items whose stacks the fold's fit saw on other evidence (the
    case of a known stack on a new testbed)."""
    def row(key: str, g: pd.DataFrame) -> dict[str, object]:
        out: dict[str, object] = {by: key, "items": len(g),
                                  "median_ape_pct": g["ape_pct"].median(),
                                  "p95_ape_pct": g["ape_pct"].quantile(0.95)}
        if "stacks_seen" in g.columns:
            seen = g[g["stacks_seen"].astype(bool)]
            out.update({"items_stacks_seen": len(seen),
                        "median_ape_pct_stacks_seen": seen["ape_pct"].median(),
                        "p95_ape_pct_stacks_seen": seen["ape_pct"].quantile(0.95)})
        if "ape_ref_pct" in g.columns and g["ape_ref_pct"].notna().any():
            # Hosts of unknown CPU, their speed set from one reference item.
            out.update({"median_ape_pct_ref": g["ape_ref_pct"].median(),
                        "p95_ape_pct_ref": g["ape_ref_pct"].quantile(0.95)})
        return out

    rows = [row(str(key), g) for key, g in held.groupby(by)]
    rows.append(row("ALL", held))
    return pd.DataFrame(rows)
