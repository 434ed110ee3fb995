"""The receive-buffer accounting every engine uses (sim/analytic/core.py skb_truesize).

The rule is a measured fact about Linux, so one test checks it against this
host's kernel: a UDP socket that nobody reads holds floor(rcvbuf / truesize)
datagrams before the kernel drops the rest.
"""

from __future__ import annotations

import socket
import struct
import sys

import numpy as np
import pytest

from quiclab.sim.analytic.core import (
    GRO_SKB_OVERHEAD_BYTES,
    rcvbuf_charge_bytes,
    skb_truesize,
    skb_truesize_array,
)


def test_power_of_two_allocation_plus_the_sk_buff():
    # 1200-1622 B payloads share the 2 KiB allocation; jumbo payloads take 16 KiB.
    assert skb_truesize(1200) == skb_truesize(1452) == skb_truesize(1622) == 2304.0
    assert skb_truesize(1623) == 4096.0 + 256.0
    assert skb_truesize(8952) == 16384.0 + 256.0
    assert skb_truesize(40) == 512.0 + 256.0  # the smallest allocation
    sizes = np.array([40.0, 598.0, 599.0, 1452.0, 4000.0, 8952.0])
    assert list(skb_truesize_array(sizes)) == [skb_truesize(s) for s in sizes]


@pytest.mark.parametrize("engine", ["analytic", "des", "ns3"])
def test_a_buffer_smaller_than_one_datagram_is_refused(engine):
    """The engines admit a datagram while occupancy + its truesize fits, so a buffer
    below one truesize would take nothing (the DES never finished; analytic and ns-3
    disagreed): refused when the scenario is resolved, naming the smallest buffer."""
    from quiclab.errors import ScenarioError
    from quiclab.models.testing import synthetic_model, synthetic_registry
    from quiclab.sim.engine import get_engine
    from quiclab.sim.scenario import Scenario

    registry = synthetic_registry(synthetic_model("a"))  # 8972-byte packets at MTU 9000
    small = Scenario(server="a", client="a", mtu_bytes=9000, gro=False, rcvbuf_bytes=8192)
    e = get_engine(engine, registry)
    with pytest.raises(ScenarioError) as err:
        e.predict(small)
    assert str(err.value) == ("rcvbuf_bytes=8192 is impossible: allowed ≥ 16640 (the skb "
                              "truesize of one 8972-byte datagram)")
    if engine == "analytic":
        # Also behind a scenario that shares the hosts (resolved once for both).
        with pytest.raises(ScenarioError, match=r"^rcvbuf_bytes=8192 "):
            e.predict_batch([small.with_(rcvbuf_bytes=212992), small])
        ok = e.predict(small.with_(rcvbuf_bytes=16640, transfer_bytes=10**6))
        assert ok.goodput_mbps > 0


def test_a_buffer_of_one_datagram_is_simulated_to_the_end():
    from quiclab.models.testing import synthetic_model, synthetic_registry
    from quiclab.sim.engine import get_engine
    from quiclab.sim.scenario import Scenario

    registry = synthetic_registry(synthetic_model("a"))  # 8972-byte packets at MTU 9000
    one = Scenario(server="a", client="a", mtu_bytes=9000, gro=False, rcvbuf_bytes=16640,
                   transfer_bytes=2_000_000)
    p = get_engine("des", registry, max_sim_s=60.0).predict(one)
    # One datagram at a time, read at once (no stalls here): nothing is dropped at the
    # buffer, and the run is the link's: 2 MB in 8929-byte stream payloads (9000 − 28
    # IP/UDP − 40 QUIC − 3 HTTP/3 framing) is 224 packets of 9038 bytes on the wire,
    # 1.620 ms at 10 Gbit/s, after the handshake's and the request's round trips
    # (2 × 50 µs). Queue drops in slow start are recovered within about one more RTT.
    assert p.rcvbuf_drops == 0
    assert p.server_packets_sent == 224 + p.retransmissions
    wire_s = 224 * 9038 * 8 / 10e9
    assert p.duration_s == pytest.approx(wire_s + 2 * 50e-6, abs=50e-6)
    assert p.limit == "link"


def test_the_default_buffers_hold_what_the_kernel_holds():
    # The counts measured on the testbed's kernel (TRANSPORT.md "Receive buffer").
    assert 65536 // skb_truesize(1452) == 28
    assert 212992 // skb_truesize(1452) == 92
    assert 212992 // skb_truesize(8952) == 12


def _drain(rx: socket.socket) -> int:
    """Read a socket until it would block; how many receives returned data."""
    rx.setblocking(False)
    held = 0
    while True:
        try:
            rx.recv(65536)
        except BlockingIOError:
            return held
        held += 1


@pytest.mark.skipif(sys.platform != "linux", reason="Linux socket accounting")
@pytest.mark.parametrize("payload", [1200, 1452])
def test_this_kernel_charges_the_modelled_truesize(payload):
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)  # the kernel doubles it
        rx.bind(("127.0.0.1", 0))
        rcvbuf = rx.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        for _ in range(400):
            tx.sendto(b"x" * payload, rx.getsockname())
        held = _drain(rx)
    finally:
        rx.close()
        tx.close()
    assert held == rcvbuf // skb_truesize(payload), (
        f"a {rcvbuf}-byte socket held {held} datagrams of {payload} B; the model says "
        f"{rcvbuf // skb_truesize(payload)} (skb truesize {skb_truesize(payload):.0f} B)")


def test_a_gro_skb_is_charged_its_payloads_and_one_overhead():
    # The analytic engine's average charge per datagram (TRANSPORT.md "Receive buffer").
    assert rcvbuf_charge_bytes(1350, 41, 41) == pytest.approx(1350 + GRO_SKB_OVERHEAD_BYTES / 41)
    # Without batching on either end, each datagram is its own skb.
    assert rcvbuf_charge_bytes(1452, 1, 44) == rcvbuf_charge_bytes(1452, 10, 1) == 2304.0


SOL_UDP, UDP_SEGMENT, UDP_GRO, SO_MEMINFO = 17, 103, 104, 55


@pytest.mark.skipif(sys.platform != "linux", reason="Linux socket accounting")
@pytest.mark.parametrize(("payload", "segments"), [(1350, 41), (1452, 10), (1452, 44)])
def test_this_kernel_charges_a_gro_skb_as_modelled(payload, segments):
    """A GSO batch sent to a GRO socket is queued as one skb of the batch's
    payloads plus GRO_SKB_OVERHEAD_BYTES, admitted while it fits (or the queue is
    empty): a 64 KiB socket holds max(1, rcvbuf // truesize) of them."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)  # the kernel doubles it
        rx.bind(("127.0.0.1", 0))
        try:
            rx.setsockopt(SOL_UDP, UDP_GRO, 1)
            tx.setsockopt(SOL_UDP, UDP_SEGMENT, payload)
        except OSError as err:
            pytest.skip(f"no UDP GSO/GRO here: {err}")
        tx.connect(rx.getsockname())
        rcvbuf = rx.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        charged = []
        for _ in range(6):
            tx.send(b"x" * (payload * segments))
            charged.append(struct.unpack("9I", rx.getsockopt(socket.SOL_SOCKET, SO_MEMINFO,
                                                             36))[0])
        held = _drain(rx)
    finally:
        rx.close()
        tx.close()
    truesize = payload * segments + GRO_SKB_OVERHEAD_BYTES
    assert charged[0] == truesize, f"one {segments} × {payload} B skb charged {charged[0]} B"
    assert held == max(1, rcvbuf // truesize), (
        f"a {rcvbuf}-byte socket held {held} skbs of {truesize} B")
