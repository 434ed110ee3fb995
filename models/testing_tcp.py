"""Small synthetic TCP cost models for tests (round numbers, not fitted values)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from quiclab.models.costmodel import Behaviour, CostModel, CryptoCost, Param, RoleCosts
from quiclab.models.tcpcost import KERNEL_TERMS, TcpCosts

#: ns (or ns/B) per unit; chosen so that each offload visibly moves a core's cost.
KERNEL_NS = {"tx_call": 800.0, "tx_byte": 0.05, "tx_skb": 1500.0, "tx_segment": 250.0,
             "csum_byte": 0.2, "ack_in": 600.0, "rx_frame": 300.0, "rx_skb": 1200.0,
             "ack_out": 500.0, "rx_call": 700.0, "rx_byte": 0.08, "file_in": 0.0,
             "file_out": 0.0, "gro_frame": 100.0, "wake_out": 2000.0, "wake_in": 1500.0}


def _p(value: float, unit: str) -> Param:
    return Param(value, value * 0.9, value * 1.1, unit, "assumed: test fixture")


def tcp_costs(placement: str = "nic", tls: bool = True, **facts: Any) -> TcpCosts:
    kernel = {k: _p(KERNEL_NS[k], "ns/B" if k.endswith("_byte") else "ns") for k in KERNEL_TERMS}
    user = {"record_out": _p(2000.0 if tls else 0.0, "ns"),
            "record_in": _p(2500.0 if tls else 0.0, "ns")}
    enc = {"aes-ni": _p(0.25, "ns/B"), "chacha20": _p(0.8, "ns/B"), "aes-sw": _p(3.0, "ns/B")}
    dec = {"aes-ni": _p(0.3, "ns/B"), "chacha20": _p(1.0, "ns/B"), "aes-sw": _p(3.5, "ns/B")}
    base = {"placement": placement, "tls": tls, "skb_fill": 0.95, "ack_segments": 8.0,
            "wakeups_per_write": 0.0,
            "gro_window_us": 20.0, "window_ratio": 0.5, "write_bytes": 0,
            "read_bytes": 16384 if tls else 131072}
    base.update(facts)
    return TcpCosts(kernel, user, enc if tls else {}, dec if tls else {},
                    Param(1.0, 0.8, 1.2, "", "assumed: test fixture"),
                    {k: {"value": v, "source": "assumed: test fixture"} for k, v in base.items()})


def tcp_model(name: str = "tcp+tls", placement: str = "nic", tls: bool = True,
              reference_cpu: str = "AMD EPYC 7543", **facts: Any) -> CostModel:
    """A CostModel carrying synthetic TcpCosts (its per-packet RoleCosts are unused)."""
    zero = Param(0.0, 0.0, 0.0, "ns", "derived: kernel TCP uses its tcp section")
    role = RoleCosts(zero, zero, zero, zero, zero, {a: zero for a in ("perf", "hq", "h3")})
    crypto = {c: CryptoCost(zero, zero) for c in ("aes-ni", "aes-sw", "chacha20")}
    beh = Behaviour(udp_payload_bytes=1472, overhead_bytes=24, ack_every_packets=8.0,
                    immediate_ack_on_gap=True, max_ack_delay_ms=40.0, ack_threshold_fixed=True,
                    ack_timer_ms=40.0, supports_gso=True, supports_gro=True, pacing=False,
                    ccs=("cubic", "reno", "bbr"), language="kernel TCP", tls_library="test")
    model = CostModel(name, "test", reference_cpu, role, role, crypto, beh)
    return replace(model, tcp=tcp_costs(placement, tls, **facts))
