"""``quiclab prospective``: register a fresh spec's predictions, run it, compare, report.

- ``register SPEC``: every cell of a testbed spec is predicted (the Scenario
  ``validate --source fresh`` will build from its runs, on this host's fresh
  models, at the host's probed state now) and registered in the catalog with
  the engine, model and code versions and the probe (:mod:`.prospective`).
- ``run SPEC`` (also ``quiclab validate --prospective SPEC``): take a host
  probe, register at it, run the spec as a testbed session (with its own
  probes at start, middle and end), then compare and report.
- ``compare``: append an outcome for every registered cell whose runs landed.
- ``report``: verify the ledger, compare, and write the report of every
  registered prediction with its outcome, across sessions and days.
- ``verify``: check the ledger (exit 1 when it was tampered with).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quiclab.errors import DataError, QuiclabError
from quiclab.experiments import prospective as ledger


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "prospective", help="register a fresh spec's predictions before its runs, then compare",
        description="Prospective validation: predictions for a fresh testbed spec are "
                    "registered in the catalog (append-only, hash-chained) before the spec "
                    "runs, and compared when its runs land.")
    s = p.add_subparsers(dest="prospective_command", metavar="COMMAND", required=True)
    for name, text in (("register", "register the predictions of a spec's cells"),
                       ("run", "probe, register, run the spec on the testbed, compare, report")):
        q = s.add_parser(name, help=text)
        q.add_argument("spec", type=Path, help="testbed sweep spec (testbed/specs/*.yaml)")
        add_register_options(q)
        if name == "run":
            q.add_argument("--build-dir", type=Path, default=None,
                           help="where the testbed's peers are built (default testbed/.build)")
            q.add_argument("--probe-points", action="store_true",
                           help="also a short host probe (~3 s) before each point")
            q.set_defaults(func=cmd_run)
        else:
            q.add_argument("--probe", default="this-host",
                           help="the host state to predict at: a stored probe's name or id, or "
                                "this-host (the latest; default)")
            q.set_defaults(func=cmd_register)
    q = s.add_parser("compare", help="append outcomes for registered cells whose runs landed")
    q.set_defaults(func=cmd_compare)
    q = s.add_parser("report", help="verify, compare, and write the report of every "
                                    "registered prediction")
    q.add_argument("--out", type=Path, default=None,
                   help="report folder (default <data dir>/reports/prospective)")
    q.set_defaults(func=cmd_report)
    q = s.add_parser("verify", help="check the ledger's hashes and chain (exit 1 if tampered)")
    q.set_defaults(func=cmd_verify)


def add_register_options(q: argparse.ArgumentParser) -> None:
    q.add_argument("--experiment", default=None,
                   help="experiment name of the runs (default: the spec's name); one per session")
    q.add_argument("--engine", action="append", choices=("analytic", "des", "ns3"),
                   help="engines to register (repeatable; default des)")
    q.add_argument("--fresh-models", type=Path, default=None,
                   help="this host's models (default <data dir>/models-fresh)")


# -- the cells of a spec, as validation will see them ------------------------------
def planned_evidence(spec: Path, experiment: str | None, names: list[str],
                     defaults: dict[str, Any], cpu: str) -> tuple[str, list[Any], list[dict]]:
    """(experiment, Evidence per cell, one entry per cell: run-id prefix, pair, setting)
    of a testbed spec, built from the rows the testbed would record for its runs, so
    each Scenario is the one ``validate --source fresh`` builds from the real runs."""
    from quiclab.experiments.validate import _fresh_bulk_cells
    from quiclab.testbed import record
    from quiclab.testbed.config import resolve
    from quiclab.testbed.runner import link_config
    from quiclab.testbed.session import sweep_plan
    from quiclab.testbed.stacks import STACKS
    from quiclab.testbed.topology import relay_queue_bytes, tbf_limit_bytes

    _, points = sweep_plan(spec, experiment=experiment)
    rows, cells = [], []
    for point, config in points:
        s = config.scenario
        if point.server not in names or point.client not in names:
            continue
        try:
            resolved = resolve(config, STACKS[point.server], STACKS[point.client])
        except QuiclabError:
            continue  # refused by the stack: the run will fail, nothing to predict
        eff, link = resolved.effective, link_config(config, resolved)
        applied: dict[str, Any] = {}
        if link.rate_gbps:
            applied["applied"] = {"tbf": {"limit_bytes": tbf_limit_bytes(link)}}
        if link.relayed:
            applied["relay"] = {"queue_bytes": relay_queue_bytes(link)}
        run_id = record.run_id(config.experiment, config.key(), 0)
        rows.append({
            "run_id": run_id, "source": "fresh", "experiment": config.experiment,
            "setting": s.describe(), "server_impl": s.server, "client_impl": s.client,
            "server_build": None, "client_build": None, "status": "ok",
            "goodput_mbps": 1.0, "goodput_reported_mbps": 1.0,
            "filesize_bytes": s.transfer_bytes, "cipher": eff.get("cipher", s.cipher),
            "rcvbuf_bytes": s.rcvbuf_bytes, "cpu": cpu, "app": eff.get("app", "perf"),
            "gso": eff.get("gso"), "gro": eff.get("gro"),
            "veth_segmentation": eff.get("veth_segmentation"), "mtu_bytes": s.mtu_bytes,
            "link_gbps": s.link_gbps if "link_gbps" in config.explicit else None,
            "rtt_ms": s.rtt_ms, "loss_pct": s.loss_pct, "reorder_pct": s.reorder_pct,
            "cc": eff.get("cc"), "server_cpu_pct": None, "client_cpu_pct": None,
            "extra": json.dumps({"topology": applied}),
        })
        cells.append({"prefix": run_id[:-1], "server": s.server, "client": s.client,
                      "setting": s.describe(), "repetitions": None})
    if not rows:
        raise DataError(spec, "no cell of this spec has a fresh model for both of its stacks "
                              "(run `quiclab calibrate --source fresh`)")
    frame = pd.DataFrame(rows)
    evidence = _fresh_bulk_cells(frame, names, defaults)
    by_setting = {f"{c['setting']}": c for c in cells}
    exp = str(frame["experiment"].iloc[0])
    ordered = []
    for e in evidence:
        _, _, setting = e.ident.partition("|")
        ordered.append(by_setting[setting])
    return exp, evidence, ordered


def _fresh(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Path]:
    from quiclab.models.registry import Registry

    directory = Path(args.fresh_models) if args.fresh_models \
        else args.paths.data_dir / "models-fresh"
    if not directory.is_dir():
        raise DataError(directory, "no fresh models (run `quiclab calibrate --source fresh`)")
    registry = Registry.load(directory)
    from quiclab.calibration.fresh import path_defaults

    return registry, dict(path_defaults(directory) or {}), directory


def register(args: argparse.Namespace, probe: Any) -> list[int]:
    """Predict every cell of ``args.spec`` at ``probe``'s state and register them."""
    from quiclab.experiments.runner import scenario_key
    from quiclab.paths import PROJECT_ROOT
    from quiclab.sim.engine import get_engine
    from quiclab.testbed import probe_store
    from quiclab.testbed.probe import git_code

    registry, defaults, directory = _fresh(args)
    host = next((c for c in registry.cpus.cpus if c.probe), None)
    if host is None:
        raise DataError(directory / "cpus.json", "the fresh models carry no host probe of "
                        "their calibration (recalibrate from a session with probes)",
                        field="probe")
    experiment, evidence, cells = planned_evidence(args.spec, args.experiment,
                                                   registry.names(), defaults, host.name)
    state = f"{host.name} @ probe {probe.probe_id}"
    probe_store.with_cpus(registry, [probe_store.as_cpu(
        host, state, dict(probe.figures), f"host probe {probe.probe_id} {probe.taken_at}")])
    versions = registry.versions()
    code = git_code(PROJECT_ROOT)
    spec_text = Path(args.spec).read_bytes()
    entries = []
    for engine_name in list(dict.fromkeys(args.engine or ["des"])):
        engine = get_engine(engine_name, registry)
        scaled = engine.predict_batch([e.scenario.with_(cpu=state) for e in evidence])
        plain = engine.predict_batch([e.scenario for e in evidence])
        for e, cell, pred, base in zip(evidence, cells, scaled, plain, strict=True):
            content = {
                "registration": f"{experiment}@{probe.probe_id}",
                "experiment": experiment, "cell": e.ident, "engine": engine_name,
                "engine_version": pred.engine_version,
                "predicted_mbps": pred.goodput_mbps, "predicted_lo_mbps": pred.goodput_lo_mbps,
                "predicted_hi_mbps": pred.goodput_hi_mbps,
                "limit_resource": pred.limit,
                "predicted_noprobe_mbps": base.goodput_mbps,
                "probe_id": probe.probe_id, "probe_sha256": probe.sha256,
                "probe_taken_at": probe.taken_at,
                "reference_probe": registry.cpus.find(
                    registry.model(cell["server"]).reference_cpu).probe_source,
                "cpu_rule": pred.cpu_rule, "run_prefix": cell["prefix"],
                "server": cell["server"], "client": cell["client"],
                "scenario": e.scenario.with_(cpu=state).to_dict(),
                "scenario_key": scenario_key(e.scenario.with_(cpu=state)),
                "spec": str(args.spec), "spec_sha256": hashlib.sha256(spec_text).hexdigest(),
                "model_versions": versions, "models_dir": str(directory), "code": code,
            }
            entries.append({**{k: content[k] for k in ledger.MIRRORED[ledger.PREDICTIONS]},
                            "content": content})
    seqs = ledger.append(args.catalog, ledger.PREDICTIONS, entries)
    print(f"registered {len(seqs)} predictions ({len(evidence)} cells × "
          f"{len(entries) // max(len(evidence), 1)} engines) for {experiment} at host probe "
          f"{probe.probe_id} ({probe.taken_at}), seq {seqs[0]}–{seqs[-1]}")
    return seqs


def compare(catalog_path: Path) -> int:
    """Append an outcome for each registered prediction whose cell has ok runs that
    started after it was registered, unless the latest outcome already counts as many
    runs. Returns how many outcomes were appended."""
    from quiclab.datasets.catalog import Catalog

    table = ledger.registered(catalog_path)
    if table.empty:
        return 0
    with Catalog(catalog_path, read_only=True) as cat:
        runs = cat.df("SELECT run_id, status, goodput_mbps, start_ns FROM runs "
                      "WHERE source = 'fresh' AND status = 'ok'")
    entries = []
    for row in table.to_dict("records"):
        content = json.loads(row["content"])
        after = pd.Timestamp(row["registered_at"]).value  # ns since the epoch (UTC)
        cell = runs[runs["run_id"].str.startswith(content["run_prefix"])
                    & (runs["start_ns"] > after)]
        good = pd.to_numeric(cell["goodput_mbps"], errors="coerce").dropna()
        if good.empty:
            continue
        before = row.get("runs")
        if before is not None and before == before and int(before) >= len(good):
            continue
        observed = float(good.median())
        predicted = content["predicted_mbps"]
        lo, hi = content.get("predicted_lo_mbps"), content.get("predicted_hi_mbps")
        ok = predicted is not None and observed > 0
        outcome = {
            "prediction_seq": int(row["seq"]), "prediction_sha256": row["row_sha256"],
            "runs": len(good), "observed_mbps": observed,
            "ape_pct": abs(predicted - observed) / observed * 100 if ok else None,
            "signed_error_pct": (predicted / observed - 1) * 100 if ok else None,
            "within_interval": bool(lo is not None and hi is not None and lo <= observed <= hi),
            "noprobe_ape_pct": abs(content["predicted_noprobe_mbps"] - observed) / observed
            * 100 if content.get("predicted_noprobe_mbps") and observed > 0 else None,
            "run_ids": sorted(cell["run_id"]),
            "first_run_ns": int(cell["start_ns"].min()),
        }
        entries.append({**{k: outcome[k] for k in ledger.MIRRORED[ledger.OUTCOMES]},
                        "content": outcome})
    ledger.append(catalog_path, ledger.OUTCOMES, entries)
    return len(entries)


REPORT_TEXT = (
    "Every prediction registered before its runs (`quiclab prospective register|run`), with "
    "its latest outcome. `predicted` is at the host's probed state when it was registered, "
    "`noprobe` as if the host were as calibrated; `ape_pct` compares the median goodput of "
    "the cell's runs that started after the registration. Kinds: control (the calibration "
    "setting re-run), knob (a held-out setting), calibrated (GSO off alone).")


def report(catalog_path: Path, out: Path) -> str:
    from quiclab.experiments.fresh_sessions import _kind
    from quiclab.experiments.validate import _fmt_table, _setting_label

    verdict = ledger.verify(catalog_path)
    appended = compare(catalog_path) if verdict.ok else 0
    table = ledger.registered(catalog_path)
    out.mkdir(parents=True, exist_ok=True)
    if table.empty:
        text = "# Prospective validation\n\nNo predictions registered.\n"
        (out / "prospective.md").write_text(text)
        return text
    contents = [json.loads(c) for c in table["content"]]
    table["setting"] = [_setting_label(c["cell"]) for c in contents]
    table["server"] = [c["server"] for c in contents]
    table["kind"] = [_kind(e, s) for e, s in zip(table["experiment"], table["setting"],
                                                 strict=True)]
    table["noprobe_mbps"] = [c.get("predicted_noprobe_mbps") for c in contents]
    table["noprobe_ape_pct"] = [abs(n - o) / o * 100 if n and o == o and o > 0 else math.nan
                                for n, o in zip(table["noprobe_mbps"], table["observed_mbps"],
                                                strict=True)]
    table["day"] = pd.to_datetime(table["registered_at"]).dt.strftime("%Y-%m-%d %H:%M")
    summary = []
    for (reg, engine, kind), g in table.groupby(["registration", "engine", "kind"], sort=False):
        done = g.dropna(subset=["ape_pct"])
        summary.append({
            "registration": reg, "registered": str(g["day"].iloc[0]), "engine": engine,
            "kind": kind, "cells": len(g), "compared": len(done),
            "median_ape_pct": float(done["ape_pct"].median()) if len(done) else math.nan,
            "p95_ape_pct": float(np.percentile(done["ape_pct"], 95)) if len(done) else math.nan,
            "median_noprobe_ape_pct": float(done["noprobe_ape_pct"].median())
            if len(done) else math.nan,
            "p95_noprobe_ape_pct": float(np.percentile(done["noprobe_ape_pct"], 95))
            if len(done) else math.nan,
            "within_interval_pct": float(done["within_interval"].astype(bool).mean() * 100)
            if len(done) else math.nan})
    summary_df = pd.DataFrame(summary)
    shown = table[["seq", "day", "experiment", "engine", "kind", "server", "setting",
                   "predicted_mbps", "predicted_lo_mbps", "predicted_hi_mbps", "noprobe_mbps",
                   "observed_mbps", "runs", "ape_pct", "noprobe_ape_pct", "within_interval",
                   "probe_id", "row_sha256"]].copy()
    shown["row_sha256"] = shown["row_sha256"].str[:12]
    table.drop(columns=["content"]).to_csv(out / "prospective.csv", index=False)
    summary_df.to_csv(out / "prospective-summary.csv", index=False)
    versions = sorted({(c["engine"], c["engine_version"], c["code"].get("revision") or "",
                        bool(c["code"].get("dirty"))) for c in contents})
    md = ["# Prospective validation", "", REPORT_TEXT, "",
          f"Ledger: {verdict.describe()}." + (f" {appended} outcomes appended now."
                                               if appended else ""),
          "", "## Per registration, engine and kind", "", _fmt_table(summary_df), "",
          "## Engines and code", "",
          "\n".join(f"- {e} {v}, code {r[:12] or '?'}{' (dirty)' if d else ''}"
                    for e, v, r, d in versions), "",
          "## Every registered prediction", "", _fmt_table(shown), ""]
    text = "\n".join(md)
    (out / "prospective.md").write_text(text + "\n")
    return "\n".join(md[:9])


# -- commands -----------------------------------------------------------------------
def _guard(body: Any) -> int:
    try:
        return int(body())
    except QuiclabError as err:
        print(f"quiclab prospective: {err}", file=sys.stderr)
        return 2


def cmd_register(args: argparse.Namespace) -> int:
    from quiclab.testbed import probe_store

    def body() -> int:
        probe = probe_store.find(args.catalog, args.probe)
        register(args, probe)
        return 0
    return _guard(body)


def cmd_run(args: argparse.Namespace) -> int:
    from quiclab.testbed.cli import _locked
    from quiclab.testbed.runner import Paths, Testbed
    from quiclab.testbed.session import Session, sweep_plan, sweep_summary
    from quiclab.testbed.topology import require_root

    def body() -> int:
        require_root()
        plan = sweep_plan(args.spec, experiment=args.experiment)  # refused before anything
        runs_dir = Path(args.paths.data_dir) / "testbed-runs"
        testbed = Testbed(Paths.default(runs_dir=runs_dir, build_dir=args.build_dir),
                          log=lambda line: print(line, flush=True))
        session = Session(testbed, Path(args.catalog), log=lambda line: print(line, flush=True),
                          probing=True, probe_points=bool(getattr(args, "probe_points", False)))
        from quiclab.testbed import probe_store

        # One hold of the testbed lock from the probe to the last run: no other run
        # comes between the state the predictions are registered at and the runs.
        with _locked():
            probe_id = session.probe("registration")
            if probe_id is None:
                raise DataError(args.catalog, "the host probe failed: nothing registered",
                                field="host_probes")
            register(args, probe_store.find(args.catalog, probe_id))
            t0 = time.monotonic()
            done = sweep_summary(session, args.spec, plan=plan)
        print(f"{len(done.results)} runs, {done.failed} failed, {done.skipped} already in the "
              f"catalog ({done.points} points, {time.monotonic() - t0:.0f} s)")
        out = args.paths.reports / "prospective"
        print(report(Path(args.catalog), out))
        print(f"\nreport: {out / 'prospective.md'}")
        return 0
    return _guard(body)


def cmd_compare(args: argparse.Namespace) -> int:
    def body() -> int:
        verdict = ledger.verify(args.catalog)
        if not verdict.ok:
            raise DataError(args.catalog, verdict.describe(), field="registered_predictions")
        print(f"{compare(args.catalog)} outcomes appended")
        return 0
    return _guard(body)


def cmd_report(args: argparse.Namespace) -> int:
    def body() -> int:
        out = args.out or args.paths.reports / "prospective"
        print(report(Path(args.catalog), out))
        print(f"\nreport: {out / 'prospective.md'}")
        return 0 if ledger.verify(args.catalog).ok else 1
    return _guard(body)


def cmd_verify(args: argparse.Namespace) -> int:
    verdict = ledger.verify(args.catalog)
    print(verdict.describe())
    return 0 if verdict.ok else 1
