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
    #: The window the receiver last offered (the sender's tcp_info snd_wnd) and the
    #: namespaces' tcp_rmem[2] it came from, bytes.
    snd_wnd: float = math.nan
    rmem: float = math.nan
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
    if runs.empty or "extra" not in runs.columns:
        return out
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
        else:
            # The veth counts the segments software GSO cut: TCP's own skbs are the
            # sender-bound ones, one write each (sim/tcp.py), up to the size goal —
            # with the device's gso flag on or off (TCP always has GSO: sk_setup_caps).
            write = record + TLS_OVERHEAD if tls else 131072
            tcp_skbs = segments / max(1.0, min((65535 - 320) // mss, write / mss))
        rx_skbs = frames if tso else (tcp_skbs if gro else segments)
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
            snd_wnd=_num((tcp.get("server_tcp_info") or {}).get("snd_wnd")),
            rmem=_num(scen.get("tcp_rmem_bytes", 6291456)),
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
                         0.0 if r.tso else r.segments,
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
    # Each kind its own law: plain TCP's 128 KiB writes deliver several skbs each.
    for kind, tls in (("tls", True), ("plain", False)):
        if sum(r.tls == tls for r in items) >= 3:
            facts[f"wake_law_{kind}"] = _wake_law(items, terms, tls)
    source = (f"fit: NNLS of each core's CPU in the transfer window on its counts over "
              f"{len(items)} runs of "
              f"{experiment} ({min(r.run_id for r in items)} …), bootstrap 95 % interval "
              f"({bootstrap} resamples)")
    return HostFit(terms, pd.DataFrame(resid), facts, len(items), source)


def _wake_law(items: list[RunCounts], terms: dict[str, dict[str, tuple[float, float, float]]],
              tls: bool = True) -> dict[str, Any]:
    """How often the faster side sleeps and must be woken, per write of the sender:
    ``min(cap, k × slack × deliveries^β)``, slack = 1 − (the faster side's time per
    write) / (the slower side's), both without wake-ups, and deliveries the frames the
    receive path hands up per write (each one can find the reader asleep): least
    squares over the TLS runs, with the fitted costs and each run's counts (a sleep is
    a voluntary context switch of the reader). Against the slack alone it halves the
    error on the calibration cells' median wake-ups (0.11 against 0.16 per write)."""
    from scipy.optimize import least_squares

    def val(side: str, name: str) -> float:
        return terms[side].get(name, (0.0,))[0]

    xs, ds, ws = [], [], []
    for r in items:
        if r.tls != tls:
            continue
        a = (val("s_sys", "kernel.tx_call") * r.writes + val("s_sys", "kernel.tx_byte") * r.wire
             + val("s_sys", "kernel.tx_skb") * r.tcp_skbs
             + val("s_sys", "kernel.tx_segment") * (0.0 if r.tso else r.segments)
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
        ds.append(r.frames / r.writes)
        ws.append(r.r_wakeups / r.writes)
    x, d, w = np.asarray(xs), np.asarray(ds), np.asarray(ws)

    def resid(p: np.ndarray) -> np.ndarray:
        return np.minimum(p[2], p[0] * x * d ** p[1]) - w

    sol = least_squares(resid, [2.0, 0.5, 1.0], bounds=([0.0, 0.0, 0.0], [50.0, 2.0, 5.0]))
    k, beta, cap = (float(v) for v in sol.x)
    rms = float(np.sqrt(np.mean(resid(sol.x) ** 2)))
    return {"value": {"k": round(k, 4), "beta": round(beta, 4), "cap": round(cap, 4)},
            "rms": round(rms, 4),
            "source": f"fit: least squares of the reader's wake-ups per write on the slack "
                      f"between the two sides and the frames delivered per write over "
                      f"{len(w)} {'TLS' if tls else 'plain'} runs (rms {rms:.2f} wake-ups "
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
    small = [r.snd_wnd / r.rmem for r in items if r.rmem < 1 << 20 and r.snd_wnd > 0]
    if small:
        out["window_ratio"] = {"value": round(_med(small), 4), "source": (
            f"fit: the window the receiver offered (tcp_info snd_wnd) over tcp_rmem, median of "
            f"{len(small)} runs with small buffers: the kernel's scaling ratio of payload to "
            "buffer (tcp_win_from_space, Linux 6.x)")}
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
    for name in ("read_bytes", "wakeups_per_write", "busy", "wake_law"):
        facts.pop(f"{name}_{other}", None)
        if f"{name}_{kind}" in facts:
            facts[name] = facts.pop(f"{name}_{kind}")
    facts["write_bytes"] = {"value": 0 if tls else 131072,
                            "source": "testbed: peers/tcp-tls writes one TLS record per "
                                      "SSL_write, or 128 KiB blocks of plain TCP (iperf3's)"}
    facts.setdefault("window_ratio", {"value": 0.5, "source": "assumed: tcp_adv_win_scale's "
                                                            "half of the buffer; ×/÷ 1.5"})
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


# ------------------------------------------------------------------- published model
#: The QIR hosts' CPU (seed 002 §3.2, AMD-2), the published models' reference.
QIR_CPU = "AMD EPYC 7543"
#: This host's kernel costs as measured by the fresh calibration (a tcp+tls CostModel
#: JSON: ``quiclab calibrate --source fresh --tcp-host models/tcp_host.json`` writes it).
HOST_FILE = "tcp_host.json"
#: Bare-metal cost of waking a sleeping process on another core (an IPI and a context
#: switch at each end). Assumed: the VM's measured 15–25 µs are its exits and injected
#: interrupts, which the QIR's bare-metal hosts do not have.
BARE_METAL_WAKE_NS = 2000.0
#: Seed 002 §4.6, Fig. 8: TCP goodput 3 % lower on the Xeon Gold 6312U host pair than on
#: the EPYC 7543 pair, where the QUIC stacks run 11–27 % faster.
INTEL_POINT = "kempf24-065"
INTEL_CPU = "Intel Xeon Gold 6312U"


def measured_host_cpu(host: Any, model: Any, cpus: Any) -> Any:
    """This host's catalog CPU at the clock its runs measured (the bench's multiply-add
    chain: 4 cycles a step on Zen 4 and its neighbours), not /proc/cpuinfo's nominal
    figure: the peers run at the boost clock."""
    from dataclasses import replace as dc_replace

    step = float((model.provenance.get("session") or {}).get("bench_mul_add_ns_median", 0) or 0)
    if step <= 0:
        return host
    ghz = round(4.0 / step, 3)
    return dc_replace(host, max_ghz=ghz, base_ghz=ghz, sources=(
        *host.sources, f"measured: a dependent 64-bit multiply-add chain (4 cycles a step) "
                       f"at {step:.4f} ns a step in the tcp-calibration runs → {ghz} GHz"))


@dataclass
class QirCell:
    """Medians of the QIR-10G tcp+tls runs of one cipher (ns per goodput byte)."""

    cipher: str
    goodput_mbps: float
    s_user: float
    s_sys: float
    r_user: float
    r_sys: float
    segments_per_ack: float
    s_util: float
    r_util: float
    runs: int


def qir_cells(runs: pd.DataFrame) -> dict[str, QirCell]:
    """The crypto experiment's tcp+tls runs (NGINX 1.18 + OpenSSL, wget), per cipher;
    none where the runs carry no user/system CPU split (the split is what is fitted)."""
    needed = ("server_cpu_user_pct", "server_cpu_sys_pct", "client_cpu_user_pct",
              "client_cpu_sys_pct", "runtime_s", "filesize_bytes", "cipher")
    if any(col not in runs.columns for col in needed):
        return {}
    df = runs[(runs["status"] == "ok") & (runs["server_impl"] == "tcp+tls")
              & runs["server_cpu_user_pct"].notna()]
    out = {}
    for cipher, g in df.groupby("cipher"):
        size = g["filesize_bytes"].astype(float)
        t = g["runtime_s"].astype(float)

        def per_byte(col: str, g: pd.DataFrame = g, t: pd.Series = t,
                     size: pd.Series = size) -> float:
            return float(np.median(g[col].astype(float) / 100.0 * t / size * 1e9))

        out[str(cipher)] = QirCell(
            str(cipher), float(g["goodput_mbps"].median()), per_byte("server_cpu_user_pct"),
            per_byte("server_cpu_sys_pct"), per_byte("client_cpu_user_pct"),
            per_byte("client_cpu_sys_pct"),
            float(np.median(g["data_packets"].astype(float) / g["ack_packets"].astype(float))),
            float(g["server_cpu_pct"].median()) / 100.0,
            float(g["client_cpu_pct"].median()) / 100.0, len(g))
    return out


def fit_kernel_scaling(qir: dict[str, QirCell], points: pd.DataFrame, cpus: Any
                       ) -> tuple[Param, float]:
    """The power γ with which kernel costs follow the CPU rule's factor (user costs follow
    it as is), from seed 002 §4.6 (kempf24-065: TCP 3 % slower on the Xeon Gold 6312U
    than on the EPYC 7543): the QIR client, the bottleneck with AES-NI, spends ``u`` in
    user and ``k`` in kernel time per byte on the EPYC; on the Intel host
    ``u·r + k·r^γ`` = (u + k) / (1 + change). Returns (γ, the rule's factor r)."""
    rows = points[points["point_id"] == INTEL_POINT] if "point_id" in points else points[:0]
    cell = qir.get("aes-ni")
    r = cpus.scaling(QIR_CPU, INTEL_CPU).factor
    if rows.empty or cell is None:
        return Param(1.0, 0.5, 1.5, "", "assumed: kernel work follows the CPU rule (no seed "
                     f"002 Fig. 8 point {INTEL_POINT} or QIR tcp+tls runs to fit it)"), r
    change = float(rows.iloc[0]["value"]) / 100.0
    u, k = cell.r_user, cell.r_sys

    def gamma(ch: float) -> float:
        target = (u + k) / (1.0 + ch) - u * r
        return math.log(max(target, 1e-9) / k) / math.log(r)

    # "decreases by 3 %": a rounded figure, read as −3 ± 1 pp.
    g, lo, hi = gamma(change), gamma(change + 0.01), gamma(change - 0.01)
    return Param(g, min(lo, hi, g), max(lo, hi, g), "", (
        f"fit: seed 002 §4.6 Fig. 8 ({INTEL_POINT}: TCP goodput {change * 100:+.0f} % on the "
        f"{INTEL_CPU} pair against the {QIR_CPU} pair, read ±1 pp) with the QIR client's "
        f"user and kernel time per byte ({u:.3f}, {k:.3f} ns/B, AES-NI, "
        f"{cell.runs} runs) and the CPU rule's factor {r:.3f}: kernel costs × factor^γ")), r


def published_costs(tls: bool, qir: dict[str, QirCell], host: Any, host_cpu: Any,
                    points: pd.DataFrame, cpus: Any) -> TcpCosts:
    """The published tcp+tls (NGINX + OpenSSL, wget + GnuTLS) or tcp (iperf3) costs on
    the QIR hosts' EPYC 7543 with a real NIC (see the module docstring)."""
    hc: TcpCosts = host.tcp
    catalog = cpus.with_cpu(host_cpu)
    gamma, _ = fit_kernel_scaling(qir, points, catalog)
    move = catalog.scaling(host_cpu.name, QIR_CPU)
    kf = move.factor ** gamma.value
    moved = (f"this host's fresh fit ({host.provenance.get('tcp_fit', '')[:60]} …), moved to "
             f"the {QIR_CPU} by the CPU rule's factor {move.factor:.3f} to the power γ = "
             f"{gamma.value:.2f}")

    def from_host(name: str, why: str = "") -> Param:
        p = hc.kernel[name]
        return Param(p.value * kf, p.lo * kf, p.hi * kf, p.unit,
                     f"derived: {moved}{why}; {p.source[:80]}")

    def fixed(value: float, unit: str, source: str, rel: float = 0.5) -> Param:
        return Param(value, value * (1 - rel), value * (1 + rel), unit, source)

    aes, chacha = qir.get("aes-ni"), qir.get("chacha20")
    sw = qir.get("aes-sw")
    # The crypto experiment's TCP runs are seed 002 Fig. 5's measurements, whose AES-NI /
    # ChaCha20 ratio is kempf24-030: a check of that ratio is in sample.
    ids = ("QIR-10G crypto experiment, tcp+tls runs (NGINX 1.18 + OpenSSL, wget; seed 002 "
           "Fig. 5, kempf24-030)")
    # A segment cut in software (TSO off) costs what it costs here: the cut and the
    # per-segment transmit before the driver, both in the sending kernel.
    kernel = {n: from_host(n) for n in ("tx_byte", "rx_byte", "csum_byte", "rx_frame",
                                        "gro_frame", "rx_skb", "ack_in", "ack_out", "tx_skb",
                                        "tx_segment")}
    wake = fixed(BARE_METAL_WAKE_NS, "ns", "assumed: a bare-metal cross-core wake-up (IPI and "
                 "context switch), ~2 µs; this host's 15–25 µs are its VM's exits", rel=1.0)
    kernel["wake_out"], kernel["wake_in"] = wake, wake
    record = 16384
    if tls and aes and chacha and sw:
        # wget (GnuTLS) reads a record's header and its body: two read() calls a record.
        reads_per_byte = 2.0 / record
        rx_call = hc.kernel["rx_call"].value * kf
        proc = rx_call * reads_per_byte + kernel["rx_byte"].value
        outs = [c.r_sys - proc for c in (aes, chacha)]
        kernel["rx_call"] = from_host("rx_call")
        kernel["file_out"] = Param(float(np.mean(outs)), min(outs), max(outs), "ns/B", (
            f"fit: {ids}: wget's system time per byte where it is the bottleneck (AES-NI "
            f"{aes.r_sys:.3f}, ChaCha20 {chacha.r_sys:.3f} ns/B; {aes.runs}+{chacha.runs} "
            f"runs) less its socket reads (two read() a record, assumed) and copies: writing "
            "the downloaded file (seed 002 §4.4's I/O)"))
        # NGINX is the bottleneck without AES-NI: its system time per byte is its reads of
        # the file, one write() per 16 KiB record (ssl_buffer_size) and the skb it sends.
        kernel["file_in"] = fixed(kernel["rx_byte"].value, "ns/B", (
            "assumed: NGINX reading a cached file costs what a socket read's copy out "
            f"costs ({kernel['rx_byte'].source[:50]} …)"))
        # One skb goes out per write there (the sender is the bottleneck: tcp_push at
        # once), at this host's per-skb cost; the rest of a write's kernel time is the
        # write() itself and what the driver does for it.
        per_write = (sw.s_sys - kernel["tx_byte"].value * (record + TLS_OVERHEAD) / record
                     - kernel["file_in"].value) * record - kernel["tx_skb"].value
        kernel["tx_call"] = Param(max(per_write, 0.0), max(per_write, 0.0) * 0.7,
                                  max(per_write, 0.0) * 1.3, "ns", (
            f"fit: {ids}: NGINX's system time per byte without AES-NI, where it is the "
            f"bottleneck ({sw.s_sys:.3f} ns/B, {sw.runs} runs), less its copies, file "
            "reads and one skb, per 16 KiB write (ssl_buffer_size) (±30 %)"))
    else:
        kernel["rx_call"] = from_host("rx_call")
        kernel["tx_call"] = from_host("tx_call", " (veth's: the receive softirq it raises "
                                                 "runs in it there, an over-estimate here)")
        for name in ("file_in", "file_out"):
            kernel[name] = fixed(0.0, "ns/B", "derived: iperf3 sends and discards buffers in "
                                 "memory, no file", rel=0.0)
    user: dict[str, Param] = {}
    enc: dict[str, Param] = {}
    dec: dict[str, Param] = {}
    if tls and aes and chacha and sw:
        ru = hc.user["record_out"].value * move.factor
        rv = hc.user["record_in"].value * move.factor
        user["record_out"] = Param(ru, ru * 0.5, ru * 1.5, "ns", f"derived: {moved} (user "
                                   "work: the rule as is); OpenSSL's record, here NGINX's")
        user["record_in"] = Param(rv, rv * 0.5, rv * 1.5, "ns", f"derived: {moved} (user "
                                  "work: the rule as is); OpenSSL's record, here wget's GnuTLS")
        for c in (aes, chacha, sw):
            for table, value, who in ((enc, c.s_user - ru / record, "NGINX (OpenSSL)"),
                                      (dec, c.r_user - rv / record, "wget (GnuTLS)")):
                table[c.cipher] = Param(max(value, 0.0), max(value, 0.0) * 0.9,
                                        max(value, 0.0) * 1.1, "ns/B", (
                    f"fit: {ids}: {who} user time per byte with {c.cipher} ({c.runs} runs) "
                    "less its records' share (±10 %)"))
    elif tls:
        # No QIR-10G crypto runs in this fit (a cross-validation fold that holds them
        # out): this host's measured TLS costs, moved by the CPU rule as they are.
        def moved_param(p: Param) -> Param:
            f = move.factor
            return Param(p.value * f, p.lo * f, p.hi * f, p.unit,
                         f"derived: {moved} (no QIR-10G crypto runs in this fit); "
                         f"{p.source[:80]}")

        user = {k: moved_param(hc.user[k]) for k in ("record_out", "record_in")}
        enc = {c: moved_param(p) for c, p in hc.encrypt.items()}
        dec = {c: moved_param(p) for c, p in hc.decrypt.items()}
    else:
        zero = Param(0.0, 0.0, 0.0, "ns", "derived: plain TCP has no TLS records")
        user = {"record_out": zero, "record_in": zero}
    facts: dict[str, dict[str, Any]] = {
        "placement": {"value": "nic", "source": "seed 002 §3.2: two hosts, a 10 Gbit/s NIC each"},
        "tls": {"value": tls, "source": "seed 002 §3.4: NGINX with OpenSSL, wget" if tls else
                "seed 001 §2.2 Table 2: iperf3 TCP (no TLS)"},
        "write_bytes": {"value": 0 if tls else 131072,
                        "source": "NGINX: one SSL_write per 16 KiB ssl_buffer_size" if tls else
                        "iperf3's default TCP block, 128 KiB"},
        "read_bytes": {"value": 8192 if tls else 131072,
                       "source": "assumed: GnuTLS reads a record's header and body in two "
                                 "read() calls" if tls else "iperf3's 128 KiB reads"},
        "size_goal_bytes": {"value": 65536, "source": "Linux GSO_LEGACY_MAX_SIZE"},
        "window_ratio": {"value": 0.5, "source": "assumed: tcp_adv_win_scale's half"},
        "skb_fill": dict(hc.facts.get("skb_fill", {"value": 1.0, "source": "assumed"})),
        "wake_law": dict(hc.facts.get("wake_law", {})),
    }
    if aes:
        segs = [c.segments_per_ack for c in qir.values()]
        facts["ack_segments"] = {"value": round(float(np.median(segs)), 2), "source": (
            f"fit: {ids}: data packets per client ACK, median over the ciphers "
            f"({', '.join(f'{c.cipher} {c.segments_per_ack:.1f}' for c in qir.values())})")}
        facts["gro_window_us"] = {"value": 30.0, "source": "assumed: the NIC's interrupt "
                                  "moderation and NAPI poll gather ~30 µs of frames"}
        busy = min(1.0, max(aes.r_util, chacha.r_util if chacha else 0.0))
        facts["busy"] = {"value": round(busy, 3), "lo": round(min(busy, 0.95), 3),
                         "hi": 1.0, "source": (
            f"fit: {ids}: the client's CPU where it is the bottleneck (pidstat means, AES-NI "
            f"{aes.r_util * 100:.0f} %, ChaCha20 "
            f"{(chacha.r_util if chacha else math.nan) * 100:.0f} %)")}
    else:
        facts["ack_segments"] = {"value": 2.0, "source": "RFC 1122: every second segment"}
        facts["busy"] = {"value": 1.0, "lo": 0.9, "hi": 1.0,
                         "source": "assumed: a bulk sender with nothing else to wait for"}
    return TcpCosts(kernel, user, enc, dec, gamma, facts)


def load_host(path: Any = None) -> Any:
    """This host's fresh tcp+tls model as committed (``models/tcp_host.json``), or None."""
    from importlib import resources
    from pathlib import Path

    from quiclab.models.costmodel import CostModel

    file = Path(path) if path else Path(str(resources.files("quiclab.models"))) / HOST_FILE
    return CostModel.load(file) if file.is_file() else None


def host_cpu_of(host: Any, cpus: Any) -> Any:
    """The Cpu the host model was measured on (its provenance keeps the catalog row), at
    the clock its runs measured."""
    from quiclab.models.cpus import Cpu

    row = dict(host.provenance.get("host_cpu") or {})
    if not row:
        return None
    row["sources"] = tuple(row.get("sources", ()))
    row["nics"] = tuple(tuple(n) for n in row.get("nics", ()))
    return measured_host_cpu(Cpu(**row), host, cpus)


def tcp_spec(name: str, qir: dict[str, QirCell], points: pd.DataFrame, cpus: Any,
             language: str, tls_library: str) -> Any:
    """The published calibration's ImplSpec of a TCP implementation (``TCP_MODELS``): its
    TcpCosts on the QIR hosts' CPU; :func:`model_from_spec` builds the CostModel."""
    from quiclab.calibration.assemble import ImplSpec, RoleSpec, fixed

    tls = TCP_MODELS[name]
    host = load_host()
    if host is None or host.tcp is None:
        raise ValueError(f"models/{HOST_FILE} is missing: run `quiclab calibrate --source "
                         f"fresh --tcp-host models/{HOST_FILE}` on TCP runs of this host")
    host_cpu = host_cpu_of(host, cpus)
    if host_cpu is None:
        raise ValueError(f"models/{HOST_FILE}: provenance.host_cpu missing")
    costs = published_costs(tls, qir, host, host_cpu, points, cpus)
    zero = fixed(0.0, "derived: kernel TCP's costs are its tcp section")
    role = RoleSpec(T=fixed(1.0, "derived: unused, kernel TCP's costs are its tcp section"),
                    call_share=zero, segment_share=zero, ack_ns=zero, cores=fixed(1.0, "derived"))
    return ImplSpec(name=name, sender=role, receiver=role, bytes_ns=zero, kappa=zero,
                    cipher_extra_ns={}, app_ns_per_byte={a: zero for a in ("perf", "hq", "h3")},
                    behaviour=tcp_behaviour(tls, language, tls_library),
                    notes=[f"kernel TCP{'+TLS' if tls else ''} as a mechanism (calibration/tcp.py):"
                           " per-unit kernel and TLS costs, placement and counts"],
                    provenance={"tcp_host": host.provenance.get("tcp_fit", ""),
                                "host_session": host.provenance.get("session", {})},
                    tcp=costs)


def model_from_spec(spec: Any, reference_cpu: str) -> Any:
    """The CostModel of a TCP ImplSpec (its per-packet role costs are unused zeros)."""
    from quiclab.models.costmodel import CostModel

    snd, rcv, crypto = _zero_roles()
    return CostModel(implementation=spec.name, version=MODEL_VERSION, reference_cpu=reference_cpu,
                     sender=snd, receiver=rcv, crypto=crypto, behaviour=spec.behaviour,
                     variants=spec.variants, notes=tuple(spec.notes),
                     provenance=spec.provenance, tcp=spec.tcp)


# ------------------------------------------------------------- held-out: UCLouvain
def uclouvain_offloads(runs: pd.DataFrame, registry: Any, engine: str = "analytic"
                       ) -> pd.DataFrame:
    """Held-out check of the published tcp+tls model: the UCLouvain picotls-over-TCP
    cells with offloads switched off one by one (ConnectX-5 NICs, interrupts on core 2,
    CPU unknown), each against the all-offloads cell of the same core list. The
    hosts' speed is not known, so only the ratio to that cell is compared (both sides
    of it on the same unknown CPU). Nothing of this dataset is fitted."""
    from quiclab.calibration.evidence import uclouvain_cells
    from quiclab.sim.engine import get_engine

    items = [e for e in uclouvain_cells(runs) if e.scenario.server == "tcp+tls"]
    if not items:
        return pd.DataFrame()
    eng = get_engine(engine, registry)
    rows = []
    for e in items:
        cond = dict(e.conditions)
        s = e.scenario.with_(tso=cond.get("tso") is not False, lro=cond.get("lro") is not False,
                             csum_offload=True)
        if cond.get("sg") is False:
            # Without scatter-gather the kernel turns GSO and TSO off (netdev_fix_features).
            s = s.with_(tso=False, gso=False)
        rows.append({"ident": e.ident, "cpus": cond.get("cpu_list") or "any",
                     "gso": s.gso, "gro": s.gro, "tso": s.tso, "lro": s.lro,
                     "sg": cond.get("sg") is not False, "n": e.n,
                     "measured_mbps": e.goodput_mbps,
                     "predicted_mbps": eng.predict(s).goodput_mbps})
    df = pd.DataFrame(rows)
    on = df[df["gso"] & df["gro"] & df["tso"] & df["lro"] & df["sg"]]
    base = on.groupby("cpus")[["measured_mbps", "predicted_mbps"]].median()
    df = df[df["cpus"].isin(base.index)].copy()
    df["measured_ratio"] = df["measured_mbps"] / df["cpus"].map(base["measured_mbps"])
    df["predicted_ratio"] = df["predicted_mbps"] / df["cpus"].map(base["predicted_mbps"])
    df["error_pct"] = (df["predicted_ratio"] / df["measured_ratio"] - 1.0) * 100.0
    return df.sort_values(["cpus", "measured_ratio"], ascending=[True, False])


# ------------------------------------------------------------ the fresh sessions' table
def sessions_table(items: pd.DataFrame) -> pd.DataFrame:
    """The fresh TCP cells of ``quiclab validate --source fresh`` (its validation.csv)
    as one row per engine, stack and setting, with each session's measured and
    predicted goodput and error side by side; ``held_out_setting`` marks settings the
    calibration session never ran."""
    df = items[(items["source"] == "fresh") & items["server"].isin(list(TCP_MODELS))].copy()
    if df.empty:
        return df
    df["setting"] = [i.partition("|")[2].split("[", 1)[-1].rstrip("]") for i in df["ident"]]
    df["setting"] = [", ".join(p for p in s.split(", ") if not p.startswith(
        ("transfer_bytes=", "pin=True"))) or "default" for s in df["setting"]]
    calibrated = set(df.loc[df["group"] == CALIBRATION_EXPERIMENT, "setting"] + "|"
                     + df.loc[df["group"] == CALIBRATION_EXPERIMENT, "server"])
    rows = []
    for (engine, server, setting), g in df.groupby(["engine", "server", "setting"], sort=True):
        row: dict[str, Any] = {"engine": engine, "stack": server, "setting": setting,
                               "held_out_setting": f"{setting}|{server}" not in calibrated}
        for _, r in g.iterrows():
            tag = "cal" if r["group"] == CALIBRATION_EXPERIMENT else "val"
            row[f"{tag}_measured"] = r["observed_mbps"]
            row[f"{tag}_predicted"] = r["predicted_mbps"]
            row[f"{tag}_error_pct"] = r["signed_error_pct"]
            row[f"{tag}_cv_pct"] = r["noise_cv_pct"]
            row[f"{tag}_limit"] = r["limit"]
        rows.append(row)
    return pd.DataFrame(rows)
