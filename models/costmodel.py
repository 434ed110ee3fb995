"""The CostModel: the calibrated CPU cost and transport behaviour of one QUIC implementation.

Parameters are data, not classes: every number is a :class:`Param` with an
interval and its provenance, stored as versioned JSON under ``models/fitted/``.
All CPU costs are nanoseconds **on the model's reference CPU**; moving them to
another CPU is the explicit rule in :mod:`quiclab.models.cpus`.

Per data packet of ``P`` stream-payload bytes, the sender spends::

    ns_per_packet + ns_per_byte·P + crypto(P) + ns_per_syscall / segments_per_call
      + ns_per_segment + acks_per_packet · ns_per_ack + app_ns_per_byte · P

and the receiver the same terms with its own values (``ns_per_ack`` is then
the cost of building, encrypting and sending one ACK packet). ``crypto(P) =
crypto_ns_per_packet + crypto_ns_per_byte·P`` for the scenario's cipher
(Mukherjee et al. 2025, Table 3: a fixed per-packet initialisation plus a
per-byte part).

Request and handshake workloads (seeds 003/004) add, per role (sender = the
server's end, receiver = the client's end): ``ns_per_connection`` (the
handshake's TLS work — key exchange, certificate signature or verification,
key schedule — and connection state, beyond its packets), ``ns_per_request``
(stream open/close, HTTP/3 HEADERS with QPACK, request parsing, the
application's lookup), ``ns_per_stream_frame`` (each STREAM frame beyond the
one a data packet carries, e.g. several small responses in one packet),
``request_cores`` / ``request_cores_half`` (how many cores request work
spreads over as connections grow) and ``connection_wait_us`` (time a
connection is held without CPU, e.g. timers). They have defaults so that
model files written before them still load; how the request engines combine
them is in :mod:`quiclab.sim.request_costs`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from quiclab.errors import DataError

SCHEMA = "quiclab.costmodel/1"
ROLES = ("sender", "receiver")
ROLE_COSTS = ("ns_per_packet", "ns_per_byte", "ns_per_syscall", "ns_per_segment", "ns_per_ack")
#: Request-workload terms of a role; optional in JSON (defaults below).
REQUEST_COSTS = ("ns_per_connection", "ns_per_request", "ns_per_stream_frame", "request_cores",
                 "request_cores_half", "connection_wait_us")
#: Of those, the CPU costs (scaled by a variant's cost factor and the CPU rule).
REQUEST_CPU_COSTS = ("ns_per_connection", "ns_per_request", "ns_per_stream_frame")
#: Provenance of a request term a model file does not carry.
UNCALIBRATED = "assumed: not in this model file (a bulk-only model without request terms)"


@dataclass(frozen=True)
class Param:
    """One parameter: value, interval [lo, hi], unit and where it came from.

    ``source`` starts with ``fit:`` (rows of the catalog), ``published:`` (ids
    of published points), ``derived:`` (computed from other parameters) or
    ``assumed:`` (with the reason).
    """

    value: float
    lo: float
    hi: float
    unit: str
    source: str

    def __post_init__(self) -> None:
        if not all(math.isfinite(x) for x in (self.value, self.lo, self.hi)):
            raise ValueError(f"Param {self.source!r}: non-finite value/interval")
        if not self.lo <= self.value <= self.hi:
            raise ValueError(
                f"Param {self.source!r}: value {self.value} outside [{self.lo}, {self.hi}]")

    @classmethod
    def point(cls, value: float, unit: str, source: str, rel: float = 0.0) -> Param:
        """A parameter with a symmetric relative interval ``value·(1 ± rel)``."""
        lo, hi = sorted((value * (1 - rel), value * (1 + rel)))
        return cls(value, lo, hi, unit, source)

    def scaled(self, factor: float) -> Param:
        lo, hi = sorted((self.lo * factor, self.hi * factor))
        return replace(self, value=self.value * factor, lo=lo, hi=hi)

    def to_json(self) -> dict[str, Any]:
        return {"value": _r(self.value), "lo": _r(self.lo), "hi": _r(self.hi),
                "unit": self.unit, "source": self.source}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Param:
        if isinstance(data, int | float):
            return cls(float(data), float(data), float(data), "", "assumed: bare number")
        try:
            return cls(float(data["value"]), float(data["lo"]), float(data["hi"]),
                       str(data.get("unit", "")), str(data["source"]))
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(where, f"malformed parameter ({err})") from None


def _r(x: float) -> float:
    """Round to 6 significant digits so that refits are bit-identical in JSON."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.6g}")


# Defaults of the request terms a model file does not carry (Param is immutable).
_NO_NS = Param(0.0, 0.0, 0.0, "ns", UNCALIBRATED)
_ONE_CORE = Param(1.0, 1.0, 1.0, "cores", UNCALIBRATED)
_NO_CONNECTIONS = Param(0.0, 0.0, 0.0, "connections", UNCALIBRATED)
_NO_WAIT = Param(0.0, 0.0, 0.0, "us", UNCALIBRATED)


@dataclass(frozen=True)
class RoleCosts:
    """CPU cost of one role (sender or receiver), ns on the reference CPU."""

    ns_per_packet: Param
    ns_per_byte: Param
    ns_per_syscall: Param
    ns_per_segment: Param
    ns_per_ack: Param
    #: Application-layer cost per payload byte for each app protocol (perf/hq/h3).
    app_ns_per_byte: dict[str, Param] = field(default_factory=dict)
    #: Effective cores the role can use for its packet path (1 = single thread).
    cores: Param = field(default_factory=lambda: Param(1, 1, 1, "cores", "assumed: single thread"))
    # --- request workloads; see the module docstring ------------------------------
    #: CPU per connection beyond its handshake packets: TLS 1.3 key exchange and
    #: certificate signature (server) or verification (client), key schedule,
    #: handshake messages, connection state set-up and teardown.
    ns_per_connection: Param = _NO_NS
    #: CPU per request beyond its packets: stream open/close, HTTP/3 HEADERS
    #: (QPACK) encoding or decoding, request parsing, the application's lookup.
    ns_per_request: Param = _NO_NS
    #: CPU per STREAM frame beyond the one every data packet carries.
    ns_per_stream_frame: Param = _NO_NS
    #: Cores request work spreads over with many connections (1 = one event loop).
    request_cores: Param = _ONE_CORE
    #: Connections at which half of the extra request cores are in use (0 = all at once).
    request_cores_half: Param = _NO_CONNECTIONS
    #: Time a connection is held at this end without CPU (timers, deferred work), µs.
    connection_wait_us: Param = _NO_WAIT

    def items(self) -> Iterator[tuple[str, Param]]:
        for name in ROLE_COSTS:
            yield name, getattr(self, name)
        for app, p in sorted(self.app_ns_per_byte.items()):
            yield f"app_ns_per_byte.{app}", p
        yield "cores", self.cores
        for name in REQUEST_COSTS:
            yield name, getattr(self, name)

    def request_cores_at(self, connections: float) -> float:
        """Cores request work uses with ``connections`` connections:
        ``1 + (request_cores − 1) · C / (C + request_cores_half)``."""
        extra = max(self.request_cores.value - 1.0, 0.0)
        half = self.request_cores_half.value
        return 1.0 + extra * (connections / (connections + half) if half > 0 else 1.0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name).to_json() for name in ROLE_COSTS}
        out["app_ns_per_byte"] = {k: v.to_json() for k, v in sorted(self.app_ns_per_byte.items())}
        out["cores"] = self.cores.to_json()
        for name in REQUEST_COSTS:
            out[name] = getattr(self, name).to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> RoleCosts:
        try:
            kwargs = {name: Param.from_json(data[name], f"{where}.{name}") for name in ROLE_COSTS}
        except KeyError as err:
            raise DataError(where, f"missing cost {err}") from None
        apps = {k: Param.from_json(v, f"{where}.app_ns_per_byte.{k}")
                for k, v in data.get("app_ns_per_byte", {}).items()}
        cores = Param.from_json(data.get("cores", 1), f"{where}.cores")
        # Request terms are optional: bulk-only model files take the defaults.
        request = {name: Param.from_json(data[name], f"{where}.{name}")
                   for name in REQUEST_COSTS if name in data}
        return cls(**kwargs, app_ns_per_byte=apps, cores=cores, **request)


@dataclass(frozen=True)
class CryptoCost:
    """AEAD + header protection per packet: fixed part and per-byte part (ns, reference CPU)."""

    ns_per_packet: Param
    ns_per_byte: Param

    def to_json(self) -> dict[str, Any]:
        return {"ns_per_packet": self.ns_per_packet.to_json(),
                "ns_per_byte": self.ns_per_byte.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> CryptoCost:
        return cls(Param.from_json(data["ns_per_packet"], f"{where}.ns_per_packet"),
                   Param.from_json(data["ns_per_byte"], f"{where}.ns_per_byte"))


@dataclass(frozen=True)
class Behaviour:
    """Transport behaviour that is not CPU cost: packet size, ACKs, windows, offloads."""

    #: Default QUIC packet size (UDP payload) on a 1500-byte MTU path.
    udp_payload_bytes: int = 1350
    #: Largest UDP payload it will use when the path allows (jumbo frames); 0 = no limit.
    max_udp_payload_bytes: int = 0
    #: Largest UDP payload it accepts as a receiver (its max_udp_payload_size
    #: transport parameter, RFC 9000 §18.2); the sender's packets are capped by it.
    max_recv_udp_payload_bytes: int = 65527
    #: Bytes of each UDP payload that are not stream data (QUIC header, AEAD tag, frames).
    overhead_bytes: int = 40
    #: ACK-eliciting packets received per ACK sent, in steady state without loss.
    ack_every_packets: float = 2.0
    #: The receiver builds its ACK once per receive call, after what the call returned
    #: (an event loop that reads, then sends): with GRO a call returns a batch of
    #: segments, so it sends at most one ACK per batch and ``ack_every_packets`` is
    #: at least the receive call's segments (:func:`quiclab.sim.resolve.resolve`).
    ack_per_receive_call: bool = False
    #: ACK at once the packet that opens a packet-number gap and one that arrives below
    #: the largest received, one ACK each (RFC 9000 §13.2.1; sim/TRANSPORT.md "ACKs").
    immediate_ack_on_gap: bool = True
    max_ack_delay_ms: float = 25.0
    #: The receiver ACKs after ``ack_every_packets`` whatever the sender's window (no
    #: ACK-frequency extension, draft-ietf-quic-ack-frequency): a window smaller than
    #: that waits for ``max_ack_delay_ms`` each round trip. False (the default): the
    #: engines keep the threshold within the window (sim/TRANSPORT.md "ACKs").
    ack_threshold_fixed: bool = False
    #: The fewest ack-eliciting packets the receiver waits for before an ACK (a gap
    #: aside) when the engines cap its threshold to the sender's window: RFC 9000
    #: §13.2.2's 2, or a receiver's own fixed tolerance (s2n-quic: 10) — a window
    #: that leaves fewer than that in flight waits for the ACK timer.
    ack_threshold_floor_packets: float = 2.0
    #: The receiver's delayed-ACK timer, when it is shorter than the
    #: ``max_ack_delay_ms`` it advertises (which the sender's PTO uses); 0 = that
    #: advertised value. aioquic ACKs 1 ms (kGranularity) after a packet.
    ack_timer_ms: float = 0.0
    #: CUBIC's Reno-friendly estimate W_est: "acks" grows it per acknowledged
    #: segment (RFC 9438 §4.3); "time" with the time since the epoch over the
    #: minimum RTT (RFC 8312 §4.2, eq. 4), and cwnd by at most half the bytes an
    #: ACK acknowledges (Linux's cap; s2n-quic); "time-srtt" the same over the
    #: smoothed RTT, cwnd by at most one datagram per packet acknowledged (quinn).
    #: sim/TRANSPORT.md "Loss detection and congestion control".
    cubic_reno_friendly: str = "acks"
    #: NewReno's multiplicative decrease: RFC 9002's kLossReductionFactor 0.5; quic-go's
    #: Reno (its only controller) keeps 0.7 of the window.
    reno_beta: float = 0.5
    #: Connection-level flow-control window the receiver keeps open (bytes).
    fc_window_bytes: int = 16 * 2**20
    supports_gso: bool = False
    supports_gro: bool = False
    #: Segments per GSO send call at most (Linux: 64 KiB per call).
    gso_max_segments: int = 64
    pacing: bool = True
    #: The pacer's bucket: a paced sender may send this many milliseconds of its
    #: pacing rate (RFC 9002 §7.7: 1.25 · cwnd / smoothed RTT) back to back, at
    #: least ``pacing_burst_min_packets`` and at most ``pacing_burst_max_packets``
    #: full datagrams (0 = no maximum). The defaults pace packet by packet.
    pacing_burst_ms: float = 0.0
    pacing_burst_min_packets: int = 1
    pacing_burst_max_packets: int = 1
    #: A pacer that has to wait waits at least this long (a timer's granularity),
    #: then sends what its bucket gathered meanwhile; 0 = as long as the rate says.
    pacing_min_delay_ms: float = 0.0
    #: Bytes an unpaced sender emits back to back (one event-loop write burst).
    tx_burst_bytes: int = 0
    #: Receiver scheduling stalls (the process does not read its socket for a
    #: while): Poisson arrivals at ``rx_stall_rate_hz`` with Pareto durations of
    #: minimum ``rx_stall_min_us`` and shape ``rx_stall_alpha``. A stall of τ at
    #: arrival rate r overflows a buffer B by (rτ − B)+, so the drop fraction is
    #: rate·τm^α·(B/r)^(1−α)/(α−1) — with α = 2 drops fall as 1/B, as LSQUIC's do
    #: in Kempf et al. 2024 Fig. 3 (0.37 % at 104 KiB … 0.005 % at 6.5 MiB).
    rx_stall_rate_hz: float = 0.0
    rx_stall_min_us: float = 0.0
    rx_stall_alpha: float = 2.0
    apps: tuple[str, ...] = ("perf", "hq", "h3")
    ccs: tuple[str, ...] = ("cubic", "reno")
    #: Language/runtime and crypto library, for the record.
    language: str = ""
    tls_library: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in OMITTED_AT_DEFAULT and value == f.default:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Behaviour:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise DataError(where, f"unknown behaviour key {unknown[0]!r} "
                            f"(known: {', '.join(sorted(known))})")
        kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                  for k, v in data.items()}
        mode = kwargs.get("cubic_reno_friendly", "acks")
        if mode not in RENO_FRIENDLY_MODES:
            raise DataError(where, f"cubic_reno_friendly={mode!r}: allowed "
                            + " | ".join(f'"{m}"' for m in RENO_FRIENDLY_MODES))
        for name, low in (("ack_threshold_floor_packets", 1.0), ("ack_timer_ms", 0.0)):
            value = kwargs.get(name, low)
            if not isinstance(value, (int, float)) or not value >= low:
                raise DataError(where, f"{name}={value!r}: must be a number ≥ {low:g}")
        beta = kwargs.get("reno_beta", 0.5)
        if not isinstance(beta, (int, float)) or not 0.0 < beta < 1.0:
            raise DataError(where, f"reno_beta={beta!r}: must be a number in (0, 1)")
        return cls(**kwargs)


#: Behaviour keys a model file leaves out while they hold their default (keys added
#: after models were committed: the files, and so the models' versions, stay the same).
OMITTED_AT_DEFAULT = frozenset({"ack_threshold_fixed", "ack_threshold_floor_packets",
                                "ack_timer_ms", "cubic_reno_friendly", "reno_beta"})
#: Values Behaviour.cubic_reno_friendly may take.
RENO_FRIENDLY_MODES = ("acks", "time", "time-srtt")


def variant_cost_factor(spec: dict[str, Any]) -> float:
    """A variant's ``cost_factor``: a number, or a Param-like dict with ``value`` (1.0
    when the variant sets none)."""
    factor = spec.get("cost_factor", 1.0)
    return float(factor.get("value", 1.0) if isinstance(factor, dict) else factor)


@dataclass(frozen=True)
class CostModel:
    """Calibrated cost model of one implementation (both roles).

    ``variants`` maps a build or version name (used as ``impl@variant`` in a
    Scenario, e.g. ``lsquic@march`` for the ``-march`` builds of seed 002 §4.6)
    to a dict of overrides: ``cost_factor`` (multiplies every CPU cost, or with
    ``cost_roles`` only those roles' — e.g. a build whose client alone differs),
    behaviour keys, or ``sender.<cost>`` / ``receiver.<cost>`` Params.
    """

    implementation: str
    version: str
    reference_cpu: str
    sender: RoleCosts
    receiver: RoleCosts
    crypto: dict[str, CryptoCost]
    behaviour: Behaviour
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Free-text notes: which parameters are assumed and why, data used.
    notes: tuple[str, ...] = ()
    #: Calibration provenance (catalog rows, published ids, fit statistics).
    provenance: dict[str, Any] = field(default_factory=dict)
    #: Kernel TCP + TLS costs (:class:`quiclab.models.tcpcost.TcpCosts`) of a TCP
    #: implementation; None for QUIC stacks. With it the engines resolve the model
    #: through the TCP mechanism (quiclab.sim.tcp), not the per-packet costs above.
    tcp: Any = None

    def role(self, role: str) -> RoleCosts:
        if role not in ROLES:
            raise ValueError(f"role={role!r}: allowed sender | receiver")
        return self.sender if role == "sender" else self.receiver

    def params(self) -> Iterator[tuple[str, Param]]:
        """Every parameter with a dotted name, e.g. ``sender.ns_per_packet``."""
        for role in ROLES:
            for name, p in self.role(role).items():
                yield f"{role}.{name}", p
        for cipher, c in sorted(self.crypto.items()):
            yield f"crypto.{cipher}.ns_per_packet", c.ns_per_packet
            yield f"crypto.{cipher}.ns_per_byte", c.ns_per_byte
        if self.tcp is not None:
            for name, p in self.tcp.params():
                yield f"tcp.{name}", p

    def with_variant(self, variant: str) -> CostModel:
        """The model of one build/version variant (see class docstring)."""
        if not variant:
            return self
        if variant not in self.variants:
            known = ", ".join(sorted(self.variants)) or "none"
            raise KeyError(f"{self.implementation}@{variant}: unknown variant (known: {known})")
        spec = self.variants[variant]
        factor = variant_cost_factor(spec)
        sender, receiver = self.sender, self.receiver
        crypto = self.crypto
        roles = set(spec.get("cost_roles") or ROLES)
        if factor != 1.0:
            if "sender" in roles:
                sender = _scale_role(sender, factor)
            if "receiver" in roles:
                receiver = _scale_role(receiver, factor)
            if roles >= set(ROLES):  # crypto is shared by both roles: scaled with both only
                crypto = {k: CryptoCost(v.ns_per_packet.scaled(factor),
                                        v.ns_per_byte.scaled(factor))
                          for k, v in crypto.items()}
        behaviour = self.behaviour
        beh = spec.get("behaviour", {})
        if beh:
            behaviour = Behaviour.from_json({**behaviour.to_json(), **beh},
                                            f"{self.implementation}@{variant}.behaviour")
        for key, value in spec.items():
            if key.startswith(("sender.", "receiver.")):
                role_name, _, cost = key.partition(".")
                param = Param.from_json(value, f"{self.implementation}@{variant}.{key}")
                target = sender if role_name == "sender" else receiver
                if cost.startswith("app_ns_per_byte."):
                    apps = dict(target.app_ns_per_byte)
                    apps[cost.split(".", 1)[1]] = param
                    target = replace(target, app_ns_per_byte=apps)
                else:
                    changes: dict[str, Any] = {cost: param}
                    target = replace(target, **changes)
                if role_name == "sender":
                    sender = target
                else:
                    receiver = target
        return replace(self, implementation=f"{self.implementation}@{variant}",
                       sender=sender, receiver=receiver, crypto=crypto, behaviour=behaviour)

    # -- JSON ---------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out = self._to_json()
        if self.tcp is not None:
            out["tcp"] = self.tcp.to_json()
        return out

    def _to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "implementation": self.implementation,
            "version": self.version,
            "reference_cpu": self.reference_cpu,
            "sender": self.sender.to_json(),
            "receiver": self.receiver.to_json(),
            "crypto": {k: v.to_json() for k, v in sorted(self.crypto.items())},
            "behaviour": self.behaviour.to_json(),
            "variants": self.variants,
            "notes": list(self.notes),
            "provenance": self.provenance,
        }

    def dumps(self) -> str:
        """Canonical JSON text: sorted keys, fixed rounding, trailing newline."""
        return json.dumps(self.to_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "<cost model>") -> CostModel:
        if data.get("schema") != SCHEMA:
            raise DataError(where, f"schema={data.get('schema')!r}, expected {SCHEMA!r}",
                            field="schema")
        try:
            return cls(
                implementation=str(data["implementation"]),
                version=str(data["version"]),
                reference_cpu=str(data["reference_cpu"]),
                sender=RoleCosts.from_json(data["sender"], f"{where}: sender"),
                receiver=RoleCosts.from_json(data["receiver"], f"{where}: receiver"),
                crypto={k: CryptoCost.from_json(v, f"{where}: crypto.{k}")
                        for k, v in data["crypto"].items()},
                behaviour=Behaviour.from_json(data.get("behaviour", {}), f"{where}: behaviour"),
                variants=dict(data.get("variants", {})),
                notes=tuple(data.get("notes", ())),
                provenance=dict(data.get("provenance", {})),
                tcp=_tcp(data.get("tcp"), where),
            )
        except KeyError as err:
            raise DataError(where, f"missing key {err}") from None

    @classmethod
    def load(cls, path: Path) -> CostModel:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise DataError(path, f"not valid JSON ({err.msg} at line {err.lineno})") from None
        return cls.from_json(data, str(path))


def _tcp(data: Any, where: str) -> Any:
    if data is None:
        return None
    from quiclab.models.tcpcost import TcpCosts

    return TcpCosts.from_json(data, f"{where}: tcp")


def _scale_role(costs: RoleCosts, factor: float) -> RoleCosts:
    return replace(
        costs,
        **{name: getattr(costs, name).scaled(factor) for name in ROLE_COSTS},
        **{name: getattr(costs, name).scaled(factor) for name in REQUEST_CPU_COSTS},
        app_ns_per_byte={k: v.scaled(factor) for k, v in costs.app_ns_per_byte.items()},
    )
