"""A sweep whose main process is killed outright leaves no worker behind.

``kill -9`` of the main process cannot stop its pool: before, the two workers went
on computing their DES points for no one (≈225 MB each, alive minutes later). The
workers now have the kernel kill them when their parent dies
(:func:`quiclab.procs.die_with_parent`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import write

#: Points long enough (seconds of DES each) that a worker is surely mid-point.
SPEC = """\
kind: sweep
base: {transfer_bytes: 2000000000, rcvbuf_bytes: 6815744}
axes:
  - {field: implementation, values: [fast, slow]}
  - {field: rtt_ms, values: [0, 1, 2, 3]}
engines: [des]
engine_options: {des: {max_packets: 0}}
"""


def _children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid``."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_9_of_the_sweep_leaves_no_worker_running(tmp_path: Path, models_dir: Path):
    spec = write(tmp_path / "sweep-orphans.yaml", SPEC)
    cmd = [sys.executable, "-m", "quiclab.cli", "--models", str(models_dir), "--catalog",
           str(tmp_path / "c.duckdb"), "sweep", str(spec), "--jobs", "2",
           "--out", str(tmp_path / "out"), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2:
            assert proc.poll() is None, "the sweep ended before its workers started"
            assert time.monotonic() < deadline, "no workers started in time"
            workers = _children(proc.pid)
            time.sleep(0.1)
        time.sleep(1.0)  # the workers are computing their first points
        os.kill(proc.pid, signal.SIGKILL)  # the main process only, as `kill -9 PID` does
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {w for w in workers if _alive(w)}
        assert not left, f"workers {sorted(left)} outlived the killed sweep"
    finally:
        for pid in workers:  # only the processes this test started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
