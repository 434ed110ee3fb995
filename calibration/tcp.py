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
    #: The receiver's and the sender's voluntary context switches (rusage): each a
    #: sleep that the other side's data or ACKs ended with a cross-core wake-up.
    r_wakeups: float = math.nan
    s_wakeups: float = math.nan
    #: The client's own transfer time (connect to last byte), s.
    transfer_s: float = math.nan
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
            goodput_mbps=_num(row["goodput_mbps"]),
            r_wakeups=_num((extra.get("client_exit") or {}).get("voluntary_switches")),
            s_wakeups=_num((extra.get("server_exit") or {}).get("voluntary_switches")),
            transfer_s=_num((extra.get("client_report") or {}).get("transfer_s")),
            experiment=str(row["experiment"]),
            setting=str(row["setting"]), host=extra.get("host") or {}))
    return [r for r in out if all(math.isfinite(x) for x in (
        r.segments, r.frames, r.acks, r.writes, r.reads, r.s_user, r.s_sys, r.r_user, r.r_sys,
        r.r_wakeups, r.transfer_s))]


#: Kernel terms of the sender's core on veth (the receive softirq runs there too), and
#: of the receiver's; "ack" is an ACK's cost at both ends together (both on the sender's
#: core on veth), "wake_out"/"wake_in" the reader's wake-up at each end.
SENDER_KERNEL = ("tx_call", "tx_byte", "tx_skb", "tx_segment", "csum_byte", "ack", "rx_frame",
                 "gro_frame", "rx_skb", "wake_out")
RECEIVER_KERNEL = ("rx_call", "rx_byte", "wake_in")
CIPHERS = ("aes-ni", "aes-sw", "chacha20")


def _design(items: list[RunCounts], side: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(term names, X, y) of one core's kernel or user time (``side``: ``s_sys``,
    ``r_sys``, ``s_user``, ``r_user``): a row per run, the counts of each term, and the
    CPU seconds in ns. rusage splits a process's time into user and system by 4 ms
    ticks (HZ=250), which is unbiased but coarse over a 1 s run; the report gives the
    fit's error on each side's total as well."""
    rows, ys = [], []
    if side == "s_sys":
        names = ["kernel." + t for t in SENDER_KERNEL]
        for r in items:
            rows.append([r.writes, r.wire, r.tcp_skbs,
                         r.segments if (r.gso and not r.tso) else 0.0,
                         0.0 if r.csum else 2.0 * r.wire,  # tx sum and rx check, both here
                         r.acks, r.frames, r.frames if r.gro else 0.0, r.rx_skbs, r.r_wakeups])
            ys.append(r.s_sys)
    elif side == "r_sys":
        names = ["kernel." + t for t in RECEIVER_KERNEL]
        for r in items:
            rows.append([r.reads, r.wire, r.r_wakeups])
            ys.append(r.r_sys)
    else:
        names = ["user.record", *[f"user.{c}" for c in CIPHERS]]
        for r in items:
            rows.append([r.records, *[r.wire if (r.tls and r.cipher == c) else 0.0
                                      for c in CIPHERS]])
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
            coef_b = _nnls(X[idx], y[idx])
            # A resample without any run that moves a term says nothing about it.
            coef_b[~(np.abs(X[idx]).sum(axis=0) > 0)] = np.nan
            boots.append(coef_b)
        lo, hi = np.nanpercentile(np.asarray(boots), [2.5, 97.5], axis=0)
        terms[side] = {n: (float(v), float(min(lo_, v)), float(max(hi_, v)))
                       for n, v, lo_, hi_ in zip(names, coef, lo, hi, strict=True)}
        fitted = X @ coef
        for r, yy, ff in zip(subset, y, fitted, strict=True):
            resid.append({"run_id": r.run_id, "setting": r.setting, "side": side,
                          "measured_s": yy / 1e9, "fitted_s": ff / 1e9,
                          "error_pct": (ff / yy - 1.0) * 100.0 if yy > 0 else math.nan})
    facts = _host_facts(items)
    facts["wake_law"] = _wake_law(items, terms)
    source = (f"fit: NNLS of each core's CPU in the transfer window on its counts over "
              f"{len(items)} runs of "
              f"{experiment} ({min(r.run_id for r in items)} …), bootstrap 95 % interval "
              f"({bootstrap} resamples)")
    return HostFit(terms, pd.DataFrame(resid), facts, len(items), source)


def _wake_law(items: list[RunCounts], terms: dict[str, dict[str, tuple[float, float, float]]]
              ) -> dict[str, Any]:
    """How often the faster side sleeps and must be woken, per write of the sender:
    ``min(cap, k × slack)``, slack = 1 − (the faster side's time per write) / (the slower
    side's), both without wake-ups, from the fitted costs and each run's counts (least
    squares over the TLS runs; a sleep is a voluntary context switch of the reader)."""
    from scipy.optimize import least_squares

    def val(side: str, name: str) -> float:
        return terms[side].get(name, (0.0,))[0]

    xs, ws = [], []
    for r in items:
        if not r.tls:
            continue
        a = (val("s_sys", "kernel.tx_call") * r.writes + val("s_sys", "kernel.tx_byte") * r.wire
             + val("s_sys", "kernel.tx_skb") * r.tcp_skbs
             + val("s_sys", "kernel.tx_segment") * (r.segments if (r.gso and not r.tso) else 0)
             + val("s_sys", "kernel.csum_byte") * (0.0 if r.csum else 2.0 * r.wire)
             + val("s_sys", "kernel.ack") * r.acks + val("s_sys", "kernel.rx_frame") * r.frames
             + val("s_sys", "kernel.gro_frame") * (r.frames if r.gro else 0.0)
             + val("s_sys", "kernel.rx_skb") * r.rx_skbs
             + val("s_user", "user.record") * r.records
             + val("s_user", f"user.{r.cipher}") * r.wire)
        b = (val("r_sys", "kernel.rx_call") * r.reads + val("r_sys", "kernel.rx_byte") * r.wire
             + val("r_user", "user.record") * r.records
             + val("r_user", f"user.{r.cipher}") * r.wire)
        xs.append(1.0 - min(a, b) / max(a, b, 1e-9))
        ws.append(r.r_wakeups / r.writes)
    x, w = np.asarray(xs), np.asarray(ws)

    def resid(p: np.ndarray) -> np.ndarray:
        return np.minimum(p[1], p[0] * x) - w

    sol = least_squares(resid, [3.0, 1.2], bounds=([0.0, 0.0], [50.0, 5.0]))
    k, cap = (float(v) for v in sol.x)
    rms = float(np.sqrt(np.mean(resid(sol.x) ** 2)))
    return {"value": {"k": round(k, 4), "cap": round(cap, 4)}, "rms": round(rms, 4),
            "source": f"fit: least squares of the reader's wake-ups per write on the slack "
                      f"between the two sides over {len(w)} TLS runs (rms {rms:.2f} wake-ups "
                      "per write: the two sides' timing decides each run, so single runs scatter "
                      "around the law)"}


def _med(values: list[float]) -> float:
    values = [v for v in values if math.isfinite(v)]
    return float(np.median(values)) if values else math.nan


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    values = [v for v in values if math.isfinite(v)]
    lo, mid, hi = np.percentile(values, [10, 50, 90]) if values else (math.nan,) * 3
    return float(lo), float(mid), float(hi)


def _host_facts(items: list[RunCounts]) -> dict[str, dict[str, Any]]:
    """Facts the runs measure: the sender-bound skb fill, segments per ACK, bytes per read,
    the reader's wake-ups per write and the bottleneck core's busy share, each for the
    TLS runs (``*_tls``) and the plain TCP runs (``*_plain``) where they differ."""
    med = _med
    tso_tls = [r for r in items if r.tso and r.tls and r.mtu == 1500 and r.record_bytes == 16384]
    fill = med([(r.segments / r.frames) / ((r.record_bytes + TLS_OVERHEAD) / (r.mtu - 52))
                for r in tso_tls])
    acks = med([r.segments / r.acks for r in items if r.acks > 0])
    tls_reads = med([r.payload / r.reads for r in items if r.tls and r.reads > 0])
    plain_reads = med([r.payload / r.reads for r in items if not r.tls and r.reads > 0])
    n = len(items)
    out: dict[str, dict[str, Any]] = {}
    for kind, group in (("tls", [r for r in items if r.tls]),
                        ("plain", [r for r in items if not r.tls])):
        if not group:
            continue
        wake = _quantiles([r.r_wakeups / r.writes for r in group])
        busy = _quantiles([max(r.s_user + r.s_sys, r.r_user + r.r_sys) / r.transfer_s
                           for r in group])
        out[f"wakeups_per_write_{kind}"] = {
            "value": round(wake[1], 4), "lo": round(wake[0], 4), "hi": round(wake[2], 4),
            "source": f"fit: the client's voluntary context switches per server write, median "
                      f"(10–90 %) of {len(group)} {kind} runs: each a sleep the sender's data "
                      "ended"}
        out[f"busy_{kind}"] = {
            "value": round(min(busy[1], 1.0), 4), "lo": round(min(busy[0], 1.0), 4),
            "hi": round(min(busy[2], 1.0), 4),
            "source": f"fit: the busier side's CPU over the client's transfer time, median "
                      f"(10–90 %) of {len(group)} {kind} runs: the bottleneck core waits for "
                      "the other's data, window or wake-up the rest of the time"}
    return {**out,
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
    s = {k.split(".", 1)[1]: v for k, v in fit.terms["s_sys"].items()}
    r = {k.split(".", 1)[1]: v for k, v in fit.terms["r_sys"].items()}
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
        "gro_frame": p(s["gro_frame"], "ns"), "wake_out": p(s["wake_out"], "ns"),
        "rx_call": p(r["rx_call"], "ns"), "rx_byte": p(r["rx_byte"], "ns/B"),
        "wake_in": p(r["wake_in"], "ns"),
        "file_in": Param(0.0, 0.0, 0.0, "ns/B", "derived: the testbed peer sends bytes from "
                                                "memory, no file"),
        "file_out": Param(0.0, 0.0, 0.0, "ns/B", "derived: the testbed peer discards what "
                                                 "it reads, no file"),
    }
    su = {k.split(".", 1)[1]: v for k, v in fit.terms["s_user"].items()}
    ru = {k.split(".", 1)[1]: v for k, v in fit.terms["r_user"].items()}
    zero = Param(0.0, 0.0, 0.0, "ns", "derived: plain TCP has no TLS records")
    user = {"record_out": p(su["record"], "ns") if tls else zero,
            "record_in": p(ru["record"], "ns") if tls else zero}
    enc = {c: p(su[c], "ns/B") for c in CIPHERS if tls and su.get(c, (0,))[0] > 0}
    dec = {c: p(ru[c], "ns/B") for c in CIPHERS if tls and ru.get(c, (0,))[0] > 0}
    facts = dict(fit.facts)
    facts["tls"] = {"value": tls, "source": "testbed: peers/tcp-tls " + ("--tls=true (OpenSSL)"
                                                                           if tls else
                                                                           "--tls=false")}
    kind, other = ("tls", "plain") if tls else ("plain", "tls")
    for name in ("read_bytes", "wakeups_per_write", "busy"):
        facts.pop(f"{name}_{other}", None)
        if f"{name}_{kind}" in facts:
            facts[name] = facts.pop(f"{name}_{kind}")
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
        if costs.kernel[name].value == 0.0 and not costs.kernel[name].source.startswith(
                "derived:"):
            out.append(f"kernel.{name} fitted at 0 (within {costs.kernel[name].hi:.3g})")
    for name in USER_TERMS:
        if costs.user[name].value == 0.0 and not costs.user[name].source.startswith("derived:"):
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


# --------------------------------------------------------------------------- models
#: The TCP implementations and whether each runs TLS.
TCP_MODELS = {"tcp+tls": True, "tcp": False}
MODEL_VERSION = "tcp-1"


def tcp_behaviour(tls: bool, language: str, tls_library: str) -> Any:
    """Kernel TCP's transport behaviour for the engines (Behaviour fields), with Linux's
    rules (testbed/stacks.py ``_TCP_FACTS`` has the sources)."""
    from quiclab.models.costmodel import Behaviour

    return Behaviour(
        udp_payload_bytes=1448 + 24, max_udp_payload_bytes=0, max_recv_udp_payload_bytes=65527,
        overhead_bytes=24, ack_every_packets=2.0, immediate_ack_on_gap=True,
        max_ack_delay_ms=40.0, ack_threshold_fixed=False, ack_threshold_floor_packets=2.0,
        ack_timer_ms=40.0, cubic_reno_friendly="acks", fc_window_bytes=0,
        supports_gso=True, supports_gro=True, gso_max_segments=45, pacing=False,
        apps=("perf", "hq", "h3"), ccs=("cubic", "reno", "bbr"),
        language=language, tls_library=tls_library if tls else "none")


def _zero_roles() -> tuple[Any, Any, dict[str, Any]]:
    from quiclab.models.costmodel import CryptoCost, RoleCosts

    zero = Param(0.0, 0.0, 0.0, "ns", "derived: kernel TCP's costs are its tcp section "
                                      "(models/tcpcost.py), not per-packet QUIC terms")
    role = RoleCosts(zero, zero, zero, zero, zero, {a: zero for a in ("perf", "hq", "h3")},
                     Param(1.0, 1.0, 1.0, "cores", "derived: one process, one thread"))
    return role, role, {c: CryptoCost(zero, zero) for c in ("aes-ni", "aes-sw", "chacha20")}


def fresh_models(runs: pd.DataFrame, host_cpu: str,
                 experiment: str = CALIBRATION_EXPERIMENT) -> tuple[dict[str, Any], HostFit]:
    """This host's tcp+tls and tcp CostModels (reference CPU ``host_cpu``) from the
    ``experiment`` runs of ``runs``. Raises ValueError without such runs."""
    from quiclab.models.costmodel import CostModel

    fit = fit_host(runs, experiment)
    items = run_counts(runs[runs["experiment"] == experiment])
    session = _session(items)
    out = {}
    for name, tls in TCP_MODELS.items():
        if not any(r.tls == tls for r in items):
            continue
        costs = host_costs(fit, tls)
        snd, rcv, crypto = _zero_roles()
        model = CostModel(
            implementation=name, version=MODEL_VERSION, reference_cpu=host_cpu, sender=snd,
            receiver=rcv, crypto=crypto,
            behaviour=tcp_behaviour(tls, "kernel TCP (this host) + quiclab's C peer",
                                    "OpenSSL 3.0"),
            notes=(f"this host's kernel TCP between two network namespaces (veth): {fit.runs} "
                   f"runs of {experiment}", *check_terms(costs)),
            provenance={"tcp_fit": fit.source, "session": session,
                        "residuals": _residual_summary(fit)},
            tcp=costs)
        out[name] = model
    return out, fit


def _session(items: list[RunCounts]) -> dict[str, Any]:
    """When the runs were made and what else the host did meanwhile (for the report)."""
    bg = [float(r.host.get("background_cores", math.nan)) for r in items]
    clocks = [float((r.host.get("bench") or {}).get("server", {}).get("mul_add_ns_min", math.nan))
              for r in items]
    return {"runs": len(items), "background_cores_median": round(_med(bg), 3),
            "background_cores_max": round(max((b for b in bg if math.isfinite(b)),
                                               default=math.nan), 3),
            "bench_mul_add_ns_median": round(_med(clocks), 5)}


def _residual_summary(fit: HostFit) -> dict[str, Any]:
    out = {}
    for side, g in fit.residuals.groupby("side"):
        e = g["error_pct"].abs()
        out[side] = {"median_abs_pct": round(float(e.median()), 2),
                     "max_abs_pct": round(float(e.max()), 2), "runs": len(g)}
    return out


def write_fresh_tcp(models: dict[str, Any], directory: Any, host: Any) -> list[str]:
    """Write the TCP models beside this host's other fresh models, and ``cpus.json``
    (this host's CPU entry) if the QUIC stacks' fresh calibration did not."""
    from pathlib import Path

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in sorted(models.items()):
        path = directory / f"{name.replace('+', '_')}.json"
        path.write_text(model.dumps())
        written.append(path.name)
    cpus = directory / "cpus.json"
    if not cpus.is_file():
        meta = {"schema": "quiclab.cpus/1",
                "cpus": [{**host.to_row(), "sources": list(host.sources)}],
                "base_rtt_us": VETH_BASE_RTT_US, "link_gbps": VETH_LINK_GBPS}
        cpus.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        written.append(cpus.name)
    return written


#: What a veth pair between two namespaces is as a path, when no QUIC fresh calibration
#: wrote it: a memory copy with no link limit (calibration/fresh.py VETH_LINK_GBPS) and
#: the round trip the TCP peers' tcp_info reports at its smallest (min_rtt, ~5-60 µs).
VETH_LINK_GBPS = 40.0
VETH_BASE_RTT_US = 30.0
