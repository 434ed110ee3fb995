"""The Scenario: one frozen, validated description of a QUIC transfer to predict.

Every engine takes exactly this object. Units are in the field names. Defaults
reproduce the QUIC Interop Runner 10G baseline of Kempf et al. 2024 (seed 002
§3.2): two hosts on one 10 Gbit/s link, MTU 1500, no added delay, AMD EPYC 7543,
HTTP/3, an 8 GB (8 GiB = 8589934592 bytes, as ``shred -s 8589934592`` in the
runner log) download, the Debian default UDP receive buffer of 208 KiB.

Validation here is about values (ranges, enumerations). Whether an
implementation or CPU name exists is checked against the model registry when
the scenario is resolved (:func:`quiclab.sim.resolve.resolve`), which names the
known values in its error.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, ClassVar

from quiclab.errors import ScenarioError

#: The Linux default UDP receive buffer on the QIR hosts (seed 002 §2.3: 208 KiB).
DEFAULT_RCVBUF_BYTES = 212992
#: The send buffer's default, the same 208 KiB (no engine models the send buffer).
DEFAULT_SNDBUF_BYTES = DEFAULT_RCVBUF_BYTES
#: 8 GiB, the file size of every QIR-10G goodput run (result.json ``filesize``).
QIR_TRANSFER_BYTES = 8589934592
#: Ethernet framing on the wire per packet: header 14 + FCS 4 + preamble 8 + gap 12
#: (a packet of the MTU is mtu_bytes + this on the wire and in the bottleneck queue).
ETHERNET_WIRE_OVERHEAD_BYTES = 38

CIPHERS = ("aes-ni", "aes-sw", "chacha20")
APPS = ("perf", "hq", "h3")
CCS = ("cubic", "reno", "bbr")
WORKLOADS = ("bulk", "requests", "handshakes")


def _bool(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ScenarioError(name, value, "true or false")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A transfer between a QUIC server and client, and the hosts and path around it.

    Downloads: the server is the sender of bulk data, the client the receiver
    (as in every seed). Raises :class:`~quiclab.errors.ScenarioError` on
    construction if any value is impossible; the message names the field,
    the value and the allowed range.
    """

    server: str = "lsquic"
    client: str = "lsquic"
    # --- path -------------------------------------------------------------
    link_gbps: float = 10.0
    mtu_bytes: int = 1500
    #: Added round-trip delay on top of the testbed's own base RTT.
    rtt_ms: float = 0.0
    #: Round-trip time of the bare testbed path (two hosts, one 10 GbE link,
    #: kernel and NIC included). Assumed: 50 µs is typical of directly
    #: connected 10 GbE hosts; the seeds do not state it.
    base_rtt_us: float = 50.0
    loss_pct: float = 0.0
    reorder_pct: float = 0.0
    #: Bottleneck queue in bytes; 0 means "queue_bdp × BDP" (at least 64 KiB).
    queue_bytes: int = 0
    queue_bdp: float = 1.0
    # --- hosts ------------------------------------------------------------
    gso: bool = True
    gro: bool = True
    rcvbuf_bytes: int = DEFAULT_RCVBUF_BYTES
    sndbuf_bytes: int = DEFAULT_SNDBUF_BYTES
    cipher: str = "aes-ni"
    #: A CPU from the catalog; any unambiguous part of its name ("7551P", "Gold 6312U").
    cpu: str = "EPYC 7543"
    #: Clock override in GHz (0 = the catalog's max clock for ``cpu``).
    cpu_ghz: float = 0.0
    #: Pinned to the best core (near the NIC) or left to the scheduler.
    pin: bool = False
    #: Named pipeline configuration (``models/pipelines.json``, after seed 001 Fig. 2),
    #: "none" = the stack as shipped.
    pipeline: str = "none"
    #: Core the server / client is pinned to (``taskset``); -1 = the core near the
    #: NIC when ``pin``, else wherever the scheduler puts it (seed 002 §4.7).
    server_core: int = -1
    client_core: int = -1
    # --- application --------------------------------------------------------
    transfer_bytes: int = QIR_TRANSFER_BYTES
    streams: int = 1
    chunks: int = 1
    app: str = "h3"
    cc: str = "cubic"
    #: QUIC packet size override (UDP payload); 0 = the implementation's default.
    udp_payload_bytes: int = 0
    workload: str = "bulk"
    request_bytes: int = 0
    requests: int = 0
    connections: int = 1
    # --- reproducibility ------------------------------------------------------
    seed: int = 0
    run: int = 0

    # Allowed ranges, used both for validation and for the messages.
    RANGES: ClassVar[dict[str, tuple[float, float]]] = {
        "link_gbps": (0.001, 400.0),
        "mtu_bytes": (1228, 65535),  # QUIC needs 1200-byte UDP payloads (RFC 9000 §14) + 28
        "rtt_ms": (0.0, 10_000.0),
        "base_rtt_us": (1.0, 100_000.0),
        "loss_pct": (0.0, 50.0),
        "reorder_pct": (0.0, 50.0),
        "queue_bytes": (0, 2**34),
        "queue_bdp": (0.01, 1000.0),
        "rcvbuf_bytes": (4096, 2**31 - 1),
        "sndbuf_bytes": (4096, 2**31 - 1),
        "cpu_ghz": (0.0, 10.0),
        "transfer_bytes": (1, 2**50),
        "streams": (1, 100_000),
        "chunks": (1, 1_000_000),
        "udp_payload_bytes": (0, 65527),
        "server_core": (-1, 4095),
        "client_core": (-1, 4095),
        "request_bytes": (0, 2**40),
        "requests": (0, 10**9),
        "connections": (1, 1_000_000),
        "seed": (0, 2**63 - 1),
        "run": (0, 2**31 - 1),
    }

    def __post_init__(self) -> None:
        for name in ("server", "client", "cpu", "pipeline"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ScenarioError(name, value, "a non-empty name")
        for name, (lo, hi) in self.RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ScenarioError(name, value, f"a number in {lo:g} … {hi:g}")
            if not math.isfinite(value) or not lo <= value <= hi:
                raise ScenarioError(name, value, f"{lo:g} … {hi:g}")
        for name in ("mtu_bytes", "queue_bytes", "rcvbuf_bytes", "sndbuf_bytes",
                     "transfer_bytes", "streams", "chunks", "udp_payload_bytes",
                     "request_bytes", "requests", "connections", "seed", "run",
                     "server_core", "client_core"):
            if not isinstance(getattr(self, name), int):
                raise ScenarioError(name, getattr(self, name), "a whole number")
        for name in _FLOAT_FIELDS:
            # rtt_ms=5 and rtt_ms=5.0 compare equal, so they must share a key().
            if type(getattr(self, name)) is not float:
                object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("gso", "gro", "pin"):
            _bool(getattr(self, name), name)
        for name, allowed in (("cipher", CIPHERS), ("app", APPS), ("cc", CCS),
                              ("workload", WORKLOADS), ("pipeline", _pipelines())):
            if getattr(self, name) not in allowed:
                raise ScenarioError(name, getattr(self, name), " | ".join(allowed))
        if self.udp_payload_bytes and self.udp_payload_bytes > self.mtu_bytes - 28:
            raise ScenarioError(
                "udp_payload_bytes", self.udp_payload_bytes,
                f"0 (implementation default) or 1200 … mtu_bytes − 28 = {self.mtu_bytes - 28}")
        if self.udp_payload_bytes and self.udp_payload_bytes < 1200:
            # RFC 9000 §14: QUIC requires paths that carry 1200-byte UDP payloads.
            raise ScenarioError("udp_payload_bytes", self.udp_payload_bytes,
                                "0 (implementation default) or ≥ 1200 (RFC 9000 §14)")
        if 0 < self.queue_bytes < self.mtu_bytes + ETHERNET_WIRE_OVERHEAD_BYTES:
            # A bottleneck queue must hold one full packet as the packet engines
            # queue it (wire bytes: framing included), or nothing ever passes.
            raise ScenarioError(
                "queue_bytes", self.queue_bytes,
                f"0 (queue_bdp × BDP) or ≥ mtu_bytes + {ETHERNET_WIRE_OVERHEAD_BYTES} "
                f"({self.mtu_bytes + ETHERNET_WIRE_OVERHEAD_BYTES}, one full packet on the wire)")
        if self.chunks > 1 and self.transfer_bytes < self.chunks:
            raise ScenarioError("chunks", self.chunks,
                                f"1 … transfer_bytes ({self.transfer_bytes})")
        if self.workload != "bulk":
            if self.request_bytes <= 0:
                raise ScenarioError("request_bytes", self.request_bytes,
                                    f"> 0 when workload={self.workload}")
            if self.workload == "requests" and self.requests <= 0:
                raise ScenarioError("requests", self.requests, "> 0 when workload=requests")

    # ------------------------------------------------------------------
    @property
    def sender(self) -> str:
        """The implementation that sends the bulk data (the server: downloads)."""
        return self.server

    @property
    def receiver(self) -> str:
        return self.client

    def with_(self, **changes: Any) -> Scenario:
        """A copy with some fields changed (validated again)."""
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            raise ScenarioError(unknown[0], changes[unknown[0]],
                                "a Scenario field: " + ", ".join(field_names()))
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | None = None) -> Scenario:
        """Build from a mapping (YAML, JSON, query string), coercing strings.

        Unknown keys are refused with the list of known ones.
        """
        names = field_names()
        kwargs: dict[str, Any] = {}
        for key, raw in data.items():
            if key not in names:
                raise ScenarioError(key, raw, "a Scenario field: " + ", ".join(names),
                                    source=source)
            kwargs[key] = coerce(key, raw, source=source)
        try:
            return cls(**kwargs)
        except ScenarioError as err:
            if source and not err.source:
                raise ScenarioError(err.field, err.value, err.allowed, source=source) from None
            raise

    def key(self) -> str:
        """A stable content hash (16 hex digits) used to name results of this scenario."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """A short human label with the fields that differ from the defaults."""
        default = Scenario()
        diffs = [f"{f}={getattr(self, f)}" for f in field_names()
                 if f not in ("server", "client") and getattr(self, f) != getattr(default, f)]
        return f"{self.server}→{self.client}" + (f" [{', '.join(diffs)}]" if diffs else "")


def _pipelines() -> tuple[str, ...]:
    """``none`` and the presets of ``models/pipelines.json`` (packaged data)."""
    from quiclab.models.pipelines import preset_names

    return preset_names()


def field_names() -> list[str]:
    return [f.name for f in fields(Scenario)]


#: Fields held as float whatever number they were given (Scenario.__post_init__).
_FLOAT_FIELDS = tuple(f.name for f in fields(Scenario) if f.type in ("float", float))


_TYPES: dict[str, type] = {f.name: type(getattr(Scenario(), f.name)) for f in fields(Scenario)}


def coerce(name: str, raw: Any, source: str | None = None) -> Any:
    """Coerce one raw value (e.g. the string ``"9000"`` from ``--set``) to the field's type."""
    if name not in _TYPES:
        raise ScenarioError(name, raw, "a Scenario field: " + ", ".join(field_names()),
                            source=source)
    kind = _TYPES[name]
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ScenarioError(name, raw, "true or false", source=source)
    if kind is int:
        if isinstance(raw, bool):
            raise ScenarioError(name, raw, "a whole number", source=source)
        if isinstance(raw, int):
            return raw
        try:
            number = float(str(raw).replace("_", ""))
        except ValueError:
            raise ScenarioError(name, raw, "a whole number", source=source) from None
        if not math.isfinite(number) or number != int(number):
            raise ScenarioError(name, raw, "a whole number", source=source)
        return int(number)
    if kind is float:
        if isinstance(raw, bool):
            raise ScenarioError(name, raw, "a number", source=source)
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise ScenarioError(name, raw, "a number", source=source) from None
    return str(raw)


#: Whitespace that starts a new ``field=`` assignment within one item.
_ASSIGNMENT_SPLIT = re.compile(r"\s+(?=[A-Za-z_][A-Za-z0-9_]*=)")


def parse_assignments(items: list[str], source: str = "--set") -> dict[str, Any]:
    """Parse ``["mtu_bytes=9000", "gso=false"]`` into a dict of coerced values.

    One item may hold several assignments separated by spaces
    (``"mtu_bytes=9000 rtt_ms=10"``); a value may itself contain spaces
    (``"cpu=Intel Xeon E5-2640 v4"``): an item is split only before a word
    followed by ``=``.
    """
    out: dict[str, Any] = {}
    for item in items:
        for part in _ASSIGNMENT_SPLIT.split(item.strip()):
            if not part:  # an empty item, as str.split() skipped it
                continue
            if "=" not in part:
                raise ScenarioError(part, None, "field=value", source=source, missing=True)
            key, _, value = part.partition("=")
            out[key.strip()] = coerce(key.strip(), value.strip(), source=source)
    return out
