"""The ``quiclab host`` command group: probe this host, list stored probes.

``quiclab host probe`` measures the cost components the models use on this
host now (:mod:`quiclab.testbed.probe`) and stores the probe in the catalog;
``predict --set cpu=this-host`` (or the probe's name) then predicts at that
state. ``--repeat N`` takes N probes back to back and reports their run-to-run
spread per component.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quiclab.errors import QuiclabError
from quiclab.testbed import probe as probe_mod
from quiclab.testbed import probe_store


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``host`` and its subcommands on the main CLI's subparsers."""
    host = subparsers.add_parser(
        "host", help="probe this host's per-core rates (crypto, UDP, copy, a QUIC transfer)",
        description="Measure the cost components the models use on this host now, and what "
                    "else the host is doing; stored in the catalog's host_probes table.")
    sub = host.add_subparsers(dest="host_command", metavar="COMMAND", required=True)
    p = sub.add_parser("probe", help="take a host probe (≤ ~20 s) and store it")
    p.add_argument("--name", default="", help="a name to find this probe by "
                   "(`predict --set cpu=NAME`); default: its id")
    p.add_argument("--rounds", type=int, default=probe_mod.ROUNDS,
                   help=f"interleaved rounds per component (default {probe_mod.ROUNDS}; the "
                        "spread is theirs)")
    p.add_argument("--repeat", type=int, default=1,
                   help="probes back to back, with their run-to-run spread (default 1)")
    p.add_argument("--no-network", action="store_true",
                   help="leave out the UDP part (it needs root for two namespaces)")
    p.add_argument("--quic-stack", default=probe_mod.QUIC_STACK,
                   help=f"stack of the short QUIC transfer (default {probe_mod.QUIC_STACK}; "
                        "'none' leaves it out)")
    p.add_argument("--build-dir", type=Path, default=None,
                   help="where the testbed's peers are built (default testbed/.build)")
    p.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                   help="how long to wait for the testbed lock (a running session) "
                        "(default 600)")
    p.add_argument("--no-store", action="store_true", help="measure and print only")
    p.add_argument("--json", action="store_true", help="print the probe(s) as JSON")
    p.set_defaults(func=cmd_probe)
    p = sub.add_parser("probes", help="list the probes stored in the catalog")
    p.add_argument("--session", default=None, help="only this testbed session's")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_probes)
    return host


@contextlib.contextmanager
def _lock(needed: bool, wait_s: float) -> Iterator[None]:
    if not needed:
        yield
        return
    from quiclab.testbed.topology import clean_stale, exclusive

    with exclusive(wait_s=wait_s):
        clean_stale()
        yield


def _testbed(args: argparse.Namespace) -> Any:
    from quiclab.testbed.runner import Paths, Testbed

    runs_dir = Path(args.paths.data_dir) / "testbed-runs" if getattr(args, "paths", None) \
        else None
    return Testbed(Paths.default(runs_dir=runs_dir, build_dir=args.build_dir))


def format_probe(probe: probe_mod.HostProbe) -> str:
    """The probe as a table: component, ns per operation, spread, CPU/wall."""
    lines = [f"host probe {probe.probe_id}" + (f" ({probe.name})" if probe.name else "")
             + f" — {probe.host}, {probe.cpu}, {probe.taken_at}, {probe.duration_s:.1f} s, "
             f"{probe.rounds} rounds",
             f"  {'component':<17} {'ns/op':>10} {'spread':>7} {'cpu/wall':>8}  what"]
    for comp, what in probe_mod.COMPONENTS.items():
        fig = probe.figures.get(comp)
        if fig is None:
            continue
        ratio = fig.cpu_ns / fig.ns if fig.ns > 0 and math.isfinite(fig.cpu_ns) else math.nan
        lines.append(f"  {comp:<17} {fig.ns:>10.4g} {fig.spread * 100:>6.1f}% "
                     f"{'' if math.isnan(ratio) else f'{ratio:.2f}':>8}  {what}")
    s = probe.state
    lines.append(f"  host: {s.busy_cores:.2f} busy cores of {s.cores} over {s.wall_s:.1f} s, "
                 f"{s.other_busy_cores:.2f} not this probe's, steal {s.steal_cores:.3f} cores, "
                 f"clock {', '.join(f'{v:.0f}' for v in s.clock_mhz.values())} MHz "
                 f"({s.clock_source}), load {s.loadavg_1m:.2f}")
    if probe.quic:
        ok = [r for r in probe.quic.get("runs", []) if r.get("status") == "ok"]
        lines.append(f"  QUIC: {probe.quic['stack']} × {len(probe.quic['runs'])}, "
                     f"{probe.quic['bytes'] / 1e6:.0f} MB: "
                     + ", ".join(f"{r['goodput_mbps']:.0f}" for r in ok) + " Mbit/s")
    lines += [f"  note: {n}" for n in probe.notes]
    return "\n".join(lines)


def run_to_run(probes: list[probe_mod.HostProbe]) -> list[dict[str, Any]]:
    """Per component: median over probes and the coefficient of variation between them."""
    rows = []
    for comp in probe_mod.COMPONENTS:
        values = [p.figures[comp].ns for p in probes if comp in p.figures]
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        rows.append({"component": comp, "probes": len(values),
                     "median_ns": statistics.median(values),
                     "cv_pct": statistics.stdev(values) / mean * 100 if mean else math.nan,
                     "median_within_spread_pct": statistics.median(
                         p.figures[comp].spread for p in probes if comp in p.figures) * 100})
    return rows


def cmd_probe(args: argparse.Namespace) -> int:
    import os

    try:
        if args.rounds < 1 or args.repeat < 1:
            raise QuiclabError(f"--rounds={args.rounds} --repeat={args.repeat}: allowed ≥ 1")
        root = os.geteuid() == 0
        stack = "" if args.quic_stack in ("none", "") else args.quic_stack
        network = not args.no_network and root
        testbed = _testbed(args) if (stack and root) else None
        probes = []
        with _lock(network or testbed is not None, args.wait):
            for i in range(args.repeat):
                name = args.name if args.repeat == 1 or not args.name else f"{args.name}-{i}"
                probe = probe_mod.run_probe(rounds=args.rounds, network=network,
                                            testbed=testbed, quic_stack=stack, name=name)
                if not args.no_store:
                    probe_store.store(args.catalog, probe)
                probes.append(probe)
                if not args.json:
                    print(format_probe(probe), flush=True)
        if not root and not args.json:
            print("note: not root: the UDP part and the QUIC transfer were left out",
                  file=sys.stderr)
        spread = run_to_run(probes)
        if args.json:
            print(json.dumps({"probes": [p.content() | {"probe_id": p.probe_id,
                                                       "sha256": p.sha256} for p in probes],
                              "run_to_run": spread}))
            return 0
        if spread:
            print(f"\nrun-to-run over {len(probes)} probes (coefficient of variation):")
            for r in spread:
                print(f"  {r['component']:<17} median {r['median_ns']:>10.4g} ns  "
                      f"CV {r['cv_pct']:5.1f} %  (within a probe: "
                      f"{r['median_within_spread_pct']:.1f} %)")
        if not args.no_store:
            print(f"\nstored in {args.catalog} (table host_probes); predict at this state with "
                  f"`quiclab predict --set cpu={args.name or probe_store.THIS_HOST} …`")
        return 0
    except QuiclabError as err:
        print(f"quiclab host: {err}", file=sys.stderr)
        return 2


def cmd_probes(args: argparse.Namespace) -> int:
    probes = probe_store.load(args.catalog, args.session)
    rows = [{"probe_id": p.probe_id, "name": p.name, "taken_at": p.taken_at,
             "session": p.session, "phase": p.phase,
             **{k: round(p.figures[k].ns, 4) for k in probe_mod.COMPONENTS if k in p.figures},
             "other_busy_cores": p.state.other_busy_cores, "steal_cores": p.state.steal_cores}
            for p in probes]
    if args.json:
        print(json.dumps(rows))
        return 0
    if not rows:
        print("no host probes stored (run `quiclab host probe`)")
        return 0
    import pandas as pd

    from quiclab.experiments.reproduce import markdown_table

    frame = pd.DataFrame(rows)
    print(markdown_table(frame, list(frame.columns), list(frame.columns)))
    return 0
