"""The Calibrator: from catalog tables to CostModel files (scikit-learn style).

``Calibrator().fit(frames)`` runs four stages and keeps what it learned in
attributes ending in ``_``:

A. direct estimates that need no engine — per-packet and per-ACK CPU cost
   (statsmodels RLM on runs with CPU samples), crypto per packet and byte
   (Table 3 of seed 001), ACK frequency and receive-buffer drop behaviour
   per receiver, perf category shares;
B. initial specs per implementation from :mod:`quiclab.calibration.knowledge`;
C. a joint maximum-a-posteriori fit of what only goodput identifies — the
   cost level of implementations without CPU samples, build/version variant
   factors, packet-size and system-call shares where the seeds measured jumbo
   frames and GSO, and the pair-interplay effects — by minimising squared log
   errors of the **analytic engine's** predictions over every evidence item
   (dataset cells and published points), each divided by the evidence error
   ``sigma`` (0.2 in log units, chosen by leave-one-experiment-out
   cross-validation among 1, 0.3, 0.2 and 0.1), plus Gaussian priors in the
   same log units (scipy ``least_squares``). The minimum over resources has no
   gradient where two rates tie, so the first passes fit a smooth minimum
   (:func:`soft_goodput`), sharper each pass (:data:`SOFTNESS`), and a last
   pass the engine's exact goodput;
D. the final CostModels, the Interop table and the in-sample residuals.

Every free parameter is a mechanism's quantity (ns per packet, per byte, per
system call, a variant's cost factor, a pair's busy fraction) shared by every
evidence item that involves it. A variant that only one item runs (a build
flag, a traffic generator, a version the seeds measured once) has its factor
set by that item alone: its ``cost_factor_source`` says so and names the item,
and only the cross-validation report (that item's experiment held out) tells
how well it transfers. ``exclude`` drops evidence groups (cross-validation).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from quiclab.calibration import knowledge as kb
from quiclab.calibration.assemble import (
    REFERENCE_CPU,
    CryptoTable,
    ImplSpec,
    RoleSpec,
    Value,
    build_model,
    call_share_for_ratio,
    fixed,
)
from quiclab.calibration.cpu import CpuCostEstimator
from quiclab.calibration.crypto import TABLE3_CPU, fit_table3
from quiclab.calibration.evidence import (
    Evidence,
    dataset_cells,
    published_points,
    uclouvain_cells,
)
from quiclab.calibration.receiver import ack_frequency, fit_stalls
from quiclab.calibration.tcp import TCP_MODELS, qir_cells, tcp_spec
from quiclab.calibration.traces import apply as trace_behaviour
from quiclab.models.costmodel import Behaviour, CostModel, Param
from quiclab.models.cpus import CpuCatalog
from quiclab.models.pipelines import HostParams
from quiclab.models.registry import Interop, PairEffects, Registry
from quiclab.models.testbeds import STATED, Speed, Testbeds, for_document
from quiclab.sim.analytic import AnalyticEngine
from quiclab.sim.resolve import gso_segments
from quiclab.sim.scenario import Scenario

#: Default shares when no measurement exists (assumed, wide priors).
DEFAULT_CALL_SHARE = 0.25  # Linux UDP sendmsg/recvmsg per call (seed 001 §2.2: IO 12–61 %)
DEFAULT_SEGMENT_SHARE = 0.2
DEFAULT_BYTES_NS = 0.45  # ns per byte incl. crypto (lsquic, seed 000 Fig. 9a ≈ 0.6 on W-2145)
DEFAULT_H3_SHARE = 0.10  # HTTP/3 layer cost as a share of T (seed 000 §V-A: h3 vs h0.9 up to 27 %)
APPS = ("perf", "hq", "h3")
#: Stacks whose per-byte cost is fitted, and the evidence that separates it from the
#: per-packet cost: jumbo frames (seed 000 Fig. 9a), or for quicly a throughput whose
#: crypto alone (Table 3) leaves too little per packet for the default per-byte cost
#: (seed 001 Table 1: 7.2 Gbit/s with 55.9 % of the cycles in crypto).
BYTES_EVIDENCE: dict[str, str] = {
    "lsquic": "seed 000 Fig. 9a MTU 9000 points",
    "quiche": "seed 000 Fig. 9a MTU 9000 points",
    "ngtcp2": "seed 000 Fig. 9a MTU 9000 points",
    "quicly": "seed 001 Table 1 throughput with GRO and without (crypto from Table 3), "
              "around the prior its libc share gives (BYTES_PRIOR)",
}
#: Stacks whose plain (non-crypto) per-byte cost has a measured prior: the share of
#: the sender's cycles in libc (seed 001 Table 1, perf by shared object) — memcpy of
#: stream data into packets, the per-byte work outside crypto and the kernel — at the
#: column's throughput. Without it the per-byte cost is identified by no MTU change
#: and drifts: a fit to two MTU-1500 throughputs put 22 % of quicly's per-packet work
#: in per-byte copies against Table 1's 8.5 % libc (and so under-predicted its
#: MTU-4000 gain, seed 001 Fig. 3: 1.40× against 1.55×). {stack: (libc share point,
#: throughput point)}.
BYTES_PRIOR: dict[str, tuple[str, str]] = {"quicly": ("mukherjee25-017", "mukherjee25-018")}
#: Log-scale sd of that prior: the libc share is of one busy core's cycles (the
#: sender's busy fraction at the column is not stated; a less busy sender copies in
#: fewer ns) and libc holds some non-copy work (allocation).
BYTES_PRIOR_SD = 0.3
#: Stacks whose call share (the part of T that GSO/GRO amortise) comes from a stated
#: offload gain instead of the default: {stack: (the gain range's two points)}. MsQuic
#: (seed 002 §4.5, Fig. 9) gains 35–50 % goodput with GSO and GRO; without them it
#: still batches with sendmmsg/recvmmsg, so the share is the per-datagram kernel work
#: that only offloads save, not the system call. Its pair is CPU- (interplay-) limited
#: at both settings, so the gain is the ratio of CPU per packet
#: (:func:`~quiclab.calibration.assemble.call_share_for_ratio`).
CALL_SHARE_GAIN: dict[str, tuple[str, str]] = {"msquic": ("kempf24-051", "kempf24-052")}
#: Variants whose cost factor applies to one role only: quicly "no opt." differs from
#: quicly in its client (seed 001 §2.2: "the main difference between the two
#: implementations is the use of GRO at the client"; Table 1 profiles the same server).
VARIANT_ROLES: dict[tuple[str, str], tuple[str, ...]] = {("quicly", "noopt"): ("receiver",)}


#: The published raw datasets the calibration fits (``runs.source``): the QIR-10G
#: hosts' runs and the UCLouvain testbed's.
DATASET_SOURCES = ("qir10g", "uclouvain")
#: Evidence groups that check a model fitted elsewhere and are never fitted: the
#: UCLouvain TCP+TLS cells test kernel TCP's per-unit costs, which are this host's
#: measurements moved by the CPU rule (calibration/tcp.py), and must not pull the
#: UCLouvain hosts' fitted speed towards that model's error. They are reported
#: (in_fit false) and predicted in every fold.
REFERENCE_GROUPS = ("uclouvain-tcp",)


@dataclass
class Frames:
    """The catalog tables calibration reads."""

    runs: pd.DataFrame
    points: pd.DataFrame
    perf: pd.DataFrame

    @classmethod
    def from_catalog(cls, catalog: Any, sources: Sequence[str] = DATASET_SOURCES) -> Frames:
        """The runs of ``sources`` (default: the published raw datasets), every
        published point and the perf categories of the runs' traces."""
        # ORDER BY: the same catalog content must give the same fit, bit for bit,
        # whatever order the rows were inserted in.
        marks = ", ".join("?" for _ in sources)
        runs = catalog.df(f"SELECT * FROM runs WHERE source IN ({marks}) ORDER BY run_id",
                          list(sources))
        points = catalog.df("SELECT * FROM published_points ORDER BY point_id")
        testbed = ", r.testbed" if "testbed" in runs.columns else ""
        perf = catalog.df(
            f"SELECT r.server_impl, r.client_impl, r.experiment{testbed}, p.side, p.category, "
            "p.share FROM perf_categories p JOIN runs r USING (run_id) "
            "ORDER BY r.run_id, p.side, p.category")
        return cls(runs, points, perf)


def _pair(e: Evidence) -> str:
    """``server|client`` of an evidence item, without build variants."""
    return f"{e.scenario.server.split('@')[0]}|{e.scenario.client.split('@')[0]}"


def _shares_irq_core(s: Scenario) -> bool:
    """Whether a stack of ``s`` is pinned to the core that handles the NIC's interrupts."""
    return s.irq_core >= 0 and s.irq_core in (s.server_core, s.client_core)


def _testbeds_of(rows: pd.DataFrame) -> pd.Series:
    """Each row's testbed id; rows of catalogs written before runs recorded one are
    the published QIR-10G dataset's (its hosts are the only testbed such runs had)."""
    if "testbed" in rows.columns:
        return rows["testbed"].fillna("qir10g").astype(str)
    return pd.Series("qir10g", index=rows.index, dtype=object)


@dataclass
class FreeParam:
    name: str
    init: float  # in fit space (log or logit)
    prior_mean: float
    prior_sd: float
    lower: float = -np.inf
    upper: float = np.inf
    kind: str = "log"  # log | logit
    source: str = ""


@dataclass
class FitReport:
    evidence: pd.DataFrame
    params: pd.DataFrame
    seconds: float
    nfev: int
    cost: float
    notes: list[str] = field(default_factory=list)


def provenance(source: str) -> str:
    """Prefix a knowledge-base source with its kind (fit/published/assumed)."""
    if source.startswith(("fit:", "published:", "derived:", "assumed:", "prior:")):
        return source
    if source.startswith("seed"):
        return f"published: {source}"
    if source.startswith("dataset"):
        return f"fit: {source}"
    return f"assumed: {source}"


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _softmin(columns: Sequence[np.ndarray], k: float) -> np.ndarray:
    """``(Σ xᵢ^−k)^(−1/k)``: below the smallest xᵢ, equal to it as k → ∞."""
    m = np.minimum.reduce(list(columns))
    total = sum((np.maximum(c, 1e-300) / m) ** -k for c in columns)
    return m * total ** (-1.0 / k)


def soft_goodput(goodput_bps: np.ndarray, rates_bps: np.ndarray, busy: np.ndarray,
                 k: float) -> np.ndarray:
    """The engine's goodput with its minimum over resources made smooth.

    Goodput is the smallest of the resource rates (sender CPU, receiver CPU, the
    pair's interplay = busy × min of the two CPUs, link, window, flow control).
    Where two rates tie — e.g. sender and receiver CPU of a stack whose two
    costs start from the same value — the derivative of the minimum with
    respect to either cost is zero, and a trust-region fit with finite
    differences stalls there (lowering one cost alone changes nothing). The
    soft minimum has a gradient towards every binding cost. The startup share
    of the engine's (effective) goodput is kept as the engine computed it.
    """
    r = rates_bps
    steady = np.minimum.reduce([r[:, i] for i in range(r.shape[1])])
    cpu = _softmin([r[:, 0], r[:, 1]], k)
    soft = _softmin([r[:, 0], r[:, 1], busy * cpu, r[:, 3], r[:, 4], r[:, 5]], k)
    return goodput_bps * soft / np.maximum(steady, 1e-300)


#: Sharpness of the smooth minimum, one stage-C pass per value before the exact pass.
#: A smooth minimum sits below the exact one where rates tie (by n^(−1/k) for n tied
#: rates: 13 % for a three-way tie at k = 10), so a fit that stops at k = 10 leaves
#: tied stacks low, and the exact pass cannot move them: along a tie no single
#: cost changes the minimum, so its finite-difference Jacobian sees no direction
#: that lowers both. Sharpening in steps (continuation) follows the tie to where
#: the smooth and exact minima agree within 1 % (3^(−1/100)). Measured with the
#: schedule alone: in-sample dataset median 2.0 → 1.9 %, leave-one-experiment-out
#: 3.5 → 3.3 % (dataset cells) and 5.1 → 4.6 % (all items); quicly, whose sender and
#: receiver tie at seed 001 Table 1's 7.2 Gbit/s, 6.54 → 6.74 Gbit/s (its ACK rule,
#: knowledge.QUICLY_ACKS, then closes the rest: 7.19).
SOFTNESS = (10.0, 30.0, 100.0)


class Calibrator:
    """Fit cost models for every implementation in the knowledge base."""

    def __init__(self, cpus: CpuCatalog | None = None, exclude: Sequence[str] = (),
                 max_nfev: int = 400, ridge_role: float = 1.0, ridge_pair: float = 1.0,
                 progress: Callable[[str], None] | None = None,
                 warm_start: dict[str, float] | None = None, requests: bool = True,
                 softness: float | Sequence[float] = SOFTNESS, sigma: float = 0.2,
                 sigma_util: float = 0.05,
                 loss: str = "linear", sigma_bound: float = 0.05):
        #: Loss of scipy's least_squares on the residuals in σ units ("linear": squares;
        #: "soft_l1": squares within one σ, linear beyond — robust to cells whose
        #: mechanism the engine lacks).
        self.loss = loss
        #: A one-sided point's scale (log units): a stated ordering ("the highest pair",
        #: "more than 6.2 Gbit/s") is not a noisy measurement; a violation of 5 % weighs
        #: like a value missed by 20 %.
        self.sigma_bound = sigma_bound
        #: Error of a measured CPU utilisation in log units (pidstat medians repeat
        #: within ~1 %; 5 % leaves room for the model).
        self.sigma_util = sigma_util
        #: Error of one evidence item in log units (model discrepancy and measurement
        #: noise): residuals are divided by it, so that priors (also in log units) weigh
        #: as what they are — a prior's sd against a measurement's.
        self.sigma = sigma
        #: Sharpness k of the smooth minimum in stage C's first passes, one pass per
        #: value (0 or empty: the exact pass only); see SOFTNESS.
        self.softness = tuple(k for k in ((softness,) if isinstance(softness, int | float)
                                          else softness) if k > 0)
        self.cpus = cpus or CpuCatalog.packaged()
        #: Also calibrate the request-workload terms (quiclab.calibration.requests).
        self.requests = requests
        #: Parameter values (fit space) to start from, e.g. a previous full fit.
        self.warm_start = dict(warm_start or {})
        self.exclude = tuple(exclude)
        self.max_nfev = max_nfev
        self.ridge_role = ridge_role
        self.ridge_pair = ridge_pair
        self.progress = progress or (lambda msg: None)

    # ------------------------------------------------------------------ stage A
    def _direct(self, frames: Frames) -> None:
        self.progress("stage A: direct estimates (CPU regression, crypto, ACKs, drops)")
        runs = frames.runs
        if self.exclude:
            pairs = runs["server_impl"] + "|" + runs["client_impl"]
            runs = runs[~runs["experiment"].isin(self.exclude)
                        & ~("pair:" + pairs).isin(self.exclude)
                        & ~("testbed:" + _testbeds_of(runs)).isin(self.exclude)]
        fits = fit_table3(frames.points)
        enc, dec = fits["encrypt"], fits["decrypt"]
        self.crypto_fit_ = fits
        self.crypto_ = CryptoTable(enc.ns_per_packet, enc.ns_per_byte, dec.ns_per_packet,
                                   dec.ns_per_byte,
                                   "published: seed 001 Table 3 fit "
                                   f"({', '.join(enc.points + dec.points)})")
        self.points_ = frames.points
        self.cpu_ = CpuCostEstimator().fit(runs)
        self.tcp_ = qir_cells(runs)
        self.acks_, self.pair_acks_ = ack_frequency(runs)
        self.stalls_ = fit_stalls(runs)
        perf = frames.perf
        if self.exclude and not perf.empty:
            # The traces are runs too: a fold that holds their experiment (or
            # pair) out must not learn κ or the segment share from them.
            keep = ~("pair:" + perf["server_impl"] + "|" + perf["client_impl"]).isin(
                self.exclude)
            if "experiment" in perf.columns:
                keep &= ~perf["experiment"].isin(self.exclude)
            keep &= ~("testbed:" + _testbeds_of(perf)).isin(self.exclude)
            perf = perf[keep]
        self.shares_: dict[tuple[str, str], dict[str, float]] = {}
        for (impl, side), g in perf[perf["server_impl"] == perf["client_impl"]].groupby(
                ["server_impl", "side"]):
            self.shares_[(str(impl), "sender" if side == "server" else "receiver")] = dict(
                zip(g["category"], g["share"], strict=False))

    def _bytes_priors(self, points: pd.DataFrame) -> dict[str, float]:
        """Prior per-byte cost (ns/B, crypto included, reference CPU) of BYTES_PRIOR's stacks.

        libc's share × the sender's ns per payload byte at the column's throughput
        (one busy core: share × 8 / Gbit/s), moved from the column's CPU to the
        reference by the CPU rule, plus Table 3's crypto per byte. A stack whose
        points are missing, or whose document a cross-validation fold leaves out,
        keeps the generic prior.
        """
        rows = {str(r["point_id"]): r for r in points.to_dict("records")}
        out: dict[str, float] = {}
        for name, (share_id, tput_id) in BYTES_PRIOR.items():
            share, tput = rows.get(share_id), rows.get(tput_id)
            if share is None or tput is None:
                continue
            # A cross-validation fold that holds the document out holds its prior out too.
            if any(self._document_excluded(r.get("document")) for r in (share, tput)):
                continue
            gbps = float(tput["value"])
            cpu = str(tput.get("cpu") or TABLE3_CPU)
            to_ref = self.cpus.scaling(cpu, REFERENCE_CPU).factor
            plain = float(share["value"]) / 100.0 * 8.0 / gbps * to_ref
            spec = self.specs_.get(name)
            kappa = spec.kappa.value if spec is not None else 1.0
            crypto = kappa * self.crypto_.byte * self.cpus.scaling(TABLE3_CPU,
                                                                    REFERENCE_CPU).factor
            out[name] = plain + crypto
        return out

    # ------------------------------------------------------------------ stage B
    def _initial_specs(self) -> None:
        self.progress("stage B: initial specs from knowledge and direct estimates")
        specs: dict[str, ImplSpec] = {}
        for name, info in kb.IMPLEMENTATIONS.items():
            specs[name] = self._spec(name, info)
        self.specs_ = specs

    def _role(self, name: str, role: str, T: Value) -> RoleSpec:
        costs = self.cpu_.costs_.get((name, role), {})
        ack = costs.get("ns_per_ack")
        ack_v = (Value(ack.value, ack.lo, ack.hi, f"fit: {ack.rows}, RLM slope on ACK ratio")
                 if ack else Value(0.6 * T.value, 0.2 * T.value, 1.5 * T.value,
                                   "assumed: an ACK costs about 0.6 × a data packet (a system "
                                   "call, a small decryption and ACK processing); wide interval"))
        shares = self.shares_.get((name, role), {})
        pio = shares.get("PACKET_IO")
        segment = Value(DEFAULT_SEGMENT_SHARE, 0.05, 0.35,
                        "assumed: Linux UDP per-datagram kernel work; no profile")
        if pio is not None:
            seg = float(np.clip(pio - DEFAULT_CALL_SHARE, 0.05, 0.4))
            segment = Value(seg, seg * 0.7, min(seg * 1.3, 0.6),
                            f"fit: perf Packet I/O share {pio:.3f} of the {name} {role} profile "
                            f"(6 perf traces) minus the system-call share")
        info = kb.IMPLEMENTATIONS[name]
        cores = info.sender_cores if role == "sender" else info.receiver_cores
        return RoleSpec(T=T, call_share=Value(DEFAULT_CALL_SHARE, 0.1, 0.4,
                                              "assumed: send/receive system call share"),
                        segment_share=segment, ack_ns=ack_v,
                        cores=fixed(float(cores.value), provenance(cores.source)))

    def _gain_call_share(self, name: str, rs: RoleSpec, beh: Behaviour) -> RoleSpec:
        """``rs`` with the call share CALL_SHARE_GAIN's points give, if it names ``name``.

        The gain range's ends give the interval, its geometric middle the value; the
        batch is the default packet's GSO/GRO segments per call, the ACK work the
        role's per-ACK cost at its ACK frequency. A stack whose points are missing,
        or whose document a cross-validation fold leaves out, keeps the default.
        """
        ids = CALL_SHARE_GAIN.get(name)
        if ids is None:
            return rs
        rows = {str(r["point_id"]): r for r in self.points_.to_dict("records")}
        points = [rows[i] for i in ids if i in rows]
        if len(points) != len(ids) or any(
                self._document_excluded(r.get("document")) for r in points):
            return rs
        batch = gso_segments(beh, beh.udp_payload_bytes)
        acks = rs.ack_ns.value / max(beh.ack_every_packets, 1.0) / rs.T.value
        lo, hi = sorted(1.0 + float(r["value"]) / 100.0 for r in points)
        shares = [call_share_for_ratio(g, batch, 1.0, acks) for g in (lo, math.sqrt(lo * hi), hi)]
        if any(c is None for c in shares):
            return rs
        c_lo, c, c_hi = (min(max(float(c or 0.0), 0.02), 0.9) for c in shares)
        return replace(rs, call_share=Value(
            c, c_lo, c_hi,
            f"fit: seed 002 §4.5 Fig. 9 — {name} gains {100 * (lo - 1):.0f}–"
            f"{100 * (hi - 1):.0f} % goodput with GSO and GRO ({', '.join(ids)}; without "
            "them it batches with sendmmsg/recvmmsg): the share of T offloads amortise at "
            f"{batch} segments per call, ACK work {acks:.2f} × T"))

    def _spec(self, name: str, info: kb.Implementation) -> ImplSpec:
        beh = self._behaviour(name, info)
        S = beh.udp_payload_bytes
        P = S - beh.overhead_bytes
        notes = list(info.notes)
        prov: dict[str, Any] = {"knowledge": {
            k: getattr(info, k).source for k in ("udp_payload_bytes", "max_recv_udp_payload_bytes",
                                                 "overhead_bytes", "supports_gso", "supports_gro",
                                                 "apps", "fc_window_bytes", "pacing",
                                                 "immediate_ack_on_gap", "ack_per_receive_call")}}
        prov["knowledge"]["rx_stall"] = self._stall_source(name)
        # Behaviour identified from qlog traces of fresh runs (calibration/traces.py).
        beh, traced = trace_behaviour(name, beh)
        prov["knowledge"].update(traced)
        cipher_extra: dict[str, Value] = {}
        h3_share = DEFAULT_H3_SHARE
        if name in TCP_MODELS:
            # Kernel TCP (+ TLS): its own mechanism (calibration/tcp.py).
            return tcp_spec(name, self.tcp_, self.points_, self.cpus, info.language,
                            info.tls_library)
        costs_s = self.cpu_.costs_.get((name, "sender"), {})
        costs_r = self.cpu_.costs_.get((name, "receiver"), {})
        kappa = Value(1.0, 0.6, 1.5, "assumed: OpenSSL-class AES-GCM (Table 3); no profile")
        Ts = Tr = Value(4000.0, 500.0, 50000.0, "fit: goodput evidence (stage C)")
        if "ns_per_packet.aes-ni" in costs_s:
            # Measured in HTTP/3 runs: T (app = perf) is that minus the HTTP/3 layer.
            est_s, est_r = costs_s["ns_per_packet.aes-ni"], costs_r["ns_per_packet.aes-ni"]
            # The HTTP/3 layer costs h3_share × T on top of T: est = T × (1 + h3_share).
            f = 1.0 / (1.0 + h3_share)
            Ts = Value(est_s.value * f, est_s.lo * f, est_s.hi * f,
                       f"fit: {est_s.rows}, RLM intercept (AES-NI), less the HTTP/3 share")
            Tr = Value(est_r.value * f, est_r.lo * f, est_r.hi * f,
                       f"fit: {est_r.rows}, RLM intercept (AES-NI), less the HTTP/3 share")
            for cipher in ("aes-sw", "chacha20"):
                key = f"ns_per_packet.{cipher}"
                if key in costs_s:
                    extra = 0.5 * ((costs_s[key].value - est_s.value)
                                   + (costs_r[key].value - est_r.value))
                    extra = max(extra, 0.0)
                    cipher_extra[cipher] = Value(extra, extra * 0.7, extra * 1.3 + 20,
                                                 f"fit: {cipher} − AES-NI intercepts, crypto "
                                                 f"experiment ({costs_s[key].n} runs)")
            crypto_share = np.mean([self.shares_.get((name, r), {}).get("CRYPTO", np.nan)
                                    for r in ("sender",)])
            if np.isfinite(crypto_share):
                to_ref = self.cpus.scaling("Intel Xeon E5-2640 v4", "AMD EPYC 7543").factor
                table = (self.crypto_.packet + self.crypto_.byte * S) * to_ref
                k = float(crypto_share * est_s.value / table)
                kappa = Value(k, k * 0.75, k * 1.25,
                              f"fit: perf Crypto share {crypto_share:.3f} of the {name} server "
                              f"profile × its per-packet cost / Table 3 model")
        for cipher, factor, lo, hi, src in (
                ("aes-sw", 3.7, 1.9, 7.4, "assumed: geometric mean of the lsquic (×1.9) and "
                 "quiche (×7.4) software-AES crypto cost ratios (crypto experiment)"),
                ("chacha20", 1.0, 0.9, 1.1, "published: seed 002 §4.2 — ChaCha20 reaches the "
                 "same goodput as AES-NI for both QUIC libraries")):
            if cipher not in cipher_extra:
                to_ref = self.cpus.scaling("Intel Xeon E5-2640 v4", "AMD EPYC 7543").factor
                base = kappa.value * (self.crypto_.packet + self.crypto_.byte * S) * to_ref
                cipher_extra[cipher] = Value(base * (factor - 1), base * (lo - 1),
                                             base * (hi - 1), src)
        sender = self._gain_call_share(name, self._role(name, "sender", Ts), beh)
        receiver = self._gain_call_share(name, self._role(name, "receiver", Tr), beh)
        app = {"perf": fixed(0.0, "derived: by definition the raw QUIC transfer (perf) has no "
                                  "application layer"),
               "hq": Value(0.02 * Ts.value / P, 0.0, 0.1 * Ts.value / P,
                           "assumed: HTTP/0.9 adds ~2 % (seed 000 §V-A: h0.9 is a thin test "
                           "protocol)"),
               "h3": Value(h3_share * Ts.value / P, 0.0, 0.27 * Ts.value / P,
                           "assumed: HTTP/3 adds 10 % of the per-packet cost (seed 000 §V-A: "
                           "switching to h0.9 gains 1.9–27 %)")}
        app = {k: v for k, v in app.items() if k in beh.apps}
        bytes_ns = Value(DEFAULT_BYTES_NS, 0.15, 1.5, "assumed: per-byte cost of lsquic-class "
                         "stacks (seed 000 Fig. 9a), no jumbo-frame data for this stack")
        variants = {v: {"cost_factor": 1.0, "description": f.value, "source": f.source}
                    for v, f in info.variants.items()}
        return ImplSpec(name=name, sender=sender, receiver=receiver, bytes_ns=bytes_ns,
                        kappa=kappa, cipher_extra_ns=cipher_extra, app_ns_per_byte=app,
                        behaviour=beh, variants=variants, notes=notes, provenance=prov)

    def _crypto_base(self, spec: ImplSpec) -> float:
        """A data packet's AES-GCM crypto on the reference CPU (ns): κ × seed 001 Table 3's
        per packet and per byte (measured on the E5-2640 v4), moved by the CPU rule."""
        to_ref = self.cpus.scaling("Intel Xeon E5-2640 v4", "AMD EPYC 7543").factor
        S = spec.behaviour.udp_payload_bytes
        return spec.kappa.value * (self.crypto_.packet + self.crypto_.byte * S) * to_ref

    def _stall_source(self, name: str) -> str:
        """Where the receiver-stall law of ``name`` comes from (the rx_stall_* fields)."""
        own = self.stalls_.get(name)
        if own:
            return own.source
        base = self.stalls_.get("lsquic")
        return ("assumed: no receive-buffer drop counts of " + name + " in the catalog; "
                "LSQUIC's stall law" + (f" ({base.source})" if base else "")
                if base else "assumed: no receive-buffer drop counts; no stalls")

    def _behaviour(self, name: str, info: kb.Implementation) -> Behaviour:
        ack_every = (info.ack_every_packets.value if info.ack_every_packets
                     else self.acks_.get(name, 10.0))
        stall = self.stalls_.get(name) or self.stalls_.get("lsquic")
        return Behaviour(
            udp_payload_bytes=int(info.udp_payload_bytes.value),
            max_udp_payload_bytes=int(info.max_udp_payload_bytes.value),
            max_recv_udp_payload_bytes=int(info.max_recv_udp_payload_bytes.value),
            overhead_bytes=int(info.overhead_bytes.value),
            ack_every_packets=float(ack_every),
            ack_per_receive_call=bool(info.ack_per_receive_call.value),
            immediate_ack_on_gap=bool(info.immediate_ack_on_gap.value),
            fc_window_bytes=int(info.fc_window_bytes.value),
            supports_gso=bool(info.supports_gso.value), supports_gro=bool(info.supports_gro.value),
            pacing=bool(info.pacing.value), apps=tuple(info.apps.value), ccs=info.ccs,
            rx_stall_rate_hz=stall.rate_hz if stall and name != "tcp+tls" else 0.0,
            rx_stall_min_us=stall.min_s * 1e6 if stall else 0.0,
            rx_stall_alpha=stall.alpha if stall else 2.0,
            language=info.language, tls_library=info.tls_library)

    # ------------------------------------------------------------------ stage C
    def _free_params(self) -> list[FreeParam]:
        out: list[FreeParam] = []
        measured = {impl for (impl, _r) in self.cpu_.costs_}
        for name in kb.IMPLEMENTATIONS:
            if name in measured or name in TCP_MODELS:
                continue
            for role in ("sender", "receiver"):
                out.append(FreeParam(f"T|{name}|{role}", math.log(4000), math.log(4000), 3.0,
                                     math.log(150), math.log(2e6),
                                     source="fit: goodput evidence"))
        for name, info in kb.IMPLEMENTATIONS.items():
            for v in info.variants:
                mean, sd, src = 0.0, 1.0, "fit: goodput evidence"
                if v == "march" and name == "lsquic":
                    mean, sd = math.log(1 / 1.155), 0.05
                    src = "prior: seed 002 §4.6 — compile flags improve LSQUIC by 11–20 %"
                elif v == "march":
                    mean, sd = 0.0, 0.05
                    src = "prior: seed 002 §4.6 — compile flags hardly affect quiche"
                out.append(FreeParam(f"V|{name}|{v}", mean, mean, sd, math.log(0.05),
                                     math.log(20), source=src))
        priors = self._bytes_priors(self.points_)
        for name, src in BYTES_EVIDENCE.items():
            mean, sd = math.log(DEFAULT_BYTES_NS), 1.0
            if name in priors:
                mean, sd = math.log(priors[name]), BYTES_PRIOR_SD
            out.append(FreeParam(f"B|{name}", mean, mean, sd, math.log(0.02), math.log(5),
                                 source=f"fit: {src}"))
        for name in ("picoquic", "ngtcp2", "lsquic", "quiche"):
            h0 = math.log(DEFAULT_H3_SHARE)
            out.append(FreeParam(f"H|{name}", h0, h0, 2.0, math.log(0.005), math.log(5.0),
                                 source="fit: seed 000 §VI-A — HTTP/3 vs traffic-generator "
                                        "goodput"))
        for name in ("quiche", "ngtcp2", "quicly"):
            out.append(FreeParam(f"C|{name}", _logit(DEFAULT_CALL_SHARE),
                                 _logit(DEFAULT_CALL_SHARE), 1.0, -5, 2, kind="logit",
                                 source="fit: GSO/GRO on/off points (seed 000 Fig. 9a, "
                                        "seed 001 Table 1)"))
        rtt0 = math.log(STATED["koenig25"].fields["base_rtt_us"])
        out.append(FreeParam("D|koenig25", rtt0, rtt0, 0.5, math.log(20.0), math.log(2000.0),
                             source="fit: the base RTT of seed 000's path (Fig. 2), from its "
                                    "window-bound points (quiche at MTU 9000 and at +5 ms)"))
        out.append(FreeParam("W|quiche", math.log(16 * 2**20), math.log(16 * 2**20), 3.0,
                             math.log(16e3), math.log(2**30),
                             source="fit: seed 000 §VI-E: quiche 4.16 → 0.15 Gbit/s at +5 ms"))
        # ChaCha20's crypto cost where the stage-A regressions did not measure it but
        # the evidence runs the stack with ChaCha20 (UCLouvain's picoquic): a factor on
        # the stack's crypto work, from its prior (seed 002 §4.2: no slower than AES-NI).
        for name in sorted({e.scenario.server.split("@")[0] for e in self.evidence_
                            if e.scenario.cipher == "chacha20"}):
            if (name, "sender") in self.cpu_.costs_ and "ns_per_packet.chacha20" in \
                    self.cpu_.costs_[(name, "sender")]:
                continue
            if name not in self.specs_ or name == "tcp+tls":
                continue
            out.append(FreeParam(f"Z|{name}|chacha20", 0.0, 0.0, 0.5, math.log(0.8),
                                 math.log(6.0),
                                 source=f"fit: {name}'s goodput with ChaCha20 against AES-GCM on "
                                        "the same testbed (prior: seed 002 §4.2, ChaCha20 as "
                                        "fast as AES-NI)"))
        if any(_shares_irq_core(e.scenario) for e in self.evidence_):
            share0 = _logit(HostParams.assumed().irq_core_share.value)
            out.append(FreeParam("I|irq_core_share", share0, share0, 1.0, -5.0, 2.0,
                                 kind="logit",
                                 source="fit: the same stack pinned to the interrupt core and "
                                        "to another core (UCLouvain cmp runs, cores 2 and 4)"))
        # Hosts whose CPU is not recorded: their speed, from the testbed's own runs.
        for tb in sorted({e.testbed for e in self.evidence_}):
            speed = STATED[tb].speed if tb in STATED else None
            if speed is None:
                continue
            sd = math.log(speed.hi / speed.lo) / (2 * 1.96)
            out.append(FreeParam(f"K|{tb}", math.log(speed.value), math.log(speed.value), sd,
                                 math.log(speed.lo / 2), math.log(speed.hi * 2),
                                 source=f"fit: the single-core speed of testbed {tb}'s hosts "
                                        "(CPU not recorded), from its runs' goodput"))
        # The pair interplay, per testbed: fitted to one testbed's goodput, it acts
        # only on that testbed's Scenarios (quiclab.models.registry.Interop).
        for tb in sorted({e.testbed for e in self.evidence_}):
            ev = [e for e in self.evidence_ if e.testbed == tb]
            impls = sorted({e.scenario.server.split("@")[0] for e in ev}
                           | {e.scenario.client.split("@")[0] for e in ev})
            pairs = sorted({_pair(e) for e in ev})
            for name in impls:
                out.append(FreeParam(f"S|{tb}|{name}", 0.0, 0.0, self.ridge_role, -4.0, 1.0,
                                     source=f"fit: server-side interplay effect on {tb}"))
                out.append(FreeParam(f"R|{tb}|{name}", 0.0, 0.0, self.ridge_role, -4.0, 1.0,
                                     source=f"fit: client-side interplay effect on {tb}"))
            for pair in pairs:
                out.append(FreeParam(f"P|{tb}|{pair}", 0.0, 0.0, self.ridge_pair, -4.0, 1.0,
                                     source=f"fit: pair interplay effect on {tb} "
                                            "(ridge-shrunk)"))
            for pair in sorted({_pair(e) for e in ev if math.isfinite(e.server_util)}):
                out.append(FreeParam(f"O|{tb}|{pair}", 0.0, 0.0, 0.5, math.log(0.5),
                                     math.log(4.0),
                                     source=f"fit: CPU utilisation and goodput of the pair's runs "
                                            f"on {tb} (pidstat)"))
        return out

    def _smart_init(self) -> None:
        """Start each free cost level where its best partner's goodput puts it.

        A sender's cost can be no higher than what its fastest pairing allows
        (goodput ≤ its CPU rate), so T₀ = payload·8 / max goodput (ns), the
        "best partner" bound; the fit then explains slower pairs with the pair
        interplay. A good start matters: the objective has many shallow valleys.
        """
        best: dict[tuple[str, str], float] = {}
        for e in self.evidence_:
            for role, name in (("sender", e.scenario.server), ("receiver", e.scenario.client)):
                if "@" in name:
                    continue
                key = (name, role)
                best[key] = max(best.get(key, 0.0), e.goodput_mbps)
        for p in self.free_:
            if p.name.startswith("W|"):
                # The window bound: goodput ≈ W / RTT where a long added delay binds.
                name = p.name[2:]
                rtts = [(e.goodput_mbps, e.scenario) for e in self.evidence_
                        if e.scenario.server.startswith(name) and e.scenario.rtt_ms >= 1]
                if rtts:
                    g, sc = min(rtts, key=lambda t: t[0])
                    w = g * 1e6 / 8 * (sc.rtt_ms * 1e-3 + sc.base_rtt_us * 1e-6)
                    p.init = float(np.clip(math.log(w), p.lower + 0.01, p.upper - 0.01))
                continue
            if not p.name.startswith("T|"):
                continue
            _, name, role = p.name.split("|")
            partner = best.get((name, role))
            if not partner:
                continue
            beh = self.specs_[name].behaviour
            payload = beh.udp_payload_bytes - beh.overhead_bytes
            p.init = float(np.clip(math.log(payload * 8 / partner * 1e3),
                                   p.lower + 0.01, p.upper - 0.01))

    def _apply(self, theta: np.ndarray) -> tuple[dict[str, ImplSpec], Interop]:
        values = {p.name: (math.exp(t) if p.kind == "log" else _expit(t))
                  for p, t in zip(self.free_, theta, strict=True)}
        raw = {p.name: t for p, t in zip(self.free_, theta, strict=True)}
        specs: dict[str, ImplSpec] = {}
        for name, base in self.specs_.items():
            spec = replace(base, variants={k: dict(v) for k, v in base.variants.items()})
            for role in ("sender", "receiver"):
                key = f"T|{name}|{role}"
                if key in values:
                    rs = getattr(spec, role)
                    T = values[key]
                    setattr(spec, role, replace(rs, T=Value(T, T * 0.8, T * 1.25,
                                                            "fit: goodput evidence (stage C)"),
                                                ack_ns=rs.ack_ns if "fit" in rs.ack_ns.source
                                                else Value(0.6 * T, 0.2 * T, 1.5 * T,
                                                           rs.ack_ns.source)))
            if f"B|{name}" in values:
                b = values[f"B|{name}"]
                spec.bytes_ns = Value(b, b * 0.8, b * 1.25, f"fit: {BYTES_EVIDENCE[name]}")
            if f"H|{name}" in values:
                h = values[f"H|{name}"]
                if (name, "sender") in self.cpu_.costs_:
                    # Measured in HTTP/3 runs (T = that / (1 + the default share)): the
                    # HTTP/3 layer moves cost out of T, the HTTP/3 total, T × (1 + h),
                    # stays the measured one.
                    for role in ("sender", "receiver"):
                        rs = getattr(spec, role)
                        t = rs.T.value * (1.0 + DEFAULT_H3_SHARE) / (1.0 + h)
                        setattr(spec, role, replace(rs, T=Value(
                            t, rs.T.lo * t / rs.T.value, rs.T.hi * t / rs.T.value,
                            rs.T.source + f"; HTTP/3 layer {h:.2f} × T (fit)")))
                T = spec.sender.T.value
                P = spec.behaviour.udp_payload_bytes - spec.behaviour.overhead_bytes
                spec.app_ns_per_byte = dict(spec.app_ns_per_byte)
                spec.app_ns_per_byte["h3"] = Value(h * T / P, 0.8 * h * T / P, 1.25 * h * T / P,
                                                   "fit: seed 000 §VI-A, HTTP/3 vs generator "
                                                   f"goodput (HTTP/3 layer = {h:.2f} × T)")
            if f"Z|{name}|chacha20" in values:
                times = values[f"Z|{name}|chacha20"]
                aes = self._crypto_base(spec)
                spec.cipher_extra_ns = dict(spec.cipher_extra_ns)
                spec.cipher_extra_ns["chacha20"] = Value(
                    aes * (times - 1), aes * (times * 0.8 - 1), aes * (times * 1.25 - 1),
                    f"fit: ChaCha20 crypto × {times:.2f} of AES-GCM's ({name} with both ciphers "
                    "on one testbed)")
            if f"C|{name}" in values:
                c = values[f"C|{name}"]
                for role in ("sender", "receiver"):
                    rs = getattr(spec, role)
                    setattr(spec, role, replace(rs, call_share=Value(
                        c, c * 0.8, min(c * 1.25, 0.9), "fit: seed 000 Fig. 9a GSO on/off")))
            for v in spec.variants:
                key = f"V|{name}|{v}"
                if key in values:
                    spec.variants[v]["cost_factor"] = values[key]
                    spec.variants[v]["cost_factor_source"] = self._variant_source(name, v)
            if name == "quiche" and "W|quiche" in values:
                for v in ("2025", "quicperf"):
                    spec.variants.setdefault(v, {})["behaviour"] = {
                        "fc_window_bytes": int(values["W|quiche"]), "supports_gso": True,
                        "supports_gro": True}
            if name == "mvfst" and "gso" in spec.variants:
                spec.variants["gso"]["behaviour"] = {"supports_gso": True, "supports_gro": True}
            if name == "quicly" and "noopt" in spec.variants:
                spec.variants["noopt"]["behaviour"] = {"supports_gro": False}
            for (impl, variant), roles in VARIANT_ROLES.items():
                if impl == name and variant in spec.variants:
                    spec.variants[variant]["cost_roles"] = list(roles)
            if name in ("lsquic", "picoquic", "ngtcp2", "quic-go"):
                for v in ("2025", "quicperf", "integrated"):
                    if v in spec.variants and name != "lsquic":
                        spec.variants[v].setdefault("behaviour", {}).update(
                            {"supports_gso": name in ("ngtcp2", "picoquic", "quic-go")})
            specs[name] = spec
        effects: dict[str, dict[str, dict[str, float]]] = {}
        for name, t in raw.items():
            kind, _, rest = name.partition("|")
            if kind not in ("S", "R", "P", "O"):
                continue
            tb, _, key = rest.partition("|")
            table = {"S": "server_effect", "R": "client_effect", "P": "pair_effect",
                     "O": "pair_overhead"}[kind]
            effects.setdefault(tb, {}).setdefault(table, {})[key] = t
        testbeds = {}
        for tb, tables in effects.items():
            pair_sd = dict.fromkeys(tables.get("pair_effect", {}), self.ridge_pair)
            pair_sd["_unseen"] = float(np.hypot(self.ridge_role, self.ridge_pair))
            testbeds[tb] = PairEffects(tables.get("server_effect", {}),
                                       tables.get("client_effect", {}),
                                       tables.get("pair_effect", {}), pair_sd,
                                       tables.get("pair_overhead", {}))
        interop = Interop(testbeds, dict(self.pair_acks_),
                          {"fit": "quiclab.calibration.fit stage C (MAP: goodput and CPU "
                                  "utilisation), per testbed"})
        return specs, interop

    def _variant_source(self, name: str, variant: str) -> str:
        """Where a variant's fitted cost factor comes from: the evidence that runs it.

        A factor that one item alone sets reproduces that item by construction;
        saying so lets a reader discount it (its held-out error is in the
        cross-validation report, fold of that item's experiment).
        """
        tag = f"{name}@{variant}"
        ids = sorted({e.ident for e in self.evidence_
                      if tag in (e.scenario.server, e.scenario.client)})
        shown = ", ".join(ids[:6]) + (f", … ({len(ids)} in all)" if len(ids) > 6 else "")
        if not ids:
            return "prior only: no evidence runs this variant"
        if len(ids) == 1:
            return f"fit: one point ({shown}), which it reproduces by construction"
        return f"fit: {len(ids)} points ({shown})"

    def _models(self, specs: dict[str, ImplSpec]) -> dict[str, CostModel]:
        out = {}
        for name, spec in specs.items():
            variants = {}
            for v, d in spec.variants.items():
                entry = {"cost_factor": float(f"{d.get('cost_factor', 1.0):.6g}"),
                         "description": d.get("description", ""), "source": d.get("source", "")}
                if "behaviour" in d:
                    entry["behaviour"] = d["behaviour"]
                if "cost_roles" in d:
                    entry["cost_roles"] = d["cost_roles"]
                if "cost_factor_source" in d:
                    entry["cost_factor_source"] = d["cost_factor_source"]
                variants[v] = entry
            out[name] = build_model(replace(spec, variants=variants), self.crypto_, self.cpus)
        return out

    def _scenarios(self, theta: np.ndarray, evidence: Sequence[Evidence]) -> list[Scenario]:
        """The evidence's Scenarios on the testbeds ``theta`` describes (see testbeds_for)."""
        fields = self.testbeds_for(theta)
        out = []
        for e in evidence:
            extra = fields.get(e.testbed)
            out.append(replace(e.scenario, **extra) if extra else e.scenario)
        return out

    def testbeds_for(self, theta: np.ndarray) -> dict[str, dict[str, Any]]:
        """Testbed fields the fit sets, by testbed: the seed-000 path's base RTT."""
        names = [p.name for p in self.free_]
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            if name.startswith("D|"):
                out[name[2:]] = {"base_rtt_us": float(
                    f"{math.exp(theta[names.index(name)]):.4g}")}
        return out

    def speeds_for(self, theta: np.ndarray) -> dict[str, Speed]:
        """Fitted single-core speeds of testbeds whose CPU is not recorded (K| parameters)."""
        out: dict[str, Speed] = {}
        for i, p in enumerate(self.free_):
            if not p.name.startswith("K|"):
                continue
            value = math.exp(theta[i])
            # The interval: the prior's, narrowed by the evidence as the fit's own
            # precision is not estimated here; cross-validation reports the error.
            sd = p.prior_sd
            out[p.name[2:]] = Speed(float(f"{value:.4g}"), float(f"{value * math.exp(-sd):.4g}"),
                                    float(f"{value * math.exp(sd):.4g}"), p.source)
        return out

    def host_at(self, theta: np.ndarray) -> HostParams | None:
        """Host parameters stage C fits (the interrupt core's share), or None."""
        names = [p.name for p in self.free_]
        if "I|irq_core_share" not in names:
            return None
        share = _expit(theta[names.index("I|irq_core_share")])
        src = self._param_source("I|irq_core_share")
        return replace(HostParams.assumed(), irq_core_share=Param(
            float(f"{share:.4g}"), float(f"{share * 0.8:.4g}"),
            float(f"{min(share * 1.25, 0.95):.4g}"), "", src))

    def testbeds_at(self, theta: np.ndarray) -> Testbeds:
        """The stated testbeds with what ``theta`` fits (base RTTs, unknown CPUs' speeds)."""
        tb = Testbeds.stated()
        for key, values in self.testbeds_for(theta).items():
            tb = tb.with_fields(key, values, {k: self._param_source(f"D|{key}") for k in values})
        for key, speed in self.speeds_for(theta).items():
            tb = tb.with_speed(key, speed)
        return tb

    def _predict(self, theta: np.ndarray, evidence: Sequence[Evidence],
                 softness: float = 0.0) -> np.ndarray:
        """Goodput (Mbit/s) of the analytic engine for every evidence item."""
        return self._predict_full(theta, evidence, softness)[0]

    def _predict_full(self, theta: np.ndarray, evidence: Sequence[Evidence],
                      softness: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Goodput (Mbit/s) and the server's and client's CPU utilisation (cores).

        With ``softness`` k > 0 the minimum over the resources is replaced by
        the smooth ``(Σ rᵢ^−k)^(−1/k)`` (see :func:`soft_goodput`); utilisation
        moves with goodput.
        """
        specs, interop = self._apply(theta)
        registry = Registry(self._models(specs), self.cpus, interop, source="calibration",
                            track_versions=False, testbeds=self.testbeds_at(theta),
                            host=self.host_at(theta))
        engine = AnalyticEngine(registry)
        resolved, out = engine.evaluate(self._scenarios(theta, evidence))
        g = out.goodput_bps
        if softness > 0:
            busy = np.array([r.interop_busy for r in resolved])
            g = soft_goodput(out.goodput_bps, out.rates_bps, busy, softness)
        scale = g / np.maximum(out.goodput_bps, 1e-300)
        return g / 1e6, out.sender_util * scale, out.receiver_util * scale

    def _dependencies(self, evidence: Sequence[Evidence]) -> np.ndarray:
        """Jacobian sparsity: which free parameters each residual can move."""
        index = {p.name: i for i, p in enumerate(self.free_)}
        n_prior = len(self.free_)
        sparsity = np.zeros((len(evidence) + n_prior, len(self.free_)), dtype=bool)
        for k, e in enumerate(evidence):
            s_full, c_full = e.scenario.server, e.scenario.client
            s, c = s_full.split("@")[0], c_full.split("@")[0]
            tb = e.testbed
            for name in (f"T|{s}|sender", f"T|{s}|receiver", f"T|{c}|sender",
                         f"T|{c}|receiver", f"B|{s}", f"B|{c}", f"C|{s}", f"C|{c}",
                         f"H|{s}", f"H|{c}",
                         f"S|{tb}|{s}", f"R|{tb}|{c}", f"P|{tb}|{s}|{c}", f"O|{tb}|{s}|{c}",
                         f"W|{c}", f"W|{s}", f"D|{tb}", f"K|{tb}"):
                if name in index:
                    sparsity[k, index[name]] = True
            if e.scenario.cipher == "chacha20":
                for name in (f"Z|{s}|chacha20", f"Z|{c}|chacha20"):
                    if name in index:
                        sparsity[k, index[name]] = True
            if _shares_irq_core(e.scenario) and "I|irq_core_share" in index:
                sparsity[k, index["I|irq_core_share"]] = True
            for full in (s_full, c_full):
                if "@" in full:
                    base, _, v = full.partition("@")
                    if f"V|{base}|{v}" in index:
                        sparsity[k, index[f"V|{base}|{v}"]] = True
        sparsity[len(evidence):, :] = np.eye(n_prior, dtype=bool)
        return sparsity

    def fit(self, frames: Frames) -> Calibrator:
        """Run stages A–D (see the module docstring). Returns self."""
        from scipy.optimize import least_squares

        started = time.perf_counter()
        self._direct(frames)
        self._initial_specs()
        evidence, self.skipped_points_ = published_points(frames.points)
        runs = frames.runs
        ucl = runs["source"].eq("uclouvain") if "source" in runs.columns else None
        cells = dataset_cells(runs[~ucl] if ucl is not None else runs)
        if ucl is not None and ucl.any():
            cells += uclouvain_cells(runs[ucl])
        self.all_evidence_ = cells + evidence
        self.evidence_ = [e for e in self.all_evidence_ if not self._excluded(e)]
        self.free_ = self._free_params()
        self._smart_init()
        if self.warm_start:
            # A parameter that no evidence in this fit informs (a variant only
            # a held-out item runs, a held-out pair's effect) keeps its prior
            # start: a warm start from a fit that saw the held-out items would
            # hand their value to the fold, which the prior alone barely moves.
            deps = self._dependencies(self.evidence_)[:len(self.evidence_)]
            informed = [bool(deps[:, j].any()) for j in range(deps.shape[1])]
            self.uninformed_ = [p.name for p, ok in zip(self.free_, informed, strict=True)
                                if not ok]
            for p, ok in zip(self.free_, informed, strict=True):
                if ok and p.name in self.warm_start:
                    p.init = float(np.clip(self.warm_start[p.name], p.lower + 1e-6,
                                           p.upper - 1e-6))
        obs = np.log([e.goodput_mbps for e in self.evidence_])
        # One-sided points (Evidence.bound) count only when a prediction violates them.
        at_least = np.array([e.bound == "lower" for e in self.evidence_])
        at_most = np.array([e.bound == "upper" for e in self.evidence_])
        weights = np.array([e.weight / (self.sigma_bound if e.bound else self.sigma)
                            for e in self.evidence_])
        prior_mean = np.array([p.prior_mean for p in self.free_])
        prior_sd = np.array([p.prior_sd for p in self.free_])

        # CPU utilisation where the runs measured it (pidstat): it tells a CPU-bound
        # side (≈ 100 %) from one the pair's interplay leaves partly idle.
        util_obs = np.array([[e.server_util, e.client_util] for e in self.evidence_])
        util_idx = np.flatnonzero(np.isfinite(util_obs).all(axis=1) & (util_obs > 0).all(axis=1))
        log_util = np.log(util_obs[util_idx])

        def residuals(theta: np.ndarray, softness: float) -> np.ndarray:
            g, su, cu = self._predict_full(theta, self.evidence_, softness)
            pred = np.log(np.maximum(g, 1e-6))
            err = pred - obs
            err[at_least] = np.minimum(err[at_least], 0.0)
            err[at_most] = np.maximum(err[at_most], 0.0)
            util = np.log(np.maximum(np.stack([su[util_idx], cu[util_idx]], axis=1), 1e-6))
            return np.concatenate([weights * err,
                                   ((util - log_util) / self.sigma_util).ravel(),
                                   (theta - prior_mean) / prior_sd])

        self.progress(f"stage C: MAP fit of {len(self.free_)} parameters to "
                      f"{len(self.evidence_)} evidence items")
        x0 = np.array([p.init for p in self.free_])
        lower = np.array([p.lower for p in self.free_])
        upper = np.array([p.upper for p in self.free_])
        from scipy.optimize._numdiff import approx_derivative, group_columns

        sparsity = self._dependencies(self.evidence_)
        n_ev = len(self.evidence_)
        # The utilisation residuals (two per measured cell) move with their cell's parameters.
        util_rows = np.repeat(sparsity[util_idx], 2, axis=0)
        sparsity = np.concatenate([sparsity[:n_ev], util_rows, sparsity[n_ev:]])
        groups = group_columns(sparsity)

        def jacobian(theta: np.ndarray, softness: float) -> Any:
            # Grouped finite differences: columns that share no residual are
            # perturbed together (a few evaluations per Jacobian, not 100).
            return approx_derivative(residuals, theta, rel_step=1e-3, args=(softness,),
                                     sparsity=(sparsity, groups), bounds=(lower, upper))

        # Passes with the resources' minimum made smooth (soft_goodput), sharper
        # each time (see SOFTNESS), then one with the engine's exact goodput from
        # there.
        x = np.clip(x0, lower + 1e-9, upper - 1e-9)
        nfev = 0
        for softness in (*self.softness, 0.0):
            result = least_squares(residuals, x, jac=jacobian, bounds=(lower, upper),
                                   loss=self.loss, tr_solver="lsmr", max_nfev=self.max_nfev,
                                   ftol=1e-5, xtol=1e-5, verbose=0, args=(softness,))
            x = np.clip(result.x, lower + 1e-9, upper - 1e-9)
            nfev += int(result.nfev)
        self.result_ = result
        self.theta_ = result.x
        self.testbeds_ = self.testbeds_at(result.x)
        specs, interop = self._apply(result.x)
        self.models_ = self._models(specs)
        if self.requests:
            # Request-workload terms: seeds 003/004 on top of the bulk fit;
            # they change no bulk cost of a model the bulk evidence identifies.
            from quiclab.calibration.requests import RequestCalibrator

            self.requests_ = RequestCalibrator(self.cpus).fit(self.models_, frames.points)
            self.models_ = self.requests_.models_
        self.interop_ = interop
        self.registry_ = Registry(self.models_, self.cpus, interop, source="calibration",
                                  testbeds=self.testbeds_)
        # Pipelines, core placement and runtime threads, fitted on these
        # models; they change no cost model (quiclab.calibration.pipeline).
        from quiclab.calibration.pipeline import HostCalibrator

        self.host_ = HostCalibrator(self.progress).fit(frames.points, frames.perf,
                                                       self.registry_)
        fitted_host = self.host_at(result.x)
        if fitted_host is not None:
            self.host_.params_ = replace(self.host_.params_,
                                         irq_core_share=fitted_host.irq_core_share)
        self.registry_ = Registry(self.models_, self.cpus, interop, source="calibration",
                                  host=self.host_.params_, testbeds=self.testbeds_)
        pred_all = self._predict(result.x, self.all_evidence_)
        rows = []
        for e, p in zip(self.all_evidence_, pred_all, strict=True):
            ape, violation = e.errors_pct(float(p))
            rows.append({"ident": e.ident, "source": e.source, "group": e.group,
                         "server": e.scenario.server, "client": e.scenario.client,
                         "observed_mbps": e.goodput_mbps, "predicted_mbps": float(p),
                         "ape_pct": ape, "violation_pct": violation if e.bound else math.nan,
                         "bound": e.bound, "n": e.n, "cv": e.variation,
                         "in_fit": not self._excluded(e), "held_out": self.held_out(e)})
        self.report_ = FitReport(
            evidence=pd.DataFrame(rows),
            params=pd.DataFrame([{"name": p.name, "value": float(t), "natural":
                                  math.exp(t) if p.kind == "log" else _expit(t),
                                  "prior_mean": p.prior_mean, "prior_sd": p.prior_sd,
                                  "source": p.source}
                                 for p, t in zip(self.free_, result.x, strict=True)]),
            seconds=time.perf_counter() - started, nfev=nfev,
            cost=float(result.cost))
        return self

    def _param_source(self, name: str) -> str:
        p = next(p for p in self.free_ if p.name == name)
        return p.source

    def held_out(self, e: Evidence) -> bool:
        """Whether this fit holds ``e`` out (a cross-validation fold's exclusion), as
        opposed to evidence no fit ever uses (:data:`REFERENCE_GROUPS`)."""
        pair = f"{e.scenario.server.split('@')[0]}|{e.scenario.client.split('@')[0]}"
        return (e.group in self.exclude or f"pair:{pair}" in self.exclude
                or f"testbed:{e.testbed}" in self.exclude)

    def _excluded(self, e: Evidence) -> bool:
        pair = f"{e.scenario.server.split('@')[0]}|{e.scenario.client.split('@')[0]}"
        return (e.group in self.exclude or e.group in REFERENCE_GROUPS
                or f"pair:{pair}" in self.exclude or f"testbed:{e.testbed}" in self.exclude)

    def _document_excluded(self, document: Any) -> bool:
        """Whether a fold holds out a seed document (its group or its testbed)."""
        doc = str(document).zfill(3)
        if f"seed{doc}" in self.exclude:
            return True
        try:
            return f"testbed:{for_document(doc)}" in self.exclude
        except KeyError:
            return False

    @property
    def theta_by_name_(self) -> dict[str, float]:
        return {p.name: float(t) for p, t in zip(self.free_, self.theta_, strict=True)}

    def write(self, directory: Any) -> list[str]:
        """Write one JSON per model plus interop.json; returns the file names."""
        from pathlib import Path

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for name, model in sorted(self.models_.items()):
            path = directory / f"{name.replace('+', '_')}.json"
            path.write_text(model.dumps())
            written.append(path.name)
        import json

        (directory / "interop.json").write_text(
            json.dumps(self.interop_.to_json(), indent=1, sort_keys=True) + "\n")
        written.append("interop.json")
        if hasattr(self, "testbeds_"):
            from quiclab.models.testbeds import FILE as TESTBEDS_FILE

            (directory / TESTBEDS_FILE).write_text(self.testbeds_.dumps())
            written.append(TESTBEDS_FILE)
        if hasattr(self, "host_"):
            from quiclab.models.registry import PIPELINE_FILE

            (directory / PIPELINE_FILE).write_text(self.host_.params_.dumps())
            written.append(PIPELINE_FILE)
        return written
