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

from collections.abc import Callable

import numpy as np
import pandas as pd

from quiclab.calibration.fit import Calibrator, Frames


def _fold(frames: Frames, full: Calibrator, exclude: tuple[str, ...], max_nfev: int,
          drop_pair: str | None = None) -> pd.DataFrame:
    # requests=False: the folds score bulk goodput only; request terms add nothing here.
    cal = Calibrator(cpus=full.cpus, exclude=exclude, max_nfev=max_nfev,
                     warm_start={k: v for k, v in full.theta_by_name_.items()
                                 if not (drop_pair and k == f"P|{drop_pair}")},
                     requests=False)
    cal.fit(frames)
    ev = cal.report_.evidence
    held = ev[~ev["in_fit"]].copy()
    # Whether the fit saw both ends' implementations (any build or version) on other
    # evidence: an item whose stack only held-out evidence measured tests a new
    # stack, not (only) a new testbed or experiment.
    seen = {name.split("@")[0] for e in cal.evidence_
            for name in (e.scenario.server, e.scenario.client)}
    held["stacks_seen"] = (held["server"].str.split("@").str[0].isin(seen)
                           & held["client"].str.split("@").str[0].isin(seen))
    return held


def leave_one_experiment_out(frames: Frames, full: Calibrator, max_nfev: int = 60,
                             progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Held-out APE per item when each evidence group is left out in turn."""
    from sklearn.model_selection import LeaveOneGroupOut

    groups = np.array([e.group for e in full.all_evidence_])
    out = []
    for _train, test in LeaveOneGroupOut().split(groups, groups=groups):
        group = str(groups[test[0]])
        if progress:
            progress(f"cross-validation: leaving out {group} ({len(test)} items)")
        held = _fold(frames, full, (group,), max_nfev)
        held["fold"] = group
        out.append(held)
    return pd.concat(out, ignore_index=True)


def leave_one_pair_out(frames: Frames, full: Calibrator, max_nfev: int = 25,
                       progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Held-out APE of each dataset pair's cells with the pair's effect unknown."""
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
        held = _fold(frames, full, (f"pair:{pair}",), max_nfev, drop_pair=pair)
        held["fold"] = pair
        out.append(held)
    return pd.concat(out, ignore_index=True)


def leave_one_testbed_out(frames: Frames, full: Calibrator, max_nfev: int = 60,
                          progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Held-out APE per item when each testbed is left out in turn: its runs (from
    the stage-A regressions on), its published points and everything fitted to
    them alone (its pair interplay, its hosts' speed, its variants) — the error a
    user should expect on their own, unseen testbed."""
    from sklearn.model_selection import LeaveOneGroupOut

    groups = np.array([e.testbed for e in full.all_evidence_])
    out = []
    splits = list(LeaveOneGroupOut().split(groups, groups=groups))
    for i, (_train, test) in enumerate(splits, 1):
        testbed = str(groups[test[0]])
        if progress:
            progress(f"cross-validation: leaving out testbed {testbed} ({len(test)} items, "
                     f"{i}/{len(splits)})")
        held = _fold(frames, full, (f"testbed:{testbed}",), max_nfev)
        held["fold"] = testbed
        out.append(held)
    return pd.concat(out, ignore_index=True)


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
        return out

    rows = [row(str(key), g) for key, g in held.groupby(by)]
    rows.append(row("ALL", held))
    return pd.DataFrame(rows)
