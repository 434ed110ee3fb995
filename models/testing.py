"""Synthetic cost models for tests and examples (never used for predictions).

``synthetic_model("fast", sender_ns=2000)`` builds a complete CostModel with
round numbers so that tests can compute the expected goodput by hand.
"""

from __future__ import annotations

from typing import Any

from quiclab.models.costmodel import Behaviour, CostModel, CryptoCost, Param, RoleCosts
from quiclab.models.cpus import CpuCatalog
from quiclab.models.registry import Interop, Registry

REFERENCE_CPU = "AMD EPYC 7543"


def _p(value: float, unit: str = "ns") -> Param:
    return Param.point(value, unit, "assumed: synthetic test model", rel=0.1)


def synthetic_model(
    name: str,
    sender_ns: float = 3000.0,
    receiver_ns: float = 3000.0,
    syscall_ns: float = 0.0,
    ack_ns: float = 0.0,
    per_byte_ns: float = 0.0,
    crypto_ns: float = 0.0,
    udp_payload_bytes: int = 1400,
    overhead_bytes: int = 40,
    cores: float = 1.0,
    **behaviour: Any,
) -> CostModel:
    """A model whose per-data-packet cost is exactly ``sender_ns`` / ``receiver_ns``.

    With the defaults (no syscall, ACK, byte or crypto cost) one data packet costs
    ``sender_ns`` on the sender and ``receiver_ns`` on the receiver, on the
    reference CPU (AMD EPYC 7543), so e.g. a 1360-byte payload at 3000 ns gives
    1360 × 8 / 3 µs = 3627 Mbit/s.
    """

    def role(ns: float) -> RoleCosts:
        return RoleCosts(
            ns_per_packet=_p(ns),
            ns_per_byte=_p(per_byte_ns, "ns/B"),
            ns_per_syscall=_p(syscall_ns),
            ns_per_segment=_p(0.0),
            ns_per_ack=_p(ack_ns),
            app_ns_per_byte={"perf": _p(0.0, "ns/B"), "hq": _p(0.0, "ns/B"),
                             "h3": _p(0.0, "ns/B")},
            cores=Param.point(cores, "cores", "assumed: synthetic test model"),
        )

    crypto = {c: CryptoCost(_p(crypto_ns), _p(0.0, "ns/B"))
              for c in ("aes-ni", "aes-sw", "chacha20")}
    beh = Behaviour(udp_payload_bytes=udp_payload_bytes, overhead_bytes=overhead_bytes,
                    **behaviour)
    return CostModel(implementation=name, version="synthetic", reference_cpu=REFERENCE_CPU,
                     sender=role(sender_ns), receiver=role(receiver_ns), crypto=crypto,
                     behaviour=beh, notes=("synthetic test model",))


def synthetic_registry(*models: CostModel, interop: Interop | None = None) -> Registry:
    """A registry of the given models (default: ``fast`` and ``slow`` ones)."""
    if not models:
        models = (synthetic_model("fast", sender_ns=2000, receiver_ns=1500),
                  synthetic_model("slow", sender_ns=8000, receiver_ns=6000))
    return Registry({m.implementation: m for m in models}, CpuCatalog.packaged(), interop,
                    source="synthetic")


def ack_rule_models() -> tuple[CostModel, ...]:
    """Receivers with their own ACK rules (sim/TRANSPORT.md "ACKs"), for the engines'
    tests: ``floor6`` has a floor of 10 packets (s2n-quic-like) behind a 6-packet
    flow-control window, ``timer6`` ACKs only on a 2 ms timer (aioquic-like), and
    ``f10`` / ``f10t`` have the floor without a window, the second with a time-driven
    CUBIC (RFC 8312 §4.2, s2n-quic's)."""
    window: dict[str, Any] = {"fc_window_bytes": 6 * 1360}
    floor: dict[str, Any] = {"sender_ns": 1000, "receiver_ns": 800, "ack_every_packets": 40.0,
                             "ack_threshold_floor_packets": 10.0}
    return (synthetic_model("floor6", **floor, **window),
            synthetic_model("timer6", sender_ns=1000, receiver_ns=800, ack_every_packets=10.0,
                            ack_threshold_fixed=True, ack_timer_ms=2.0,
                            immediate_ack_on_gap=False, **window),
            synthetic_model("f10", **floor),
            synthetic_model("f10t", cubic_reno_friendly="time", **floor))
