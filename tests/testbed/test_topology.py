"""Namespaces are created and always torn down, also after a killed run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from quiclab.testbed.topology import (
    BUFFER_SYSCTLS,
    MAX_GSO_SKB_BYTES,
    LinkConfig,
    Topology,
    clean_stale,
    read_sysctl,
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


def test_a_killed_run_is_cleaned_by_the_next_one(root, paths):
    """SIGKILL leaves namespaces, a process inside and changed sysctls; clean_stale removes all."""
    before = {n: read_sysctl(n) for n in BUFFER_SYSCTLS}
    script = textwrap.dedent(f"""
        import os, subprocess, sys, time
        from pathlib import Path
        from quiclab.testbed.topology import LinkConfig, Topology
        topo = Topology(LinkConfig(rcvbuf_bytes=99999), Path({str(paths.state_dir)!r}))
        topo.up()
        subprocess.Popen([*topo.exec_prefix("server"), "sleep", "300"])
        print("up", flush=True)
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    assert quiclab_namespaces(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert quiclab_namespaces(proc.pid), "a killed run leaves its namespaces behind"
    removed = clean_stale(paths.state_dir)
    assert set(removed) >= set(quiclab_namespaces(proc.pid)) or removed
    assert quiclab_namespaces(proc.pid) == []
    assert {n: read_sysctl(n) for n in BUFFER_SYSCTLS} == before
    assert not list(paths.state_dir.glob(f"{proc.pid}-*.json"))


def test_interrupted_cli_run_tears_down(root, quic_go, tmp_path):
    """SIGTERM (as Ctrl-C) during a transfer: the CLI exits 130 with nothing left behind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "quiclab.testbed", "testbed", "--runs-dir", str(tmp_path),
         "run", "--server", "quic-go", "--client", "quic-go", "--bytes", "500000000",
         "--set", "link_gbps=0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not quiclab_namespaces(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert quiclab_namespaces(proc.pid), "the run never created its namespaces"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert quiclab_namespaces(proc.pid) == []
