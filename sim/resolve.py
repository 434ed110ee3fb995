"""Resolve a Scenario against the model registry into numbers every engine uses.

The analytic engine, the SimPy DES and the ns-3 engine all start from the same
:class:`Resolved`: per-endpoint CPU costs already moved to the Scenario's CPU,
packet sizes, GSO/GRO batch sizes, ACK behaviour, windows, the path, and the
pair's interplay factor. That keeps the three engines comparable: they differ
in how they model dynamics, never in the inputs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from quiclab.errors import ScenarioError
from quiclab.models.costmodel import Behaviour, CostModel, RoleCosts
from quiclab.models.cpus import CpuScaling
from quiclab.models.registry import Registry
from quiclab.sim.request_costs import endpoint_fields
from quiclab.sim.scenario import ETHERNET_WIRE_OVERHEAD_BYTES, Scenario

#: IPv4 (20) + UDP (8) header bytes between the MTU and the UDP payload.
IP_UDP_HEADER_BYTES = 28
#: The fewest bytes of the default bottleneck queue (a switch buffer), and of
#: full packets on the wire it holds at least.
DEFAULT_QUEUE_MIN_BYTES = 65536
DEFAULT_QUEUE_MIN_PACKETS = 2
#: Size of an ACK-only QUIC packet on the wire (UDP payload): short header,
#: one ACK frame with a few ranges, AEAD tag (RFC 9000 §17.3, §19.3).
ACK_PACKET_BYTES = 50
#: Linux UDP GSO/GRO move at most 64 segments and 64 KiB per call.
GSO_MAX_BYTES = 65535
#: HTTP/3 DATA frame header per 16 KiB of body (type + length varints), the
#: only framing on the bulk path (RFC 9114 §7.2.1).
H3_FRAME_BYTES_PER_16K = 4


def gso_segments(beh: Behaviour, payload: int) -> int:
    """Datagrams of ``payload`` bytes one GSO send (GRO receive) call moves."""
    return max(1, min(beh.gso_max_segments, GSO_MAX_BYTES // payload))

@dataclass(frozen=True)
class Endpoint:
    """One endpoint's resolved parameters (all times in ns on the Scenario's CPU)."""

    impl: str
    role: str  # "sender" | "receiver"
    udp_payload_bytes: int
    stream_bytes: int  # goodput bytes carried by one full data packet
    segments_per_call: int  # GSO (sender) / GRO (receiver) batch; 1 without offload
    # Per data packet, split by stage (Mukherjee et al. 2025 §3: IO, UDP/IP, crypto,
    # protocol, application) so that pipelines can place stages on cores.
    ns_protocol: float  # QUIC packetisation/parsing, streams, CC, per-byte copies
    ns_crypto: float  # AEAD + header protection for one data packet
    ns_app: float  # HTTP/3 / HTTP/0.9 / perf application work for one packet's bytes
    ns_segment: float  # kernel per-datagram work inside a batch (UDP/IP, driver)
    ns_per_call: float  # one sendmsg/recvmsg system call
    ns_per_ack: float  # one ACK packet received (sender) or built and sent (receiver)
    cost_lo: float  # multiplicative interval of all costs (parameters × CPU rule)
    cost_hi: float
    cores: float
    ack_every_packets: float
    immediate_ack_on_gap: bool
    max_ack_delay_s: float
    ack_threshold_fixed: bool  # Behaviour.ack_threshold_fixed
    ack_floor_packets: float  # Behaviour.ack_threshold_floor_packets
    #: The receiver's delayed-ACK timer (Behaviour.ack_timer_ms, else max_ack_delay).
    ack_timer_s: float
    #: CUBIC's Reno-friendly estimate (Behaviour.cubic_reno_friendly): "acks",
    #: "time" (over the minimum RTT) or "time-srtt" (over the smoothed RTT).
    cubic_reno_friendly: str
    reno_beta: float  # Behaviour.reno_beta: NewReno's multiplicative decrease
    fc_window_bytes: int
    pacing: bool
    #: The pacer's bucket (Behaviour.pacing_burst_*): seconds of the pacing rate,
    #: and its bounds in full datagrams (max 0 = none).
    pacing_burst_s: float
    pacing_burst_min_packets: int
    pacing_burst_max_packets: int
    pacing_min_delay_s: float
    tx_burst_bytes: int
    rx_stall_rate_hz: float
    rx_stall_min_s: float
    rx_stall_alpha: float
    #: Loss detection and probes (sim/des/cc.py RECOVERY_MODES): "rfc9002" for QUIC,
    #: "tcp" for kernel TCP's RACK-TLP and retransmission timeout.
    recovery: str = "rfc9002"
    # Where the work runs (sim/cores.py, sim/analytic/pipeline.py):
    # hand-offs between the cores of a pipeline per data packet (ns); each core as
    # (stages, share of the endpoint's work, busy polling, queue depth in messages);
    # the preset and layout; runtime threads' CPU that adds no packet rate (cores);
    # where the process runs relative to the NIC.
    ns_handoff: float = 0.0
    pipeline: tuple[tuple[str, float, bool, int], ...] = ()
    pipeline_label: str = ""
    overhead_cores: float = 0.0
    placement_note: str = ""
    # Request workloads (sim/request_costs.py). Sending a packet uses the
    # implementation's sender-role costs, receiving one its receiver-role costs,
    # whichever end this is: fixed ns per packet (protocol, crypto, segment),
    # ns per UDP payload byte, ns per system call.
    tx_ns_packet: float = 0.0
    tx_ns_byte: float = 0.0
    tx_ns_call: float = 0.0
    rx_ns_packet: float = 0.0
    rx_ns_byte: float = 0.0
    rx_ns_call: float = 0.0
    app_ns_byte: float = 0.0  # application cost per response byte (the scenario's app)
    ns_per_connection: float = 0.0  # handshake TLS work and state, beyond its packets
    ns_per_request: float = 0.0
    ns_per_stream_frame: float = 0.0
    request_cores: float = 1.0  # cores request work uses at the scenario's connections
    connection_wait_s: float = 0.0
    request_source: str = ""

    @property
    def ns_per_data_packet(self) -> float:
        """Cost of one data packet without system calls and ACKs."""
        return (self.ns_protocol + self.ns_crypto + self.ns_app + self.ns_segment
                + self.ns_handoff)

    def ns_per_packet_amortised(self, acks_per_packet: float) -> float:
        """All CPU per data packet: packet work, its share of a call, and of ACKs."""
        return (self.ns_per_data_packet + self.ns_per_call / self.segments_per_call
                + acks_per_packet * self.ns_per_ack)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Path:
    link_bps: float
    mtu_bytes: int
    base_rtt_s: float
    added_rtt_s: float
    loss_prob: float
    reorder_prob: float
    queue_bytes: int
    rcvbuf_bytes: int
    sndbuf_bytes: int

    @property
    def rtt_s(self) -> float:
        return self.base_rtt_s + self.added_rtt_s

    def wire_bytes(self, udp_payload_bytes: int) -> int:
        return udp_payload_bytes + IP_UDP_HEADER_BYTES + ETHERNET_WIRE_OVERHEAD_BYTES


@dataclass(frozen=True)
class Resolved:
    scenario: Scenario
    sender: Endpoint
    receiver: Endpoint
    path: Path
    interop_busy: float
    interop_lo: float
    interop_hi: float
    interop_source: str
    cpu: CpuScaling
    cc: str
    model_versions: dict[str, str]

    @property
    def acks_per_packet(self) -> float:
        """Steady-state ACKs per data packet without loss (receiver's policy)."""
        return 1.0 / max(self.receiver.ack_every_packets, 1e-9)

    def describe_cpu(self) -> str:
        return self.cpu.describe()


def _app_cost(role: RoleCosts, app: str, impl: str, field: str) -> float:
    if app not in role.app_ns_per_byte:
        raise ScenarioError("app", app, f"one of {', '.join(sorted(role.app_ns_per_byte))} "
                            f"(supported by {impl} as {field})")
    return role.app_ns_per_byte[app].value


def _interval(role: RoleCosts) -> tuple[float, float]:
    """Relative interval of the role's total cost from its per-packet parameter."""
    p = role.ns_per_packet
    if p.value <= 0:
        return 1.0, 1.0
    return p.lo / p.value, p.hi / p.value


def _payload(sender: CostModel, receiver: CostModel, scenario: Scenario) -> int:
    """UDP payload of a full data packet: the sender's choice, capped by the path
    MTU and by the receiver's max_udp_payload_size (RFC 9000 §18.2)."""
    path_max = scenario.mtu_bytes - IP_UDP_HEADER_BYTES
    if scenario.udp_payload_bytes:
        return scenario.udp_payload_bytes
    beh = sender.behaviour
    if scenario.mtu_bytes <= 1500:
        chosen = min(beh.udp_payload_bytes, path_max)
    else:
        # Jumbo path: the stack uses the largest payload it is configured for
        # (König et al. 2025 §VI-D: 9000-byte packets where supported).
        cap = beh.max_udp_payload_bytes or path_max
        chosen = max(min(cap, path_max), min(beh.udp_payload_bytes, path_max))
    limit = receiver.behaviour.max_recv_udp_payload_bytes
    if scenario.mtu_bytes > 1500 and limit < path_max and limit <= 1500:
        # A receiver configured for jumbo frames lifts its default limit.
        limit = path_max
    return max(1200, min(chosen, limit))


def _endpoint(model: CostModel, role_name: str, scenario: Scenario, scale: CpuScaling,
              payload: int, field: str) -> Endpoint:
    role = model.role(role_name)
    beh = model.behaviour
    if scenario.app not in beh.apps:
        raise ScenarioError("app", scenario.app, f"{' | '.join(beh.apps)} "
                            f"({model.implementation} as {field} has no {scenario.app})")
    crypto = model.crypto.get(scenario.cipher)
    if crypto is None:
        raise ScenarioError("cipher", scenario.cipher,
                            f"{' | '.join(sorted(model.crypto))} for {model.implementation}")
    stream_bytes = max(1, payload - beh.overhead_bytes)
    if scenario.app == "h3":
        framing = math.ceil(stream_bytes * H3_FRAME_BYTES_PER_16K / 16384)
        stream_bytes = max(1, stream_bytes - framing)
    f, part = scale.factor, scale.part
    offload = (scenario.gso and beh.supports_gso) if role_name == "sender" else (
        scenario.gro and beh.supports_gro)
    segments = gso_segments(beh, payload) if offload else 1
    ack_every = beh.ack_every_packets
    if beh.ack_per_receive_call and role_name == "receiver":
        # One ACK per receive call at most (Behaviour.ack_per_receive_call).
        ack_every = max(ack_every, float(segments))
    lo, hi = _interval(role)
    return Endpoint(
        impl=model.implementation,
        role=role_name,
        udp_payload_bytes=payload,
        stream_bytes=stream_bytes,
        segments_per_call=segments,
        # Each part moves by its own factor under the probe rule (models/cpus.py);
        # under clock × IPC every part() is f.
        ns_protocol=_packet_and_bytes(scale, ("protocol", role.ns_per_packet.value),
                                      ("byte", role.ns_per_byte.value * payload)),
        ns_crypto=_packet_and_bytes(
            scale, (f"crypto_packet:{scenario.cipher}", crypto.ns_per_packet.value),
            (f"crypto_byte:{scenario.cipher}", crypto.ns_per_byte.value * payload)),
        ns_app=part("app") * _app_cost(role, scenario.app, model.implementation, field)
        * stream_bytes,
        ns_segment=part(f"segment:{role_name}") * role.ns_per_segment.value,
        ns_per_call=part(f"call:{role_name}") * role.ns_per_syscall.value,
        ns_per_ack=part("ack") * role.ns_per_ack.value,
        cost_lo=lo * scale.factor_lo / f,
        cost_hi=hi * scale.factor_hi / f,
        cores=role.cores.value,
        ack_every_packets=ack_every,
        immediate_ack_on_gap=beh.immediate_ack_on_gap,
        max_ack_delay_s=beh.max_ack_delay_ms / 1000.0,
        ack_threshold_fixed=beh.ack_threshold_fixed,
        ack_floor_packets=beh.ack_threshold_floor_packets,
        ack_timer_s=(beh.ack_timer_ms or beh.max_ack_delay_ms) / 1000.0,
        cubic_reno_friendly=beh.cubic_reno_friendly,
        reno_beta=beh.reno_beta,
        fc_window_bytes=beh.fc_window_bytes,
        pacing=beh.pacing,
        pacing_burst_s=beh.pacing_burst_ms / 1000.0,
        pacing_burst_min_packets=beh.pacing_burst_min_packets,
        pacing_burst_max_packets=beh.pacing_burst_max_packets,
        pacing_min_delay_s=beh.pacing_min_delay_ms / 1000.0,
        tx_burst_bytes=beh.tx_burst_bytes,
        rx_stall_rate_hz=beh.rx_stall_rate_hz,
        rx_stall_min_s=beh.rx_stall_min_us * 1e-6,
        rx_stall_alpha=beh.rx_stall_alpha,
        **endpoint_fields(model, role_name, scenario.cipher, scenario.app,
                          scenario.connections, f),
    )


def _packet_and_bytes(scale: CpuScaling, packet: tuple[str, float],
                      per_bytes: tuple[str, float]) -> float:
    """A per-packet and a per-byte cost (ns) on the target CPU, each by its part's
    factor under the probe rule (one factor for both under clock × IPC)."""
    if not scale.parts:
        return scale.factor * (packet[1] + per_bytes[1])
    return scale.part(packet[0]) * packet[1] + scale.part(per_bytes[0]) * per_bytes[1]


def _scaled(ep: Endpoint, factor: float) -> Endpoint:
    """``ep`` with every bulk CPU cost (packet, crypto, application, kernel, ACK) × factor."""
    return replace(ep, ns_protocol=ep.ns_protocol * factor, ns_crypto=ep.ns_crypto * factor,
                   ns_app=ep.ns_app * factor, ns_segment=ep.ns_segment * factor,
                   ns_per_call=ep.ns_per_call * factor, ns_per_ack=ep.ns_per_ack * factor)


def path_for(scenario: Scenario) -> Path:
    """The path part of a Scenario (no registry needed)."""
    link_bps = scenario.link_gbps * 1e9
    base_rtt = scenario.base_rtt_us * 1e-6
    rtt = base_rtt + scenario.rtt_ms * 1e-3
    # Default bottleneck queue: queue_bdp × BDP, at least 64 KiB (a switch buffer)
    # and two full packets on the wire (a 64 KiB queue holds no 65535-byte packet).
    floor = max(DEFAULT_QUEUE_MIN_BYTES,
                DEFAULT_QUEUE_MIN_PACKETS * (scenario.mtu_bytes + ETHERNET_WIRE_OVERHEAD_BYTES))
    queue = scenario.queue_bytes or max(floor, int(scenario.queue_bdp * link_bps / 8 * rtt))
    return Path(link_bps=link_bps, mtu_bytes=scenario.mtu_bytes, base_rtt_s=base_rtt,
                added_rtt_s=scenario.rtt_ms * 1e-3, loss_prob=scenario.loss_pct / 100.0,
                reorder_prob=scenario.reorder_pct / 100.0, queue_bytes=queue,
                rcvbuf_bytes=scenario.rcvbuf_bytes, sndbuf_bytes=scenario.sndbuf_bytes)


def check_rcvbuf(scenario: Scenario, udp_payload_bytes: int) -> None:
    """Refuse a receive buffer smaller than one full datagram's skb truesize: the
    packet engines admit a datagram only while it fits, so nothing would arrive."""
    from quiclab.sim.analytic.core import skb_truesize

    smallest = int(skb_truesize(udp_payload_bytes))
    if scenario.rcvbuf_bytes < smallest:
        raise ScenarioError("rcvbuf_bytes", scenario.rcvbuf_bytes,
                            f"≥ {smallest} (the skb truesize of one {udp_payload_bytes}-byte "
                            "datagram)")


def resolve(scenario: Scenario, registry: Registry) -> Resolved:
    """Evaluate the registry's models for ``scenario``.

    Raises ScenarioError (one line: field, value, what is allowed) for unknown
    implementations, CPUs, unsupported app protocols or ciphers, and a receive
    buffer that cannot hold one datagram (:func:`check_rcvbuf`).
    """
    server = registry.model(scenario.server, field="server")
    client = registry.model(scenario.client, field="client")
    registry.testbed(scenario.testbed)  # refuses an unknown testbed, naming the known
    cpu = registry.cpus.find(scenario.cpu)
    if scenario.cipher == "aes-ni" and not cpu.aes_ni:
        raise ScenarioError("cipher", "aes-ni", f"aes-sw | chacha20 ({cpu.name} has no AES-NI)")
    if scenario.cc not in server.behaviour.ccs:
        raise ScenarioError("cc", scenario.cc,
                            f"{' | '.join(server.behaviour.ccs)} for {server.implementation}")
    if server.tcp is not None or client.tcp is not None:
        # Kernel TCP + TLS: its own mechanism (sim/tcp.py), same Endpoint numbers out.
        from quiclab.sim.tcp import resolve_tcp

        return resolve_tcp(scenario, registry, server, client,
                           registry.cpus.scaling(server.reference_cpu, cpu.name, scenario.cpu_ghz),
                           registry.cpus.scaling(client.reference_cpu, cpu.name, scenario.cpu_ghz))
    # Both ends must agree on a packet size: the sender's choice, capped by the
    # path; the receiver accepts what the path carries (max_udp_payload_size).
    payload = _payload(server, client, scenario)
    if scenario.workload == "bulk":  # request workloads do not model the buffer
        check_rcvbuf(scenario, payload)
    s_scale = registry.cpus.scaling(server.reference_cpu, cpu.name, scenario.cpu_ghz)
    c_scale = registry.cpus.scaling(client.reference_cpu, cpu.name, scenario.cpu_ghz)
    sender = _endpoint(server, "sender", scenario, s_scale, payload, "server")
    receiver = _endpoint(client, "receiver", scenario, c_scale, payload, "client")
    path = path_for(scenario)
    s_base, c_base = scenario.server.split("@")[0], scenario.client.split("@")[0]
    # Pair effects fitted to a testbed's goodput act only on that testbed's Scenarios.
    busy, lo, hi, src = registry.interop.busy(s_base, c_base, scenario.testbed)
    pair_acks = registry.interop.ack_every(s_base, c_base)
    overhead = registry.interop.overhead(s_base, c_base, scenario.testbed)
    if overhead != 1.0:
        # The pair's interplay costs CPU per packet on both sides (Interop.pair_overhead).
        sender, receiver = (_scaled(ep, overhead) for ep in (sender, receiver))
    if pair_acks is not None:
        # The pair's measured ACK frequency replaces the client's usual one.
        receiver = replace(receiver, ack_every_packets=pair_acks)
    resolved = Resolved(scenario=scenario, sender=sender, receiver=receiver, path=path,
                        interop_busy=busy, interop_lo=lo, interop_hi=hi, interop_source=src,
                        cpu=s_scale, cc=scenario.cc, model_versions=registry.versions())
    # Pipelines, core placement and runtime threads (sim/cores.py): the last step,
    # so that every engine starts from the same per-core numbers.
    from quiclab.sim.cores import apply

    return apply(resolved, registry)
