"""``quiclab calibrate``: fit cost models from the catalog and report the fit."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="fit per-implementation cost models from the catalog",
        description="Fit CPU cost models (stage A: CPU regressions; stage C: a joint fit of "
                    "the analytic engine to every dataset cell and published point), write "
                    "them as JSON, and report in-sample and cross-validated errors.")
    p.add_argument("--source", default="dataset", choices=("dataset", "fresh"),
                   help="runs to fit: the published QIR-10G data (default) or fresh testbed "
                        "runs of this host")
    p.add_argument("--impl", action="extend", nargs="+", metavar="NAME",
                   help="write only these implementations' models (the fit is joint)")
    p.add_argument("--out", metavar="DIR",
                   help="model directory to write (default: --models; with --source fresh "
                        "<data dir>/models-fresh)")
    p.add_argument("--report", metavar="DIR",
                   help="report directory (default <data dir>/reports/calibration)")
    p.add_argument("--cv", default="experiments", choices=("none", "experiments", "pairs", "all"),
                   help="cross-validation: leave one experiment out (default), leave one "
                        "implementation pair out (slow), both, or none")
    p.add_argument("--max-nfev", type=int, default=400,
                   help="evaluation budget of the joint fit (default 400)")
    p.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from quiclab.calibration import cv as cvmod
    from quiclab.calibration.fit import Calibrator, Frames
    from quiclab.calibration.report import write_report
    from quiclab.datasets.catalog import Catalog
    from quiclab.errors import DataError

    def progress(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    if args.source == "fresh":
        return run_fresh(args)
    source = "qir10g"
    with Catalog(args.catalog, read_only=True) as catalog:
        frames = Frames.from_catalog(catalog, source=source)
    if frames.runs.empty:
        raise DataError(args.catalog, f"no runs with source={source!r} "
                                      "(run `quiclab data ingest` or `quiclab testbed run`)")
    started = time.perf_counter()
    cal = Calibrator(max_nfev=args.max_nfev, progress=progress).fit(frames)
    out = Path(args.out) if args.out else args.paths.models
    if args.impl:
        unknown = sorted(set(args.impl) - set(cal.models_))
        if unknown:
            raise DataError("--impl", f"unknown implementation(s) {', '.join(unknown)} "
                                      f"(known: {', '.join(sorted(cal.models_))})")
        cal.models_ = {k: v for k, v in cal.models_.items() if k in args.impl}
    written = cal.write(out)
    print(f"wrote {len(written)} model files to {out}")
    cv: dict[str, object] = {}
    if args.cv in ("experiments", "all"):
        cv["experiments"] = cvmod.leave_one_experiment_out(frames, cal, progress=progress)
    if args.cv in ("pairs", "all"):
        cv["pairs"] = cvmod.leave_one_pair_out(frames, cal, progress=progress)
    report_dir = Path(args.report) if args.report else args.paths.reports / "calibration"
    headline = write_report(cal, report_dir, cv)
    print(f"report: {report_dir / 'calibration.md'} ({time.perf_counter() - started:.0f} s)")
    for key, value in headline.items():
        print(f"  {key:42s} {value:6.1f}")
    (report_dir / "headline.json").write_text(json.dumps(headline, indent=1, sort_keys=True))
    return 0


def run_fresh(args: argparse.Namespace) -> int:
    """Models for this host from the testbed's fresh-calibration runs."""
    from quiclab.calibration.fresh import (
        VETH_LINK_GBPS,
        fit_fresh,
        recorded_host,
        recorded_link_gbps,
        write_fresh,
    )
    from quiclab.datasets.catalog import Catalog
    from quiclab.errors import DataError
    from quiclab.models.cpus import CpuCatalog, read_host_cpu

    with Catalog(args.catalog, read_only=True) as catalog:
        runs = catalog.df("SELECT * FROM runs WHERE source = 'fresh' ORDER BY run_id")
        points = catalog.df("SELECT * FROM published_points ORDER BY point_id")
    if runs.empty:
        raise DataError(args.catalog, "no fresh runs (run `quiclab testbed sweep "
                                      "testbed/specs/fresh-calibration.yaml` first)")
    if points.empty:
        import pandas as pd

        from quiclab.datasets.sources.published import packaged_dir, read_csv

        points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    try:
        # The server host's CPU when the runs were made over SSH, else this machine's.
        host = recorded_host(runs) or read_host_cpu(CpuCatalog.packaged())
        fit = fit_fresh(runs, points, host)
    except ValueError as err:
        raise DataError(args.catalog, str(err)) from None
    out = Path(args.out) if args.out else args.paths.data_dir / "models-fresh"
    written = write_fresh(fit, out, recorded_link_gbps(runs) or VETH_LINK_GBPS)
    print(f"wrote {len(written)} files to {out} (reference CPU: {host.name})")
    print(fit.table.round(2).to_string(index=False))
    for note in fit.notes:
        print(f"  {note}")
    return 0
