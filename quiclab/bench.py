"""``quiclab bench``: speed figures (benchmarks print figures; tests never time things).

- ``analytic``: scenarios per second of the vectorised analytic engine on a
  batch of 10⁶ scenarios (10 implementation pairs × random RTT, loss, link
  rate, buffer and transfer size; the median of three runs, with the CPU time
  they took and the load average, as the machine may be shared), plus
  end-to-end ``predict_batch`` with Prediction objects on a smaller batch, one
  ``predict``, and what loading the compiled core cost this process;
- ``des`` / ``ns3``: simulated packets per CPU-second of the packet engines
  (delegated to ``quiclab.sim.des.bench`` and ``quiclab.sim.ns3.bench``);
- ``app``: the what-if page's latency per widget change (target: every analytic
  what-if answers in under 200 ms), the app driven by Streamlit's AppTest;
- ``cli``: wall and CPU time of whole ``quiclab`` processes — ``--help`` and an
  analytic ``predict`` (target: 0.5 s wall each), and ``predict --backend
  compiled`` beside them for what numba's import and cache load cost.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from quiclab.errors import QuiclabError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="print speed figures of the engines",
                       description="Benchmarks: scenarios/s (analytic), simulated packets per "
                                   "CPU-second (des, ns3), what-if latency (app).")
    p.add_argument("what", choices=("analytic", "des", "ns3", "app", "cli", "all"), nargs="?",
                   default="all")
    p.add_argument("--repeat", type=int, default=7,
                   help="cli: runs of each command (default 7; the median is reported)")
    p.add_argument("--n", type=int, default=1_000_000,
                   help="batch size for the analytic benchmark (default 10⁶)")
    p.add_argument("--json", action="store_true", help="print one JSON object per benchmark")
    p.set_defaults(func=run_bench)


def bench_analytic(registry: Any, n: int = 1_000_000, seed: int = 0,
                   repeat: int = 3) -> dict[str, Any]:
    """Scenarios per second: the core on ``n`` scenarios, and predict_batch end to end
    (on the first 2000 of them, or all if fewer). QuiclabError if ``n`` < 1."""
    import os
    from dataclasses import fields

    from quiclab.sim.analytic import AnalyticEngine, compiled, core, inputs_from_resolved
    from quiclab.sim.analytic.core import Inputs, evaluate
    from quiclab.sim.scenario import Scenario

    if n < 1:
        raise QuiclabError(f"--n {n}: the analytic batch needs at least 1 scenario")
    engine = AnalyticEngine(registry)
    # QUIC stacks only: kernel TCP (a model with a tcp section) pairs only with itself.
    names = [m for m in registry.names()
             if registry.models[m].tcp is None and "h3" in registry.models[m].behaviour.apps][:5]
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
    # Warm-up; in a process that has not loaded the compiled core yet, this
    # also measures what loading it costs (numba's import and its disk cache).
    loaded = bool(compiled._compiled_kernel)
    t0 = time.perf_counter()
    evaluate(Inputs(**{k: v[:1000] for k, v in arrays.items()}))
    warm_s = time.perf_counter() - t0
    runs = []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = evaluate(inputs)
        runs.append((time.perf_counter() - t0, time.process_time() - c0))
        if len(runs) < repeat:
            del out
    core_s, core_cpu_s = sorted(runs)[len(runs) // 2]
    m = min(2000, n)
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
        "backend": core.backend_for(n),
        "core_seconds": core_s,
        "core_scenarios_per_s": n / core_s,
        "core_cpu_seconds": core_cpu_s,
        "core_scenarios_per_cpu_s": n / core_cpu_s if core_cpu_s > 0 else float("nan"),
        "load_average_1min": os.getloadavg()[0],
        "compiled_core_load_s": None if loaded else warm_s,
        "end_to_end_batch": m,
        "end_to_end_scenarios_per_s": m / e2e_s,
        "single_predict_ms": single_ms,
        "median_goodput_mbps": float(np.median(out.goodput_bps) / 1e6),
        "predictions_checked": len(preds),
    }


#: What-if changes the app benchmark makes, in turn (widget key, values cycled).
APP_CHANGES: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("number_input", "w.mtu_bytes", (9000, 1500, 4000)),
    ("number_input", "w.rtt_ms", (10.0, 50.0, 0.0)),
    ("number_input", "w.loss_pct", (0.5, 1.0, 0.0)),
    ("number_input", "w.link_gbps", (1.0, 25.0, 10.0)),
    ("number_input", "w.rcvbuf_bytes", (6656, 416, 208)),
    ("checkbox", "w.gso", (False, True)),
)


def bench_app(paths: Any, changes: int = 30, browser: bool = True) -> dict[str, Any]:
    """Latency of the what-if page: the app script under Streamlit's AppTest with the
    real models and catalog, one widget change at a time (MTU, RTT, loss, link, buffer,
    GSO), each a full rerun. Reports the page's own "Analytic answer in … ms" (read
    from its caption, which times the whole script run on the server: sidebar,
    predictions, matching measured points, charts) and AppTest's rerun around it,
    median and p95 over ``changes``. Then, where Debian's Chromium and Playwright are
    installed, what the user sees: the key press to the new goodput on screen in
    Chromium, for one pair and for six pairs at once (targets 200 and 300 ms,
    :func:`quiclab.app.browser.measure`)."""
    import logging
    import os
    import re

    from streamlit.testing.v1 import AppTest

    # AppTest runs the script in "bare mode"; its context warnings are not results.
    logging.getLogger("streamlit").setLevel(logging.ERROR)

    script = Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py"
    if not script.is_file():
        from importlib import resources

        script = Path(str(resources.files("quiclab.app").joinpath("streamlit_app.py")))
    env = {"QUICLAB_MODELS": str(paths.models), "QUICLAB_CATALOG": str(paths.catalog),
           "QUICLAB_DATA_DIR": str(paths.data_dir)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        at = AppTest.from_file(str(script), default_timeout=120)
        t0 = time.perf_counter()
        at.run()
        cold_ms = (time.perf_counter() - t0) * 1e3
        if at.exception:
            raise RuntimeError(f"app: {at.exception[0].message}")
        answer, rerun = [], []
        for i in range(changes):
            kind, key, values = APP_CHANGES[i % len(APP_CHANGES)]
            widget = getattr(at, kind)(key=key).set_value(values[(i // len(APP_CHANGES))
                                                                 % len(values)])
            t0 = time.perf_counter()
            widget.run()
            rerun.append((time.perf_counter() - t0) * 1e3)
            if at.exception:
                raise RuntimeError(f"app: {at.exception[0].message}")
            caption = next((c.value for c in at.caption if "Analytic answer in" in c.value), "")
            match = re.search(r"Analytic answer in (\d+) ms", caption)
            if match:
                answer.append(float(match.group(1)))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {
        "benchmark": "app",
        **(_browser_timings(paths) if browser else {"browser": "not asked"}),
        "changes": changes,
        "cold_first_page_ms": cold_ms,
        "analytic_answer_median_ms": float(np.median(answer)) if answer else float("nan"),
        "analytic_answer_p95_ms": float(np.percentile(answer, 95)) if answer else float("nan"),
        "analytic_answer_max_ms": float(np.max(answer)) if answer else float("nan"),
        "page_rerun_median_ms": float(np.median(rerun)),
        "page_rerun_p95_ms": float(np.percentile(rerun, 95)),
        "target_answer_ms": 200.0,
        "target_met": bool(answer) and float(np.max(answer)) < 200.0,
    }


def _browser_timings(paths: Any) -> dict[str, Any]:
    """:func:`quiclab.app.browser.measure` of one pair and of six (two servers × three
    clients of the models, lsquic, quiche and picoquic first), or why it was skipped."""
    from quiclab.app import browser
    from quiclab.models.registry import Registry

    why = browser.available()
    if why:
        return {"browser": f"skipped: {why}"}
    names = Registry.load(paths.models).names()
    preferred = [n for n in ("lsquic", "quiche", "picoquic") if n in names]
    chosen = preferred + [n for n in names if n not in preferred]
    if len(chosen) < 3:
        return {"browser": f"skipped: six pairs need three implementations, the models "
                           f"have {len(chosen)}"}
    pairs = {"one_pair": f"&server={chosen[0]}&client={chosen[0]}",
             "six_pairs": f"&server={','.join(chosen[:2])}&client={','.join(chosen[:3])}"}
    global_options = {"--models": str(paths.models), "--catalog": str(paths.catalog),
                      "--data-dir": str(paths.data_dir)}
    found = browser.measure(global_options, pairs, paths.reports / "bench" / "app-browser.log")
    one, six = found["browser_one_pair_median_ms"], found["browser_six_pairs_median_ms"]
    return {"browser_one_pair_median_ms": one, "browser_six_pairs_median_ms": six,
            "browser_target_one_pair_ms": browser.TARGET_ONE_MS,
            "browser_target_six_pairs_ms": browser.TARGET_SIX_MS,
            "browser_target_met": one <= browser.TARGET_ONE_MS
            and six <= browser.TARGET_SIX_MS,
            "browser_one_pair_ms": found["browser_one_pair_ms"],
            "browser_six_pairs_ms": found["browser_six_pairs_ms"]}


#: Commands ``bench cli`` times, with the wall-time target each must meet (None: shown
#: for comparison only).
CLI_COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("help", ("--help",), 0.5),
    ("predict", ("predict", "--server", "lsquic", "--client", "lsquic"), 0.5),
    ("predict_compiled", ("predict", "--server", "lsquic", "--client", "lsquic",
                          "--backend", "compiled"), None),
)


def bench_cli(repeat: int = 7) -> dict[str, Any]:
    """Wall and CPU seconds of whole ``quiclab`` processes (interpreter start-up,
    imports, the answer), the median over ``repeat`` runs of each of
    :data:`CLI_COMMANDS`, with the load average: on a shared machine the wall time
    waits for a core, the CPU time does not. QuiclabError if a command fails."""
    import os
    import resource
    import shutil
    import subprocess
    import sys

    if repeat < 1:
        raise QuiclabError(f"--repeat {repeat}: at least 1 run")
    script = Path(sys.executable).with_name("quiclab")
    if not script.exists():
        found = shutil.which("quiclab")
        script = Path(found) if found else script
    command = [str(script)] if script.exists() else [sys.executable, "-m", "quiclab.cli"]
    out: dict[str, Any] = {"benchmark": "cli", "repeat": repeat,
                           "load_average_1min_before": os.getloadavg()[0]}
    met = True
    for name, argv, target in CLI_COMMANDS:
        walls, cpus = [], []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            done = subprocess.run([*command, *argv], capture_output=True, text=True)
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise QuiclabError(f"bench cli: `quiclab {' '.join(argv)}` exited "
                                   f"{done.returncode}: {last}")
        out[f"{name}_wall_median_s"] = float(np.median(walls))
        out[f"{name}_wall_min_s"] = float(np.min(walls))
        out[f"{name}_cpu_median_s"] = float(np.median(cpus))
        if target is not None:
            out[f"{name}_target_s"] = target
            met = met and float(np.median(walls)) <= target
    out["load_average_1min_after"] = os.getloadavg()[0]
    out["target_met"] = met
    return out


def run_bench(args: argparse.Namespace) -> int:
    from quiclab.models.registry import Registry

    results = []
    if args.what in ("analytic", "all"):
        results.append(bench_analytic(Registry.load(args.paths.models), n=args.n))
    if args.what in ("des", "all"):
        from quiclab.sim.des import bench as des_bench

        # The DES bench also times the ns-3 engine in the same run (target: packet
        # mode reaches at least 2× ns-3's packets per CPU-second on the same host).
        results.append(des_bench.bench(ns3=True, ns3_cache_dir=str(args.paths.cache / "ns3"),
                                       out=None))
    if args.what in ("app", "all"):
        results.append(bench_app(args.paths))
    if args.what in ("cli", "all"):
        results.append(bench_cli(args.repeat))
    if args.what == "ns3":
        from quiclab.sim.ns3 import bench as ns3_bench

        results.append(ns3_bench.bench(cache_dir=args.paths.cache / "ns3", out=None))
    from quiclab.stamp import stamp

    # Kept for `quiclab report` (docs/results/speed.md), each with where it was measured.
    bench_dir = args.paths.reports / "bench"
    bench_dir.mkdir(parents=True, exist_ok=True)
    where = stamp()
    for r in results:
        name = str(r.get("benchmark", r.get("engine", "bench")))
        (bench_dir / f"{name}.json").write_text(
            json.dumps({"stamp": where, "result": r}, indent=1, sort_keys=True, default=float)
            + "\n")
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
