"""A sweep on a Dask cluster: two stacks × two MTUs × three RTTs, four tasks, two workers.

Builds a sweep spec in code (the same keys as experiments/sweep-*.yaml), runs it
with quiclab's Dask executor on a LocalCluster of two single-threaded worker
processes (pass a scheduler address to use a running cluster instead), and prints
the goodput table. Each finished task is written as an atomic Parquet part under
the output folder, so running it again computes nothing.

    python examples/dask_sweep.py [OUT_DIR [SCHEDULER]]

Expected output: examples/dask_sweep.out (tests/test_examples.py: numbers within
0.1 %, relative).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from quiclab.experiments import runner
from quiclab.experiments.executors import DaskExecutor
from quiclab.experiments.spec import parse_sweep
from quiclab.models.registry import Registry
from quiclab.paths import Paths

SPEC = {
    "kind": "sweep",
    "description": "jumbo frames and added RTT on seed 000's host (König et al. 2025 Fig. 9a, 10a)",
    "base": {"cpu": "Intel Xeon W-2145", "app": "perf", "rcvbuf_bytes": 6815744},
    "axes": [{"field": "implementation", "values": ["lsquic@2025", "quiche@2025"]},
             {"field": "mtu_bytes", "values": [1500, 9000]},
             {"field": "rtt_ms", "values": [0, 10, 50]}],
    "engines": ["analytic"],
    "record": ["goodput_mbps", "limit"],
    "chunk": 3,  # points per task: the analytic engine would otherwise take all 12 at once
}


def sweep(out: Path, scheduler: str | None = None) -> None:
    spec = parse_sweep(SPEC, "examples/dask_sweep.py", "example-dask-sweep")
    registry = Registry.load(Paths.resolve().models)
    report = runner.run_points(
        name=spec.name, kind="sweep", spec=spec.resolved(), scenarios=spec.scenarios(),
        engines=spec.engines, engine_options={}, registry=registry, out=out,
        executor=DaskExecutor(jobs=2, scheduler=scheduler), record=spec.record,
        chunk=spec.chunk, progress=False)
    assert report.table is not None and not report.failed
    table = report.table.to_pandas().sort_values(["server", "mtu_bytes", "rtt_ms"])
    print(f"{report.points} points, {report.computed} computed on Dask "
          f"({report.reused} reused from {out.name}/parts)")
    print(f"{'server':12s} {'mtu_bytes':>9s} {'rtt_ms':>7s} {'goodput_mbps':>13s}  limit")
    for r in table.itertuples(index=False):
        print(f"{r.server:12s} {r.mtu_bytes:9d} {r.rtt_ms:7.0f} {r.goodput_mbps:13.1f}  "
              f"{r.limit_resource}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sweep(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            sweep(Path(tmp) / "example-dask-sweep")
