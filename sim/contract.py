"""The engine contract suite: named scenarios every engine must get right.

Like scikit-learn's ``parametrize_with_checks``: the same scenarios, built on
synthetic cost models with round numbers (:mod:`quiclab.models.testing`), run
through every engine (``tests/sim/test_contract.py``). Each case names the
resource that must limit, the reference goodput and the tolerance. The
references are hand formulas on the resolved inputs
(:func:`reference_goodput_mbps`), never an engine's answer, so that every
engine, the analytic one included, is held to them:

==================== ============== ================================ =========
case                 limit          reference                        tolerance
==================== ============== ================================ =========
link-bound           link           link rate × payload / wire bytes 5 %
sender-cpu-bound     sender_cpu     cores × payload / CPU per packet 5 %
receiver-cpu-bound   receiver_cpu   cores × payload / CPU per packet 5 %
loss-bound           cwnd           Mathis response (NewReno)        15 %
window-bound         flow_control   window / RTT                     10 %
rcvbuf-bound         rcvbuf         Mathis response to the stalls    30 %
                                    that overflow the buffer
==================== ============== ================================ =========

Why the last one is loose: the formula averages the stalls, while the
packet engines see each one drop a burst at once, and a stall longer than a
round trip can cost a second congestion event (the DES and ns-3 land ~20 % below).

``CONTRACT_SCENARIOS[name](**overrides)`` builds the Scenario (e.g. with a
different ``seed``); ``contract_registry()`` holds the models they use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from quiclab.models.registry import Registry
from quiclab.models.testing import synthetic_model, synthetic_registry
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import Resolved, resolve
from quiclab.sim.scenario import Scenario

#: 1400-byte packets of 1360 stream bytes (40 B overhead), the synthetic default (1359
#: goodput bytes a packet under HTTP/3, whose framing the references count).
_FAST: dict[str, Any] = dict(sender_ns=1000.0, receiver_ns=800.0)


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
    #: The hand formula of the reference goodput (see ``reference_goodput_mbps``):
    #: "link", "sender_cpu", "receiver_cpu", "mathis", "window" or "stalls".
    reference: str
    rel_tol: float
    why: str


CONTRACT_CASES: dict[str, ContractCase] = {c.name: c for c in (
    ContractCase(
        "link-bound",
        _builder(server="c-fast", client="c-fast", link_gbps=1.0, transfer_bytes=50_000_000),
        "link", "link", 0.05,
        "1 Gbit/s link, CPUs for ~10 Gbit/s: goodput = link × payload / wire bytes"),
    ContractCase(
        "sender-cpu-bound",
        _builder(server="c-slow-sender", client="c-fast", transfer_bytes=50_000_000),
        "sender_cpu", "sender_cpu", 0.05,
        "4 µs + 2 µs/46 per packet + 0.5 µs per ACK at one ACK per 2 packets"),
    ContractCase(
        "receiver-cpu-bound",
        _builder(server="c-fast", client="c-slow-receiver", transfer_bytes=50_000_000),
        "receiver_cpu", "receiver_cpu", 0.05,
        "4 µs + 1 µs/46 per packet + 0.5 µs per ACK; the receive buffer absorbs the excess"),
    ContractCase(
        "loss-bound",
        _builder(server="c-fast", client="c-fast", link_gbps=1.0, rtt_ms=2.0, loss_pct=1.0,
                 cc="reno", transfer_bytes=10_000_000_000),
        "cwnd", "mathis", 0.15,
        "1 % random loss at 2 ms: NewReno's Mathis response 1.22/√p packets per RTT"),
    ContractCase(
        "window-bound",
        _builder(server="c-window", client="c-window", rtt_ms=10.0, transfer_bytes=50_000_000),
        "flow_control", "window", 0.10,
        "256 KiB flow-control window per 10 ms RTT ≈ 210 Mbit/s"),
    ContractCase(
        "rcvbuf-bound",
        _builder(server="c-stall", client="c-stall", rtt_ms=1.0, rcvbuf_bytes=65536,
                 transfer_bytes=10_000_000_000),
        "rcvbuf", "stalls", 0.30,
        "receiver stalls overflow the 64 KiB socket buffer; the drops drive cwnd"),
)}

#: Scenario builders by name (``CONTRACT_SCENARIOS["link-bound"]()``).
CONTRACT_SCENARIOS: dict[str, Callable[..., Scenario]] = {
    name: case.build for name, case in CONTRACT_CASES.items()}


def reference_goodput_mbps(case: ContractCase, registry: Registry,
                           scenario: Scenario | None = None) -> float:
    """The goodput (Mbit/s) an engine must match for ``case``, by hand formula.

    From the resolved inputs every engine shares (payload P, wire bytes, CPU
    ns, windows), never from an engine's answer:

    - link: link rate × P / wire bytes;
    - sender_cpu, receiver_cpu: cores × P·8 / (ns per packet + ns per call /
      segments per call + ns per ACK / packets per ACK);
    - mathis: W = sqrt((1 + β) / (2 (1 − β) p)) packets (Mathis et al. 1997:
      1.22/√p at β = 0.5) per RTT: the path's plus one packet's serialisation
      (RTT₀), stretched by the receiver's wait for the k − 1 packets after the
      first of each ACK (k packets per ACK, at most a quarter of W):
      RTT₀ / (1 − (k − 1)/W);
    - window: flow-control window / the path's RTT;
    - stalls: the same response to the stalls that overflow a buffer of N
      datagrams (rcvbuf / skb truesize), each one loss event: at pkt datagrams/s
      a Pareto(τm, α) stall overflows it when longer than x = N / pkt, λ·(τm/x)^α
      times a second, so with pkt = W / RTT, W^(α+1) = 1.5 · N^α · RTT^(α−1) /
      (λ · τm^α) (RTT stretched by the ACK wait as above: a few fixed-point
      steps); goodput net of the datagrams they drop, λ·τm^α·x^(1−α)/(α − 1).
    """
    scenario = scenario or case.build()
    r = resolve(scenario, registry)
    payload_bits = r.sender.stream_bytes * 8.0
    if case.reference == "link":
        return r.path.link_bps * r.sender.stream_bytes / _wire(r) / 1e6
    if case.reference in ("sender_cpu", "receiver_cpu"):
        ep = r.sender if case.reference == "sender_cpu" else r.receiver
        ns = ep.ns_per_packet_amortised(1.0 / r.receiver.ack_every_packets)
        return ep.cores * payload_bits / (ns * 1e-9) / 1e6
    rtt0 = r.path.rtt_s + _wire(r) * 8.0 / r.path.link_bps
    if case.reference == "mathis":
        beta = r.sender.reno_beta
        window = math.sqrt((1.0 + beta) / (2.0 * (1.0 - beta)) / r.path.loss_prob)
        return window * payload_bits / (rtt0 * _ack_stretch(r, window)) / 1e6
    if case.reference == "window":
        return r.receiver.fc_window_bytes * 8.0 / r.path.rtt_s / 1e6
    if case.reference == "stalls":
        from quiclab.sim.analytic.core import skb_truesize

        rcv = r.receiver
        # Whole datagrams, as the engines hold them (TRANSPORT.md "Receive buffer").
        n = math.floor(r.path.rcvbuf_bytes / skb_truesize(r.sender.udp_payload_bytes))
        a, tm, rate = rcv.rx_stall_alpha, rcv.rx_stall_min_s, rcv.rx_stall_rate_hz
        rtt = rtt0
        for _ in range(8):
            window = (1.5 * n**a * rtt ** (a - 1.0) / (rate * tm**a)) ** (1.0 / (a + 1.0))
            rtt = rtt0 * _ack_stretch(r, window)
        x = n * rtt / window
        if x < tm:
            raise ValueError(f"{case.name}: the buffer fills in {x:.3g} s, less than the "
                             f"shortest stall ({tm:.3g} s): the formula does not hold")
        dropped = rate * tm**a * x ** (1.0 - a) / (a - 1.0)
        return window * payload_bits / rtt * (1.0 - dropped) / 1e6
    raise ValueError(f"reference={case.reference!r}: link | sender_cpu | receiver_cpu | "
                     "mathis | window | stalls")


def _wire(r: Resolved) -> float:
    return float(r.path.wire_bytes(r.sender.udp_payload_bytes))


def _ack_stretch(r: Resolved, window: float) -> float:
    """RTT factor of the receiver's wait for the rest of an ACK's k packets
    (k capped at a quarter of the window, never below the receiver's floor)."""
    rcv = r.receiver
    k = min(rcv.ack_every_packets, max(rcv.ack_floor_packets, window / 4.0))
    return 1.0 / (1.0 - (k - 1.0) / window)


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
