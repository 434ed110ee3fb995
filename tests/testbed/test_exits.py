"""How each peer ended is part of the verdict, also under `perf stat` (which exits 0
for a peer killed by a signal), and CPU % covers the transfer window on both sides
(the server's samples are cut at the window's edges)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from quiclab.testbed import collect, record
from quiclab.testbed.config import RunConfig
from quiclab.testbed.runner import RunResult, Testbed
from quiclab.testbed.stacks import STACKS

from .conftest import quiclab_namespaces

PEER = "{build}/bin/quic-go-peer"


def _wrapped(name: str, script: str) -> object:
    """quic-go's peer run by a Python wrapper (no braces in ``script``: the command
    is formatted with the build and peers directories)."""
    return dataclasses.replace(STACKS["quic-go"], name=name,
                               command=(sys.executable, "-c", script, PEER))


# Prints the real peer's report, then dies of SIGKILL.
KILLED_AFTER_REPORT = _wrapped("killed-after-report", "\n".join([
    "import os, signal, subprocess, sys",
    "subprocess.run(sys.argv[1:])",
    "os.kill(os.getpid(), signal.SIGKILL)"]))
# A server that serves the transfer, then exits 3.
EXITS_3 = _wrapped("exits-3", "\n".join([
    "import subprocess, sys",
    "subprocess.run(sys.argv[1:])",
    "sys.exit(3)"]))
# A server that spends a second of CPU before it starts (before the transfer window).
BURNS_FIRST = _wrapped("burns-first", "\n".join([
    "import os, sys, time",
    "t = time.process_time()",
    "while time.process_time() - t < 1.0: pass",
    "os.execv(sys.argv[1], sys.argv[1:])"]))


# -- no root ----------------------------------------------------------------------
def test_perf_reports_a_killed_peer_on_stderr_and_the_exit_takes_it():
    killed = collect.perf_child_status(collect.Exit(0), "some output\nsetpriv: Killed\n",
                                       "setpriv")
    assert (killed.returncode, killed.signal, killed.how) == (-9, 9, "killed by SIGKILL")
    term = collect.perf_child_status(collect.Exit(0), "setpriv: Terminated", "setpriv")
    assert term.signal == signal.SIGTERM
    clean = collect.perf_child_status(collect.Exit(0), "a line\n", "setpriv")
    assert (clean.returncode, clean.signal) == (0, None)
    # perf passes a peer's exit code on; its own death by a signal is in wait4's status.
    assert collect.perf_child_status(collect.Exit(3), "setpriv: Killed", "setpriv").signal \
        is None


@pytest.mark.skipif(not collect.perf_available(), reason="perf cannot count here")
def test_perf_really_says_so():
    """What the parser reads is what this host's perf prints for a killed child."""
    proc = subprocess.run([*collect.perf_prefix(Path(os.devnull)), *collect.NO_NET_ADMIN,
                           "sh", "-c", "kill -9 $$"], capture_output=True, text=True)
    assert proc.returncode == 0  # perf hides the signal in its exit code …
    exit_ = collect.perf_child_status(collect.Exit(proc.returncode), proc.stderr,
                                      collect.NO_NET_ADMIN[0])
    assert exit_.signal == signal.SIGKILL  # … and says it on stderr


def test_the_sampler_cut_puts_sample_edges_where_asked():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sampler = collect.CpuSampler(busy.pid).start()
        time.sleep(0.35)
        first = sampler.cut()
        time.sleep(0.6)
        second = sampler.cut()
        time.sleep(0.25)
        busy.kill()
        busy.wait()
        samples = sampler.stop()
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.wait()
    edges = [(s.start_ns, s.end_ns) for s in samples]
    assert any(end == first.time_ns for _, end in edges)
    assert (first.time_ns, second.time_ns) in edges
    window = next(s for s in samples if s.start_ns == first.time_ns)
    used = (second.user_s + second.system_s) - (first.user_s + first.system_s)
    assert first.complete and second.complete
    # One busy thread over a 0.6 s window: at most 0.6 CPU-s (plus a tick), and more
    # than nothing however loaded the host is; the window's percentage is that CPU
    # time over the window's own wall time.
    wall_s = (second.time_ns - first.time_ns) / 1e9
    assert 0.0 < used <= wall_s + 0.02
    assert window.total_pct == pytest.approx(used / wall_s * 100, abs=5.0)


def test_host_load_is_at_most_the_host_cores(monkeypatch):
    readings = iter([(100.0, 0.0), (100.0 + 3.0, 0.0)])  # 3 busy s "within" a moment
    monkeypatch.setattr(collect, "host_cpu_s", lambda path="/proc/stat": next(readings))
    assert collect.HostLoad(ncores=2).cores() == 2.0


def test_sample_rows_mark_the_server_samples_in_the_window():
    """Recorded shape of a run: the server's samples cut at start_ns and end_ns."""
    from quiclab.testbed.runner import Side

    cfg = RunConfig.build("quic-go", "quic-go", transfer_bytes=1000)
    t0, start, end = 1_000_000_000, 1_400_000_000, 2_100_000_000
    server = Side("quic-go", samples=[
        collect.CpuSample(0, 5.0, 1.0, 0, t0, start),
        collect.CpuSample(1, 60.0, 30.0, 0, start, end),
        collect.CpuSample(2, 1.0, 1.0, 0, end, end + 50_000_000)])
    client = Side("quic-go", samples=[collect.CpuSample(0, 50.0, 40.0, 1, start + 1000, end)])
    result = RunResult("r", cfg, 0, "ok", None, server, client, start_ns=start, end_ns=end)
    rows = record.sample_rows(result)
    assert [(r["side"], r["in_window"]) for r in rows] == [
        ("server", False), ("server", True), ("server", False), ("client", True)]


# -- real runs (root, namespaces) -------------------------------------------------
def _testbed(paths, builder, *stacks) -> Testbed:
    return Testbed(paths, stacks={**STACKS, **{s.name: s for s in stacks}}, builder=builder,
                   startup_s=5.0)


def _run(testbed: Testbed, server: str, client: str, nbytes: int, **changes) -> RunResult:
    config = RunConfig.build(server, client, changes, transfer_bytes=nbytes,
                             experiment="test-exits")
    return testbed.run(config, 0, f"test-exits-{server}-{client}-{config.key()}")


@pytest.mark.testbed
def test_a_client_killed_after_its_report_fails_the_run(root, quic_go, paths, builder):
    testbed = _testbed(paths, builder, KILLED_AFTER_REPORT)
    assert testbed.perf_ok(), "perf stat cannot count system calls on this host"
    result = _run(testbed, "quic-go", "killed-after-report", 5_000_000)
    assert result.client.report.get("bytes") == 5_000_000  # it did report …
    assert result.status == "failed"  # … and then died
    assert result.failure_reason and result.failure_reason.startswith(
        "client killed-after-report killed by SIGKILL after reporting")
    assert result.client.exit and result.client.exit.returncode == -9


@pytest.mark.testbed
def test_a_server_that_exits_non_zero_fails_the_run(root, quic_go, paths, builder):
    testbed = _testbed(paths, builder, EXITS_3)
    result = _run(testbed, "exits-3", "quic-go", 5_000_000)
    assert result.client.report.get("bytes") == 5_000_000
    assert result.status == "failed"
    assert result.failure_reason and result.failure_reason.startswith("server exits-3 exited 3")
    row = record.run_row(result, "host: test", True)
    assert json.loads(row["extra"])["server_exit"]["returncode"] == 3


@pytest.mark.testbed
def test_a_real_peer_killed_mid_transfer_is_recorded_as_killed(root, quic_go, paths, builder):
    """The quic-go client is killed with -9 from outside, under perf stat."""
    testbed = _testbed(paths, builder)
    killed: list[int] = []

    def kill_the_client() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not killed:
            for ns in quiclab_namespaces(os.getpid()):
                if not ns.endswith("-cli"):
                    continue
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                      text=True).stdout.split()
                for pid in pids:
                    try:
                        comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    except OSError:
                        continue
                    if comm == "quic-go-peer":
                        time.sleep(0.3)  # mid-transfer
                        os.kill(int(pid), signal.SIGKILL)
                        killed.append(int(pid))
                        return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_client)
    killer.start()
    result = _run(testbed, "quic-go", "quic-go", 10_000_000, link_gbps=0.05)
    killer.join()
    assert killed, "the client peer was never seen"
    assert result.status == "failed"
    assert result.failure_reason and result.failure_reason.startswith(
        "client quic-go killed by SIGKILL"), result.failure_reason
    assert result.client.exit and result.client.exit.returncode == -9


@pytest.mark.testbed
def test_cpu_pct_covers_the_transfer_window_on_both_sides(root, quic_go, paths, builder):
    """A server that burns a second of CPU before it starts: its CPU seconds keep that
    second, its CPU % (and samples in the window) do not."""
    testbed = _testbed(paths, builder, BURNS_FIRST)
    result = _run(testbed, "burns-first", "quic-go", 20_000_000)
    assert result.status == "ok", result.failure_reason
    row = record.run_row(result, "host: test", True)
    extra = json.loads(row["extra"])
    window_s = (result.end_ns - result.start_ns) / 1e9
    cores = os.cpu_count() or 1
    server_window = sum(extra["window_cpu_s"]["server"].values())
    assert row["server_cpu_s"] >= 1.0  # the whole life, start-up included
    assert server_window <= row["server_cpu_s"] - 0.9
    for side in ("server", "client"):
        window_cpu = sum(extra["window_cpu_s"][side].values())
        assert row[f"{side}_cpu_pct"] == pytest.approx(100 * window_cpu / window_s)
        assert 0 < row[f"{side}_cpu_pct"] <= 100 * cores
    samples = record.sample_rows(result)
    server = [s for s in samples if s["side"] == "server"]
    assert any(s["in_window"] for s in server), "no server sample in the transfer window"
    assert any(not s["in_window"] for s in server)  # the burn, before it
    assert 0 <= result.host["background_cores"] <= cores
