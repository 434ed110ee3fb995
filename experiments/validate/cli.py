"""``quiclab validate``'s command: load every source's evidence, predict it with
each engine, summarise, write the report and print its tables."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from quiclab.errors import DataError
from quiclab.experiments import runner
from quiclab.experiments.validate.evidence import load_evidence
from quiclab.experiments.validate.predict import predict_requests, predict_source
from quiclab.experiments.validate.report import _fmt_table, _written, write_report
from quiclab.experiments.validate.summary import (
    controlled_knobs,
    coverage_report,
    stale_reason,
    summarise,
    summarise_controlled,
    summarise_fresh,
    summarise_requests,
)


def main_validate(args: argparse.Namespace) -> int:

    from quiclab.experiments.cli import _executor, runtime_options
    from quiclab.models.registry import Registry

    registry = Registry.load(args.paths.models)
    fresh_dir = Path(args.fresh_models) if getattr(args, "fresh_models", None) \
        else args.paths.data_dir / "models-fresh"
    fresh_registry = fresh_defaults = None
    if fresh_dir.is_dir() and any(p.name != "cpus.json" for p in fresh_dir.glob("*.json")):
        from quiclab.calibration.fresh import path_defaults

        fresh_registry = Registry.load(fresh_dir)
        fresh_defaults = path_defaults(fresh_dir)
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
