"""``quiclab trace``: qlog traces in the catalog, simulated beside real.

    quiclab trace ingest PATH… [--run-id ID] [--stack S] [--origin file]
    quiclab trace list [--run LIKE]
    quiclab trace events TRACE_ID [--every N] [--event NAME …] [--to FILE.parquet|csv]
    quiclab trace simulate --server S --client C [--set k=v …] [--out FILE.sqlog] [--ingest]
    quiclab trace compare RUN_ID_OR_LIKE [--sim TRACE_ID …] [--plot FILE.png] [--engine des]
    quiclab trace identify [--stack S …] [--run LIKE] [--json]

``compare`` takes a fresh run (or a set: a SQL ``LIKE`` pattern over run ids),
simulates each run's Scenario with the DES writing qlog (the run's path as
``validate --source fresh`` gives it: relay, queue, GRO), ingests the simulated
trace (origin ``des``, run id ``des:<run id>``) and prints the distributions of
``quiclab.calibration.traces`` side by side: congestion reduction factor, cwnd
after a loss, loss-event rate, recovery duration, reductions per epoch, ACKs
per packet, RTT inflation. ``--plot`` draws their distributions (matplotlib).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pandas as pd

from quiclab.errors import DataError

#: The distributions ``compare`` prints and plots: (label, Features attribute or
#: property, reducer over the events).
COMPARED = (
    ("reduction factor β", "reductions", "median"),
    ("cwnd after a loss (datagrams)", "cwnd_after_loss_packets", "median"),
    ("loss-event rate (per packet)", "loss_event_rate", "value"),
    ("loss rate (per packet)", "loss_rate", "value"),
    ("reductions per recovery epoch", "reductions_per_epoch", "value"),
    ("recovery duration (srtt)", "recovery_rtts", "median"),
    ("packets per ACK", "packets_per_ack", "value"),
    ("RTT inflation p95 (× min RTT)", "srtt_over_min", "p95"),
    ("growth per round (datagrams)", "growth_per_rtt", "median"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="qlog traces: ingest, simulate, compare, identify")
    tsub = p.add_subparsers(dest="trace_command", required=True)
    a = tsub.add_parser("ingest", help="ingest qlog files or run directories")
    a.add_argument("files", nargs="*", metavar="PATH")
    a.add_argument("--runs", metavar="LIKE", help="(again) the qlog of the catalog's runs whose "
                                                  "id is LIKE this, from their log directories")
    a.add_argument("--run-id", help="run id to file the traces under (default: the file name)")
    a.add_argument("--stack", help="the stack that wrote them")
    a.add_argument("--origin", default="file", help="fresh | des | ns3 | file")
    a.set_defaults(func=run_ingest)
    a = tsub.add_parser("list", help="traces in the catalog")
    a.add_argument("--run", help="run ids LIKE this")
    a.set_defaults(func=run_list)
    a = tsub.add_parser("events", help="one trace's events (whole, or every N-th)")
    a.add_argument("trace_id")
    a.add_argument("--every", type=int, default=1)
    a.add_argument("--event", action="append", help="only these events (repeatable)")
    a.add_argument("--to", help="write to a .parquet or .csv file instead of printing")
    a.set_defaults(func=run_events)
    a = tsub.add_parser("simulate", help="a DES run that writes qlog")
    a.add_argument("--server", required=True)
    a.add_argument("--client", required=True)
    a.add_argument("--set", action="append", default=[], metavar="K=V")
    a.add_argument("--out", help="qlog file (default <data dir>/qlog-sim/<scenario>.sqlog)")
    a.add_argument("--max-events", type=int, default=200_000)
    a.add_argument("--ingest", action="store_true", help="also ingest it (origin des)")
    a.set_defaults(func=run_simulate)
    a = tsub.add_parser("compare", help="real against simulated dynamics")
    a.add_argument("run", help="a fresh run id, or a LIKE pattern for a set of runs")
    a.add_argument("--sim", action="append", help="simulated trace ids (default: simulate)")
    a.add_argument("--plot", help="write the distributions to this PNG")
    a.add_argument("--fresh-models", help="models for this host (default <data dir>/models-fresh,"
                                          " else the packaged models on this host's CPU)")
    a.add_argument("--max-events", type=int, default=200_000)
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=run_compare)
    a = tsub.add_parser("identify", help="behaviour identified from a stack's traces")
    a.add_argument("--stack", action="append", help="stacks (default: every stack with traces)")
    a.add_argument("--run", help="run ids LIKE this")
    a.add_argument("--origin", default="fresh")
    a.add_argument("--json", action="store_true")
    a.add_argument("--write", metavar="FILE", nargs="?", const="",
                   help="also write the identification the models apply (default: the "
                        "package's models/trace-behaviour.json)")
    a.set_defaults(func=run_identify)


# ------------------------------------------------------------------ handlers
def _catalog(args: argparse.Namespace, read_only: bool = False) -> Any:
    from quiclab.datasets.catalog import Catalog

    return Catalog(args.catalog, read_only=read_only)


def run_ingest(args: argparse.Namespace) -> int:
    from quiclab.datasets import qlog

    n = 0
    if not args.files and not args.runs:
        raise DataError("trace ingest", "give qlog files / run directories, or --runs LIKE")
    with _catalog(args) as cat:
        if args.runs:
            for run_id, logdir, server, client in cat.con.execute(
                    "SELECT run_id, logdir, server_impl, client_impl FROM runs WHERE run_id LIKE ? "
                    "AND logdir IS NOT NULL ORDER BY run_id", [args.runs]).fetchall():
                if not Path(logdir).is_dir():
                    print(f"{run_id}: log directory {logdir} is gone")
                    continue
                rows = qlog.ingest_run(cat, run_id, Path(logdir), server=server, client=client,
                                       parquet_root=Path(args.catalog).parent / "qlog", log=print)
                n += len(rows)
                print(f"{run_id}: {len(rows)} trace(s), {sum(r['events'] for r in rows)} events")
        for text in args.files:
            path = Path(text)
            if not path.exists():
                raise DataError(path, "no such file or directory")
            run_id = args.run_id or path.stem
            if path.is_dir():
                rows = qlog.ingest_run(cat, run_id, path, server=args.stack, client=args.stack,
                                       parquet_root=Path(args.catalog).parent / "qlog",
                                       origin=args.origin, log=print)
            else:
                try:
                    trace = qlog.parse(path)
                except qlog.QlogError as err:
                    cat.record_issue("qlog", str(path), str(err))
                    print(f"qlog: {err}")
                    continue
                for problem in trace.problems:
                    cat.record_issue("qlog", str(path), problem)
                    print(f"qlog: {path}: {problem}")
                side = qlog.guess_side(path, trace.vantage, trace.title)
                rows = [qlog.store(cat, trace, run_id=run_id, side=side, stack=args.stack,
                                   origin=args.origin,
                                   parquet_dir=Path(args.catalog).parent / "qlog" / run_id)]
            for r in rows:
                n += 1
                print(f"{r['trace_id']}: {r['events']} events"
                      + (" (sampled in the catalog)" if r["sampled"] else "")
                      + (" (truncated)" if r["truncated"] else ""))
    print(f"{n} trace(s) ingested")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with _catalog(args, read_only=True) as cat:
        if "qlog_traces" not in cat.tables():
            print("no traces (quiclab trace ingest, or a testbed run with --set qlog=true)")
            return 0
        sql = ("SELECT t.trace_id, t.stack, t.origin, t.events, t.sampled, t.truncated, "
               "c.packets_sent, c.packets_lost, round(c.cwnd_median_bytes) AS cwnd_median "
               "FROM qlog_traces t JOIN qlog_connections c USING (trace_id)")
        params: list[Any] = []
        if args.run:
            sql += " WHERE t.run_id LIKE ?"
            params.append(args.run)
        print(cat.df(sql + " ORDER BY 1", params).to_string(index=False))
    return 0


def run_events(args: argparse.Namespace) -> int:
    from quiclab.datasets import qlog

    if args.every < 1:
        raise DataError("--every", f"must be ≥ 1, got {args.every}")
    with _catalog(args, read_only=True) as cat:
        try:
            frame = qlog.events(cat, args.trace_id, every=args.every,
                                names=tuple(args.event) if args.event else None)
        except qlog.QlogError as err:
            raise DataError(args.catalog, str(err), field="trace_id") from None
    if args.to:
        out = Path(args.to)
        if out.suffix == ".parquet":
            frame.to_parquet(out, compression="zstd", index=False)
        else:
            frame.to_csv(out, index=False)
        print(f"{len(frame)} events → {out}")
    else:
        print(frame.dropna(axis=1, how="all").to_string(index=False, max_rows=200))
    return 0


def _scenario_from_sets(server: str, client: str, sets: list[str]) -> Any:
    from quiclab.sim.scenario import Scenario

    fields: dict[str, Any] = {"server": server, "client": client}
    for item in sets:
        for pair in item.split():
            if "=" not in pair:
                raise DataError("--set", f"{pair!r}: expected KEY=VALUE")
            k, v = pair.split("=", 1)
            fields[k] = v
    return Scenario.from_dict(fields)


def simulate(registry: Any, scenario: Any, out: Path, max_events: int) -> Any:
    """One DES run of ``scenario`` writing the sender's qlog to ``out``; its Prediction."""
    from quiclab.sim.des import DesEngine

    out.parent.mkdir(parents=True, exist_ok=True)
    return DesEngine(registry, max_packets=0, qlog_path=str(out),
                     qlog_max_events=max_events).predict(scenario)


def run_simulate(args: argparse.Namespace) -> int:
    from quiclab.datasets import qlog
    from quiclab.models.registry import Registry

    registry = Registry.load(args.paths.models)
    scenario = _scenario_from_sets(args.server, args.client, args.set)
    out = Path(args.out) if args.out else (args.paths.data_dir / "qlog-sim"
                                           / f"{scenario.key()[:16]}.sqlog")
    pred = simulate(registry, scenario, out, args.max_events)
    print(f"{scenario.describe()}: DES {pred.goodput_mbps:.1f} Mbit/s, limit {pred.limit}")
    print(f"qlog: {out}")
    if args.ingest:
        with _catalog(args) as cat:
            row = qlog.store(cat, qlog.parse(out), run_id=f"des:{scenario.key()[:16]}",
                             side="server", stack=scenario.server, origin="des",
                             parquet_dir=Path(args.catalog).parent / "qlog" / "des")
        print(f"ingested as {row['trace_id']} ({row['events']} events)")
    return 0


def _fresh_registry_and_defaults(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """This host's models (``calibrate --source fresh``) and the veth path's defaults, or
    the packaged models on this host's CPU when there are none (said in the output)."""
    from quiclab.models.registry import Registry

    fresh_dir = Path(args.fresh_models) if args.fresh_models \
        else args.paths.data_dir / "models-fresh"
    if fresh_dir.is_dir() and any(p.name != "cpus.json" for p in fresh_dir.glob("*.json")):
        from quiclab.calibration.fresh import path_defaults

        defaults: dict[str, Any] = dict(path_defaults(fresh_dir) or {})
        return Registry.load(fresh_dir), defaults, f"models: {fresh_dir}"
    return (Registry.load(args.paths.models), {"base_rtt_us": 100.0, "link_gbps": 40.0},
            f"models: {args.paths.models} (no fresh models in {fresh_dir})")


def sim_scenario_for_run(runs: pd.DataFrame, registry: Any, defaults: dict[str, Any]) -> Any:
    """The Scenario ``validate --source fresh`` gives a fresh run (one cell of one run)."""
    from quiclab.experiments.validate import _fresh_bulk_cells

    cells = _fresh_bulk_cells(runs, set(registry.names()), defaults)
    if not cells:
        raise DataError("run", f"{runs.run_id.iloc[0]}: no model for "
                               f"{runs.server_impl.iloc[0]} → {runs.client_impl.iloc[0]}")
    return cells[0].scenario


def _value(f: Any, attr: str, how: str) -> float | None:
    import numpy as np

    if how == "value":
        scalar = getattr(f, attr)
        return None if scalar is None else float(scalar)
    v: list[float] = ([c / f.mss for c in f.cwnd_after_loss_bytes]
                      if attr == "cwnd_after_loss_packets" else getattr(f, attr))
    vals = [x for x in (v or []) if x is not None and math.isfinite(x)]
    if not vals:
        return None
    return float(np.median(vals)) if how == "median" else float(np.quantile(vals, 0.95))


def compare_table(real: list[Any], sim: list[Any]) -> pd.DataFrame:
    """One row per compared distribution: real and simulated (median over traces of
    each trace's value), their ratio, and the traces behind each."""
    import numpy as np

    rows = []
    for label, attr, how in COMPARED:
        r = [x for x in (_value(f, attr, how) for f in real) if x is not None]
        s = [x for x in (_value(f, attr, how) for f in sim) if x is not None]
        rv = float(np.median(r)) if r else None
        sv = float(np.median(s)) if s else None
        rows.append({"quantity": label, "real": rv, "simulated": sv,
                     "sim/real": (sv / rv) if rv and sv is not None else None,
                     "real traces": len(r), "sim traces": len(s)})
    return pd.DataFrame(rows)


def run_compare(args: argparse.Namespace) -> int:
    from quiclab.calibration import traces
    from quiclab.datasets import qlog
    from quiclab.sim.scenario import Scenario

    registry, defaults, models_note = _fresh_registry_and_defaults(args)
    with _catalog(args) as cat:
        qlog.ensure_tables(cat.con)
        like = args.run  # an exact run id, or a LIKE pattern for a set
        runs = cat.df("SELECT * FROM runs WHERE run_id LIKE ? AND status = 'ok'", [like])
        real_ids = cat.df("SELECT trace_id, run_id, stack FROM qlog_traces WHERE run_id LIKE ? "
                          "AND side = 'server' AND origin = 'fresh'", [like])
        if real_ids.empty:
            raise DataError(args.catalog, f"no server qlog for runs LIKE {args.run!r} "
                                          "(testbed run --set qlog=true)", field="run")
        sim_ids = list(args.sim or [])
        if not sim_ids:
            for run_id in real_ids.run_id.unique():
                one = runs[runs.run_id == run_id]
                if one.empty:
                    continue
                reg = registry
                if one.server_impl.iloc[0] not in set(registry.names()):
                    # A stack this host's models do not cover (no fresh calibration of
                    # it): the packaged model, on this host's CPU by the CPU rule.
                    from quiclab.models.registry import Registry

                    reg = Registry.load(args.paths.models)
                    print(f"{run_id}: {one.server_impl.iloc[0]} has no fresh model; "
                          f"using {args.paths.models}")
                # Each repetition its own random streams (loss, stalls), as on the testbed.
                # testbed "unseen": this host's models carry no other lab's fitted pair
                # effects, and their registry does not list this host's testbed.
                scenario = sim_scenario_for_run(one, reg, defaults).with_(
                    run=int(one.repetition.iloc[0] or 0), testbed="unseen")
                if reg is not registry and scenario.cpu not in reg.cpus.names():
                    # The packaged models know the catalog's CPUs and testbeds, not this
                    # host's: the default CPU, and no testbed's fitted effects.
                    scenario = scenario.with_(cpu=Scenario().cpu, testbed="unseen")
                    print(f"{run_id}: simulated on the {scenario.cpu} (this host's CPU is "
                          "known to the fresh models only)")
                out = Path(args.catalog).parent / "qlog-sim" / f"{run_id}.sqlog"
                pred = simulate(reg, scenario, out, args.max_events)
                row = qlog.store(cat, qlog.parse(out), run_id=f"des:{run_id}", side="server",
                                 stack=scenario.server, origin="des",
                                 parquet_dir=Path(args.catalog).parent / "qlog" / "des")
                sim_ids.append(row["trace_id"])
                observed = float(one.goodput_mbps.iloc[0])
                print(f"{run_id}: real {observed:.1f} Mbit/s, DES {pred.goodput_mbps:.1f} "
                      f"({scenario.describe()})")
        real = [traces.features(qlog.events(cat, t), t) for t in real_ids.trace_id]
        sim = [traces.features(qlog.events(cat, t), t) for t in sim_ids]
    table = compare_table(real, sim)
    print(models_note)
    if args.json:
        print(table.to_json(orient="records"))
    else:
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if args.plot:
        plot(real, sim, Path(args.plot))
        print(f"plot: {args.plot}")
    return 0


def plot(real: list[Any], sim: list[Any], out: Path) -> None:
    """Empirical CDFs of the per-event distributions, real against simulated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = (("reduction factor β", lambda f: f.reductions),
              ("cwnd after a loss (datagrams)", lambda f: [c / f.mss for c in
                                                           f.cwnd_after_loss_bytes]),
              ("recovery duration (srtt)", lambda f: f.recovery_rtts),
              ("packets per ACK", lambda f: f.acked_per_ack),
              ("smoothed RTT / min RTT", lambda f: f.srtt_over_min),
              ("packets between losses", lambda f: list(np.diff(f.reduction_times_ms)) and
               [f.packets_sent / max(len(f.reductions), 1)]))
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (title, get) in zip(axes.flat, panels, strict=False):
        for label, fs, style in (("real", real, "-"), ("simulated", sim, "--")):
            vals = np.sort(np.asarray([v for f in fs for v in (get(f) or [])
                                       if v is not None and math.isfinite(v)], dtype=float))
            if len(vals):
                ax.step(vals, np.arange(1, len(vals) + 1) / len(vals), style, label=label,
                        where="post")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("CDF")
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)


def run_identify(args: argparse.Namespace) -> int:
    from quiclab.calibration import traces

    with _catalog(args, read_only=True) as cat:
        if "qlog_traces" not in cat.tables():
            raise DataError(args.catalog, "no traces in the catalog", field="qlog_traces")
        stacks = args.stack or [r[0] for r in cat.con.execute(
            "SELECT DISTINCT stack FROM qlog_traces WHERE stack IS NOT NULL AND origin = ? "
            "ORDER BY 1", [args.origin]).fetchall()]
        tables = [traces.identify(cat, s, run_like=args.run, origin=args.origin) for s in stacks]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if args.write is not None and not table.empty:
        from quiclab.models.costmodel import __file__ as models_init
        from quiclab.testbed.stacks import STACKS

        path = Path(args.write) if args.write else Path(models_init).parent / \
            traces.IDENTIFIED_FILE
        by_stack = {s: (STACKS[s].default_cc if s in STACKS else "cubic", part)
                    for s, part in table.groupby("stack", sort=True)}
        traces.write_identified(by_stack, path)
        print(f"identification written to {path}")
    if args.json:
        print(table.to_json(orient="records"))
        return 0
    for stack, part in table.groupby("stack", sort=False):
        print(f"== {stack} (runs: {part.runs.iloc[0]})")
        shown = part.assign(interval=[
            "" if lo is None or pd.isna(lo) else f"[{lo:.4g}, {hi:.4g}]"
            for lo, hi in zip(part.lo, part.hi, strict=False)])
        print(shown[["parameter", "value", "interval", "unit", "traces", "events", "why"]]
              .to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return 0
