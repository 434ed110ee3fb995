"""Ctrl-C during ``quiclab sweep --jobs 2``: one line from the parent, no worker tracebacks.

A terminal sends SIGINT to the whole foreground process group, workers included.
The sweep has one short and one long DES point, so that once the short one's part
is written one pool worker waits idle for a task (where an interrupted worker used
to print ``Process ForkProcess-N: Traceback … KeyboardInterrupt``) while the other
is busy. The parent must report the interruption in its one line and leave no
worker behind.

The sweep is started as a terminal starts a foreground job: with SIGINT at its
default action. A test run started in the background by a shell without job
control (``make test &``, some CI harnesses) has SIGINT ignored, and a child
inherits that across exec — Python then keeps ignoring it, the simulated
Ctrl-C does nothing and the sweep runs to its end (empty stderr after the long
point's ~40 s on a loaded machine).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from quiclab.experiments.store import PartStore

from .conftest import write

SPEC = """\
kind: sweep
description: a short DES point and one of ~10 s, so that one worker waits idle
base: {server: fast, client: fast}
axes:
  - {field: transfer_bytes, values: [1000000, 4000000000]}
engines: [des]
engine_options: {des: {max_packets: 0}}
record: [goodput_mbps, limit]
"""
INTERRUPTED = ("quiclab: interrupted — results already written are kept; "
               "run the same command again to resume")


def _group_gone(pgid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _as_in_a_terminal() -> None:
    """In the child before exec: SIGINT at its default, as for a terminal's foreground job."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_with_two_jobs_is_one_line(tmp_path: Path, models_dir: Path) -> None:
    spec = write(tmp_path / "sweep-ctrl-c.yaml", SPEC)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "quiclab.cli", "--models", str(models_dir), "--catalog",
           str(tmp_path / "catalog.duckdb"), "sweep", str(spec), "--jobs", "2",
           "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_in_a_terminal)
    store = PartStore(out)
    deadline = time.monotonic() + 120
    try:
        while not store.part_files("des"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the short point was not written in time"
            time.sleep(0.05)
        time.sleep(0.3)  # one worker now waits for a task, the other runs the long point
        assert proc.poll() is None, "the long point ended before the interrupt"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err, err
    assert err.strip() == INTERRUPTED
    assert proc.returncode == 130
    assert len(store.part_files("des")) == 1  # the short point's part is kept
    assert _group_gone(proc.pid, 10), "a worker outlived the interrupted sweep"
