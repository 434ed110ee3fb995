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
#: Linux's defaults of net.ipv4.tcp_rmem / tcp_wmem (the largest autotuned buffer; the
#: QIR hosts' Debian bullseye kernel 5.10: "4096 131072 6291456", "4096 16384 4194304").
DEFAULT_TCP_RMEM_BYTES = 6291456
DEFAULT_TCP_WMEM_BYTES = 4194304
#: TLS 1.3's largest record (RFC 8446 §5.1: 2^14 bytes of plaintext), what NGINX and
#: OpenSSL write by default.
DEFAULT_TLS_RECORD_BYTES = 16384
APPS = ("perf", "hq", "h3")
CCS = ("cubic", "reno", "bbr")
WORKLOADS = ("bulk", "requests", "handshakes")
#: A testbed id (``models/fitted/testbeds.json``); whether it exists is checked
#: against the registry when the scenario is resolved.
TESTBED_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")
#: The testbed id of hosts the models never saw: no testbed-specific effect applies.
UNSEEN_TESTBED = "unseen"


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
    #: Kernel TCP's offloads (tcp+tls and tcp): TCP segmentation offload on the
    #: sender's NIC, large receive offload on the receiver's, and checksum offload on
    #: both (without it the kernel sums every byte, and TSO is off: the kernel needs
    #: the NIC's checksum for TSO). ``gso``/``gro`` are the kernel's software GSO and
    #: GRO for TCP. QUIC stacks ignore all three.
    tso: bool = True
    lro: bool = False
    csum_offload: bool = True
    #: Kernel TCP's largest autotuned receive and send buffers (tcp_rmem[2], tcp_wmem[2]).
    tcp_rmem_bytes: int = DEFAULT_TCP_RMEM_BYTES
    tcp_wmem_bytes: int = DEFAULT_TCP_WMEM_BYTES
    #: TLS record size (plaintext bytes per record) of TCP+TLS senders.
    tls_record_bytes: int = DEFAULT_TLS_RECORD_BYTES
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
    #: The core that handles the NIC queue's interrupts on both hosts (-1: not a core
    #: a stack is pinned to — irqbalance or a dedicated core). A stack pinned to it
    #: shares that core with the kernel's packet processing (UCLouvain's testbed
    #: pins its interrupts to core 2, and some runs the stacks too).
    irq_core: int = -1
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
    # --- where -----------------------------------------------------------------
    #: The testbed the transfer runs on (``models/fitted/testbeds.json``): effects
    #: fitted to one testbed's measurements (a pair's interplay, an unknown CPU's
    #: speed) act only on predictions for that testbed. The default, ``unseen``, is
    #: a testbed the models never saw — the user's own hosts — where only
    #: mechanisms act; ``qir10g`` is the testbed whose baseline the other defaults
    #: reproduce (seed 002 §3.2).
    testbed: str = UNSEEN_TESTBED
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
        "tcp_rmem_bytes": (4096, 2**31 - 1),
        "tcp_wmem_bytes": (4096, 2**31 - 1),
        # RFC 8446 §5.1: at most 2^14 plaintext bytes; 512 is the smallest
        # max_fragment_length (RFC 6066 §4) and OpenSSL's smallest send fragment.
        "tls_record_bytes": (512, 16384),
        "cpu_ghz": (0.0, 10.0),
        "transfer_bytes": (1, 2**50),
        "streams": (1, 100_000),
        "chunks": (1, 1_000_000),
        "udp_payload_bytes": (0, 65527),
        "server_core": (-1, 4095),
        "client_core": (-1, 4095),
        "irq_core": (-1, 4095),
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
        if not isinstance(self.testbed, str) or not TESTBED_ID.fullmatch(self.testbed):
            raise ScenarioError("testbed", self.testbed,
                                "a testbed id: lower-case letters, digits and '-' (e.g. "
                                "qir10g, koenig25, uclouvain, unseen)")
        for name in ("server", "client"):
            # "lsquic@" or "@march" would reach the registry as a name without a
            # variant or without an implementation.
            value = getattr(self, name)
            impl, at, variant = value.partition("@")
            if not impl.strip() or (at and not variant.strip()) or "@" in variant:
                raise ScenarioError(name, value, "an implementation, optionally @variant "
                                                 "(lsquic, lsquic@march)")
        for name, (lo, hi) in self.RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ScenarioError(name, value, f"a number in {lo:g} … {hi:g}")
            # math.isfinite() of a 400-digit int overflows: only floats can be inf/nan.
            if (isinstance(value, float) and not math.isfinite(value)) or not lo <= value <= hi:
                raise ScenarioError(name, value, f"{lo:g} … {hi:g}")
        for name in ("mtu_bytes", "queue_bytes", "rcvbuf_bytes", "sndbuf_bytes",
                     "tcp_rmem_bytes", "tcp_wmem_bytes", "tls_record_bytes",
                     "transfer_bytes", "streams", "chunks", "udp_payload_bytes",
                     "request_bytes", "requests", "connections", "seed", "run",
                     "server_core", "client_core", "irq_core"):
            if not isinstance(getattr(self, name), int):
                raise ScenarioError(name, getattr(self, name), "a whole number")
        for name in _FLOAT_FIELDS:
            # rtt_ms=5 and rtt_ms=5.0 compare equal, so they must share a key().
            if type(getattr(self, name)) is not float:
                object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("gso", "gro", "pin", "tso", "lro", "csum_offload"):
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

    def key_dict(self) -> dict[str, Any]:
        """The fields a key hashes: every field, except those added after catalogs held
        keys (:data:`LATER_FIELDS`) while they keep their default, so that a scenario
        that does not use them keeps the key (and testbed run id) it had before."""
        data = self.to_dict()
        for name in LATER_FIELDS:
            if data[name] == DEFAULTS[name]:
                del data[name]
        return data

    def key(self) -> str:
        """A stable content hash (16 hex digits) used to name results of this scenario."""
        blob = json.dumps(self.key_dict(), sort_keys=True, separators=(",", ":"))
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


#: Fields added after sweeps, predictions and testbed runs were keyed by
#: :meth:`Scenario.key` (kernel TCP's offloads, buffers and TLS record size): a
#: scenario at their defaults hashes as before.
LATER_FIELDS = ("tso", "lro", "csum_offload", "tcp_rmem_bytes", "tcp_wmem_bytes",
                "tls_record_bytes", "irq_core", "testbed")
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Scenario)}


#: Fields held as float whatever number they were given (Scenario.__post_init__).
_FLOAT_FIELDS = tuple(f.name for f in fields(Scenario) if f.type in ("float", float))


_TYPES: dict[str, type] = {f.name: type(getattr(Scenario(), f.name)) for f in fields(Scenario)}


#: Most digits a whole number read from text may have: more than any field's range
#: needs (seed: 19 digits), and far below where ``int()`` of text turns slow and then
#: refuses (4300 digits).
MAX_DIGITS = 40
_WHOLE_TEXT = re.compile(r"[+-]?[0-9][0-9_]*")


def _allowed(name: str, what: str) -> str:
    """``what`` with the field's range, if it has one: "a whole number in 1228 … 65535"."""
    bounds = Scenario.RANGES.get(name)
    return f"{what} in {bounds[0]:g} … {bounds[1]:g}" if bounds else what


def whole_number(name: str, raw: Any, source: str | None = None) -> int:
    """The one reader of whole numbers from user input (``--set``, YAML, URLs, specs).

    Takes an int, a float with no fraction (``1500.0``, ``1e9``) or text of either
    (``"9000"``, ``"1_000_000"``, ``"8.6e9"``); text of digits is read exactly
    (``2**53 + 1`` stays itself), never through a float. Raises ScenarioError naming
    the field, a bounded excerpt of the value and the field's range: for a number
    with more than :data:`MAX_DIGITS` digits the range is what it breaks.
    """
    if isinstance(raw, bool):
        raise ScenarioError(name, raw, _allowed(name, "a whole number"), source=source)
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float):
        if not math.isfinite(raw) or not raw.is_integer():
            raise ScenarioError(name, raw, _allowed(name, "a whole number"), source=source)
        return int(raw)
    if not isinstance(raw, str):
        raise ScenarioError(name, raw, _allowed(name, "a whole number"), source=source)
    text = raw.strip()
    if _WHOLE_TEXT.fullmatch(text):
        digits = text.lstrip("+-").replace("_", "").lstrip("0")
        if len(digits) > MAX_DIGITS:
            bounds = Scenario.RANGES.get(name)
            allowed = f"{bounds[0]:g} … {bounds[1]:g}" if bounds else \
                f"a whole number of at most {MAX_DIGITS} digits"
            raise ScenarioError(name, raw, allowed, source=source)
        return int(text.replace("_", ""))
    try:
        number = float(text.replace("_", ""))
    except ValueError:
        raise ScenarioError(name, raw, _allowed(name, "a whole number"), source=source) from None
    if not math.isfinite(number) or not number.is_integer():
        raise ScenarioError(name, raw, _allowed(name, "a whole number"), source=source)
    return int(number)


def coerce(name: str, raw: Any, source: str | None = None) -> Any:
    """Coerce one raw value (e.g. the string ``"9000"`` from ``--set``) to the field's type.

    Numbers, booleans and names are read from text or taken as given; a list, a
    mapping or nothing where one value belongs is refused (a YAML ``cpu: [a, b]``
    is not a CPU). Raises ScenarioError naming the field and a bounded excerpt.
    """
    if name not in _TYPES:
        raise ScenarioError(name, raw, "a Scenario field: " + ", ".join(field_names()),
                            source=source)
    kind = _TYPES[name]
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if not isinstance(raw, str | int | float):
            raise ScenarioError(name, raw, "true or false", source=source)
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ScenarioError(name, raw, "true or false", source=source)
    if kind is int:
        return whole_number(name, raw, source=source)
    if kind is float:
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise ScenarioError(name, raw, _allowed(name, "a number"), source=source)
        try:
            return float(raw)
        except (ValueError, OverflowError):  # "fast", or an int past 1e308
            raise ScenarioError(name, raw, _allowed(name, "a number"), source=source) from None
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ScenarioError(name, raw, "a name (one word or quoted text)", source=source)
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
