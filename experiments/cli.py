"""``quiclab sweep``, ``quiclab reproduce`` and ``quiclab validate``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from quiclab.cliopts import add_level
from quiclab.errors import QuiclabError
from quiclab.experiments.executors import EXECUTORS
from quiclab.sim.engine import ENGINES


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}")
    return value


def _jobs_default() -> int:
    return max(1, os.cpu_count() or 1)


def _add_execution(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", action="append", choices=ENGINES, metavar="ENGINE",
                   help="engine(s) to use instead of the spec's (repeatable): "
                        + ", ".join(ENGINES))
    p.add_argument("--jobs", type=int, default=_jobs_default(), metavar="N",
                   help="worker processes (default: the number of CPUs, here "
                        f"{_jobs_default()})")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local process pool (default) or dask.distributed")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="with --executor dask: a running cluster's scheduler "
                        "(e.g. tcp://host:8786); default a LocalCluster of --jobs workers")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="run a sweep spec (experiments/sweep-*.yaml), resumable",
        description="Expand a sweep spec into scenarios, predict the ones not done yet "
                    "(each finished point is an atomic Parquet part, so an interrupted sweep "
                    "resumes), and upsert the results with provenance into the catalog's "
                    "predictions table.")
    p.add_argument("spec", metavar="SPEC",
                   help="a spec file, or the name of a shipped one (sweep-mtu-offload)")
    _add_execution(p)
    p.add_argument("--out", metavar="DIR",
                   help="output folder (default <data dir>/sweeps/<name>-<content hash>)")
    p.add_argument("--no-catalog", action="store_true",
                   help="write the Parquet parts only, not the catalog")
    add_level(p)
    p.set_defaults(func=run_sweep)

    p = sub.add_parser(
        "reproduce", help="reproduce seed findings (experiments/repro-*.yaml)",
        description="Run reproduction specs: predicted vs published values with absolute and "
                    "relative errors, a PNG shaped like the paper's figure with the published "
                    "points overlaid, and pass/fail per finding against its tolerance.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("name", nargs="?", metavar="NAME",
                      help="a reproduction (repro-kempf24-fig3-buffers) or a spec file")
    what.add_argument("--all", action="store_true", help="every shipped reproduction")
    what.add_argument("--list", action="store_true", help="list the shipped reproductions")
    _add_execution(p)
    p.add_argument("--out", metavar="DIR",
                   help="report folder (default <data dir>/reports/reproductions)")
    p.add_argument("--no-catalog", action="store_true",
                   help="do not write the predictions to the catalog")
    p.add_argument("--readme", metavar="FILE",
                   help="also write the findings table into FILE between its "
                        "REPRODUCTIONS:BEGIN/END markers (appended if absent)")
    p.add_argument("--repetitions", type=_positive_int, metavar="N",
                   help="runs per point of the DES and ns-3 (the findings check the mean; "
                        "default: the spec's repetitions, else 1)")
    p.set_defaults(func=run_reproduce)

    p = sub.add_parser(
        "validate", help="validation report: prediction errors per source and engine",
        description="Predict every measurement of a source with each engine and report the "
                    "median and 95th-percentile absolute percentage error, the worst cases "
                    "and which seed findings are reproduced (HTML with plots, and Markdown).")
    p.add_argument("--source", action="append", choices=("published", "dataset", "fresh"),
                   help="measurements to validate against (repeatable; default: all that "
                        "the catalog holds)")
    _add_execution(p)
    p.add_argument("--out", metavar="DIR",
                   help="report folder (default <data dir>/reports/validation)")
    p.add_argument("--reproduce", action="store_true",
                   help="run `quiclab reproduce --all` first (into --reproductions)")
    p.add_argument("--fresh-models", metavar="DIR",
                   help="this host's models for --source fresh (default <data dir>/models-fresh, "
                        "written by `quiclab calibrate --source fresh`)")
    p.add_argument("--reproductions", metavar="DIR",
                   help="folder of `quiclab reproduce` results to summarise (default: "
                        "<data dir>/reports/reproductions)")
    p.add_argument("--prospective", metavar="SPEC", type=Path, default=None,
                   help="prospective validation of a fresh testbed spec: probe the host, "
                        "register every cell's prediction, run the spec, compare and report "
                        "(`quiclab prospective run SPEC`; needs root and built peers)")
    p.add_argument("--experiment", default=None,
                   help="with --prospective: the runs' experiment name (one per session)")
    p.add_argument("--build-dir", type=Path, default=None,
                   help="with --prospective: where the testbed's peers are built")
    p.add_argument("--probe-scaling", choices=("on", "off", "both"), default="on",
                   help="fresh cells at their session's probed host state (on, the default; "
                        "sessions without host probes are not scaled), as if the host were "
                        "as calibrated (off), or both, with the session table "
                        "(fresh-sessions.md)")
    p.set_defaults(func=run_validate)


def _registry(args: argparse.Namespace) -> Any:
    from quiclab.models.registry import Registry

    registry = Registry.load(args.paths.models)
    if getattr(args, "level", None) is not None:
        registry.interval_level = args.level
    return registry


def _executor(args: argparse.Namespace) -> Any:
    from quiclab.experiments.executors import make_executor

    if args.jobs < 1:
        from quiclab.errors import SpecError
        raise SpecError(f"--jobs {args.jobs}: allowed ≥ 1")
    return make_executor(args.executor, args.jobs, args.scheduler)


def runtime_options(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Engine options that come from the command line, not the spec (build caches)."""
    return {"ns3": {"cache_dir": str(args.paths.cache / "ns3")}}


def run_sweep(args: argparse.Namespace) -> int:
    from quiclab.experiments import runner
    from quiclab.experiments.registry_check import check_sweep
    from quiclab.experiments.spec import find_spec, load_sweep

    spec = load_sweep(find_spec(args.spec, "sweep-"))
    if args.engine:
        spec = spec.with_engines(tuple(dict.fromkeys(args.engine)))
    registry = _registry(args)
    # Unknown implementations and CPUs: one line naming the file and axis, before running.
    check_sweep(spec, registry)
    resolved = spec.resolved()
    chash = runner.content_hash(resolved, registry.versions())
    out = Path(args.out) if args.out else runner.default_out(args.paths.data_dir, "sweep",
                                                             spec.name, chash)
    options = {e: {**runtime_options(args).get(e, {}), **spec.engine_options.get(e, {})}
               for e in spec.engines}
    started = time.perf_counter()
    report = runner.run_points(
        name=spec.name, kind="sweep", spec=resolved, scenarios=spec.scenarios(),
        engines=spec.engines, engine_options=options, registry=registry, out=out,
        executor=_executor(args), record=spec.record, chunk=spec.chunk,
        progress=not args.quiet, chash=chash)
    wall = time.perf_counter() - started
    runner.print_failures(report)
    rows = replaced = 0
    if not args.no_catalog and report.table is not None:
        try:
            rows, replaced = runner.to_catalog(args.catalog, report.table, name=spec.name,
                                               kind="sweep", provenance=report.provenance)
        except QuiclabError as err:  # a locked or damaged catalog: say what is kept
            raise _kept(err, report.table.num_rows, out) from None
    rates = ", ".join(f"{e} {report.rate(e):,.1f} pts/s" for e in report.seconds
                      if report.computed_by.get(e))  # no rate for an engine that computed none
    print(f"{spec.name}: {report.points} point×engine(s): {report.computed} computed, "
          f"{report.reused} reused, {len(report.failed)} failed in {wall:.1f} s"
          + (f" ({rates})" if rates else ""))
    print(f"  results: {out}/parts  ({report.table.num_rows if report.table else 0} rows)")
    if rows:
        again = f"--catalog {args.catalog} " if getattr(args, "catalog", None) else ""
        older = (f", replacing {replaced} rows of an earlier spec or model set"
                 if replaced else "")
        print(f"  catalog: {rows} rows in predictions{older} — quiclab {again}data sql "
              f"\"SELECT server, engine, goodput_mbps, limit_resource FROM predictions "
              f"WHERE sweep = '{spec.name}' LIMIT 10\"")
    return 1 if report.failed else 0


def _kept(err: QuiclabError, rows: int, out: Path) -> QuiclabError:
    """``err`` with a note that the sweep's computed rows are kept in its parts."""
    from quiclab.errors import DataError

    note = f"; the sweep's {rows} rows are kept in {out}/parts (run again to write them)"
    if isinstance(err, DataError):
        return DataError(err.path, err.reason + note, err.field)
    return QuiclabError(f"{err}{note}")


def run_reproduce(args: argparse.Namespace) -> int:
    from quiclab.experiments.reproduce import main_reproduce

    return main_reproduce(args)


def run_validate(args: argparse.Namespace) -> int:
    from quiclab.experiments.validate import main_validate

    if args.prospective is not None:
        from quiclab.experiments.prospective_cli import cmd_run

        engines = [e for e in (args.engine or ["des"]) if e in ("analytic", "des", "ns3")]
        return cmd_run(argparse.Namespace(**{**vars(args), "spec": args.prospective,
                                             "engine": engines}))
    return main_validate(args)


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")
