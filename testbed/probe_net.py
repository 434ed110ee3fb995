"""The host probe's UDP part: send and receive per datagram between the testbed's namespaces.

One thread does everything, so each figure is one core's rate with nothing
else of ours running: it makes a socket in the server namespace and one in
the client namespace (``setns(2)`` on the calling thread, then back), then in
cycles fills the receiver's socket buffer from the sender and drains it.

- ``udp_send``: wall-clock per ``send`` of one 1350-byte datagram without GSO.
  On veth the send call also runs the receive path up to the receiver's socket
  (veth_xmit queues the skb to the backlog, and the softirq that delivers it
  runs as the sending call re-enables bottom halves), so this is the kernel's
  whole per-datagram path, as the stacks' ``ns_per_syscall`` holds it.
- ``udp_recv``: wall-clock per ``recv`` of one queued datagram (no GRO).
- ``udp_gso_segment``: wall-clock per datagram of one ``send`` of a 44-segment
  GSO batch (UDP_SEGMENT, Linux ``udp(7)``): veth passes the batch whole
  (``tx-udp-segmentation`` on, as in the testbed's runs).
- ``udp_gro_segment``: wall-clock per datagram of ``recv`` of such a batch on a
  socket with UDP_GRO (delivered as one coalesced buffer).

The receive buffer is raised with SO_RCVBUFFORCE (the probe runs as root), so
the host-wide ``rmem`` sysctls that runs set are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from quiclab.testbed.errors import TestbedError
from quiclab.testbed.probe_bench import Timing

#: setns(2) flag for a network namespace.
CLONE_NEWNET = 0x40000000
#: Linux udp(7) socket options (include/uapi/linux/udp.h).
SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
#: socket(7): set the receive buffer past rmem_max (needs CAP_NET_ADMIN).
SO_RCVBUFFORCE = 33
#: The datagram the probe sends: a full QUIC packet at MTU 1500 (the stacks' 1350–1472).
DATAGRAM_BYTES = 1350
#: Segments of one GSO batch: 44 × 1350 B fit the 64 KiB limit (as quiche's batches).
GSO_SEGMENTS = 44
RCVBUF_BYTES = 16 << 20
PORT = 4444


@contextlib.contextmanager
def in_namespace(name: str) -> Iterator[None]:
    """Run the calling thread in network namespace ``name`` (``/run/netns/<name>``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(str(Path("/run/netns") / name), os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise TestbedError(f"setns({name}): {os.strerror(ctypes.get_errno())}")
        try:
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise TestbedError(f"setns(back): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(target)
        os.close(home)


class UdpPair:
    """A sender socket in ``sender_ns`` connected to a receiver socket in ``receiver_ns``."""

    def __init__(self, sender_ns: str, receiver_ns: str, receiver_ip: str, gso: bool,
                 port: int = PORT):
        self.gso = gso
        with in_namespace(receiver_ns):
            self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            if gso:
                self.rx.setsockopt(SOL_UDP, UDP_GRO, 1)
            self.rx.bind((receiver_ip, port))
        self.rx.setblocking(False)
        with in_namespace(sender_ns):
            self.tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            if gso:
                self.tx.setsockopt(SOL_UDP, UDP_SEGMENT, DATAGRAM_BYTES)
            self.tx.connect((receiver_ip, port))
        self.payload = os.urandom(DATAGRAM_BYTES * (GSO_SEGMENTS if gso else 1))
        self.buf = bytearray(65536)
        # Resolve the neighbour and warm both paths before anything is timed.
        for _ in range(4):
            self.tx.send(self.payload)
        time.sleep(0.01)
        self.drain()

    def close(self) -> None:
        self.tx.close()
        self.rx.close()

    def drain(self) -> tuple[int, int]:
        """Receive until the queue is empty: (datagrams, wall ns)."""
        got = 0
        t0 = time.perf_counter_ns()
        while True:
            try:
                n = self.rx.recv_into(self.buf)
            except BlockingIOError:
                break
            got += max(1, -(-n // DATAGRAM_BYTES)) if self.gso else 1
        return got, time.perf_counter_ns() - t0

    def cycle(self, calls: int) -> tuple[int, int, int, int]:
        """One fill and drain: (datagrams sent, send ns, datagrams received, receive ns)."""
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            self.tx.send(self.payload)
        send_ns = time.perf_counter_ns() - t0
        got, recv_ns = self.drain()
        return calls * (GSO_SEGMENTS if self.gso else 1), send_ns, got, recv_ns


def measure(pair: UdpPair, min_s: float) -> tuple[Timing, Timing]:
    """(send, receive) per datagram, over fill-and-drain cycles lasting ``min_s``."""
    # A cycle fills about half the receive buffer (a 1350-byte datagram costs ~2.3 KB
    # of it, a 44-segment batch ~64 KB more than its bytes).
    calls = 60 if pair.gso else 1500
    sent = send_ns = got = recv_ns = 0
    cpu0 = time.thread_time_ns()
    deadline = time.perf_counter_ns() + int(min_s * 1e9)
    while time.perf_counter_ns() < deadline:
        s, s_ns, g, g_ns = pair.cycle(calls)
        sent, send_ns, got, recv_ns = sent + s, send_ns + s_ns, got + g, recv_ns + g_ns
    cpu = time.thread_time_ns() - cpu0
    if not sent or not got:
        raise TestbedError(f"UDP probe {'with' if pair.gso else 'without'} GSO: "
                           f"{sent} datagrams sent, {got} received")
    total = send_ns + recv_ns
    # This thread's CPU, split between the phases by their wall time.
    return (Timing(send_ns / sent, cpu * send_ns / total / sent, sent),
            Timing(recv_ns / got, cpu * recv_ns / total / got, got))
