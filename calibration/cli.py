"""``quiclab calibrate``: fit cost models from the catalog and report the fit."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "calibrate", help="fit per-implementation cost models from the catalog",
        description="Fit CPU cost models (stage A: CPU regressions; stage C: a joint fit of "
                    "the analytic engine to every dataset cell and published point), write "
                    "them as JSON, and report in-sample and cross-validated errors.")
    p.add_argument("--source", default="dataset", choices=("dataset", "fresh"),
                   help="runs to fit: the published QIR-10G data (default) or fresh testbed "
                        "runs of this host")
    p.add_argument("--impl", nargs="+", metavar="NAME",
                   help="write only these implementations' models (the fit is joint)")
    p.add_argument("--out", metavar="DIR", help="model directory to write (default: --models)")
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

    source = "qir10g" if args.source == "dataset" else "fresh"
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
    headline = write_report(cal, report_dir, cv)  # type: ignore[arg-type]
    print(f"report: {report_dir / 'calibration.md'} ({time.perf_counter() - started:.0f} s)")
    for key, value in headline.items():
        print(f"  {key:42s} {value:6.1f}")
    (report_dir / "headline.json").write_text(json.dumps(headline, indent=1, sort_keys=True))
    return 0
