"""The host probe's measurements: per-core rates of the cost components the models use.

Each function times one component on the calling thread and returns
:class:`Timing` (wall-clock and CPU nanoseconds per operation). Wall-clock is
what a CPU-bound stack's goodput follows: it includes what the process's own
CPU time leaves out on a shared or virtual machine (time stolen by the
hypervisor, which Linux subtracts from a task's ticks, and time the core
spent on other tasks), as well as a lower clock or a busy SMT sibling, which
both show up in CPU time too.

- AEAD (:func:`aead`): AES-128-GCM and ChaCha20-Poly1305 through OpenSSL (the
  ``cryptography`` package), sealing a 64-byte and a 16 KiB buffer: the slope
  between the sizes is the per-byte cost, the small size less its bytes the
  per-packet cost (RFC 9001 §5.3: every QUIC packet is one AEAD seal/open;
  seed 001 Table 3 splits crypto the same way).
- Copy (:func:`copy_bytes`): a 256 KiB buffer copied by numpy (memcpy), which
  stays in the core's L2 cache as a packet's bytes do.
- Interpreter (:func:`interpreter`): a fixed loop that parses a QUIC short
  header and two varints (RFC 9000 §16, §17.3) and keeps a dict of packet
  numbers: branchy integer work with no special instructions, the kind a
  stack's protocol code does. It stands in for protocol work when no QUIC
  stack is built.
- UDP between the testbed's namespaces: :mod:`quiclab.testbed.probe_net`.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Buffer sizes the AEAD is timed at (bytes): one below any QUIC packet, one far above.
AEAD_SMALL_BYTES = 64
AEAD_LARGE_BYTES = 16384
#: The copied buffer (bytes): L2-resident on any server core of the last decade.
COPY_BYTES = 256 * 1024


@dataclass(frozen=True)
class Timing:
    """Nanoseconds per operation: wall clock and this thread's CPU time."""

    wall_ns: float
    cpu_ns: float
    ops: int


def timed(step: Callable[[], object], ops_per_step: int, min_s: float) -> Timing:
    """Call ``step`` until ``min_s`` of wall time has passed; per-operation times.

    ``ops_per_step`` is how many operations one call does (a step should last
    well over a microsecond so that the loop and clock reads stay out of it).
    """
    step()  # warm: first-call allocations and imports stay out of the timing
    steps = 0
    wall0, cpu0 = time.perf_counter_ns(), time.thread_time_ns()
    deadline = wall0 + int(min_s * 1e9)
    while True:
        step()
        steps += 1
        now = time.perf_counter_ns()
        if now >= deadline:
            break
    cpu = time.thread_time_ns() - cpu0
    ops = steps * ops_per_step
    return Timing((now - wall0) / ops, cpu / ops, ops)


def aead(cipher: str, size: int, min_s: float) -> Timing:
    """Seal ``size`` bytes with a fresh nonce per call (``cipher``: aes-gcm | chacha20)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

    if cipher == "aes-gcm":
        box: AESGCM | ChaCha20Poly1305 = AESGCM(bytes(range(16)))
    elif cipher == "chacha20":
        box = ChaCha20Poly1305(bytes(range(32)))
    else:
        raise ValueError(f"cipher={cipher!r}: allowed aes-gcm, chacha20")
    data = os.urandom(size)
    header = bytes(12)  # the AEAD's associated data: a short header's worth
    per_step = 16
    nonces = [struct.pack(">4xQ", i) for i in range(per_step)]

    def step() -> None:
        for nonce in nonces:
            box.encrypt(nonce, data, header)
    return timed(step, per_step, min_s)


def copy_bytes(min_s: float, size: int = COPY_BYTES) -> Timing:
    """Nanoseconds per byte copied (numpy ``copyto``, a memcpy)."""
    import numpy as np

    src = np.frombuffer(os.urandom(size), dtype=np.uint8)
    dst = np.empty_like(src)
    per_step = 8

    def step() -> None:
        for _ in range(per_step):
            np.copyto(dst, src)
    t = timed(step, per_step, min_s)
    return Timing(t.wall_ns / size, t.cpu_ns / size, t.ops * size)


def _packets(count: int) -> list[bytes]:
    out = []
    for pn in range(count):
        # Short header: flags, 8-byte connection id, 2-byte packet number, then an
        # ACK frame's largest acknowledged and delay as 2- and 4-byte varints.
        out.append(bytes([0x41]) + bytes(8) + struct.pack(">H", pn & 0xFFFF)
                   + struct.pack(">H", 0x4000 | (pn & 0x3FFF))
                   + struct.pack(">I", 0x80000000 | pn))
    return out


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """RFC 9000 §16: a variable-length integer at ``at``; (value, next offset)."""
    first = buf[at]
    length = 1 << (first >> 6)
    value = first & 0x3F
    for i in range(1, length):
        value = (value << 8) | buf[at + i]
    return value, at + length


def interpreter(min_s: float) -> Timing:
    """Nanoseconds per parsed packet of a fixed header-parsing loop."""
    packets = _packets(64)
    seen: dict[int, int] = {}

    def step() -> None:
        for buf in packets:
            if buf[0] & 0x80:
                continue
            pn = struct.unpack_from(">H", buf, 9)[0]
            largest, at = _varint(buf, 11)
            delay, _ = _varint(buf, at)
            seen[pn] = largest + delay
        seen.clear()
    return timed(step, len(packets), min_s)
