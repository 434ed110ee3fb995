"""``quiclab calibrate``: fit cost models from the catalog and report the fit."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CV_KINDS = ("testbeds", "experiments", "pairs")


def cv_kinds(text: str) -> tuple[str, ...]:
    """``--cv``: "none", "all", or kinds of :data:`CV_KINDS` joined by commas."""
    if text == "none":
        return ()
    if text == "all":
        return CV_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in CV_KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(
            f"{text!r}: none, all, or one or more of {', '.join(CV_KINDS)} joined by commas")
    return tuple(k for k in CV_KINDS if k in kinds)


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
    p.add_argument("--cv", default="experiments", type=cv_kinds, metavar="KINDS",
                   help="cross-validation, one or more of testbeds, experiments, pairs "
                        "joined by commas: leave one testbed out (the error to expect on "
                        "your own testbed), leave one experiment out (default), leave one "
                        "implementation pair out (slow); all (the three) or none")
    p.add_argument("--tcp-host", metavar="FILE",
                   help="with --source fresh: also write this host's kernel TCP + TLS model "
                        "(its measured per-unit costs and host CPU) to FILE, the input the "
                        "published calibration moves to the seeds' hosts (models/tcp_host.json)")
    p.add_argument("--max-nfev", type=int, default=400,
                   help="evaluation budget of the joint fit (default 400)")
    from quiclab.cliopts import interval_level

    p.add_argument("--level", type=interval_level, default=0.9, metavar="L",
                   help="default level of the predictive intervals written beside the models "
                        "(intervals.json; default 0.9)")
    p.add_argument("--interval-engines", nargs="+", default=["analytic"],
                   choices=("analytic", "des", "ns3"), metavar="ENGINE",
                   help="engines whose held-out residuals the intervals learn from (default "
                        "analytic; des and ns3 re-predict every held-out item with its fold's "
                        "models: minutes per engine)")
    p.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from quiclab.calibration import cv as cvmod
    from quiclab.calibration.fit import DATASET_SOURCES, Calibrator, Frames
    from quiclab.calibration.report import write_report
    from quiclab.datasets.catalog import Catalog
    from quiclab.errors import DataError

    def progress(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    if args.source == "fresh":
        return run_fresh(args)
    with Catalog(args.catalog, read_only=True) as catalog:
        frames = Frames.from_catalog(catalog)
    if frames.runs.empty:
        raise DataError(args.catalog, "no runs of the published datasets "
                                      f"({', '.join(DATASET_SOURCES)}; run `quiclab data ingest`)")
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
    written.append(write_domain(cal, out))
    print(f"wrote {len(written)} model files to {out}")
    cv: dict[str, object] = {}
    report_dir = Path(args.report) if args.report else args.paths.reports / "calibration"
    folds = report_dir / "folds" if set(args.interval_engines) - {"analytic"} else None
    if "testbeds" in args.cv:
        cv["testbeds"] = cvmod.leave_one_testbed_out(
            frames, cal, progress=progress, models_dir=folds / "testbeds" if folds else None)
    if "experiments" in args.cv:
        cv["experiments"] = cvmod.leave_one_experiment_out(
            frames, cal, progress=progress, models_dir=folds / "experiments" if folds else None)
    if "pairs" in args.cv:
        cv["pairs"] = cvmod.leave_one_pair_out(
            frames, cal, progress=progress, models_dir=folds / "pairs" if folds else None)
    if cv:
        write_band(args, cv, out, report_dir, progress)
    else:
        print("no cross-validation (--cv none): intervals.json left as it is (a Prediction "
              "says when it was fitted for other models)")
    headline = write_report(cal, report_dir, cv)
    from quiclab.stamp import write_stamp

    write_stamp(report_dir)
    print(f"report: {report_dir / 'calibration.md'} ({time.perf_counter() - started:.0f} s)")
    if "testbeds" in cv:
        # The figure a user should read first: the error on a testbed the fit never saw.
        summary = cvmod.summarise(cv["testbeds"])
        print("leave one testbed out (absolute % error of each held-out testbed's items; "
              "'stacks seen': items whose stacks other testbeds measured):")
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    for key, value in headline.items():
        print(f"  {key:42s} {value:6.1f}")
    (report_dir / "headline.json").write_text(json.dumps(headline, indent=1, sort_keys=True))
    return 0


def write_domain(cal: object, out: Path) -> str:
    """Write ``domain.json``: the envelope of the fit's evidence per model and pair."""
    from quiclab.models.domain import FILE, Domain

    items = cal.evidence_  # type: ignore[attr-defined]
    domain = Domain.from_scenarios(
        cal._scenarios(cal.theta_, items), cal.cpus,  # type: ignore[attr-defined]
        {"evidence": len(items), "sources": sorted({e.source for e in items}),
         "written_by": "quiclab calibrate (calibration/fit.py evidence_)"})
    (out / FILE).write_text(domain.dumps())
    return FILE


def write_band(args: argparse.Namespace, cv: dict[str, object], out: Path, report_dir: Path,
               progress: object) -> None:
    """Held-out residuals of each engine asked for → ``intervals.json`` and the coverage
    report (calibration/intervals.py)."""
    import pandas as pd

    from quiclab.calibration.intervals import coverage_table, engine_residuals, write_intervals

    held = [frame for frame in cv.values() if isinstance(frame, pd.DataFrame)]
    for engine in args.interval_engines:
        if engine == "analytic":
            continue
        options = {"cache_dir": args.paths.cache / "ns3"} if engine == "ns3" else {}
        held += [engine_residuals(frame, engine, progress, **options)
                 for frame in cv.values() if isinstance(frame, pd.DataFrame)]
    model, judged = write_intervals(held, out, report_dir, args.level,
                                    {"written_by": "quiclab calibrate --cv "
                                                   + ",".join(args.cv),
                                     "catalog": str(args.catalog)})
    table = coverage_table(judged)
    print(f"intervals: {out / 'intervals.json'} ({model.provenance['residuals']} held-out "
          "residuals); coverage of held-out items by cross-conformal folds:")
    print(table.round(2).to_string(index=False))


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
    out = Path(args.out) if args.out else args.paths.data_dir / "models-fresh"
    tcp = runs["server_impl"].isin(("tcp+tls", "tcp"))
    if tcp.any():
        # Kernel TCP + TLS (calibration/tcp.py): its own mechanism and runs.
        from quiclab.calibration.tcp import CALIBRATION_EXPERIMENT, fresh_models, write_fresh_tcp

        host = recorded_host(runs[tcp]) or read_host_cpu(CpuCatalog.packaged())
        if (runs.loc[tcp, "experiment"] == CALIBRATION_EXPERIMENT).any():
            models, tcp_fit = fresh_models(runs[tcp], host.name)
            print(f"wrote {', '.join(write_fresh_tcp(models, out, host))} to {out} "
                  f"(kernel TCP: {tcp_fit.runs} runs of {CALIBRATION_EXPERIMENT})")
            if getattr(args, "tcp_host", None) and "tcp+tls" in models:
                from dataclasses import replace as dc_replace

                model = models["tcp+tls"]
                row = {**host.to_row(), "sources": list(host.sources),
                       "nics": [list(n) for n in host.nics]}
                model = dc_replace(model, provenance={**model.provenance, "host_cpu": row})
                Path(args.tcp_host).write_text(model.dumps())
                print(f"wrote {args.tcp_host} (this host's kernel TCP + TLS costs)")
        runs = runs[~tcp]
        if runs.empty:
            return 0
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
    # The host's state while each stack was calibrated (its sessions' host probes):
    # the reference of the probe rule (models/cpus.py) when predicting at another state.
    from quiclab.calibration.fresh import CALIBRATION_EXPERIMENT, with_states
    from quiclab.testbed.probe_store import calibration_states

    fit = with_states(fit, calibration_states(args.catalog, runs, CALIBRATION_EXPERIMENT))
    written = write_fresh(fit, out, recorded_link_gbps(runs) or VETH_LINK_GBPS)
    print(f"wrote {len(written)} files to {out} (reference CPU: {host.name})")
    for ref in fit.references:
        users = sorted(n for n, m in fit.models.items() if m.reference_cpu == ref.name)
        print(f"  host state of {', '.join(users)}: {ref.probe_source}")
    if not fit.references:
        print("  no host probes with the calibration runs: predictions at another host "
              "state fall back to clock × IPC")
    print(fit.table.round(2).to_string(index=False))
    for note in fit.notes:
        print(f"  {note}")
    write_fresh_band(args, runs, points, host, out)
    return 0


def write_fresh_band(args: argparse.Namespace, runs: object, points: object, host: object,
                     out: Path) -> None:
    """This host's models' ``domain.json`` (the calibration cells' envelope) and, with
    two sessions or more, ``intervals.json`` from each session predicted by another's
    models (calibration/sessions.py)."""
    from quiclab.calibration.fresh import CALIBRATION_EXPERIMENT
    from quiclab.calibration.intervals import coverage_table, write_intervals
    from quiclab.calibration.sessions import session_labels, session_residuals
    from quiclab.experiments.validate import _fresh_bulk_cells, _is_bulk
    from quiclab.models.domain import FILE, Domain
    from quiclab.models.registry import Registry

    def progress(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    if not any(p.name != "cpus.json" for p in out.glob("*.json")):
        return  # no stack could be fitted (the notes above say why)
    registry = Registry.load(out)
    from quiclab.calibration.fresh import path_defaults

    defaults = path_defaults(out) or {}
    cal = runs[(runs["experiment"] == CALIBRATION_EXPERIMENT)]  # type: ignore[index]
    cells = _fresh_bulk_cells(cal[_is_bulk(cal)], registry.names(), defaults)
    Domain.from_evidence(cells, registry.cpus, {
        "evidence": len(cells), "sources": ["fresh"],
        "written_by": "quiclab calibrate --source fresh (the calibration cells)"}) \
        .dump(out / FILE)
    sessions = session_labels(runs).nunique()
    held = session_residuals(runs, points, host, progress)
    if held.empty:
        print(f"{sessions} fresh session(s): intervals need each session predicted by "
              "another session's models (two sessions with calibration runs); "
              f"{out / 'intervals.json'} not written")
        return
    report = Path(args.report) if args.report else args.paths.reports / "calibration-fresh"
    model, judged = write_intervals([held], out, report, args.level,
                                    {"written_by": "quiclab calibrate --source fresh",
                                     "catalog": str(args.catalog)})
    print(f"intervals: {out / 'intervals.json'} ({model.provenance['residuals']} held-out "
          f"residuals of {sessions} sessions); coverage by cross-conformal folds:")
    print(coverage_table(judged).round(2).to_string(index=False))
