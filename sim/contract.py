"""The engine contract suite: named scenarios every engine must get right.

Like scikit-learn's ``parametrize_with_checks``: the same scenarios, built on
synthetic cost models with round numbers (:mod:`quiclab.models.testing`), run
through every engine (``tests/sim/test_contract.py``). Each case names the
resource that must limit, the reference goodput and the tolerance:

==================== ============== ================================ =========
case                 limit          reference                        tolerance
==================== ============== ================================ =========
link-bound           link           analytic goodput (exact)         5 %
sender-cpu-bound     sender_cpu     analytic goodput (exact)         5 %
receiver-cpu-bound   receiver_cpu   analytic goodput (exact)         5 %
loss-bound           cwnd           Mathis response (NewReno)        15 %
window-bound         flow_control   window / RTT                     10 %
rcvbuf-bound         rcvbuf         analytic goodput                 30 %
==================== ============== ================================ =========

Why the last one is loose: the analytic engine treats receive-buffer drops as
independent losses, while a scheduling stall drops a burst that costs one
congestion event, so the packet engines are expected above it.

``CONTRACT_SCENARIOS[name](**overrides)`` builds the Scenario (e.g. with a
different ``seed``); ``contract_registry()`` holds the models they use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quiclab.models.registry import Registry
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

#: 1400-byte packets of 1360 stream bytes (40 B overhead), the synthetic default.
_FAST = dict(sender_ns=1000.0, receiver_ns=800.0)


def contract_registry() -> Registry:
    """The synthetic models of the contract scenarios (hand-computable costs).

    - ``c-fast``: 1 µs per packet to send, 0.8 µs to receive — neither CPU limits
      a 1 Gbit/s link;
    - ``c-slow-sender``: GSO (46 segments per call), 4 µs per packet + 2 µs per
      call + 0.5 µs per ACK received;
    - ``c-slow-receiver``: GRO, 4 µs per packet + 1 µs per call + 0.5 µs per ACK sent;
    - ``c-window``: a 256 KiB flow-control window;
    - ``c-stall``: receiver stalls (1 kHz, Pareto from 200 µs, α = 2).
    """
    return synthetic_registry(
        synthetic_model("c-fast", **_FAST),
        synthetic_model("c-slow-sender", sender_ns=4000.0, receiver_ns=800.0,
                        syscall_ns=2000.0, ack_ns=500.0, supports_gso=True, supports_gro=True),
        synthetic_model("c-slow-receiver", sender_ns=1000.0, receiver_ns=4000.0,
                        syscall_ns=1000.0, ack_ns=500.0, supports_gso=True, supports_gro=True),
        synthetic_model("c-window", **_FAST, fc_window_bytes=256 * 1024),
        synthetic_model("c-stall", **_FAST, rx_stall_rate_hz=1000.0, rx_stall_min_us=200.0,
                        rx_stall_alpha=2.0),
    )


def _builder(**fields: Any) -> Callable[..., Scenario]:
    def build(**overrides: Any) -> Scenario:
        return Scenario(**{**fields, **overrides})

    build.__doc__ = "Scenario(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
    return build


@dataclass(frozen=True)
class ContractCase:
    """One contract scenario: how to build it and what every engine must predict."""

    name: str
    build: Callable[..., Scenario]
    limit: str
    #: "analytic" (the analytic engine's goodput), "cwnd" (its congestion-control
    #: response, the Mathis formula for NewReno) or "flow_control" (window / RTT).
    reference: str
    rel_tol: float
    why: str


CONTRACT_CASES: dict[str, ContractCase] = {c.name: c for c in (
    ContractCase(
        "link-bound",
        _builder(server="c-fast", client="c-fast", link_gbps=1.0, transfer_bytes=50_000_000),
        "link", "analytic", 0.05,
        "1 Gbit/s link, CPUs for ~10 Gbit/s: goodput = link × payload / wire bytes"),
    ContractCase(
        "sender-cpu-bound",
        _builder(server="c-slow-sender", client="c-fast", transfer_bytes=50_000_000),
        "sender_cpu", "analytic", 0.05,
        "4 µs + 2 µs/46 per packet + 0.5 µs per ACK at one ACK per 2 packets"),
    ContractCase(
        "receiver-cpu-bound",
        _builder(server="c-fast", client="c-slow-receiver", transfer_bytes=50_000_000),
        "receiver_cpu", "analytic", 0.05,
        "4 µs + 1 µs/46 per packet + 0.5 µs per ACK; the receive buffer absorbs the excess"),
    ContractCase(
        "loss-bound",
        _builder(server="c-fast", client="c-fast", link_gbps=1.0, rtt_ms=2.0, loss_pct=1.0,
                 cc="reno", transfer_bytes=10_000_000_000),
        "cwnd", "cwnd", 0.15,
        "1 % random loss at 2 ms: NewReno's Mathis response 1.22/√p packets per RTT"),
    ContractCase(
        "window-bound",
        _builder(server="c-window", client="c-window", rtt_ms=10.0, transfer_bytes=50_000_000),
        "flow_control", "flow_control", 0.10,
        "256 KiB flow-control window per 10 ms RTT ≈ 210 Mbit/s"),
    ContractCase(
        "rcvbuf-bound",
        _builder(server="c-stall", client="c-stall", rtt_ms=1.0, rcvbuf_bytes=65536,
                 transfer_bytes=10_000_000_000),
        "rcvbuf", "analytic", 0.30,
        "receiver stalls overflow the 208 KiB socket buffer; the drops drive cwnd"),
)}

#: Scenario builders by name (``CONTRACT_SCENARIOS["link-bound"]()``).
CONTRACT_SCENARIOS: dict[str, Callable[..., Scenario]] = {
    name: case.build for name, case in CONTRACT_CASES.items()}


def reference_goodput_mbps(case: ContractCase, registry: Registry,
                           scenario: Scenario | None = None) -> float:
    """The goodput (Mbit/s) an engine must match for ``case`` (see ``reference``)."""
    from quiclab.sim.analytic import AnalyticEngine

    scenario = scenario or case.build()
    pred = AnalyticEngine(registry).predict(scenario)
    if case.reference == "analytic":
        return pred.goodput_mbps
    return pred.rates_mbps[case.reference]


def check(case: ContractCase, prediction: Prediction, reference_mbps: float) -> list[str]:
    """Contract violations of one prediction (an empty list when it passes)."""
    problems = []
    if prediction.limit != case.limit:
        problems.append(f"{case.name}: limit {prediction.limit}, expected {case.limit}")
    error = prediction.goodput_mbps / reference_mbps - 1.0
    if abs(error) > case.rel_tol:
        problems.append(
            f"{case.name}: goodput {prediction.goodput_mbps:.1f} Mbit/s is {error:+.1%} "
            f"from the reference {reference_mbps:.1f} (tolerance ±{case.rel_tol:.0%})")
    return problems
