"""Calibrate from a fresh catalog: build one from ../shared, then fit the direct estimates.

Ingests the shared data into a new DuckDB catalog (or opens the one named on the
command line), then fits two of the calibration's direct estimates, as
``quiclab calibrate`` does before its joint fit (docs/explanation/calibration.md):

- stage A: CPU time per data packet and per ACK of lsquic and quiche, from the
  QIR-10G runs that recorded CPU (statsmodels RLM, Huber's T; ns on the EPYC 7543,
  with 95 % intervals);
- the crypto cost per packet and per byte, from seed 001 Table 3's latencies (WLS).

    python examples/calibrate_from_catalog.py [CATALOG]

Needs the shared data (QUICLAB_SHARED or ../shared) when no catalog is given.
Expected output: examples/calibrate_from_catalog.out (tests/test_examples.py:
numbers within 0.1 %, relative).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

import duckdb

from quiclab.calibration.cpu import CpuCostEstimator
from quiclab.calibration.crypto import fit_table3
from quiclab.cli import main as quiclab


def fresh_catalog(folder: Path) -> Path:
    """`quiclab data ingest` into ``folder`` (its progress goes to stderr)."""
    catalog = folder / "catalog.duckdb"
    with contextlib.redirect_stdout(sys.stderr):
        if quiclab(["--catalog", str(catalog), "data", "ingest", "--no-perf"]) != 0:
            raise SystemExit("ingest failed")
    return catalog


def calibrate(catalog: Path) -> None:
    con = duckdb.connect(str(catalog), read_only=True)
    runs = con.execute("SELECT * FROM runs WHERE source = 'qir10g'").df()
    points = con.execute("SELECT * FROM published_points").df()
    con.close()
    print(f"catalog: {len(runs)} QIR-10G runs, {len(points)} published points")

    stage_a = CpuCostEstimator().fit(runs).table()
    mine = stage_a[stage_a.implementation.isin(["lsquic", "quiche"])
                   & stage_a.parameter.isin(["ns_per_packet.aes-ni", "ns_per_ack"])]
    print("\nstage A: CPU per data packet (AES-NI) and per ACK, ns on the EPYC 7543")
    print(f"{'implementation':15s} {'role':9s} {'parameter':21s} {'ns':>8s} "
          f"{'95 % interval':>19s} {'runs':>5s}")
    for r in mine.itertuples(index=False):
        print(f"{r.implementation:15s} {r.role:9s} {r.parameter:21s} {r.ns:8.1f} "
              f"[{r.lo:8.1f}, {r.hi:8.1f}] {r.runs:5d}")

    print("\ncrypto (seed 001 Table 3): AES-GCM cost per packet and per byte")
    for op, fit in fit_table3(points).items():
        lo, hi = fit.ns_per_byte_ci
        print(f"{op:8s} {fit.ns_per_packet:7.1f} ns/packet + {fit.ns_per_byte:6.4f} ns/byte "
              f"[{lo:6.4f}, {hi:6.4f}]; one core's ceiling at 1500 B: "
              f"{fit.ceiling_gbps(1500):5.2f} Gbit/s")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        calibrate(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            calibrate(fresh_catalog(Path(tmp)))
