"""Cost models for *this* host from fresh testbed runs (``quiclab calibrate --source fresh``).

The testbed (``quiclab.testbed``) runs each stack against itself between two network
namespaces at MTU 1500 with its default offloads (the ``fresh-calibration``
experiment) and records CPU seconds, data packets, send/receive calls and
ACKs per side. From those runs alone this module fits, per stack and role:

- ``T``: CPU per data packet at one packet per system call, from the measured
  CPU per packet and the measured packets per call. A peer's CPU time is its
  whole process life's; the spec's third row (the calibration setting with a
  quarter of the transfer) separates what each process spends whatever it
  moves (start-up, TLS, threads) from the per-packet cost (:func:`_fixed_cpu`);
- the system-call share of each role, from the same session's runs with GSO
  off (``testbed/specs/fresh-calibration.yaml``'s second row): the ratio of CPU
  per packet at one packet per call to that at the GSO batch fixes it
  (:func:`_call_share`). The receiver's comes from the fifth row where there is
  one (veth segmentation off: the sender keeps its batches, only the receiver
  reads single datagrams), so it is fixed for a stack that refuses GSO off
  (MsQuic) and not mixed with a slower sender's. Without such runs, or for a
  role whose batch does not change, the share the published-data calibration
  assumes (0.25);
- crypto and per-byte work are assumed (seed 001 Table 3 moved by the CPU rule,
  the published calibration's per-byte default) and scaled down together where
  the measured CPU per packet leaves them less room;
- ACK frequency (data packets per ACK packet) and receive-buffer drops
  (the receiver-stall model, LSQUIC's Pareto shape, fitted to lost datagrams:
  with GSO and GRO each error is a whole batch);
- behaviour from the testbed's stack table (packet sizes, offload support,
  application protocol, congestion controllers);
- the delay relay's capacity (``testbed/peers/udp-relay``: one system call per
  datagram on this host's cores), from the spec's fourth row, +10 ms with 4 MiB
  buffers: the fastest stack's median goodput there (:func:`relay_capacity`).
  Relayed runs are kept out of every per-stack fit above; ``validate --source
  fresh`` gives relayed cells this rate as their link (``cpus.json``'s
  ``relay_gbps``);
- request-workload terms derived as the published calibration derives
  them for a stack no seed measures (:func:`request_terms`), not fitted on fresh
  request runs, so ``validate --source fresh`` compares those out of sample.

The reference CPU of these models is this host (from ``/proc/cpuinfo``),
written beside the models as ``cpus.json``. Held-out settings — MTU 9000
(with GSO off), a rate limit, added delay, loss, a smaller buffer — are then
predicted by the engines from these models (``quiclab validate --source
fresh``); GSO off alone is a calibrated setting there, shown apart.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quiclab.calibration.assemble import (
    CryptoTable,
    ImplSpec,
    RoleSpec,
    Value,
    build_model,
    call_share_for_ratio,
    fixed,
    packet_work,
)
from quiclab.calibration.crypto import TABLE3_CPU, fit_table3
from quiclab.calibration.evidence import recorded
from quiclab.calibration.fit import DEFAULT_BYTES_NS, DEFAULT_CALL_SHARE, DEFAULT_H3_SHARE
from quiclab.calibration.receiver import STALL_MIN_S
from quiclab.calibration.traces import apply as trace_behaviour
from quiclab.models.costmodel import Behaviour, CostModel
from quiclab.models.cpus import Cpu, CpuCatalog
from quiclab.sim.rcvbuf import rcvbuf_charge_bytes

#: The calibration experiment the testbed writes (testbed/specs/fresh-calibration.yaml).
CALIBRATION_EXPERIMENT = "fresh-calibration"
#: veth between namespaces is a memory copy: no link limit below this.
VETH_LINK_GBPS = 40.0
#: Assumed kernel per-datagram share of T (the published-data calibration's default).
SEGMENT_SHARE = 0.2
#: Protocol work a data packet keeps at least (calibration/assemble.py's 5 % of T).
PROTOCOL_FLOOR = 0.05
#: The least system-call share a role keeps when T leaves no more room for it.
MIN_SHARE = 0.02
#: A role's system-call share is identified only when GSO on batches at least this
#: many times more packets per call than GSO off.
MIN_BATCH_RATIO = 2.0


#: Per role: the runs' CPU-seconds column and its system-call (datagram) column.
ROLE_COLUMNS = {"sender": ("server_cpu_s", "server_udp_sent"),
                "receiver": ("client_cpu_s", "client_udp_received")}


def _per_packet(g: pd.DataFrame, role: str, fixed_s: float = 0.0) -> tuple[float, float]:
    """(CPU ns per data packet, data packets per call) of one role, medians over runs;
    ``fixed_s`` is the process's CPU that is not the transfer's (:func:`_fixed_cpu`)."""
    cpu, calls = ROLE_COLUMNS[role]
    pkts = pd.to_numeric(g["data_packets"], errors="coerce")
    batch = _median(pkts / pd.to_numeric(g[calls], errors="coerce").clip(lower=1))
    return _median((pd.to_numeric(g[cpu], errors="coerce") - fixed_s) / pkts) * 1e9, batch


def _sizes(g: pd.DataFrame) -> pd.Series:
    """Each run's transfer size (bytes); runs that recorded none count as the largest."""
    if "filesize_bytes" not in g.columns:
        return pd.Series(0.0, index=g.index)
    size = pd.to_numeric(g["filesize_bytes"], errors="coerce")
    return size.fillna(size.max() if size.notna().any() else 0.0)


def _largest(g: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``g`` at its largest transfer size (all of them if it is empty)."""
    if g.empty:
        return g
    size = _sizes(g)
    return g[size == size.max()]


def _fixed_cpu(main: pd.DataFrame, small: pd.DataFrame, role: str) -> float:
    """CPU seconds a peer process spends whatever it transfers (start-up, TLS and
    thread set-up, teardown), from the same setting at two transfer sizes:
    ``cpu = fixed + per_packet × packets`` through the two medians. 0 without
    smaller runs or when the difference is not positive (noise).

    A peer's CPU time is its whole life's (rusage at exit), and at 10 Gbit/s a
    200 MB transfer lasts 0.16 s: s2n-quic's fixed 60–90 ms read as 1.4 µs per
    packet where the slope between 50 and 200 MB gives 0.8 µs.
    """
    if small.empty or main.empty:
        return 0.0
    cpu = ROLE_COLUMNS[role][0]
    c1, c2 = _median(small[cpu]), _median(main[cpu])
    p1, p2 = _median(small["data_packets"]), _median(main["data_packets"])
    if not all(math.isfinite(v) for v in (c1, c2, p1, p2)) or p2 <= p1 * 1.5 or c2 <= c1:
        return 0.0
    per_packet = (c2 - c1) / (p2 - p1)
    return float(min(max(c1 - per_packet * p1, 0.0), 0.9 * c1))


def _call_share(on: tuple[float, float], off: pd.DataFrame, role: str,
                ack_share: float, fixed_s: float = 0.0, unbatched: str = "GSO off") -> Value:
    """The system-call share of one role from runs with and without batching in one
    session (``unbatched`` names how the ``off`` runs lost it: GSO off, or veth
    segmentation off for the receiver alone).

    The ratio ``R`` of CPU per packet unbatched to batched gives ``c``
    (:func:`~quiclab.calibration.assemble.call_share_for_ratio`; the ACK share
    ``a`` is held at the GSO-on value). The ACKs a receiver sends after each
    receive batch (many more without GSO) are in ``c``: the model keeps one ACK
    frequency per stack.
    Without a usable pair (no GSO-off runs, a role whose batch GSO does not change,
    e.g. a receiver without GRO) the published calibration's default is assumed.
    ``on`` is the role's :func:`_per_packet` at its default offloads.
    """
    assumed = Value(DEFAULT_CALL_SHARE, 0.1, 0.4,
                    "assumed: system-call share of the published-data calibration")
    if off.empty or ROLE_COLUMNS[role][1] not in off.columns:
        return assumed
    (cpp_on, b_on), (cpp_off, b_off) = on, _per_packet(off, role, fixed_s)
    if not all(math.isfinite(x) and x > 0 for x in (cpp_on, b_on, cpp_off, b_off)) \
            or b_on < MIN_BATCH_RATIO * max(b_off, 1.0):
        return assumed
    ratio = cpp_off / cpp_on
    share = call_share_for_ratio(ratio, b_on, b_off, ack_share)
    if share is None:
        return assumed
    c = min(max(share, MIN_SHARE), 0.9)
    return Value(c, 0.85 * c, min(0.95, 1.15 * c),
                 f"fit: {len(off)} fresh-calibration runs with {unbatched} against its "
                 f"default offloads, same session: CPU per packet × {ratio:.2f} from {b_on:.1f} to "
                 f"{b_off:.1f} packets per call (the ACKs after each receive batch included)")


@dataclass
class FreshFit:
    host: Cpu
    models: dict[str, CostModel]
    base_rtt_us: float
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    #: The delay relay's capacity (Gbit/s of goodput) and where it came from; None
    #: without relayed calibration runs.
    relay_gbps: float | None = None
    relay_source: str = ""
    #: This host in the probed state of each calibration session (models/cpus.py, the
    #: probe rule): the reference CPUs of the models calibrated in it (:func:`with_states`).
    references: list[Cpu] = field(default_factory=list)


def with_states(fit: FreshFit, states: dict[str, tuple[str, Any, str]]) -> FreshFit:
    """``fit`` with each model's reference CPU the host in the probed state of the
    session(s) that calibrated it (``states``: stack → (sessions, figures, source),
    testbed/probe_store.py ``calibration_states``), so that the probe rule moves each
    model from the state it was measured in. Models without a state keep the host."""
    from quiclab.testbed.probe_store import as_cpu

    references: dict[str, Cpu] = {}
    models = dict(fit.models)
    for name, model in fit.models.items():
        if name not in states:
            continue
        sessions, figures, source = states[name]
        label = f"{fit.host.name} @ calibration {sessions}"
        references.setdefault(label, as_cpu(fit.host, label, figures, source))
        models[name] = replace(model, reference_cpu=label)
    # A busy calibration host is no longer a reason to recalibrate: the state it was in
    # is the models' reference, and the probe rule moves them to the state predicted at.
    notes = [f"note: {note[9:].split(chr(39))[0]}'s calibration ran on a busy host "
             f"({note.split('(', 1)[1].split(')')[0]}), whose state its host probes "
             "record: predictions at another probed state are moved by the probe rule "
             "(models/cpus.py)"
             if note.startswith("warning: ") and note[9:].split("'s ")[0] in states
             else note for note in fit.notes]
    return replace(fit, models=models, references=list(references.values()), notes=notes)


def relayed(runs: pd.DataFrame) -> pd.Series:
    """Runs whose path went through the delay relay (added delay or reordering;
    testbed/topology.py ``Link.relayed``)."""
    flag = pd.Series(False, index=runs.index)
    for col in ("rtt_ms", "reorder_pct"):
        if col in runs:
            flag |= pd.to_numeric(runs[col], errors="coerce").fillna(0.0) > 0
    return flag


def relay_capacity(runs: pd.DataFrame) -> tuple[float | None, str]:
    """The relay's capacity: the highest per-stack median goodput among relayed runs.

    ``fresh-calibration.yaml``'s fourth row gives every stack 4 MiB buffers at
    +10 ms, so that nothing but the relay (or a stack's own window) limits it;
    the fastest stack shows the relay's ceiling. None when there are no relayed
    runs (an older calibration session).
    """
    if runs.empty:
        return None, ""
    good = pd.to_numeric(runs["goodput_mbps"], errors="coerce")
    per_stack = good.groupby(runs["server_impl"]).agg(["median", "count"]).dropna()
    if per_stack.empty:
        return None, ""
    best = per_stack["median"].idxmax()
    gbps = float(per_stack.loc[best, "median"]) / 1e3
    rtts = sorted({float(v) for v in pd.to_numeric(runs["rtt_ms"], errors="coerce").dropna()})
    bufs = sorted({int(v) for v in pd.to_numeric(runs["rcvbuf_bytes"], errors="coerce").dropna()})
    others = ", ".join(f"{k} {v / 1e3:.2f}" for k, v in per_stack["median"].sort_values(
        ascending=False).items() if k != best)
    return gbps, (f"fit: the fastest stack through the delay relay, {best} "
                  f"({int(per_stack.loc[best, 'count'])} '{CALIBRATION_EXPERIMENT}' runs at "
                  f"+{'/'.join(f'{r:g}' for r in rtts)} ms, receive buffer "
                  f"{'/'.join(str(b) for b in bufs)} B): median {gbps:.2f} Gbit/s"
                  + (f" (others: {others})" if others else ""))


def _gso_batch(stack: Any, send_batch: float = math.nan) -> int:
    """The datagrams one GSO send (and GRO receive) call moves in the engines.

    The stack's cap (64 segments, fewer where the peer limits a batch's bytes),
    lowered to the packets per send call the calibration runs measured at the
    stack's default offloads: T is backed out of the measured CPU per packet at
    that batch (``T_from``), so an engine that amortised each system call over a
    larger batch would run the stack faster than the runs it was fitted to
    (s2n-quic sends ~10 datagrams per call, not the 44 a 64 KiB batch holds).
    """
    cap = max(1, 65535 // stack.gso_max_payload_bytes) if stack.gso_max_payload_bytes else 64
    if stack.gso in ("switch", "on") and math.isfinite(send_batch) and send_batch > 1.0:
        return max(1, min(cap, round(send_batch)))
    return cap


#: Where a fresh model's read-in behaviour comes from, and which of the stack registry's
#: source notes (testbed/stacks.py) stands for each key of ``provenance.knowledge``.
REGISTRY = "testbed stack registry (testbed/stacks.py): "
REGISTRY_FACTS = {"pacing": "pacing_source", "pacing_burst": "pacing_burst_source",
                  "fc_window_bytes": "fc_window_source",
                  "ack_threshold_fixed": "ack_threshold_source",
                  "ack_policy": "ack_policy_source", "cubic_reno_friendly": "cubic_source",
                  "reno_beta": "reno_source"}


def _stack_behaviour(stack: Any, ack_every: float, stall: tuple[float, float],
                     send_batch: float = math.nan) -> Behaviour:
    gso = stack.gso in ("switch", "on")
    gro = stack.gro in ("switch", "on")
    payload = int(stack.default_udp_payload_bytes)
    window: dict[str, Any] = (
        {"fc_window_bytes": int(stack.fc_window_bytes)} if stack.fc_window_bytes else {})
    return Behaviour(
        udp_payload_bytes=payload,
        max_udp_payload_bytes=int(stack.max_udp_payload_bytes) if stack.max_udp_payload_bytes
        < 65527 else 0,
        max_recv_udp_payload_bytes=int(stack.max_udp_payload_bytes),
        overhead_bytes=40, ack_every_packets=ack_every,
        immediate_ack_on_gap=stack.immediate_ack_on_gap,
        ack_threshold_floor_packets=float(stack.ack_floor_packets),
        ack_timer_ms=float(stack.ack_timer_ms), cubic_reno_friendly=stack.cubic_reno_friendly,
        reno_beta=float(stack.reno_beta),
        supports_gso=gso, supports_gro=gro,
        gso_max_segments=_gso_batch(stack, send_batch),
        apps=("h3",) if stack.app == "h3" else ("perf", "hq", "h3"),
        ccs=tuple(c for c in stack.ccs if c in ("cubic", "reno", "bbr")) or ("cubic",),
        rx_stall_rate_hz=stall[0], rx_stall_min_us=STALL_MIN_S * 1e6, rx_stall_alpha=stall[1],
        pacing=stack.pacing,
        pacing_burst_ms=float(stack.pacing_burst[0]),
        pacing_burst_min_packets=int(stack.pacing_burst[1]),
        pacing_burst_max_packets=int(stack.pacing_burst[2]),
        pacing_min_delay_ms=float(stack.pacing_burst[3]),
        **window,
        ack_threshold_fixed=stack.ack_threshold_fixed,
        language=stack.origin.split(":")[0], tls_library="")


def _median(s: pd.Series) -> float:
    s = pd.to_numeric(s, errors="coerce").replace([np.inf, -np.inf], np.nan).dropna()
    return float(s.median()) if len(s) else float("nan")


def _min_rtt_us(extra: pd.Series) -> float:
    values = [float(v) * 1e3 for v in recorded(extra, "server_report", "min_rtt_ms") if v]
    return float(np.median(values)) if values else 100.0


#: Packaged models whose seed-004 per-request work the fresh models scale from
#: (lsws's server and lsquic's client, fitted on LiteSpeed's Round 1).
REQUEST_REFERENCES = {"sender": ("lsws", "sender"), "receiver": ("lsquic", "receiver")}


def request_terms(models: dict[str, CostModel], cpus: CpuCatalog,
                  references: dict[str, CostModel] | None = None) -> dict[str, CostModel]:
    """``models`` with their request terms set (they are otherwise 0: a bulk fit).

    The derivation the published calibration uses for stacks no seed measures
    (:class:`~quiclab.calibration.requests.RequestCalibrator`): per connection the
    handshake's X25519 and ECDSA cryptography measured with ``openssl speed``, moved
    to this host by the CPU rule, plus ten packets' protocol work of the role; a
    STREAM frame at a tenth of a packet; per request the seed-004 work of lsws
    (sender) and lsquic (receiver) × this stack's per-packet cost over theirs,
    which carries this host's speed and the contention factor of the bulk fit.
    ``references`` are those two models (default: the packaged ones); ``cpus``
    must hold this host.
    """
    from quiclab.calibration.requests import RequestCalibrator
    from quiclab.models.registry import Registry

    if references is None:
        packaged = Registry.packaged()
        references = {name: packaged.models[name] for name, _ in REQUEST_REFERENCES.values()}
    calibrator = RequestCalibrator(cpus)
    calibrator.models_ = {**references, **models}
    calibrator.fitted_ = set()
    calibrator.terms_ = {}
    calibrator.reference_ = dict(REQUEST_REFERENCES)
    for name in sorted(models):
        calibrator._derive(name)
    return {name: calibrator.models_[name] for name in models}


#: Background load (busy cores before a transfer, testbed/collect.py's HostLoad)
#: above which a session's CPU-bound runs are taken as slowed by other work.
BUSY_BACKGROUND_CORES = 0.25


def recorded_host(runs: pd.DataFrame) -> Cpu | None:
    """The CPU the calibration runs were made on when that was an SSH inventory's
    server host (``extra.hosts.server``, testbed/hosts.py ``host_record``), as a
    catalog entry; None for runs made here (the caller reads this machine). Raises
    ValueError when the calibration runs come from more than one CPU."""
    cal = runs[runs["experiment"] == CALIBRATION_EXPERIMENT]
    hosts = [h for h in recorded(cal.get("extra", []), "hosts", "server")
             if isinstance(h, dict) and h.get("kind") == "ssh"]
    if not hosts:
        return None
    names = sorted({str(h["cpu"]["name"]) for h in hosts})
    if len(names) > 1 or len(hosts) != len(cal):
        which = ", ".join(names) if len(names) > 1 else f"{names[0]} and this machine"
        raise ValueError(f"the '{CALIBRATION_EXPERIMENT}' runs come from more than one host "
                         f"CPU ({which}): calibrate from one testbed's runs (a catalog of "
                         "its own)")
    row = dict(hosts[-1]["cpu"])
    row.pop("sources", None)
    return Cpu(**row, sources=(f"/proc/cpuinfo of {hosts[-1]['name']} "
                               f"({hosts[-1]['hostname']}, {hosts[-1]['host_id']})",))


def recorded_link_gbps(runs: pd.DataFrame) -> float | None:
    """The test link's rate when the calibration runs were made over SSH: the slower of
    the two NICs' speeds (``extra.hosts.<role>.nic.speed_mbps``); None otherwise."""
    cal = runs[runs["experiment"] == CALIBRATION_EXPERIMENT]
    speeds = [float(speed) / 1e3
              for role in ("server", "client")
              for h in recorded(cal.get("extra", []), "hosts", role)
              if isinstance(h, dict) and h.get("kind") == "ssh"
              and isinstance(speed := (h.get("nic") or {}).get("speed_mbps"), int | float)]
    return min(speeds) if speeds else None


def background_load(runs: pd.DataFrame, by: str = "experiment") -> pd.DataFrame:
    """Per value of ``by`` (a runs column): runs that recorded the host's background
    load (``extra.host``, busy cores before each transfer) and its median and maximum.
    Runs recorded before the testbed measured it are left out (a group with none has
    no row)."""
    rows: dict[str, list[float]] = {}
    cores = recorded(runs.get("extra", []), "host", "background_cores")
    for key, value in zip(runs.get(by, []), cores, strict=False):
        if value is not None:
            rows.setdefault(str(key), []).append(float(value))
    return pd.DataFrame([{by: key, "runs": len(v),
                          "median_background_cores": float(np.median(v)),
                          "max_background_cores": float(np.max(v))}
                         for key, v in sorted(rows.items())],
                        columns=[by, "runs", "median_background_cores",
                                 "max_background_cores"])


def fit_fresh(runs: pd.DataFrame, points: pd.DataFrame, host: Cpu,
              cpus: CpuCatalog | None = None) -> FreshFit:
    """Fit models for every stack with calibration runs (see the module docstring)."""
    from quiclab.testbed.stacks import STACKS

    cpus = (cpus or CpuCatalog.packaged()).with_cpu(host)
    fits = fit_table3(points)
    enc, dec = fits["encrypt"], fits["decrypt"]
    crypto = CryptoTable(enc.ns_per_packet, enc.ns_per_byte, dec.ns_per_packet, dec.ns_per_byte,
                         "published: seed 001 Table 3 fit")
    cal = runs[(runs["experiment"] == CALIBRATION_EXPERIMENT) & (runs["status"] == "ok")
               & (runs["server_impl"] == runs["client_impl"])]
    if cal.empty:
        raise ValueError(f"no '{CALIBRATION_EXPERIMENT}' runs with status ok "
                         "(run `quiclab testbed sweep testbed/specs/fresh-calibration.yaml`)")
    # The relay probe (the spec's fourth row) measures the path, not the stacks.
    through_relay = relayed(cal)
    relay_gbps, relay_source = relay_capacity(cal[through_relay])
    cal = cal[~through_relay]
    if cal.empty:
        raise ValueError(f"no '{CALIBRATION_EXPERIMENT}' runs without the delay relay "
                         "(run `quiclab testbed sweep testbed/specs/fresh-calibration.yaml`)")
    base_rtt = _min_rtt_us(cal["extra"])
    models: dict[str, CostModel] = {}
    rows = []
    skipped: list[str] = []
    for name, g in cal.groupby("server_impl"):
        stack = STACKS.get(str(name))
        if stack is None:
            skipped.append(f"{name}: not in the testbed's stack table")
            continue
        pkts = pd.to_numeric(g["data_packets"], errors="coerce")
        ok = pkts > 0
        if not ok.any() or g["server_cpu_s"].isna().all():
            skipped.append(f"{name}: its runs recorded no data packets or CPU time")
            continue
        g = g[ok]
        pkts = pkts[ok]
        # The calibration setting is each stack's default offloads; a GSO stack's
        # GSO-off rows (same session) only fix its system-call share below.
        gso_off = g.iloc[0:0]
        # The fifth row (veth segmentation off) only fixes the receiver's share.
        rx_single = g.iloc[0:0]
        if "veth_segmentation" in g.columns:
            unseg = g["veth_segmentation"].eq(False)
            rx_single, g, pkts = g[unseg], g[~unseg], pkts[~unseg]
            if g.empty:
                skipped.append(f"{name}: no runs with the veth's segmentation on")
                continue
        if stack.gso in ("switch", "on") and "gso" in g.columns:
            gso_off = g[g["gso"].eq(False)]
            g, pkts = g[~g["gso"].eq(False)], pkts[~g["gso"].eq(False)]
            if g.empty:
                skipped.append(f"{name}: no runs at its default offloads (GSO on)")
                continue
        # The third row: the calibration setting with a smaller transfer, which
        # separates each process's fixed CPU from the per-packet cost.
        size = _sizes(g)
        small = g[size < size.max()]
        g, pkts = g[size == size.max()], pkts[size == size.max()]
        gso_off, rx_single = _largest(gso_off), _largest(rx_single)
        fixed_cpu = {role: _fixed_cpu(g, small, role) for role in ROLE_COLUMNS}
        acks = pd.to_numeric(g["ack_packets"], errors="coerce")
        ack_every = _median(pkts / acks.clip(lower=1))
        if not math.isfinite(ack_every):
            ack_every = 10.0
        on = {role: _per_packet(g, role, fixed_cpu[role]) for role in ROLE_COLUMNS}
        (meas_s, seg_s), (meas_r, seg_r) = on["sender"], on["receiver"]
        seg_s = seg_s if math.isfinite(seg_s) else 1.0
        seg_r = seg_r if math.isfinite(seg_r) else 1.0
        # A receive-buffer error is one skb as the kernel queued it: with GSO and GRO
        # a whole batch (the stacks' own loss counts agree: quiche reports 7836
        # packets lost against 182 errors × 44 packets per receive), and the engines
        # drop such a batch whole too (TRANSPORT.md "Receive buffer"). So the drop
        # fraction they are fitted to is lost datagrams: errors × datagrams per
        # receive when both ends batch, errors otherwise.
        coalesced = seg_s > 1.5 and seg_r > 1.5
        per_error = seg_r if coalesced else 1.0
        drops = _median(pd.to_numeric(g["client_udp_rcvbuf_errors"], errors="coerce")
                        * per_error / pkts)
        goodput = _median(g["goodput_mbps"])
        ack_share = 0.6 / max(ack_every, 1.0)  # ACKs cost ~0.6 data packets each (assumed)
        shares = {role: _call_share(on[role], gso_off, role, ack_share, fixed_cpu[role])
                  for role in on}
        if not rx_single.empty:
            single = _call_share(on["receiver"], rx_single, "receiver", ack_share,
                                 fixed_cpu["receiver"], unbatched="veth segmentation off")
            if single.source.startswith("fit:"):
                shares["receiver"] = single

        def T_from(meas: float, segments: float, c: float,
                   ack_share: float = ack_share) -> float:
            # meas = T·(1 − c + c/segments) + T·0.6/ack_every
            return meas / (1.0 - c + c / max(segments, 1.0) + ack_share)

        # Both endpoints, the kernel's veth path and whatever else runs share this
        # host's cores, so a process's own CPU time understates what a packet
        # costs the host: scale both sides' measured costs up to what the
        # calibration runs' goodput implies (effective cost on this host).
        payload = stack.default_udp_payload_bytes - 40
        effective = payload * 8 / goodput * 1e3 if goodput > 0 else max(meas_s, meas_r)
        scale = max(1.0, effective / max(meas_s, meas_r))
        Ts = T_from(meas_s * scale, seg_s, shares["sender"].value)
        Tr = T_from(meas_r * scale, seg_r, shares["receiver"].value)
        src = (f"fit: {len(g)} fresh-calibration runs of {name} on this host (CPU per data "
               f"packet {meas_s:.0f}/{meas_r:.0f} ns, {seg_s:.1f}/{seg_r:.1f} packets per call, "
               f"× {scale:.2f} for shared-host contention"
               + (f"; {fixed_cpu['sender'] * 1e3:.0f}/{fixed_cpu['receiver'] * 1e3:.0f} ms of each "
                  f"process's CPU fixed, from {len(small)} runs of a smaller transfer)"
                  if len(small) else "; no smaller transfer: each process's fixed CPU counted "
                  "per packet)"))
        spread = float(pd.to_numeric((g["server_cpu_s"] - fixed_cpu["sender"]) / pkts,
                                     errors="coerce").std()
                       / max(meas_s * 1e-9, 1e-12)) if len(g) > 1 else 0.3
        rel = min(max(spread, 0.05), 0.5)
        # Receiver stalls: K from the measured drop fraction at this buffer (α of LSQUIC, 1.83).
        alpha = 1.83
        # ... at the buffer time the engines see: what the buffer is charged per
        # datagram (sim/rcvbuf.py rcvbuf_charge_bytes) at the arrival rate.
        arrival = goodput * 1e6 / 8 / max(stack.default_udp_payload_bytes - 40, 1) * (
            rcvbuf_charge_bytes(stack.default_udp_payload_bytes, round(seg_s), round(seg_r)))
        x = float(_median(g["rcvbuf_bytes"])) / max(arrival, 1.0)
        k = max(drops if math.isfinite(drops) else 0.0, 1e-7) / x ** (1 - alpha)
        stall_rate = k * (alpha - 1) / STALL_MIN_S**alpha
        beh = _stack_behaviour(stack, ack_every, (stall_rate, alpha), seg_s)
        # Behaviour identified from qlog traces of fresh runs (calibration/traces.py).
        beh, traced = trace_behaviour(str(name), beh)
        P = beh.udp_payload_bytes - beh.overhead_bytes

        def role(T: float, call: Value, segment: float = SEGMENT_SHARE, rel: float = rel,
                 src: str = src) -> RoleSpec:
            return RoleSpec(T=Value(T, T * (1 - rel), T * (1 + rel), src),
                            call_share=call,
                            segment_share=Value(segment, min(0.05, segment), 0.35,
                                                "assumed: kernel per-datagram share"
                                                + ("" if segment == SEGMENT_SHARE else
                                                   f" ({SEGMENT_SHARE} less what the measured "
                                                   "system-call share, crypto and per-byte "
                                                   "work leave of T)")),
                            ack_ns=Value(0.6 * T, 0.2 * T, 1.5 * T, "assumed: an ACK costs "
                                                                   "~0.6 data packets"))

        spec = ImplSpec(
            name=str(name), sender=role(Ts, shares["sender"]),
            receiver=role(Tr, shares["receiver"]),
            bytes_ns=Value(DEFAULT_BYTES_NS, 0.15, 1.5, "assumed: per-byte cost of the "
                           "published-data calibration (no jumbo-frame calibration run)"),
            kappa=Value(1.0, 0.6, 1.5, "assumed: OpenSSL-class AES-GCM"),
            cipher_extra_ns={"aes-sw": fixed(0.0, "assumed: not measured here", 0.0),
                             "chacha20": fixed(0.0, "assumed: seed 002 §4.2, ChaCha20 ≈ AES-NI "
                                                    "for QUIC", 0.0)},
            app_ns_per_byte={"perf": fixed(0.0, "derived: the perf protocol has no "
                                                "application layer"),
                             "hq": fixed(0.0, "derived: not measured; as perf"),
                             "h3": Value(DEFAULT_H3_SHARE * Ts / P, 0.0, 0.27 * Ts / P,
                                         "assumed: HTTP/3 adds 10 % (seed 000 §V-A)")},
            behaviour=beh, notes=[f"fresh calibration on {host.name}; {stack.version}"],
            provenance={"stack": stack.version, "runs": len(g), "experiment":
                        CALIBRATION_EXPERIMENT,
                        "knowledge": {**{key: REGISTRY + getattr(stack, attr)
                                         for key, attr in REGISTRY_FACTS.items()}, **traced,
                                      "gso_max_segments": (
                                          f"fit: median {seg_s:.1f} packets per send call "
                                          f"at the default offloads ({len(g)} runs), the "
                                          "engines' GSO/GRO batch" if beh.gso_max_segments
                                          < _gso_batch(stack) else REGISTRY
                                          + "the stack's batch cap"),
                                      "rx_stall": (f"fit: median receive-buffer drop "
                                                   f"fraction {drops:.2e} of the {len(g)} "
                                                   "runs" + (f" (errors × {per_error:.1f} "
                                                             "datagrams per GRO receive)"
                                                             if coalesced else "")
                                                   if math.isfinite(drops) else
                                                   "assumed: no drop counts recorded, "
                                                   "fraction 1e-7")
                                      + f" at {x * 1e3:.2f} ms of buffer; Pareto shape α "
                                      f"{alpha} from LSQUIC's buffer experiment"}})
        # Measured costs come first: T and the system-call share reproduce the CPU per
        # packet with GSO on and off. What T leaves beside the system calls and the
        # protocol floor must hold crypto and per-byte work, which are assumed
        # (Table 3 moved by the CPU rule, the default per-byte cost); where they
        # would not fit (this host's crypto is faster than the rule says) they are
        # scaled down together. The assumed per-datagram share takes what is left.
        crypto_pkt, crypto_byte, plain = packet_work(
            spec, crypto, cpus.scaling(TABLE3_CPU, host.name).factor)
        work = crypto_pkt + (crypto_byte + plain) * beh.udp_payload_bytes
        kappa, per_byte = spec.kappa.value, spec.bytes_ns.value
        T = {"sender": Ts, "receiver": Tr}
        room = {side: (1.0 - shares[side].value - PROTOCOL_FLOOR) * T[side] for side in T}
        shrink = 0.999 * min(room.values()) / work  # (a hair inside: rounding)
        if shrink < 1.0:
            why = (f" × {shrink:.2f}: the measured CPU per packet leaves no more room beside "
                   "the system calls")
            spec = replace(spec, kappa=Value(kappa * shrink, spec.kappa.lo * shrink,
                                             spec.kappa.hi, spec.kappa.source + why),
                           bytes_ns=Value(per_byte * shrink, spec.bytes_ns.lo * shrink,
                                          spec.bytes_ns.hi, spec.bytes_ns.source + why))
            work *= shrink
        side_change: dict[str, Any] = {
            side: role(T[side], shares[side],
                       min(SEGMENT_SHARE, max(0.0, (room[side] - work) / T[side] - 0.001)))
            for side in T}
        spec = replace(spec, **side_change)
        model = build_model(spec, crypto, cpus, reference_cpu=host.name)
        models[str(name)] = model
        rows.append({"stack": name, "runs": len(g), "goodput_mbps": goodput,
                     "sender_ns_per_packet": meas_s, "receiver_ns_per_packet": meas_r,
                     "packets_per_send_call": seg_s, "packets_per_recv_call": seg_r,
                     "packets_per_ack": ack_every, "drop_fraction": drops,
                     "contention_factor": scale, "T_sender_ns": Ts, "T_receiver_ns": Tr,
                     "call_share_sender": shares["sender"].value,
                     "call_share_receiver": shares["receiver"].value,
                     "gso_off_runs": len(gso_off), "rx_single_runs": len(rx_single),
                     "fixed_ms_sender": fixed_cpu["sender"] * 1e3,
                     "fixed_ms_receiver": fixed_cpu["receiver"] * 1e3})
    if models:
        models = request_terms(models, cpus)
        for row in rows:
            model = models[str(row["stack"])]
            row["conn_us_sender"] = model.sender.ns_per_connection.value / 1e3
            row["request_us_sender"] = model.sender.ns_per_request.value / 1e3
    relay_note = (f"delay relay: {relay_gbps:.2f} Gbit/s ({relay_source})" if relay_gbps
                  else "delay relay: no relayed calibration runs, so relayed cells keep the "
                       "veth link (rerun the calibration sweep for its fourth row)")
    return FreshFit(host, models, base_rtt, pd.DataFrame(rows),
                    notes=[f"veth base RTT (median stack min_rtt): {base_rtt:.0f} µs",
                           relay_note, *_busy_note(cal),
                           *(f"skipped {s}" for s in skipped)],
                    relay_gbps=relay_gbps, relay_source=relay_source)


def _busy_note(cal: pd.DataFrame) -> list[str]:
    load = background_load(cal, by="server_impl")
    busy = load[load["median_background_cores"] > BUSY_BACKGROUND_CORES]
    return [f"warning: {r.server_impl}'s calibration runs shared this host with other work "
            f"(median {r.median_background_cores:.2f} busy cores before each of {r.runs} "
            "transfers): its CPU costs are fitted slow; rerun `quiclab testbed sweep "
            "testbed/specs/fresh-calibration.yaml` on an idle host"
            for r in busy.itertuples()]


def path_defaults(directory: Path) -> dict[str, float] | None:
    """The path the fresh models in ``directory`` were fitted on (its ``cpus.json``, as
    :func:`write_fresh` writes it): base RTT, link rate and, where calibrated, the delay
    relay's capacity (relayed cells' bottleneck); None without the file."""
    meta_path = Path(directory) / "cpus.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    defaults = {"base_rtt_us": float(meta.get("base_rtt_us", 100.0)),
                "link_gbps": float(meta.get("link_gbps", 40.0))}
    if meta.get("relay_gbps"):
        defaults["relay_gbps"] = float(meta["relay_gbps"])
    return defaults


def write_fresh(fit: FreshFit, directory: Path, link_gbps: float = VETH_LINK_GBPS) -> list[str]:
    """Write the models and this host's CPU entry (``cpus.json``, with the link rate
    validation gives cells that set none: the veth's, or the hosts' NIC speed)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in sorted(fit.models.items()):
        (directory / f"{name}.json").write_text(model.dumps())
        written.append(f"{name}.json")
    host = {"schema": "quiclab.cpus/1", "cpus": [
        {**cpu.to_row(), "sources": list(cpu.sources),
         **({"probe": cpu.probe_json()} if cpu.probe else {})}
        for cpu in (fit.host, *fit.references)],
        "base_rtt_us": fit.base_rtt_us, "link_gbps": link_gbps}
    if fit.relay_gbps:
        host.update(relay_gbps=round(fit.relay_gbps, 4), relay_source=fit.relay_source)
    (directory / "cpus.json").write_text(json.dumps(host, indent=1, sort_keys=True) + "\n")
    written.append("cpus.json")
    return written
