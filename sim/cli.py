"""``quiclab predict``: one Scenario in, one Prediction out, from any engine."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from quiclab.errors import DataError, ScenarioError, excerpt


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predict goodput for one scenario",
                       description="Predict goodput, CPU, packets and the limiting resource "
                                   "of one scenario. Defaults reproduce the QIR-10G baseline.")
    p.add_argument("--server", help="server (sender) implementation, e.g. lsquic or lsquic@march")
    p.add_argument("--client", help="client (receiver) implementation")
    p.add_argument("--set", action="extend", nargs="+", default=[], metavar="FIELD=VALUE",
                   help="override Scenario fields (repeatable; several per flag), e.g. "
                        "--set mtu_bytes=9000 --set rtt_ms=10 loss_pct=0.5, or a request "
                        "workload: --set workload=requests request_bytes=630 connections=100 "
                        "streams=10 requests=1000000; quote a value with spaces: "
                        "--set 'cpu=Intel Xeon E5-2640 v4'")
    p.add_argument("--scenario", metavar="FILE.yaml", help="read scenario fields from YAML/JSON")
    p.add_argument("--engine", default="analytic", choices=("analytic", "des", "ns3"),
                   help="engine to use (default analytic)")
    p.add_argument("--backend", default="numpy", choices=("numpy", "compiled", "auto"),
                   help="analytic engine: the core's backend. numpy (default) answers one "
                        "scenario in milliseconds; compiled (numba, what sweeps use) pays "
                        "~0.5 s of CPU to import numba and load its cached machine code; "
                        "the two agree to ~1e-12 relative")
    p.add_argument("--runs", type=_runs, default=1, metavar="N",
                   help="DES and ns-3: simulate N runs, run … run+N−1 (the scenario's run, "
                        "0 unless set; random loss, reordering and stalls are drawn per run) "
                        "and print the goodput's mean and spread beside the first run "
                        f"(1 … {MAX_RUNS}, default 1; a progress bar on stderr; the analytic "
                        "engine is deterministic)")
    p.add_argument("--json", action="store_true",
                   help="print the Prediction as one JSON object (goodput_mbps, limit, …); "
                        "with --runs, an object with every run and the goodput summary")
    from quiclab.cliopts import add_level

    add_level(p)
    p.set_defaults(func=run_predict, writes=False)


#: Most runs of one `predict` (a sweep's repetitions are the tool for more).
MAX_RUNS = 10_000


def _runs(text: str) -> int:
    """``--runs``: a whole number 1 … MAX_RUNS (argparse makes the error one line)."""
    from quiclab.sim.scenario import whole_number

    try:
        value = whole_number("--runs", text)
    except ScenarioError:
        value = 0
    if not 1 <= value <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"expected a whole number 1 … {MAX_RUNS}, "
                                         f"got {excerpt(text)}")
    return value


def scenario_from_args(args: argparse.Namespace) -> tuple[Any, dict[str, str]]:
    """A Scenario from --scenario FILE, --server/--client and --set, and for each
    field given where it came from (the --set item, the flag or the file).

    An impossible value is reported against where it came from.
    """
    from quiclab.sim.scenario import Scenario

    fields, origin = _fields_and_origin(args)
    if "testbed" in fields:
        fields = _on_testbed(fields, args, origin)
    try:
        return Scenario.from_dict(fields), origin
    except ScenarioError as err:
        raise _attributed(err, origin) from None


def _on_testbed(fields: dict[str, Any], args: argparse.Namespace,
                origin: dict[str, str]) -> dict[str, Any]:
    """``fields`` with the named testbed's defaults (models directory's testbeds.json)
    under them."""
    from quiclab.models.testbeds import FILE, Testbeds, on_testbed

    models = getattr(getattr(args, "paths", None), "models", None)
    path = Path(models) / FILE if models else None
    testbeds = Testbeds.load(path) if path is not None and path.is_file() else Testbeds.stated()
    try:
        return on_testbed(fields, testbeds)
    except KeyError:
        raise ScenarioError("testbed", fields["testbed"],
                            "one of: " + ", ".join([*testbeds.ids(), "unseen"]),
                            source=origin.get("testbed")) from None


def _fields_and_origin(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The Scenario fields the arguments give, and for each where it came from."""
    from quiclab.sim.scenario import parse_assignments

    fields: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if args.scenario:
        from_file = load_mapping(Path(args.scenario))
        fields.update(from_file)
        origin.update(dict.fromkeys(from_file, args.scenario))
    for flag in ("server", "client"):
        value = getattr(args, flag)
        if value is not None:  # an empty name is refused by Scenario, not ignored
            fields[flag] = value
            origin[flag] = f"--{flag}"
    assigned = parse_assignments(args.set)
    fields.update(assigned)
    origin.update(dict.fromkeys(assigned, "--set"))
    return fields, origin


def _attributed(err: ScenarioError, origin: dict[str, str]) -> ScenarioError:
    """``err`` naming the argument or file its field came from (unless it names one)."""
    if err.source or err.field not in origin:
        return err
    return ScenarioError(err.field, err.value, err.allowed, source=origin[err.field])


def load_mapping(path: Path) -> dict[str, Any]:
    """One YAML/JSON mapping of Scenario fields; DataError naming the file and line."""
    import yaml

    from quiclab import yamlio

    if not path.exists():
        raise DataError(path, "no such file")
    text = yamlio.read(path, "scenario file")  # size, UTF-8, not a directory
    if path.suffix.lower() == ".json":
        # JSON is YAML too, but YAML would let a trailing comma or a repeated key pass.
        try:
            data = json.loads(text, object_pairs_hook=_unique_json_object)
        except json.JSONDecodeError as err:
            raise DataError(path, f"not valid JSON: line {err.lineno}, column {err.colno}: "
                                  f"{err.msg}") from None
        except ValueError as err:
            raise DataError(path, f"not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise DataError(path, "expected an object of Scenario fields")
        return data
    try:
        data = yamlio.load(text)
    except yaml.YAMLError as err:
        raise DataError(path, f"not valid YAML: {yamlio.where(err)}") from None
    if not isinstance(data, dict):
        raise DataError(path, "expected a mapping of Scenario fields")
    return data


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def run_predict(args: argparse.Namespace) -> int:
    from quiclab.models.registry import Registry
    from quiclab.sim.engine import STOCHASTIC_ENGINES, get_engine, goodput_spread

    scenario, origin = scenario_from_args(args)
    runs = args.runs if args.engine in STOCHASTIC_ENGINES else 1
    if runs != args.runs:
        print(f"quiclab: --runs {args.runs}: the {args.engine} engine is deterministic; "
              "one run", file=sys.stderr)
    registry = Registry.load(args.paths.models)
    if args.level is not None:
        registry.interval_level = args.level
    options: dict[str, Any] = {}
    if args.engine == "ns3":
        options["cache_dir"] = args.paths.cache / "ns3"
    elif args.engine == "analytic":
        options["backend"] = args.backend
    # cpu=this-host or a stored host probe's name: the machine in its probed state (the
    # probe store, and the catalog behind it, are imported only for such a name).
    try:
        known = scenario.cpu != "this-host" and bool(registry.cpus.find(scenario.cpu))
    except ScenarioError:
        known = False
    if not known:
        from quiclab.models.cpus import CpuCatalog, read_host_cpu
        from quiclab.testbed.probe_store import attach

        try:
            registry = attach(registry, scenario.cpu, args.catalog,
                              read_host_cpu(CpuCatalog.packaged()))
        except ScenarioError as err:
            raise _attributed(err, origin) from None
    if runs > 1:
        options["jobs" if args.engine == "ns3" else "workers"] = min(runs, os.cpu_count() or 1)
    engine = get_engine(args.engine, registry, **options)
    try:
        preds = _predict_runs(engine, [scenario.with_(run=scenario.run + r)
                                       for r in range(runs)],
                              options.get("jobs") or options.get("workers") or 1)
        pred = preds[0]
    except ScenarioError as err:
        # Names and combinations are checked when the scenario is resolved; the
        # value is reported against its argument or file, as on construction.
        raise _attributed(err, origin) from None
    summary = goodput_spread([p.goodput_mbps for p in preds]) if runs > 1 else None
    if args.json:
        if summary is None:
            print(json.dumps(pred.to_dict(), sort_keys=True))
        else:
            print(json.dumps({**summary, "predictions": [p.to_dict() for p in preds]},
                             sort_keys=True))
        return 0
    print(format_prediction(pred))
    if summary is not None:
        print(f"  runs      {runs} (run {scenario.run}–{scenario.run + runs - 1}): goodput mean "
              f"{summary['goodput_mean_mbps']:.1f}, sd {summary['goodput_sd_mbps']:.1f}, "
              f"min {summary['goodput_min_mbps']:.1f}, max {summary['goodput_max_mbps']:.1f} "
              "Mbit/s; the lines above are the first run's")
    return 0





def _band(pred: Any) -> str:
    """``90 % band [lo, hi]`` (or the parameter interval when no band was learned)."""
    import math

    level = pred.interval_level
    name = f"{level * 100:g} % band" if math.isfinite(level) else "parameter interval"
    return f"{name} [{_mbps(pred.goodput_lo_mbps)}, {_mbps(pred.goodput_hi_mbps)}]"


def _mbps(value: float) -> str:
    """A rate with three significant digits at least (1.23, 45.6, 789, 12345)."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def _predict_runs(engine: Any, scenarios: list[Any], workers: int) -> list[Any]:
    """Every run's Prediction; more than one run is computed behind a progress bar
    (stderr, rate and ETA) in batches of a twentieth of the runs (at least ``workers``,
    so that each batch keeps every worker busy)."""
    if len(scenarios) == 1:
        return list(engine.predict_batch(scenarios))
    from quiclab.experiments.progress import ProgressReporter

    size = max(workers, -(-len(scenarios) // 20))
    preds: list[Any] = []
    with ProgressReporter(f"predict · {engine.name}", len(scenarios)) as bar:
        for i in range(0, len(scenarios), size):
            batch = scenarios[i:i + size]
            preds.extend(engine.predict_batch(batch))
            bar.advance(len(batch))
    return preds


def format_prediction(pred: Any) -> str:
    s = pred.scenario
    lines = [
        f"{s.describe()}",
        f"  goodput   {pred.goodput_mbps:9.1f} Mbit/s  {_band(pred)}  limit: {pred.limit}  "
        f"({pred.engine} {pred.engine_version})",
        f"  band      {pred.interval_source}",
        f"  params    fitted parameters alone [{_mbps(pred.param_lo_mbps)}, "
        f"{_mbps(pred.param_hi_mbps)}]",
        "  evidence  " + (f"outside: {pred.extrapolated}" if pred.extrapolated
                          else "unknown (no domain.json beside these models)"
                          if "no domain.json" in pred.interval_source
                          else "inside the evidence of its models and pair"),
        f"  CPU       server {pred.server_cpu_util * 100:5.1f} %   client "
        f"{pred.client_cpu_util * 100:5.1f} %",
        f"  packets   data {pred.server_packets_sent:,.0f}  acks {pred.acks:,.0f}  "
        f"losses {pred.losses:,.0f}  rcvbuf drops {pred.rcvbuf_drops:,.0f}",
        "  headroom  " + ", ".join(f"{k} {v * 100:+.0f} %" if v != float('inf') else f"{k} ∞"
                                   for k, v in sorted(pred.headroom.items(), key=lambda kv: kv[1])),
        f"  CPU rule  {pred.cpu_rule}",
    ]
    if s.workload != "bulk":
        lines[1:1] = [
            f"  requests  {pred.requests_per_s:12,.0f} req/s   completion {pred.completion_s:.3f} s"
            f"   latency p50 {pred.latency_p50_ms:.3f} ms  p99 {pred.latency_p99_ms:.3f} ms"]
    lines += [f"  note      {n}" for n in pred.notes]
    return "\n".join(lines)
