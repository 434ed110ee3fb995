"""The link knobs act on a real quic-go transfer: tbf rate, relay delay, eBPF loss, MTU."""

from __future__ import annotations

import pytest

from quiclab.testbed.config import RunConfig
from quiclab.testbed.runner import RunResult, Testbed

pytestmark = pytest.mark.testbed


def run(testbed: Testbed, nbytes: int = 3_000_000, **changes) -> RunResult:
    config = RunConfig.build("quic-go", "quic-go", changes, transfer_bytes=nbytes,
                             experiment="test-knobs")
    result = testbed.run(config, 0, f"test-knobs-{config.key()}")
    assert result.status == "ok", result.failure_reason
    return result


def test_tbf_caps_the_rate(root, quic_go, testbed):
    result = run(testbed, link_gbps=0.1)
    assert result.goodput_mbps is not None and result.goodput_mbps < 110
    assert result.topology["qdisc"][0]["kind"] == "tbf"


def test_relay_adds_the_delay(root, quic_go, testbed):
    result = run(testbed, rtt_ms=20)
    assert result.server.report["min_rtt_ms"] >= 19.0
    relay = result.topology["relay"]
    assert relay["server_to_client"]["forwarded"] > 2000 and relay["cpu_s"] > 0


def test_ebpf_classifier_drops_packets(root, quic_go, testbed):
    result = run(testbed, nbytes=10_000_000, loss_pct=5)
    assert result.server.report["packets_lost"] > 0
    assert result.effective["veth_segmentation"] is False
    assert result.topology["applied"]["loss"]["loss_pct"] == 5


def test_jumbo_mtu_reaches_the_link(root, quic_go, testbed):
    result = run(testbed, mtu_bytes=9000)
    # quic-go keeps its 1452-byte cap: the row records what was in effect.
    assert result.effective["udp_payload_bytes"] == 1452
    assert result.server.link["tx_bytes"] > 3_000_000


def test_peers_cannot_force_buffers_past_the_cap(root):
    """Peers run without CAP_NET_ADMIN: SO_RCVBUFFORCE (which quic-go falls back
    to as root) fails, so net.core.rmem_max caps every stack's buffer."""
    import subprocess
    import sys

    from quiclab.testbed import collect

    force = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             "s.setsockopt(socket.SOL_SOCKET, 33, 1 << 24)")  # 33: SO_RCVBUFFORCE
    as_root = subprocess.run([sys.executable, "-c", force], capture_output=True, text=True)
    assert as_root.returncode == 0, as_root.stderr  # root may
    as_peer = subprocess.run([*collect.NO_NET_ADMIN, sys.executable, "-c", force],
                             capture_output=True, text=True)
    assert as_peer.returncode != 0 and "PermissionError" in as_peer.stderr
