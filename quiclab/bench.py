"""``quiclab bench``: speed figures (benchmarks print figures; tests never time things).

- ``analytic``: scenarios per second of the vectorised analytic engine on a
  batch of 10⁶ scenarios (10 implementation pairs × random RTT, loss, link
  rate, buffer and transfer size), plus end-to-end ``predict_batch`` with
  Prediction objects on a smaller batch;
- ``des`` / ``ns3``: simulated packets per CPU-second of the packet engines
  (delegated to ``quiclab.sim.des.bench`` and ``quiclab.sim.ns3.bench``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="print speed figures of the engines",
                       description="Benchmarks: scenarios/s (analytic), simulated packets per "
                                   "CPU-second (des, ns3).")
    p.add_argument("what", choices=("analytic", "des", "ns3", "all"), nargs="?", default="all")
    p.add_argument("--n", type=int, default=1_000_000,
                   help="batch size for the analytic benchmark (default 10⁶)")
    p.add_argument("--json", action="store_true", help="print one JSON object per benchmark")
    p.set_defaults(func=run_bench)


def bench_analytic(registry: Any, n: int = 1_000_000, seed: int = 0) -> dict[str, Any]:
    """Scenarios per second: the numpy core on ``n`` scenarios, and predict_batch end to end."""
    from dataclasses import fields

    from quiclab.sim.analytic import AnalyticEngine, inputs_from_resolved
    from quiclab.sim.analytic.core import Inputs, evaluate
    from quiclab.sim.scenario import Scenario

    engine = AnalyticEngine(registry)
    names = [m for m in registry.names()
             if m != "tcp+tls" and "h3" in registry.models[m].behaviour.apps][:5]
    pairs = [(s, c) for s in names for c in names][:10]
    resolved = engine.resolve_many([Scenario(server=s, client=c) for s, c in pairs])
    base = inputs_from_resolved(resolved)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(pairs), n)
    arrays = {f.name: np.asarray(getattr(base, f.name))[idx] for f in fields(Inputs)}
    rtt = rng.uniform(0.0, 0.3, n)
    arrays["rtt_s"] = 50e-6 + rtt
    arrays["loss_prob"] = rng.uniform(0.0, 0.025, n)
    arrays["link_bps"] = 10 ** rng.uniform(9, 11, n)
    arrays["rcvbuf_bytes"] = 212992 * 2.0 ** rng.integers(-1, 6, n)
    arrays["queue_bytes"] = np.maximum(65536, arrays["link_bps"] / 8 * arrays["rtt_s"])
    arrays["transfer_bytes"] = 10 ** rng.uniform(6, 10, n)
    inputs = Inputs(**arrays)
    evaluate(Inputs(**{k: v[:1000] for k, v in arrays.items()}))  # warm-up
    t0 = time.perf_counter()
    out = evaluate(inputs)
    core_s = time.perf_counter() - t0
    m = 2000
    scenarios = [Scenario(server=pairs[i % len(pairs)][0], client=pairs[i % len(pairs)][1],
                          rtt_ms=float(rtt[i] * 1e3), loss_pct=float(arrays["loss_prob"][i] * 100))
                 for i in range(m)]
    t0 = time.perf_counter()
    preds = engine.predict_batch(scenarios)
    e2e_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.predict(scenarios[0])
    single_ms = (time.perf_counter() - t0) * 1e3
    return {
        "benchmark": "analytic",
        "batch": n,
        "core_seconds": core_s,
        "core_scenarios_per_s": n / core_s,
        "end_to_end_batch": m,
        "end_to_end_scenarios_per_s": m / e2e_s,
        "single_predict_ms": single_ms,
        "median_goodput_mbps": float(np.median(out.goodput_bps) / 1e6),
        "predictions_checked": len(preds),
    }


def run_bench(args: argparse.Namespace) -> int:
    from quiclab.models.registry import Registry

    results = []
    if args.what in ("analytic", "all"):
        results.append(bench_analytic(Registry.load(args.paths.models), n=args.n))
    if args.what in ("des", "all"):
        from quiclab.sim.des import bench as des_bench

        # The DES bench also times the ns-3 engine in the same run (issue 4:
        # packet mode should reach at least 2× ns-3's packets per CPU-second).
        results.append(des_bench.bench(ns3=True, ns3_cache_dir=str(args.paths.cache / "ns3"),
                                       out=None))
    if args.what == "ns3":
        from quiclab.sim.ns3 import bench as ns3_bench

        results.append(ns3_bench.bench(cache_dir=args.paths.cache / "ns3", out=None))
    for r in results:
        if args.json:
            print(json.dumps(r, sort_keys=True, default=float))
            continue
        print(f"== {r.get('benchmark', r.get('engine', '?'))}")
        for k, v in r.items():
            if k == "benchmark":
                continue
            print(f"  {k:34s} {v:,.3f}" if isinstance(v, float) else f"  {k:34s} {v}")
    return 0
