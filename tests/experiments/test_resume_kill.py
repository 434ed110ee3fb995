"""A sweep killed with SIGKILL midway and restarted ends with every point exactly once.

A real subprocess (``python -m quiclab.cli sweep``) runs DES points one by one;
once a few part files exist its whole process group gets SIGKILL. The rerun
must reuse every finished point, compute only the rest, and leave one row per
point — in the part files and in the catalog.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from quiclab.datasets.catalog import Catalog
from quiclab.experiments.runner import scenario_key
from quiclab.experiments.spec import load_sweep
from quiclab.experiments.store import PartStore

from .conftest import write

POINTS = 30
SPEC = """\
kind: sweep
description: DES points of ~0.1 CPU-seconds each, long enough to be killed midway
base: {transfer_bytes: 8000000, rcvbuf_bytes: 6815744}
axes:
  - {field: implementation, values: [fast, slow, lsquic]}
  - {field: rtt_ms, range: {start: 0, stop: 0.9, step: 0.1}}
engines: [des]
record: [goodput_mbps, limit]
"""


def _command(spec: Path, out: Path, models: Path, catalog: Path) -> list[str]:
    return [sys.executable, "-m", "quiclab.cli", "--models", str(models), "--catalog",
            str(catalog), "sweep", str(spec), "--jobs", "1", "--out", str(out), "--quiet"]


def test_kill_9_midway_then_resume_gives_every_point_once(tmp_path: Path,
                                                          models_dir: Path) -> None:
    spec_path = write(tmp_path / "sweep-kill.yaml", SPEC)
    expected = {scenario_key(s) for s in load_sweep(spec_path).scenarios()}
    assert len(expected) == POINTS
    out, catalog = tmp_path / "out", tmp_path / "catalog.duckdb"
    cmd = _command(spec_path, out, models_dir, catalog)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    store = PartStore(out)
    deadline = time.monotonic() + 180
    try:
        while len(store.part_files("des")) < 5:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no parts written in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    survived = {p.stem for p in store.part_files("des")}
    assert 5 <= len(survived) < POINTS, "the kill came too late to test resuming"
    assert survived <= expected
    assert not catalog.exists() or Catalog(catalog, read_only=True).count("predictions") == 0

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    m = re.search(r"(\d+) computed, (\d+) reused, (\d+) failed", done.stdout)
    assert m, done.stdout
    computed, reused, failed = map(int, m.groups())
    assert reused == len(survived) and computed == POINTS - len(survived) and failed == 0

    files = store.part_files("des")
    keys = [k for f in files for k in pq.read_table(f).column("scenario_key").to_pylist()]
    assert len(keys) == POINTS and set(keys) == expected  # every point exactly once
    assert not list((out / "parts" / "des").glob(".*"))  # temporaries cleaned up
    with Catalog(catalog, read_only=True) as cat:
        rows = cat.df("SELECT scenario_key FROM predictions WHERE sweep = 'sweep-kill'")
    assert sorted(rows["scenario_key"]) == sorted(expected)
