"""Namespaces are created and always torn down, also after a killed run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from quiclab.testbed.topology import (
    BUFFER_SYSCTLS,
    MAX_GSO_SKB_BYTES,
    LinkConfig,
    Topology,
    clean_stale,
    read_sysctl,
    write_sysctl,
)

from .conftest import quiclab_namespaces

pytestmark = pytest.mark.testbed


def test_direct_topology_comes_up_and_goes_away(root, paths):
    link = LinkConfig(mtu_bytes=9000, veth_segmentation=False, rate_gbps=1.0)
    with Topology(link, paths.state_dir) as topo:
        names = set(topo.ns.values())
        assert names <= set(quiclab_namespaces(os.getpid()))
        assert topo.applied["server.eth0"]["tx-udp-segmentation"] == "off"
        assert topo.applied["tbf"]["rate_bps"] == 1_000_000_000
        # 1 × BDP is tiny here: the floor must let a full GSO batch queue behind another.
        assert topo.applied["tbf"]["limit_bytes"] >= 2 * MAX_GSO_SKB_BYTES
        mtu = subprocess.run([*topo.exec_prefix("client"), "cat", "/sys/class/net/eth0/mtu"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert mtu == "9000"
        assert topo.snmp("server")["Udp"]["OutDatagrams"] == 0
    assert not names & set(quiclab_namespaces())
    assert not topo.state_file.exists()


def test_relayed_topology_has_three_namespaces(root, paths):
    with Topology(LinkConfig(rtt_ms=10), paths.state_dir) as topo:
        assert len(topo.ns) == 3 and topo.client_target.startswith("198.18.2.2")
    assert not set(topo.ns.values()) & set(quiclab_namespaces())


def test_buffer_sysctls_are_restored(root, paths):
    before = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}
    with Topology(LinkConfig(rcvbuf_bytes=123456, sndbuf_bytes=654321), paths.state_dir):
        assert read_sysctl("net.core.rmem_max") == "123456"
        assert read_sysctl("net.core.wmem_default") == "654321"
    assert {n: read_sysctl(n) for n in BUFFER_SYSCTLS} == before


def _gone(pid: int, wait_s: float = 3.0) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie nobody reaped yet)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _netns_pids(names: list[str]) -> set[int]:
    pids: set[int] = set()
    for name in names:
        out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
        pids |= {int(p) for p in out.stdout.split()}
    return pids


#: A run that makes its topology, starts a process inside and sleeps; argv[1] is the
#: state directory, argv[2] "lock" to hold the testbed lock meanwhile.
HOLDER = textwrap.dedent("""
    import contextlib, subprocess, sys, time
    from pathlib import Path
    from quiclab.testbed.topology import LinkConfig, Topology, exclusive
    state = Path(sys.argv[1])
    with exclusive(state) if sys.argv[2] == "lock" else contextlib.nullcontext():
        topo = Topology(LinkConfig(rcvbuf_bytes=99999, sndbuf_bytes=88888), state)
        topo.up()
        inside = subprocess.Popen([*topo.exec_prefix("server"), "sleep", "300"])
        print(inside.pid, flush=True)
        time.sleep(300)
""")


def _holder(paths, lock: bool = False) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(paths.state_dir),
                             "lock" if lock else "-"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture
def host_sysctls(root):
    """The buffer sysctls before the test, put back afterwards whatever happened."""
    before = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}
    yield before
    for name, value in before.items():
        if read_sysctl(name) != value:
            write_sysctl(name, value)


def test_a_killed_run_is_cleaned_by_the_next_one(root, paths, host_sysctls):
    """SIGKILL leaves namespaces, a process inside and changed sysctls; clean_stale removes all."""
    proc, inside = _holder(paths)
    assert read_sysctl("net.core.rmem_max") == "99999"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = set(quiclab_namespaces(proc.pid))
    assert len(left) == 2, "a killed run leaves its namespaces behind"
    assert not _gone(inside, 0.2), "and the process it started inside them"
    removed = clean_stale(paths.state_dir)
    assert left <= set(removed)
    assert quiclab_namespaces(proc.pid) == []
    assert _gone(inside), f"pid {inside} in a removed namespace is still running"
    assert {n: read_sysctl(n) for n in BUFFER_SYSCTLS} == host_sysctls
    assert not list(paths.state_dir.glob(f"{proc.pid}-*.json"))


def _clean(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "quiclab.testbed", "testbed", "clean", *args],
                          capture_output=True, text=True, timeout=60)


def test_clean_leaves_live_runs_alone_unless_forced(root, paths, host_sysctls):
    live, live_inside = _holder(paths)
    dead, dead_inside = _holder(paths)  # (saves the live run's sysctls as the host's)
    os.kill(dead.pid, signal.SIGKILL)
    dead.wait()
    try:
        done = _clean()
        assert done.returncode == 0, done.stderr
        assert quiclab_namespaces(dead.pid) == [] and _gone(dead_inside)
        assert len(quiclab_namespaces(live.pid)) == 2, "clean removed a live run's namespaces"
        assert not _gone(live_inside, 0.2)
        assert read_sysctl("net.core.rmem_max") == "99999"  # the live run's setting stays
        forced = _clean("--force")
        assert forced.returncode == 0, forced.stderr
        assert quiclab_namespaces(live.pid) == [] and _gone(live_inside)
        assert {n: read_sysctl(n) for n in BUFFER_SYSCTLS} == host_sysctls
    finally:
        _kill(live)
        clean_stale(paths.state_dir)


def test_clean_waits_for_the_lock(root, paths, host_sysctls):
    """A run holding the lock is live: clean waits for it, then fails in one line."""
    holder, inside = _holder(paths, lock=True)
    try:
        done = _clean("--wait", "0.5")
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1
        assert f"(pid {holder.pid}) holds the lock" in done.stderr
        assert len(quiclab_namespaces(holder.pid)) == 2 and not _gone(inside, 0.2)
    finally:
        _kill(holder)
        clean_stale(paths.state_dir)


def test_a_run_waiting_for_the_lock_cleans_a_run_killed_meanwhile(root, quic_go, paths,
                                                                  host_sysctls, tmp_path):
    """Run A holds the lock with its buffer sysctls set; run B waits; A is killed. B
    must restore A's sysctls before it saves the host's for itself (else it takes A's
    99999 for the host's own and leaves it set)."""
    holder, _ = _holder(paths, lock=True)
    waiting = None
    try:
        assert read_sysctl("net.core.rmem_max") == "99999"
        waiting = subprocess.Popen(
            [sys.executable, "-m", "quiclab.testbed", "testbed", "--runs-dir", str(tmp_path),
             "run", "--server", "quic-go", "--client", "quic-go", "--bytes", "2000000",
             "--set", "rcvbuf_bytes=262144", "sndbuf_bytes=262144"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)  # B has started and waits for the lock
        assert waiting.poll() is None and quiclab_namespaces(waiting.pid) == []
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        _, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        assert quiclab_namespaces(holder.pid) == []
        assert {n: read_sysctl(n) for n in BUFFER_SYSCTLS} == host_sysctls
    finally:
        _kill(holder)
        if waiting is not None:
            _kill(waiting)  # type: ignore[arg-type]
        clean_stale(paths.state_dir)


def test_interrupted_cli_run_tears_down(root, quic_go, tmp_path, host_sysctls):
    """SIGTERM (as Ctrl-C) during a transfer: the CLI exits 130 with nothing left behind:
    no namespace, no peer process, the buffer sysctls as they were."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiclab.testbed", "testbed", "--runs-dir", str(tmp_path),
         # --no-probe: the session's host probe would run a transfer of its own first.
         "run", "--no-probe", "--server", "quic-go", "--client", "quic-go",
         "--bytes", "500000000",
         "--set", "link_gbps=0.05", "rcvbuf_bytes=262144", "sndbuf_bytes=262144"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    peers: set[int] = set()
    while time.monotonic() < deadline:
        names = [n for n in quiclab_namespaces(proc.pid) if n.endswith("-cli")]
        peers = _netns_pids(quiclab_namespaces(proc.pid))
        if names and len(peers) >= 4:  # perf and the peer on each side
            break
        time.sleep(0.1)
    assert quiclab_namespaces(proc.pid), "the run never created its namespaces"
    assert len(peers) >= 4, f"server and client never both ran: {peers}"
    assert read_sysctl("net.core.rmem_max") == "262144"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert quiclab_namespaces(proc.pid) == []
    assert [pid for pid in peers if not _gone(pid)] == []
    assert {n: read_sysctl(n) for n in BUFFER_SYSCTLS} == host_sysctls
