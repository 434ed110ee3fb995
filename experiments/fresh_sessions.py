"""Fresh validation at each session's probed host state, and the table of sessions.

Every testbed session probes the host at its start, middle and end
(``testbed/probe.py``) and its runs carry the session's id. Here each fresh
goodput cell is predicted at its session's state at the cell's time (the
probes interpolated, :func:`~quiclab.testbed.probe_store.state_at`): the cell's
Scenario gets a CPU entry that is this host in that state, so the probe rule
(``models/cpus.py``) moves each cost component by (probe now / probe at
calibration). Cells of sessions without probes keep the host's entry (no
scaling).

The session table (:func:`session_table`) puts, per session, the probe's
figures beside the errors of its controls (the calibration setting re-run) and
its knob cells, with and without the probe scaling; :func:`drift_explained`
says how much of the controls' drift across sessions the probe accounts for.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: Experiments whose every pair also ran the calibration setting in the same session
#: (testbed/specs/fresh-validation-controlled.yaml, under its name or a name that
#: starts with it, one per session); their ``base`` cell is the session's control.
CONTROLLED_PREFIX = "fresh-validation-controlled"
#: The fresh calibration's experiment: its base cells are its session's controls.
CALIBRATION_EXPERIMENT = "fresh-calibration"
#: Sessions of controls alone (testbed/specs/fresh-controls.yaml, one name per session).
CONTROLS_PREFIX = "fresh-controls"
#: Knob settings the fresh calibration also runs (not held out in kind).
CALIBRATED_SETTINGS = ("gso=False",)
#: Probe figures shown per session in the table.
SHOWN = ("aes_gcm_packet", "chacha20_byte", "copy_byte", "udp_send", "udp_gso_segment",
         "quic_packet")


def is_controlled(experiment: str) -> bool:
    return str(experiment).startswith(CONTROLLED_PREFIX)


def _setting(ident: str) -> str:
    from quiclab.experiments.validate import _setting_label

    return _setting_label(ident)


def probed_evidence(evidence: list[Any], runs: pd.DataFrame, registry: Any,
                    catalog_path: Path) -> tuple[list[Any], pd.DataFrame]:
    """``evidence`` (fresh goodput cells) with each cell's CPU set to its session's
    probed state, and one row per cell saying which (session, time, state; an empty
    session where its runs have none or it took no probes). ``registry`` (the fresh
    models) gains the state entries."""
    from quiclab.testbed import probe_store

    ok = runs[runs["status"] == "ok"].copy()
    ok["session"] = probe_store.run_sessions(ok)
    sessions = sorted({s for s in ok["session"] if isinstance(s, str)})
    probes = probe_store.sessions_probes(catalog_path, sessions)
    out, rows, cpus = [], [], {}
    for e in evidence:
        exp, _, setting = e.ident.partition("|")
        cell = ok[(ok["experiment"] == exp) & (ok["setting"] == setting)]
        named = cell["session"].dropna()
        session = str(named.mode().iloc[0]) if len(named) else ""
        starts = pd.to_numeric(cell["start_ns"], errors="coerce").dropna() \
            if "start_ns" in cell else pd.Series(dtype=float)
        when = float(starts.median()) / 1e9 if len(starts) else math.nan
        row = {"ident": e.ident, "experiment": exp, "setting": _setting(e.ident),
               "server": e.scenario.server, "client": e.scenario.client, "session": session,
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
               if math.isfinite(when) else "", "probes": len(probes.get(session, [])),
               "cpu": e.scenario.cpu}
        if session in probes and math.isfinite(when):
            figures = probe_store.state_at(probes[session], when)
            base = registry.cpus.find(e.scenario.cpu)
            name = f"{base.name} @ {session} {row['when'][11:19]}"
            if name not in cpus:
                ids = ", ".join(p.probe_id for p in probes[session])
                cpus[name] = probe_store.as_cpu(
                    base, name, figures, f"session {session} at {row['when']} (probes {ids}, "
                    "interpolated)")
            e = replace(e, scenario=e.scenario.with_(cpu=name))
            row["cpu"] = name
            row.update({k: figures[k].ns for k in SHOWN if k in figures})
        out.append(e)
        rows.append(row)
    probe_store.with_cpus(registry, list(cpus.values()))
    return out, pd.DataFrame(rows)


def _kind(experiment: str, setting: str) -> str:
    """control | knob | calibrated | in-sample | other."""
    if experiment == CALIBRATION_EXPERIMENT:
        # The reference itself (and its base cell also holds the veth-segmentation-off
        # row, a knob the setting does not name): in sample, not a re-run control.
        return "in-sample"
    if str(experiment).startswith(CONTROLS_PREFIX):
        return "control" if setting == "base" else "other"
    if is_controlled(experiment):
        if setting == "base":
            return "control"
        return "calibrated" if setting in CALIBRATED_SETTINGS else "knob"
    return "other"


def classify(items: pd.DataFrame, states: pd.DataFrame) -> pd.DataFrame:
    """Fresh items with their session, setting and kind (control, knob, …)."""
    fresh = items[items["source"] == "fresh"].copy()
    if fresh.empty:
        return fresh.assign(session=[], setting=[], kind=[])
    by_ident = states.drop_duplicates("ident").set_index("ident")
    fresh["session"] = fresh["ident"].map(by_ident["session"]).fillna("")
    fresh["setting"] = fresh["ident"].map(_setting)
    fresh["kind"] = [_kind(g, s) for g, s in zip(fresh["group"], fresh["setting"],
                                                 strict=True)]
    # The calibration's smaller transfer (its third row) is the same setting in name but
    # not the control: only the largest transfer of an experiment counts as one.
    size = fresh["ident"].str.extract(r"transfer_bytes=(\d+)")[0].astype(float)
    largest = size.groupby(fresh["group"]).transform("max")
    fresh.loc[(fresh["kind"] == "control") & (size < largest), "kind"] = "in-sample"
    return fresh


def _ape_stats(g: pd.DataFrame) -> tuple[int, float, float]:
    ape = g["ape_pct"].dropna()
    if ape.empty:
        return 0, math.nan, math.nan
    return len(ape), float(ape.median()), float(np.percentile(ape, 95))


def session_table(scaled: pd.DataFrame, unscaled: pd.DataFrame, states: pd.DataFrame,
                  probes: pd.DataFrame) -> pd.DataFrame:
    """Per engine and session: the probes' median figures and what else the host did,
    the controls' and knob cells' APE (median, p95) with the probe scaling and without.

    ``scaled``/``unscaled``: :func:`classify`-ed items of the two predictions;
    ``probes``: the ``host_probes`` rows (session, figures, other_busy_cores, …).
    """
    rows = []
    keys = ["engine", "session"]
    for (engine, session), g in scaled.groupby(keys, sort=True):
        u = unscaled[(unscaled["engine"] == engine) & (unscaled["session"] == session)]
        p = probes[probes["session"] == session] if len(probes) else probes
        row: dict[str, Any] = {
            "engine": engine, "session": session or "(no probes)",
            "experiments": ", ".join(sorted(set(g["group"]))),
            "probes": len(p), "first_probe": str(p["taken_at"].min())[:16] if len(p) else "",
        }
        for comp in SHOWN:
            row[f"{comp}_ns"] = float(p[comp].median()) if len(p) and comp in p else math.nan
        row["other_busy_cores"] = float(p["other_busy_cores"].max()) if len(p) else math.nan
        row["steal_cores"] = float(p["steal_cores"].max()) if len(p) else math.nan
        for kind in ("control", "knob"):
            for label, frame in (("probe", g), ("noprobe", u)):
                n, med, p95 = _ape_stats(frame[frame["kind"] == kind])
                row[f"{kind}s"] = n
                row[f"{kind}_median_{label}"] = med
                row[f"{kind}_p95_{label}"] = p95
        rows.append(row)
    return pd.DataFrame(rows)


def drift_explained(scaled: pd.DataFrame, unscaled: pd.DataFrame) -> pd.DataFrame:
    """How much of the controls' drift the probe explains, per engine.

    A control's drift is ln(observed / predicted without the probe) (its session's
    state against the calibration's, plus model error); the probe's share is
    ``1 − Σ residual² / Σ drift²`` with residual = ln(observed / predicted with it),
    over the controls of every session with probes (not centred: drift is measured
    from the calibration, where it is 0 by construction). Also the spread of the
    drift without and with the probe (standard deviation of the logs).
    """
    rows = []
    for engine, g in scaled[scaled["kind"] == "control"].groupby("engine", sort=True):
        u = unscaled[(unscaled["engine"] == engine) & (unscaled["kind"] == "control")]
        both = g.merge(u[["ident", "predicted_mbps"]], on="ident", suffixes=("", "_noprobe"))
        both = both[(both["session"] != "") & (both["observed_mbps"] > 0)
                    & (both["predicted_mbps"] > 0) & (both["predicted_mbps_noprobe"] > 0)]
        if both.empty:
            continue
        drift = np.log(both["observed_mbps"] / both["predicted_mbps_noprobe"])
        resid = np.log(both["observed_mbps"] / both["predicted_mbps"])
        rows.append({"engine": engine, "controls": len(both),
                     "sessions": both["session"].nunique(),
                     "drift_sd_pct": float(drift.std(ddof=1) * 100) if len(both) > 1
                     else math.nan,
                     "residual_sd_pct": float(resid.std(ddof=1) * 100) if len(both) > 1
                     else math.nan,
                     "drift_rms_pct": float(np.sqrt((drift ** 2).mean()) * 100),
                     "residual_rms_pct": float(np.sqrt((resid ** 2).mean()) * 100),
                     "explained_pct": float((1 - (resid ** 2).sum() / (drift ** 2).sum()) * 100)
                     if (drift ** 2).sum() > 0 else math.nan,
                     "explained_centred_pct": float((1 - resid.var() / drift.var()) * 100)
                     if len(both) > 2 and drift.var() > 0 else math.nan})
    return pd.DataFrame(rows)


def probe_rows(catalog_path: Path) -> pd.DataFrame:
    """The stored probes as a frame: session, taken_at, each component's ns, host state."""
    from quiclab.testbed import probe_store
    from quiclab.testbed.probe import COMPONENTS

    rows = [{"probe_id": p.probe_id, "session": p.session, "phase": p.phase,
             "taken_at": p.taken_at, **{k: p.figures[k].ns for k in COMPONENTS
                                        if k in p.figures},
             "other_busy_cores": p.state.other_busy_cores,
             "steal_cores": p.state.steal_cores}
            for p in probe_store.load(catalog_path)]
    return pd.DataFrame(rows)


SESSIONS_TEXT = (
    "Each fresh cell predicted at its session's host state (the session's host probes "
    "interpolated to the cell's time; `probe`) and as if the host were as calibrated "
    "(`noprobe`). Controls: the calibration setting re-run in a later session (the "
    "calibration session's own cells are in sample); knobs: the held-out settings of a controlled "
    "experiment (GSO off alone is calibrated and left out). Probe figures: medians of the "
    "session's probes, wall-clock ns per operation; busy cores and steal: the largest over "
    "its probes.")


def write_sessions(out: Path, scaled_items: pd.DataFrame, unscaled_items: pd.DataFrame,
                   states: pd.DataFrame, catalog_path: Path) -> str:
    """Write ``fresh-sessions.md``/``.csv`` and ``fresh-drift.csv`` into ``out``; return
    the Markdown."""
    from quiclab.experiments.validate import _fmt_table

    probes = probe_rows(catalog_path)
    scaled, unscaled = classify(scaled_items, states), classify(unscaled_items, states)
    table = session_table(scaled, unscaled, states, probes)
    drift = drift_explained(scaled, unscaled)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "fresh-sessions.csv", index=False)
    drift.to_csv(out / "fresh-drift.csv", index=False)
    cells = scaled.merge(unscaled[["engine", "ident", "predicted_mbps", "ape_pct"]],
                         on=["engine", "ident"], suffixes=("", "_noprobe"))
    cells = cells[["engine", "session", "kind", "server", "setting", "observed_mbps",
                   "predicted_mbps", "ape_pct", "predicted_mbps_noprobe", "ape_pct_noprobe",
                   "limit"]].sort_values(["engine", "session", "kind", "server", "setting"])
    cells.to_csv(out / "fresh-session-cells.csv", index=False)
    md = ["# Fresh sessions at their probed host state", "", SESSIONS_TEXT, "",
          _fmt_table(table, floats=3), "",
          "## How much of the controls' drift the probe explains", "",
          "drift = ln(observed / predicted without the probe); residual = ln(observed / "
          "predicted with it); explained = 1 − Σ residual² / Σ drift² (and centred: 1 − "
          "var(residual) / var(drift)).", "", _fmt_table(drift), "",
          "## Every cell", "", _fmt_table(cells), ""]
    text = "\n".join(md)
    (out / "fresh-sessions.md").write_text(text + "\n")
    return "\n".join(md[:8])
