"""Receive-buffer accounting, shared by every engine and by calibration.

What Linux charges a UDP socket's receive buffer per datagram (the skb
truesize, or a GRO skb's payloads plus its overhead), and the drops a stalled
receiver's buffer lets through (Pareto-distributed stalls against a buffer that
absorbs rcvbuf / arrival-rate seconds). TRANSPORT.md "Receive buffer" is the
specification; the analytic model solves the same drop law inside its fixed
point (``quiclab.sim.analytic.core._rates``), the DES charges each datagram its
truesize as it arrives, and ns-3 does the same with its C++ copy of these rules
(``sim/ns3/main.cc`` SkbTruesize, ``transport.h`` kGroSkbOverhead).
"""

from __future__ import annotations

import numpy as np

#: What Linux charges a UDP socket's receive buffer for one datagram (the skb
#: truesize): the data buffer holds headroom (NET_SKB_PAD, 64 B), the Ethernet,
#: IP and UDP headers (42 B), the payload and struct skb_shared_info (320 B),
#: rounded up to the allocator's power-of-two size (at least 512 B), plus the
#: struct sk_buff (256 B). Measured on the testbed's kernel 6.18 (a socket of
#: rcvbuf B holds floor(B / truesize) datagrams): 1200–1452 B payloads → 2304 B
#: (28 in 64 KiB, 92 in 208 KiB), 8952 B → 16 640 B (3 and 12); NIC drivers that
#: receive into 2 KiB buffers charge the same 2304 B at MTU 1500 (TRANSPORT.md).
SKB_HEAD_BYTES = 64 + 42 + 320
SKB_STRUCT_BYTES = 256
SKB_MIN_ALLOC_BYTES = 512
#: A GSO batch that reaches a GRO receiver whole is one skb, charged its UDP
#: payloads plus this (measured on this host's kernel 6.18 with SO_MEMINFO over
#: loopback: 41 × 1350 B → 56 182 B, 10 × 1452 B → 15 352 B, 44 × 1452 B →
#: 64 720 B). The kernel admits an skb while occupancy + its truesize fits the
#: buffer, or when the buffer is empty (a 64 KiB buffer holds one 44-segment
#: skb, four 10-segment ones, or 28 single datagrams). TRANSPORT.md "Receive buffer".
GRO_SKB_OVERHEAD_BYTES = 832


def skb_truesize(udp_payload_bytes: float) -> float:
    """Receive-buffer bytes one datagram of ``udp_payload_bytes`` costs (see SKB_HEAD_BYTES)."""
    need = max(float(udp_payload_bytes), 0.0) + SKB_HEAD_BYTES
    alloc = SKB_MIN_ALLOC_BYTES
    while alloc < need:
        alloc *= 2
    return float(alloc + SKB_STRUCT_BYTES)


def rcvbuf_charge_bytes(udp_payload_bytes: float, gso_segments: int, gro_segments: int) -> float:
    """Receive-buffer bytes per datagram on average: its skb truesize, or, when a
    GSO batch of ``gso_segments`` reaches a GRO receiver as one skb, its payload
    and a share of the skb's overhead (GRO_SKB_OVERHEAD_BYTES)."""
    if gso_segments > 1 and gro_segments > 1:
        return float(udp_payload_bytes) + GRO_SKB_OVERHEAD_BYTES / gso_segments
    return skb_truesize(udp_payload_bytes)


def skb_truesize_array(udp_payload_bytes: np.ndarray) -> np.ndarray:
    """:func:`skb_truesize` element-wise."""
    need = np.maximum(np.asarray(udp_payload_bytes, dtype=np.float64), 0.0) + SKB_HEAD_BYTES
    alloc = np.maximum(np.exp2(np.ceil(np.log2(need))), SKB_MIN_ALLOC_BYTES)
    return alloc + SKB_STRUCT_BYTES


def rcvbuf_drop_fraction(arrival_Bps: np.ndarray, rcvbuf_bytes: np.ndarray,
                         stall_rate_hz: np.ndarray, stall_min_s: np.ndarray,
                         stall_alpha: np.ndarray) -> np.ndarray:
    """Fraction of arriving bytes dropped because the receiver stalled.

    Stalls arrive at ``stall_rate_hz`` (Poisson) and last a Pareto(τm, α) time;
    during a stall the buffer of B bytes absorbs B/r seconds of arrivals at r
    bytes/s, the rest overflows. Expected overflow time per stall:

    - x = B/r ≥ τm:  E[(τ−x)+] = τm^α · x^(1−α) / (α − 1)
    - x < τm:        E[τ] − x  = τm·α/(α−1) − x

    Drop fraction = stall_rate × E[(τ−x)+] (capped at 1). (The solver's form of
    the same law is in ``_rates``.)
    """
    r = np.maximum(arrival_Bps, 1.0)
    x = rcvbuf_bytes / r
    a = np.maximum(stall_alpha, 1.01)
    tm = stall_min_s
    safe_x = np.maximum(x, 1e-12)
    tail = np.where(x >= tm, tm**a * safe_x ** (1.0 - a) / (a - 1.0), tm * a / (a - 1.0) - x)
    return np.clip(stall_rate_hz * tail, 0.0, 1.0)


def stall_event_rate(arrival_Bps: np.ndarray, rcvbuf_bytes: np.ndarray,
                     stall_rate_hz: np.ndarray, stall_min_s: np.ndarray,
                     stall_alpha: np.ndarray) -> np.ndarray:
    """Stalls per second that overflow the buffer: rate × P(τ > B/r) = rate·(τm/x)^α.

    Each overflowing stall drops a burst of consecutive datagrams, which the
    sender's congestion controller sees as one loss event (RFC 9002 §7.3.2:
    one reduction per round trip).
    """
    x = rcvbuf_bytes / np.maximum(arrival_Bps, 1.0)
    a = np.maximum(stall_alpha, 1.01)
    tail = np.where(x >= stall_min_s, (stall_min_s / np.maximum(x, 1e-12)) ** a, 1.0)
    return stall_rate_hz * tail
