"""Turn calibrated totals and shares into CostModel files.

Each role of each implementation is described during calibration by:

- ``T`` — ns per data packet on the reference CPU (EPYC 7543) at the
  implementation's default packet size, one packet per system call, AES-NI,
  and no application layer (app = perf);
- shares of ``T``: ``call`` (the send/receive system call, which GSO/GRO
  amortise), ``segment`` (kernel per-datagram work that stays inside a batch);
- ``bytes_ns`` — total ns per payload byte including crypto's per-byte part
  (what makes jumbo frames pay off, König et al. 2025 §VI-D);
- ``kappa`` — the crypto library's speed relative to OpenSSL in Mukherjee et
  al. 2025 Table 3, and per-cipher extra cost;
- application cost per byte for HTTP/3 and HTTP/0.9;
- ``ack_ns`` — cost of one ACK packet (received by the sender, sent by the receiver).

The components then follow: crypto from Table 3 scaled by κ and the CPU rule;
system call and segment from their shares; per-byte from ``bytes_ns`` minus
crypto's per-byte part; and the per-packet protocol work is the remainder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quiclab.calibration.crypto import TABLE3_CPU
from quiclab.models.costmodel import Behaviour, CostModel, CryptoCost, Param, RoleCosts
from quiclab.models.cpus import CpuCatalog

REFERENCE_CPU = "AMD EPYC 7543"
MODEL_VERSION = "2026.11"


@dataclass
class Value:
    """A calibrated number with interval and provenance (what Param is made of)."""

    value: float
    lo: float
    hi: float
    source: str

    def param(self, unit: str, scale: float = 1.0) -> Param:
        v, lo, hi = self.value * scale, self.lo * scale, self.hi * scale
        lo, hi = min(lo, v), max(hi, v)
        return Param(v, lo, hi, unit, self.source)


def fixed(value: float, source: str, rel: float = 0.0) -> Value:
    lo, hi = sorted((value * (1 - rel), value * (1 + rel)))
    return Value(value, lo, hi, source)


@dataclass
class RoleSpec:
    T: Value
    call_share: Value
    segment_share: Value
    ack_ns: Value
    cores: Value = field(default_factory=lambda: fixed(1.0, "assumed: single thread"))


@dataclass
class ImplSpec:
    """Everything needed to write one CostModel."""

    name: str
    sender: RoleSpec
    receiver: RoleSpec
    bytes_ns: Value  # ns per payload byte, crypto included
    kappa: Value  # crypto library factor vs OpenSSL (Table 3)
    cipher_extra_ns: dict[str, Value]  # extra ns per packet for aes-sw / chacha20
    app_ns_per_byte: dict[str, Value]  # perf / hq / h3
    behaviour: Behaviour
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    #: Kernel TCP's costs (models/tcpcost.py TcpCosts) of a TCP implementation; its
    #: model is built by quiclab.calibration.tcp, not from the per-packet terms above.
    tcp: Any = None


@dataclass(frozen=True)
class CryptoTable:
    """Table 3 fit (ns on the Table-3 CPU): encryption and decryption, per packet and byte."""

    enc_packet: float
    enc_byte: float
    dec_packet: float
    dec_byte: float
    source: str

    @property
    def packet(self) -> float:
        return 0.5 * (self.enc_packet + self.dec_packet)

    @property
    def byte(self) -> float:
        return 0.5 * (self.enc_byte + self.dec_byte)


def packet_work(spec: ImplSpec, crypto: CryptoTable, to_ref: float) -> tuple[float, float, float]:
    """What a data packet costs besides T's kernel shares and protocol part: crypto ns
    per packet, crypto ns per byte and plain (non-crypto) ns per byte, on the CPU that
    ``to_ref`` moves Table 3's to."""
    kappa = spec.kappa.value
    crypto_byte = kappa * crypto.byte * to_ref
    return (kappa * crypto.packet * to_ref, crypto_byte,
            max(0.0, spec.bytes_ns.value - crypto_byte))


def call_share_for_ratio(ratio: float, batch_on: float, batch_off: float,
                         ack_share: float) -> float | None:
    """The call share ``c`` of T that makes CPU per packet ``ratio`` × larger at
    ``batch_off`` than at ``batch_on`` packets per call.

    Per data packet a role spends ``T·(1 − c + c/b + a)`` at ``b`` packets per call
    (``a``: its ACK work as a share of T, the same at both batches), so
    ``c = (R − 1)(1 + a) / (R(1 − 1/b_on) − (1 − 1/b_off))``. None where the two
    batches do not identify it (a ratio ≤ 1, or batches too alike).
    """
    denom = ratio * (1.0 - 1.0 / batch_on) - (1.0 - 1.0 / max(batch_off, 1.0))
    if denom <= 0.05 or ratio <= 1.0:
        return None
    return (ratio - 1.0) * (1.0 + ack_share) / denom


def build_model(spec: ImplSpec, crypto: CryptoTable, cpus: CpuCatalog,
                reference_cpu: str = REFERENCE_CPU) -> CostModel:
    """Assemble one CostModel from its calibrated spec (see module docstring)."""
    if spec.tcp is not None:
        from quiclab.calibration.tcp import model_from_spec

        return model_from_spec(spec, reference_cpu)
    to_ref = cpus.scaling(TABLE3_CPU, reference_cpu).factor
    S = spec.behaviour.udp_payload_bytes
    kappa = spec.kappa.value
    crypto_pkt, crypto_byte, per_byte_plain = packet_work(spec, crypto, to_ref)
    crypto_src = (f"derived: κ={kappa:.3g} ({spec.kappa.source}) × {crypto.source}, "
                  f"moved from {TABLE3_CPU} to {reference_cpu} by the CPU rule")
    kap_lo, kap_hi = spec.kappa.lo / kappa, spec.kappa.hi / kappa
    ciphers = {"aes-ni": CryptoCost(
        Param(crypto_pkt, crypto_pkt * kap_lo, crypto_pkt * kap_hi, "ns", crypto_src),
        Param(crypto_byte, crypto_byte * kap_lo, crypto_byte * kap_hi, "ns/B", crypto_src))}
    for cipher, extra in spec.cipher_extra_ns.items():
        # Extra cost of a cipher is spread over the bytes of a default packet:
        # software AES and ChaCha20 are per-byte stream work (seed 002 §4.2).
        per_byte = extra.value / S
        ciphers[cipher] = CryptoCost(
            ciphers["aes-ni"].ns_per_packet,
            Param(crypto_byte + per_byte, crypto_byte * kap_lo + extra.lo / S,
                  max(crypto_byte * kap_hi + extra.hi / S, crypto_byte + per_byte), "ns/B",
                  f"{crypto_src}; plus {extra.source}"))

    def role(rs: RoleSpec) -> RoleCosts:
        T = rs.T.value
        call = rs.call_share.value * T
        segment = rs.segment_share.value * T
        rest = T - crypto_pkt - crypto_byte * S - call - segment - per_byte_plain * S
        note, scale = "", 1.0
        if rest < 0.05 * T:
            # Shares from different sources can over-explain T; keep 5 % for the
            # protocol and scale the kernel shares down to fit.
            over = 0.05 * T - rest
            scale = max(0.0, 1.0 - over / max(call + segment, 1e-9))
            call, segment = call * scale, segment * scale
            rest = T - crypto_pkt - crypto_byte * S - call - segment - per_byte_plain * S
            note = f"; kernel shares scaled × {scale:.3g} to fit T"
            if rest < 0:
                # Crypto and bytes alone exceed T: the protocol share is clamped
                # to 0, so the role's costs add up to more than T. Say by how much.
                note += f" (crypto and bytes exceed T by {-rest:.0f} ns; protocol set to 0)"
        rel_lo, rel_hi = rs.T.lo / T, rs.T.hi / T

        def share_source(share: Value) -> str:
            if scale == 1.0:
                return f"derived: {share.value:.3g} × T; share {share.source}"
            return (f"derived: {share.value * scale:.3g} × T (the share {share.value:.3g} "
                    f"scaled × {scale:.3g} to fit T); share {share.source}")
        return RoleCosts(
            ns_per_packet=Param(max(rest, 0.0), max(rest, 0.0) * rel_lo, max(rest, 0.0) * rel_hi,
                                "ns",
                                f"derived: T − crypto − kernel − bytes; T {rs.T.source}{note}"),
            ns_per_byte=spec.bytes_ns.param(
                "ns/B", per_byte_plain / max(spec.bytes_ns.value, 1e-12))
            if spec.bytes_ns.value > 0 else Param(0, 0, 0, "ns/B", spec.bytes_ns.source),
            ns_per_syscall=Param(call, call * rel_lo, call * rel_hi, "ns",
                                 share_source(rs.call_share)),
            ns_per_segment=Param(segment, segment * rel_lo, segment * rel_hi, "ns",
                                 share_source(rs.segment_share)),
            ns_per_ack=rs.ack_ns.param("ns"),
            app_ns_per_byte={k: v.param("ns/B") for k, v in spec.app_ns_per_byte.items()},
            cores=rs.cores.param("cores"),
        )

    return CostModel(
        implementation=spec.name, version=MODEL_VERSION, reference_cpu=reference_cpu,
        sender=role(spec.sender), receiver=role(spec.receiver), crypto=ciphers,
        behaviour=spec.behaviour, variants=spec.variants, notes=tuple(spec.notes),
        provenance=spec.provenance)
