"""Kernel TCP + TLS cost models: fitted from fresh TCP runs of this host, the QIR-10G
``tcp+tls`` runs and the seeds' TCP numbers (``models/tcpcost.py`` names the terms).

Two fits, one mechanism:

- :func:`fit_host` — this host, between two network namespaces (veth): every
  term from the ``tcp-calibration`` session (``testbed/specs/tcp-calibration.yaml``).
  Each run gives, per side, the process's system and user CPU seconds in the
  transfer window and the counts of each unit: data segments and the client's
  pure ACKs (``struct tcp_info``), the skbs the server's veth transmitted (a TSO
  skb whole, else each segment), system calls (``perf stat``), TLS records (the
  peer's OpenSSL callback). The system time of each core is a sum of counts ×
  costs, and so is the user time; the offload combinations, MTUs, record sizes,
  ciphers and plain TCP vary the counts independently enough to separate the
  terms (non-negative least squares, :func:`scipy.optimize.nnls`). Intervals are
  the 2.5–97.5 % range over bootstrap resamples of the runs. Terms that the
  runs cannot separate (an ACK's cost at either end: both run on the sender's
  core on veth) share their sum, and say so.
- :func:`fit_published` — NGINX (OpenSSL) and wget (GnuTLS) on the QIR hosts'
  AMD EPYC 7543 with a BCM57416 NIC (seed 002 §3.2): the kernel's per-unit
  costs are this host's, moved to the EPYC 7543 by the CPU rule's factor to a
  fitted power ``kernel_scaling`` (kernel work need not follow clock × IPC as
  user code does: seed 002 §4.6 finds TCP 3 % slower on the Xeon Gold 6312U where
  QUIC is 11–27 % faster); what only the QIR hosts have is fitted on their runs'
  user and system time per byte: each cipher's cost in each TLS library, the
  files NGINX reads and wget writes (seed 002 §4.4's "I/O"), the NIC's per-frame
  receive work and its GRO window (from the ACKs the client sent).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from quiclab.models.costmodel import Param
from quiclab.models.tcpcost import KERNEL_TERMS, USER_TERMS, TcpCosts

#: The fresh calibration experiment (testbed/specs/tcp-calibration.yaml).
CALIBRATION_EXPERIMENT = "tcp-calibration"
#: Bootstrap resamples of the runs for the terms' intervals (seeded: same runs, same file).
BOOTSTRAP = 200
SEED = 20261128
#: TLS 1.3 record overhead on the wire (sim/tcp.py).
TLS_OVERHEAD = 22
#: The size goal of TCP's skbs in segments at MTU 1500 (sim/tcp.py SIZE_GOAL_BYTES).
IPV4_TCP_TS_HEADERS = 52

#: Terms of the sender core's system time on veth, and of the receiver core's.
SENDER_SYS = ("tx_call", "tx_byte", "tx_skb", "tx_segment", "csum_byte", "ack", "rx_frame",
              "rx_skb")
RECEIVER_SYS = ("rx_call", "rx_byte")


def _extra(runs: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for text in runs["extra"]:
        try:
            out.append(json.loads(text))
        except (TypeError, ValueError):
            out.append({})
    return out


def _num(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return math.nan
    return x


@dataclass
class RunCounts:
    """One fresh TCP run: its settings, measured counts and CPU seconds per side."""

    run_id: str
    tls: bool
    cipher: str
    mtu: int
    tso: bool
    gso: bool
    gro: bool
    csum: bool
    record_bytes: int
    payload: float  # goodput bytes
    wire: float  # payload bytes on the wire (TLS records included)
    segments: float
    frames: float  # the server's veth transmissions (TSO skbs or segments)
    tcp_skbs: float  # skbs TCP built
    rx_skbs: float  # skbs the receiver's TCP processed (veth: see sim/tcp.py)
    acks: float
    records: float
    writes: float
    reads: float
    s_user: float
    s_sys: float
    r_user: float
    r_sys: float
    goodput_mbps: float
    experiment: str = ""
    setting: str = ""
    host: dict[str, Any] = field(default_factory=dict)


def run_counts(runs: pd.DataFrame) -> list[RunCounts]:
    """Counts and CPU of the ok TCP runs of ``runs`` (fresh rows of the catalog).

    CPU per side is the transfer window's (the server's start-up left out; the
    client's rusage is its life, start-up about a millisecond). The sender's core
    also ran what its ksoftirqd deferred (``extra.host.per_core``, pinned runs): it
    is added to the server's system time.
    """
    out: list[RunCounts] = []
    ok = runs[(runs["status"] == "ok") & runs["server_impl"].isin(("tcp+tls", "tcp"))]
    for row, extra in zip(ok.to_dict("records"), _extra(ok), strict=True):
        tcp = extra.get("tcp") or {}
        eff = extra.get("effective") or {}
        scen = extra.get("scenario") or {}
        window = extra.get("window_cpu_s") or {}
        srv, cli = window.get("server") or {}, window.get("client") or {}
        tls = bool(eff.get("tls", row["server_impl"] == "tcp+tls"))
        record = int(scen.get("tls_record_bytes", 16384))
        payload = float(row["filesize_bytes"])
        wire = payload * ((record + TLS_OVERHEAD) / record if tls else 1.0)
        segments = _num(tcp.get("data_segments"))
        frames = _num(tcp.get("tx_skbs"))
        tso, gso, gro = bool(eff.get("tso")), bool(eff.get("gso")), bool(eff.get("gro"))
        soft = 0.0
        per_core = (extra.get("host") or {}).get("per_core") or {}
        core = str(row.get("server_core")) if row.get("server_core") is not None else None
        if core in per_core and (extra.get("cores") or {}).get("server", {}).get(
                "source") == "pinned":
            soft = float(per_core[core].get("ksoftirqd_s", 0.0))
        records = _num(tcp.get("records_out")) if tls else 0.0
        mss = int(scen.get("mtu_bytes", row["mtu_bytes"])) - IPV4_TCP_TS_HEADERS
        if tso:
            tcp_skbs = frames
        elif gso:
            # The veth counts the segments software GSO cut: TCP's own skbs are the
            # sender-bound ones, one write each (sim/tcp.py), up to the size goal.
            write = record + TLS_OVERHEAD if tls else 131072
            tcp_skbs = segments / max(1.0, min((65535 - 320) // mss, write / mss))
        else:
            tcp_skbs = segments
        rx_skbs = frames if tso else (tcp_skbs if (gro and gso) else segments)
        out.append(RunCounts(
            run_id=str(row["run_id"]), tls=tls, cipher=str(eff.get("cipher") or "none"),
            mtu=int(row["mtu_bytes"]), tso=tso, gso=gso, gro=gro,
            csum=bool(eff.get("csum_offload", True)), record_bytes=record, payload=payload,
            wire=wire, segments=segments, frames=frames, tcp_skbs=tcp_skbs, rx_skbs=rx_skbs,
            acks=_num(tcp.get("acks")), records=records,
            writes=_num(row.get("server_syscalls")), reads=_num(row.get("client_syscalls")),
            s_user=_num(srv.get("user")), s_sys=_num(srv.get("system")) + soft,
            r_user=_num(cli.get("user")), r_sys=_num(cli.get("system")),
            goodput_mbps=_num(row["goodput_mbps"]), experiment=str(row["experiment"]),
            setting=str(row["setting"]), host=extra.get("host") or {}))
    return [r for r in out if all(math.isfinite(x) for x in (
        r.segments, r.frames, r.acks, r.writes, r.reads, r.s_user, r.s_sys, r.r_user, r.r_sys))]


def _design(items: list[RunCounts], side: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(term names, X, y): one row per run, counts per term and the CPU seconds (ns)."""
    rows, ys = [], []
    if side == "s_sys":
        names = list(SENDER_SYS)
        for r in items:
            rows.append([r.writes, r.wire, r.tcp_skbs,
                         r.segments if (r.gso and not r.tso) else 0.0,
                         0.0 if r.csum else 2.0 * r.wire,  # tx sum and rx check, both here
                         r.acks, r.frames, r.rx_skbs])
            ys.append(r.s_sys)
    elif side == "r_sys":
        names = list(RECEIVER_SYS)
        for r in items:
            rows.append([r.reads, r.wire])
            ys.append(r.r_sys)
    else:
        ciphers = sorted({r.cipher for r in items if r.tls})
        prefix = "encrypt" if side == "s_user" else "decrypt"
        names = ["record", *[f"{prefix}.{c}" for c in ciphers]]
        for r in items:
            rows.append([r.records, *[r.wire if (r.tls and r.cipher == c) else 0.0
                                      for c in ciphers]])
            ys.append(r.s_user if side == "s_user" else r.r_user)
    return names, np.asarray(rows, float), np.asarray(ys, float) * 1e9


def _nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares in relative terms: each run's equation is divided by
    its CPU time, so that a slow run does not outweigh a fast one."""
    from scipy.optimize import nnls

    w = 1.0 / np.maximum(y, 1.0)
    coef, _ = nnls(X * w[:, None], y * w)
    return coef


@dataclass
class HostFit:
    """Result of :func:`fit_host`: each side's terms with intervals, residuals, facts."""

    terms: dict[str, dict[str, tuple[float, float, float]]]
    residuals: pd.DataFrame
    facts: dict[str, dict[str, Any]]
    runs: int
    source: str
    notes: list[str] = field(default_factory=list)


def fit_host(runs: pd.DataFrame, experiment: str = CALIBRATION_EXPERIMENT,
             bootstrap: int = BOOTSTRAP, seed: int = SEED) -> HostFit:
    """Fit every kernel and user term on this host's ``experiment`` runs (see the module
    docstring). Raises ValueError when there are no such runs."""
    items = [r for r in run_counts(runs[runs["experiment"] == experiment])]
    if not items:
        raise ValueError(f"no ok tcp+tls/tcp runs of experiment {experiment!r} "
                         "(run `quiclab testbed sweep testbed/specs/tcp-calibration.yaml`)")
    rng = np.random.default_rng(seed)
    terms: dict[str, dict[str, tuple[float, float, float]]] = {}
    resid = []
    for side in ("s_sys", "r_sys", "s_user", "r_user"):
        subset = items if side.endswith("sys") else [r for r in items if r.tls]
        names, X, y = _design(subset, side)
        coef = _nnls(X, y)
        boots = []
        for _ in range(bootstrap):
            idx = rng.integers(0, len(subset), len(subset))
            boots.append(_nnls(X[idx], y[idx]))
        lo, hi = np.percentile(np.asarray(boots), [2.5, 97.5], axis=0)
        terms[side] = {n: (float(v), float(min(lo_, v)), float(max(hi_, v)))
                       for n, v, lo_, hi_ in zip(names, coef, lo, hi, strict=True)}
        fitted = X @ coef
        for r, yy, ff in zip(subset, y, fitted, strict=True):
            resid.append({"run_id": r.run_id, "setting": r.setting, "side": side,
                          "measured_s": yy / 1e9, "fitted_s": ff / 1e9,
                          "error_pct": (ff / yy - 1.0) * 100.0 if yy > 0 else math.nan})
    facts = _host_facts(items)
    source = (f"fit: NNLS of each side's window CPU on its counts over {len(items)} runs of "
              f"{experiment} ({min(r.run_id for r in items)} …), bootstrap 95 % interval "
              f"({bootstrap} resamples)")
    return HostFit(terms, pd.DataFrame(resid), facts, len(items), source)


def _host_facts(items: list[RunCounts]) -> dict[str, dict[str, Any]]:
    """Facts the runs measure: the sender-bound skb fill, segments per ACK, bytes per read."""
    def med(values: list[float]) -> float:
        values = [v for v in values if math.isfinite(v)]
        return float(np.median(values)) if values else math.nan

    tso_tls = [r for r in items if r.tso and r.tls and r.mtu == 1500 and r.record_bytes == 16384]
    fill = med([(r.segments / r.frames) / ((r.record_bytes + TLS_OVERHEAD) / (r.mtu - 52))
                for r in tso_tls])
    acks = med([r.segments / r.acks for r in items if r.acks > 0])
    tls_reads = med([r.payload / r.reads for r in items if r.tls and r.reads > 0])
    plain_reads = med([r.payload / r.reads for r in items if not r.tls and r.reads > 0])
    n = len(items)
    return {
        "placement": {"value": "veth", "source": "testbed: two network namespaces joined by a "
                      "veth pair; the sender's transmit raises the receive softirq on its own "
                      "CPU (veth_xmit → netif_rx / napi_schedule), so the receive path runs "
                      "on the sender's core"},
        "skb_fill": {"value": round(fill, 4), "source": f"fit: segments per TSO skb over one "
                     f"TLS record's segments, median of {len(tso_tls)} sender-bound runs"},
        "ack_segments": {"value": round(acks, 2), "source": f"fit: data segments per pure ACK "
                         f"of the client, median of {n} runs (the reader's window updates: "
                         "tcp_cleanup_rbuf)"},
        "read_bytes_tls": {"value": round(tls_reads), "source": "fit: payload bytes per "
                           "client system call, median of the TLS runs"},
        "read_bytes_plain": {"value": round(plain_reads) if math.isfinite(plain_reads) else 0,
                             "source": "fit: payload bytes per client system call, median "
                                       "of the plain TCP runs"},
    }


def host_costs(fit: HostFit, tls: bool) -> TcpCosts:
    """The host fit as TcpCosts (reference CPU: this host)."""
    s, r = fit.terms["s_sys"], fit.terms["r_sys"]
    src = fit.source

    def p(entry: tuple[float, float, float], unit: str, note: str = "") -> Param:
        v, lo, hi = entry
        return Param(v, lo, hi, unit, src + note)

    ack = s["ack"]
    half = (ack[0] / 2, ack[1] / 2, ack[2] / 2)
    share = " (an ACK's cost at both ends: on veth both run on the sender's core, so the " \
            "runs fix their sum; split equally, assumed)"
    kernel = {
        "tx_call": p(s["tx_call"], "ns"), "tx_byte": p(s["tx_byte"], "ns/B"),
        "tx_skb": p(s["tx_skb"], "ns"), "tx_segment": p(s["tx_segment"], "ns"),
        "csum_byte": p(tuple(x for x in s["csum_byte"]), "ns/B",  # type: ignore[arg-type]
                       " (a sum on the sender and a check on the receiver, both here)"),
        "ack_in": p(half, "ns", share), "ack_out": p(half, "ns", share),
        "rx_frame": p(s["rx_frame"], "ns"), "rx_skb": p(s["rx_skb"], "ns"),
        "rx_call": p(r["rx_call"], "ns"), "rx_byte": p(r["rx_byte"], "ns/B"),
    }
    su, ru = fit.terms.get("s_user", {}), fit.terms.get("r_user", {})
    zero = Param(0.0, 0.0, 0.0, "ns", "derived: plain TCP has no TLS records")
    user = {"record_out": p(su["record"], "ns") if tls and "record" in su else zero,
            "record_in": p(ru["record"], "ns") if tls and "record" in ru else zero}
    enc = {k.split(".", 1)[1]: p(v, "ns/B") for k, v in su.items() if k.startswith("encrypt.")}
    dec = {k.split(".", 1)[1]: p(v, "ns/B") for k, v in ru.items() if k.startswith("decrypt.")}
    facts = dict(fit.facts)
    facts["tls"] = {"value": tls, "source": "testbed: peers/tcp-tls " + ("--tls=true (OpenSSL)"
                                                                           if tls else
                                                                           "--tls=false")}
    reads = facts.pop("read_bytes_tls" if tls else "read_bytes_plain")
    facts.pop("read_bytes_plain" if tls else "read_bytes_tls", None)
    facts["read_bytes"] = reads
    facts["write_bytes"] = {"value": 0 if tls else 131072,
                            "source": "testbed: peers/tcp-tls writes one TLS record per "
                                      "SSL_write, or 128 KiB blocks of plain TCP (iperf3's)"}
    facts["window_ratio"] = {"value": 0.5, "source": "assumed: tcp_adv_win_scale's half of "
                                                     "the buffer for payload; ×/÷ 1.5"}
    facts["size_goal_bytes"] = {"value": 65536, "source": "Linux GSO_LEGACY_MAX_SIZE"}
    scaling = Param(1.0, 1.0, 1.0, "", "derived: this host is the reference CPU")
    return TcpCosts(kernel, user, enc, dec, scaling, facts)


def check_terms(costs: TcpCosts) -> list[str]:
    """Terms the fit left at zero (NNLS's bound): each a line for the report."""
    out = []
    for name in KERNEL_TERMS:
        if costs.kernel[name].value == 0.0:
            out.append(f"kernel.{name} fitted at 0 (within {costs.kernel[name].hi:.3g})")
    for name in USER_TERMS:
        if costs.user[name].value == 0.0:
            out.append(f"user.{name} fitted at 0")
    return out


def describe_fit(fit: HostFit, out: Callable[[str], None] = print) -> None:
    for side, entries in fit.terms.items():
        out(f"{side}:")
        for name, (v, lo, hi) in entries.items():
            out(f"  {name:20s} {v:10.4g}  [{lo:.4g}, {hi:.4g}]")
    res = fit.residuals
    if not res.empty:
        for side, g in res.groupby("side"):
            e = g["error_pct"].abs()
            out(f"{side}: median |error| {e.median():.1f} %, max {e.max():.1f} % "
                f"over {len(g)} runs")
