"""Transport behaviour identified from qlog traces (real stacks' and the engines').

A sender's trace (the server of a download) says how its congestion control
and loss recovery behaved; :func:`features` reads one trace's events
(``quiclab.datasets.qlog`` rows) into the distributions that matter:

- **congestion reduction factor** β: cwnd just after a reduction over cwnd just
  before it (RFC 9002 §7.3.2: 0.5 for NewReno; RFC 9438 §4.6: 0.7 for CUBIC);
  a collapse to the minimum window (persistent congestion, RFC 9002 §7.6)
  is counted apart, not as a β;
- **loss events**: reductions per packet sent (the rate the sawtooth follows),
  and lost packets per packet sent;
- **reductions per recovery epoch**: a reduction within one smoothed RTT of the
  previous one belongs to the same epoch (RFC 9002 §7.3.2 allows one);
- **recovery duration**: from a reduction to the first cwnd growth after it
  (growth resumes only once a packet sent after recovery began is
  acknowledged), in smoothed RTTs;
- **growth per round** in congestion avoidance: cwnd growth per smoothed RTT in
  full datagrams, between reductions (RFC 9002 §7.3.3: 1 for NewReno);
- **loss detection**: for each lost packet, how far below the largest
  acknowledged it was (packet threshold, §6.1.1: 3) and how long after it was
  sent it was declared lost, over the smoothed RTT (time threshold, §6.1.2: 9/8);
- **ACKs**: newly acknowledged packets per ACK frame (ACK frequency) and the
  ACK delay the peer reports;
- **pacing**: packets sent back to back (gaps under 20 µs) as bursts, and the
  pacing rate the stack reports;
- **slow-start exit** (cwnd at the first reduction), **minimum window** (the
  smallest cwnd after the first reduction), **RTT inflation** (smoothed RTT
  p50/p95 over the minimum RTT);
- **flow control** (a receiver's trace): the MAX_DATA / MAX_STREAM_DATA
  credit it advertises ahead of what it has received, and how it grows.

:func:`identify` pools the features of many traces of one stack into
values with 95 % intervals (a bootstrap over traces when there are several,
over events within one otherwise) and the run ids they come from; what a
trace set cannot show is reported as not identified, with the reason.
:func:`behaviour_overrides` turns the identified values into ``Behaviour``
fields with ``trace:`` provenance (applied in ``calibration/knowledge.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: A cwnd drop below this fraction of the previous value is a reduction.
REDUCTION_BELOW = 0.97
#: A reduction to this fraction or less is a collapse (persistent congestion / PTO).
COLLAPSE_BELOW = 0.35
#: A loss logged up to this long before the ACK that declared it is matched to that ACK.
ACK_MATCH_MS = 2.0
#: Packets sent less than this apart are one burst (a GSO batch or a paced bucket).
BURST_GAP_MS = 0.02


@dataclass
class Features:
    """Per-trace distributions (see the module docstring); lists are per event."""

    trace_id: str
    packets_sent: int = 0
    packets_lost: int = 0
    reductions: list[float] = field(default_factory=list)  # β per reduction
    reduction_times_ms: list[float] = field(default_factory=list)
    collapses: int = 0
    epochs: int = 0
    recovery_rtts: list[float] = field(default_factory=list)
    growth_per_rtt: list[float] = field(default_factory=list)  # datagrams per srtt in CA
    reorder_distance: list[float] = field(default_factory=list)
    loss_delay_rtts: list[float] = field(default_factory=list)
    acked_per_ack: list[float] = field(default_factory=list)
    ack_delay_ms: list[float] = field(default_factory=list)
    burst_packets: list[float] = field(default_factory=list)
    pacing_rate_bps: list[float] = field(default_factory=list)
    slow_start_exit_bytes: float | None = None
    min_cwnd_bytes: float | None = None
    cwnd_after_loss_bytes: list[float] = field(default_factory=list)
    srtt_over_min: list[float] = field(default_factory=list)
    min_rtt_ms: float | None = None
    fc_credit_bytes: list[float] = field(default_factory=list)
    ack_frames: int = 0
    cwnd_median_bytes: float | None = None
    rtt_ms: float = 1.0
    rtt_samples_ms: list[float] = field(default_factory=list)
    time_resolution_ms: float = 0.0
    mss: float = 1200.0
    duration_ms: float = 0.0

    @property
    def loss_event_rate(self) -> float | None:
        return len(self.reductions) / self.packets_sent if self.packets_sent else None

    @property
    def loss_rate(self) -> float | None:
        return self.packets_lost / self.packets_sent if self.packets_sent else None

    @property
    def packets_per_ack(self) -> float | None:
        return self.packets_sent / self.ack_frames if self.ack_frames else None

    @property
    def reductions_per_epoch(self) -> float | None:
        return (len(self.reductions) + self.collapses) / self.epochs if self.epochs else None


def features(events: pd.DataFrame, trace_id: str = "") -> Features:
    """The :class:`Features` of one sender trace (a receiver's trace gives ACK and
    flow-control features only). ``events`` has the columns of
    ``quiclab.datasets.qlog.EVENT_COLUMNS``, in time order."""
    ev = events.sort_values(["t_ms", "seq"]) if "seq" in events else events.sort_values("t_ms")
    f = Features(trace_id=trace_id)
    f.duration_ms = float(ev.t_ms.max()) if len(ev) else 0.0
    # One packet-number space: the application data's (1-RTT); Initial and Handshake
    # packets number from 0 again.
    ptype = ev.packet_type.astype("string").str.lower()
    app = ptype.isna() | ptype.isin(["1rtt", "1-rtt", "onertt"])
    ev = ev[app | ~ev.event.isin(["packet_sent", "packet_received", "packet_lost"])]
    sent = ev[ev.event == "packet_sent"]
    data_sent = sent[sent.stream_frames.fillna(0) > 0]
    if data_sent.empty:
        # A stack that logs no frames (quinn): every 1-RTT packet it sent.
        data_sent = sent[sent.packet_type.notna()]
    f.packets_sent = len(data_sent)
    sizes = data_sent.size_bytes.dropna()
    if len(sizes):
        f.mss = float(sizes.quantile(0.9))
    lost = ev[ev.event == "packet_lost"]
    f.packets_lost = len(lost)
    if not len(lost) and ev.lost_total.notna().any():
        # quiche counts losses in its metrics instead (cf_lost_packets).
        f.packets_lost = int(ev.lost_total.max())
    srtt_series = ev.smoothed_rtt_ms.ffill()
    # --- RTTs
    mins = pd.concat([ev.min_rtt_ms.dropna(), ev.latest_rtt_ms.dropna()])
    if len(mins):
        f.min_rtt_ms = float(mins[mins > 0].min()) if (mins > 0).any() else None
    if f.min_rtt_ms and f.min_rtt_ms >= 0.05:
        srtt = ev.smoothed_rtt_ms.dropna()
        f.srtt_over_min = list((srtt / f.min_rtt_ms).to_numpy())
    # --- congestion window: reductions, epochs, recovery, growth
    m = ev[ev.cwnd_bytes.notna()][["t_ms", "cwnd_bytes"]]
    cw = m.cwnd_bytes.to_numpy(dtype=float)
    if len(cw):
        f.cwnd_median_bytes = float(np.median(cw))
    ts = m.t_ms.to_numpy(dtype=float)
    # Rounds are measured in the trace's typical RTT (the median latest RTT, else the
    # median smoothed RTT), not the smoothed RTT of the moment: a handshake sample taken
    # while a loaded host delayed a peer (quic-go here: 676 ms on a 0.1 ms path) keeps
    # the smoothed RTT high for hundreds of samples.
    f.rtt_samples_ms = _ack_rtts(ev, sent)
    latest = ev.latest_rtt_ms.dropna()
    if len(f.rtt_samples_ms) >= 20:
        typical = float(np.median(f.rtt_samples_ms))
    elif len(latest):
        typical = float(latest.median())
    else:
        typical = float(srtt_series.median()) if srtt_series.notna().any() \
            else (f.min_rtt_ms or 1.0)
    f.rtt_ms = max(typical, 1e-3)
    # A trace whose times are whole milliseconds (ngtcp2 0.12) cannot time a round of
    # a sub-millisecond path: the RTT-scaled parameters are left unidentified.
    times = ev.t_ms.to_numpy(dtype=float)
    if len(times) > 100 and np.all(times == np.round(times)):
        f.time_resolution_ms = 1.0
    coarse = f.time_resolution_ms > f.rtt_ms / 4
    rt = np.full(len(cw), f.rtt_ms)
    last_epoch_end = -math.inf
    first_reduction = True
    i = 1
    reductions_at: list[int] = []
    while i < len(cw):
        prev, cur = cw[i - 1], cw[i]
        if cur < prev * REDUCTION_BELOW:
            # One reduction may be logged in steps at one instant: take it whole.
            j = i
            while (j + 1 < len(cw) and cw[j + 1] < cw[j] * REDUCTION_BELOW
                   and ts[j + 1] - ts[i] < 0.5 * rt[i]):
                j += 1
            after = cw[j]
            ratio = after / prev
            if first_reduction:
                f.slow_start_exit_bytes = prev
                first_reduction = False
            if ratio <= COLLAPSE_BELOW:
                f.collapses += 1
            else:
                f.reductions.append(ratio)
                f.reduction_times_ms.append(ts[i])
                f.cwnd_after_loss_bytes.append(after)
            if ts[i] > last_epoch_end:
                f.epochs += 1
            last_epoch_end = ts[i] + rt[i]
            reductions_at.append(j)
            # Recovery: until the window first grows again.
            k = j + 1
            while k < len(cw) and cw[k] <= after:
                if cw[k] < after * REDUCTION_BELOW:
                    break
                k += 1
            if k < len(cw) and cw[k] > after and not coarse:
                f.recovery_rtts.append((ts[k] - ts[i]) / rt[i])
            i = j + 1
            continue
        i += 1
    if reductions_at:
        f.min_cwnd_bytes = float(cw[reductions_at[0]:].min())
        # Congestion-avoidance growth between consecutive reductions (skip slow start).
        for a, b in zip(reductions_at, [*reductions_at[1:], len(cw) - 1], strict=False):
            seg_c, seg_t, seg_r = cw[a:b], ts[a:b], rt[a:b]
            if len(seg_c) < 4:
                continue
            span = seg_t[-1] - seg_t[0]
            grown = seg_c.max() - seg_c[0]
            srtt = float(np.median(seg_r))
            if span > 2 * srtt and grown > 0 and not coarse:
                f.growth_per_rtt.append(grown / f.mss / (span / srtt))
    # --- loss detection: reordering distance and time since sent
    if len(lost):
        send_t = dict(zip(sent.packet_number.dropna().astype(int),
                          sent.t_ms[sent.packet_number.notna()], strict=False))
        rec = ev[ev.event == "packet_received"]
        acks = rec[rec.largest_acked.notna()][["t_ms", "largest_acked"]]
        at = acks.t_ms.to_numpy(dtype=float)
        largest = np.maximum.accumulate(acks.largest_acked.to_numpy(dtype=float)) \
            if len(acks) else np.array([])
        lost_srtt = srtt_series.loc[lost.index].fillna(f.min_rtt_ms or 1.0)
        triggers = lost.trigger.astype("string").fillna("").str.lower()
        # The packet threshold is read from the losses it declared and the time
        # threshold from the ones the timer declared: a stack that logs no trigger
        # (aioquic, ngtcp2 0.12) leaves both unidentified.
        for t, pn, s, trig in zip(lost.t_ms, lost.packet_number, lost_srtt, triggers,
                                  strict=False):
            if pn is None or (isinstance(pn, float) and math.isnan(pn)):
                continue
            pn = int(pn)
            by_time = "time" in trig
            by_count = "reorder" in trig or "packet" in trig
            # The ACK that declared it: stacks log the loss while processing an ACK,
            # before or after they log the packet that carried it (quic-go: before).
            idx = np.searchsorted(at, t, side="left")
            if not (idx < len(at) and at[idx] - t <= ACK_MATCH_MS):
                idx = np.searchsorted(at, t, side="right") - 1
            if idx >= 0 and by_count:
                f.reorder_distance.append(float(largest[idx] - pn))
            if pn in send_t and by_time and not coarse:
                # Over the larger of the stack's smoothed RTT then and the trace's
                # typical round (RFC 9002 §6.1.2: max(smoothed_rtt, latest_rtt)).
                f.loss_delay_rtts.append((t - send_t[pn]) / max(float(s), f.rtt_ms, 1e-3))
    # --- ACKs (sender side: ACK frames it received; receiver side: ones it sent)
    acks_rx = ev[(ev.event == "packet_received") & ev.largest_acked.notna()]
    side_acks = acks_rx if len(acks_rx) else ev[(ev.event == "packet_sent")
                                                & ev.largest_acked.notna()]
    if len(side_acks):
        # Packets each ACK frame newly acknowledges, by how far it moves the largest
        # acknowledged packet number (a stack's own ACKs of ACKs aside).
        newest = np.maximum.accumulate(side_acks.largest_acked.to_numpy(dtype=float))
        step = np.diff(newest)
        f.ack_frames = len(side_acks)
        f.acked_per_ack = [float(x) for x in step if x > 0]
        f.ack_delay_ms = list(side_acks.ack_delay_ms.dropna().to_numpy(dtype=float))
    # --- pacing: bursts of back-to-back packets
    if len(data_sent) > 10:
        gaps = np.diff(data_sent.t_ms.to_numpy(dtype=float))
        run = 1
        for g in gaps:
            if g < BURST_GAP_MS:
                run += 1
            else:
                f.burst_packets.append(run)
                run = 1
        f.burst_packets.append(run)
    f.pacing_rate_bps = list(ev.pacing_rate_bps.dropna().to_numpy(dtype=float))
    # --- flow control (a receiver's trace): credit ahead of the bytes received
    # (MAX_STREAM_DATA of the one bulk stream where the stack sends it, else MAX_DATA.)
    column = "max_stream_data" if ev.max_stream_data.notna().any() else "max_data"
    fc = ev[ev[column].notna() & (ev.event == "packet_sent")]
    if len(fc):
        received = ev[ev.event == "packet_received"].stream_bytes.fillna(0).cumsum()
        got = received.reindex(ev.index).ffill().fillna(0)
        f.fc_credit_bytes = list((fc[column] - got.loc[fc.index]).to_numpy(dtype=float))
    return f


def _ack_rtts(ev: pd.DataFrame, sent: pd.DataFrame) -> list[float]:
    """RTT samples measured in the trace itself (RFC 9002 §5.1): for each ACK frame that
    newly acknowledges a largest packet, its time less that packet's send time. Used
    where a stack logs its RTTs coarsely (ngtcp2 0.12: whole milliseconds)."""
    acks = ev[(ev.event == "packet_received") & ev.largest_acked.notna()]
    if acks.empty or sent.empty:
        return []
    send_t = dict(zip(sent.packet_number.dropna().astype(int),
                      sent.t_ms[sent.packet_number.notna()], strict=False))
    out = []
    best = -1
    for t, largest in zip(acks.t_ms, acks.largest_acked.astype(int), strict=False):
        if largest > best:
            best = largest
            if largest in send_t and t >= send_t[largest]:
                out.append(float(t - send_t[largest]))
    return out


# ---------------------------------------------------------------- summaries
def _ci(values: list[float], stat: Any = np.median, n_boot: int = 400,
        seed: int = 0) -> tuple[float | None, float | None, float | None]:
    """(statistic, 2.5 %, 97.5 %) with a bootstrap over the values."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return None, None, None
    value = float(stat(x))
    if len(x) == 1:
        return value, None, None
    rng = np.random.default_rng(seed)
    boots = [float(stat(rng.choice(x, len(x)))) for _ in range(n_boot)]
    return value, float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


#: (parameter, unit, how it is computed from a list of Features, what it means).
PARAMETERS: tuple[tuple[str, str, str], ...] = (
    ("reduction_factor", "ratio", "median cwnd after / before a reduction"),
    ("loss_event_rate", "per packet", "reductions per data packet sent"),
    ("loss_rate", "per packet", "packets declared lost per data packet sent"),
    ("reductions_per_epoch", "count", "reductions (and collapses) per recovery epoch"),
    ("recovery_rtts", "srtt", "median time from a reduction to the next cwnd growth"),
    ("growth_per_rtt", "datagrams", "median cwnd growth per srtt in congestion avoidance"),
    ("packet_threshold", "packets", "smallest distance below the largest acknowledged at "
                                    "which the packet threshold declared a packet lost"),
    ("time_threshold", "srtt", "10th percentile of (declared − sent) / max(srtt, typical "
                               "RTT) of packets the timer declared lost"),
    ("acked_per_ack", "packets", "median packets an ACK frame moves the largest "
                                 "acknowledged by (ACK frames that move it)"),
    ("packets_per_ack", "packets", "data packets sent per ACK frame received"),
    ("ack_floor_packets", "packets", "packets per ACK frame in traces whose median window is "
                                     "under 4 × that (where a receiver that followed the "
                                     "sender's window would ACK more often)"),
    ("ack_delay_ms", "ms", "median ACK delay the receiver reports"),
    ("burst_packets", "packets", "90th percentile of packets sent back to back"),
    ("slow_start_exit_kb", "KB", "cwnd at the first reduction"),
    ("min_cwnd_packets", "datagrams", "smallest cwnd after the first reduction"),
    ("cwnd_after_loss_packets", "datagrams", "median cwnd right after a reduction"),
    ("rtt_inflation_p95", "× min RTT", "95th percentile of smoothed RTT / min RTT"),
    ("fc_credit_kb", "KB", "median flow-control credit advertised ahead of the data"),
)


def _pooled(fs: list[Features], name: str) -> tuple[list[float], list[float]]:
    """(per-trace values, per-event values) of one parameter."""
    per_trace: list[float] = []
    per_event: list[float] = []

    def add(vals: list[float], reducer: Any) -> None:
        if vals:
            per_event.extend(vals)
            per_trace.append(float(reducer(np.asarray(vals, dtype=float))))

    q90 = lambda x: np.quantile(x, 0.9)  # noqa: E731
    for f in fs:
        if name == "reduction_factor":
            add(f.reductions, np.median)
        elif name == "loss_event_rate" and f.loss_event_rate is not None:
            add([f.loss_event_rate], np.mean)
        elif name == "loss_rate" and f.loss_rate is not None:
            add([f.loss_rate], np.mean)
        elif name == "reductions_per_epoch" and f.reductions_per_epoch is not None:
            add([f.reductions_per_epoch], np.mean)
        elif name == "recovery_rtts":
            add(f.recovery_rtts, np.median)
        elif name == "growth_per_rtt":
            add(f.growth_per_rtt, np.median)
        elif name == "packet_threshold":
            add([d for d in f.reorder_distance if d > 0], np.min)
        elif name == "time_threshold":
            add([d for d in f.loss_delay_rtts if d > 0], lambda x: np.quantile(x, 0.1))
        elif name == "acked_per_ack":
            add(f.acked_per_ack, np.median)
        elif name in ("packets_per_ack", "ack_floor_packets") and f.packets_per_ack is not None:
            small = bool(f.cwnd_median_bytes
                         and f.cwnd_median_bytes / f.mss < 4 * f.packets_per_ack)
            if name == "packets_per_ack" or small:
                add([f.packets_per_ack], np.mean)
        elif name == "ack_delay_ms":
            add(f.ack_delay_ms, np.median)
        elif name == "burst_packets":
            add(f.burst_packets, q90)
        elif name == "slow_start_exit_kb" and f.slow_start_exit_bytes:
            add([f.slow_start_exit_bytes / 1e3], np.mean)
        elif name == "min_cwnd_packets" and f.min_cwnd_bytes:
            add([f.min_cwnd_bytes / f.mss], np.mean)
        elif name == "cwnd_after_loss_packets":
            add([c / f.mss for c in f.cwnd_after_loss_bytes], np.median)
        elif name == "rtt_inflation_p95":
            add(f.srtt_over_min, lambda x: np.quantile(x, 0.95))
        elif name == "fc_credit_kb":
            add([c / 1e3 for c in f.fc_credit_bytes if c > 0], np.median)
    return per_trace, per_event


def summarise(fs: list[Features]) -> dict[str, dict[str, Any]]:
    """Every :data:`PARAMETERS` entry over a set of traces: value, 95 % interval, the
    number of traces and events it rests on, or ``value=None`` with the reason."""
    out: dict[str, dict[str, Any]] = {}
    for name, unit, meaning in PARAMETERS:
        per_trace, per_event = _pooled(fs, name)
        if not per_trace:
            out[name] = {"value": None, "lo": None, "hi": None, "traces": 0, "events": 0,
                         "unit": unit, "why": _why_not(name, fs)}
            continue
        if len(per_trace) >= 3:
            value, lo, hi = _ci(per_trace, np.median)
        else:
            stat = {"packet_threshold": np.min,
                    "time_threshold": lambda x: np.quantile(x, 0.1),
                    "burst_packets": lambda x: np.quantile(x, 0.9),
                    "rtt_inflation_p95": lambda x: np.quantile(x, 0.95)}.get(name, np.median)
            value, lo, hi = _ci(per_event, stat) if len(per_event) > 1 else (per_trace[0], None,
                                                                               None)
            if len(per_trace) == 1 and name in ("loss_event_rate", "loss_rate", "packets_per_ack",
                                                "ack_floor_packets",
                                                "reductions_per_epoch", "slow_start_exit_kb",
                                                "min_cwnd_packets"):
                value = per_trace[0]
                lo, hi = _count_interval(name, fs)
        if name == "time_threshold" and value is not None and value < 0.5:
            # RFC 9002 §6.1.2 never declares a packet lost sooner than 9/8 of a round
            # after it was sent: such a value says the trace's send times and losses do
            # not pair up (quic-go v0.65 here), not what the stack's threshold is.
            out[name] = {"value": None, "lo": None, "hi": None, "traces": len(per_trace),
                         "events": len(per_event), "unit": unit,
                         "why": f"inconsistent: the 10th percentile is {value:.3g} rounds "
                                "after sending, below any time threshold"}
            continue
        out[name] = {"value": value, "lo": lo, "hi": hi, "traces": len(per_trace),
                     "events": len(per_event), "unit": unit, "why": meaning}
    return out


def _count_interval(name: str, fs: list[Features]) -> tuple[float | None, float | None]:
    """A 95 % interval for a rate from one trace: Poisson on the count of events."""
    if name not in ("loss_event_rate", "loss_rate") or not fs:
        return None, None
    f = fs[0]
    n = len(f.reductions) if name == "loss_event_rate" else f.packets_lost
    if not f.packets_sent:
        return None, None
    half = 1.96 * math.sqrt(max(n, 1))
    return max(n - half, 0) / f.packets_sent, (n + half) / f.packets_sent


def _why_not(name: str, fs: list[Features]) -> str:
    if not fs:
        return "no traces"
    if name in ("recovery_rtts", "growth_per_rtt", "time_threshold") and all(
            f.time_resolution_ms > f.rtt_ms / 4 for f in fs):
        return ("the traces time events in whole milliseconds (ngtcp2 0.12), coarser than "
                "a round of this path")
    if name in ("reduction_factor", "recovery_rtts", "growth_per_rtt", "cwnd_after_loss_packets",
                "reductions_per_epoch", "slow_start_exit_kb", "min_cwnd_packets"):
        if not any(f.reductions or f.collapses for f in fs):
            return "no cwnd reduction in the traces (no recovery metrics, or no loss)"
        return "too few reductions followed by growth"
    if name == "packet_threshold" and any(f.packets_lost for f in fs) \
            and not any(f.ack_frames for f in fs):
        return ("no ACK frames to measure a lost packet's distance from the largest "
                "acknowledged (quinn-proto 0.11's qlog logs no frames)")
    if name in ("packet_threshold", "time_threshold"):
        return ("no packet_lost events with a packet number and a trigger (the stack logs no "
                "losses, as quiche 0.30, or no trigger, as aioquic 1.7 and ngtcp2 0.12)")
    if name in ("acked_per_ack", "ack_delay_ms"):
        return "no ACK frames in the traces (frames not logged, as quinn-proto 0.11's qlog)"
    if name == "burst_packets":
        return "too few packet_sent events"
    if name == "fc_credit_kb":
        return "no MAX_DATA frames (needs the receiver's trace)"
    if name == "rtt_inflation_p95":
        return "no RTT metrics"
    return "not in the traces"


def identify(cat: Any, stack: str | None = None, *, run_like: str | None = None,
             side: str = "server", origin: str | None = None) -> pd.DataFrame:
    """The identification table of one stack (its ``side`` traces in the catalog):
    one row per parameter with value, interval, traces, events and run ids."""
    from quiclab.datasets import qlog

    con = cat.con if hasattr(cat, "con") else cat
    where = ["side = ?"]
    params: list[Any] = [side]
    if stack:
        where.append("stack = ?")
        params.append(stack)
    if run_like:
        where.append("run_id LIKE ?")
        params.append(run_like)
    if origin:
        where.append("origin = ?")
        params.append(origin)
    traces = con.execute("SELECT trace_id, run_id FROM qlog_traces WHERE "
                         + " AND ".join(where) + " ORDER BY trace_id", params).fetchall()
    fs = [features(qlog.events(cat, tid), tid) for tid, _ in traces]
    # Flow control is the receiver's: its trace's MAX_DATA / MAX_STREAM_DATA credit.
    for f, (_, run_id) in zip(fs, traces, strict=True):
        if f.fc_credit_bytes:
            continue
        peer = con.execute("SELECT trace_id FROM qlog_traces WHERE run_id = ? AND side = ?",
                           [run_id, "client" if side == "server" else "server"]).fetchone()
        if peer is not None:
            f.fc_credit_bytes = features(qlog.events(cat, peer[0]), peer[0]).fc_credit_bytes
    runs = sorted({r for _, r in traces})
    rows = []
    for name, res in summarise(fs).items():
        rows.append({"stack": stack, "parameter": name, **res, "runs": ",".join(runs)})
    return pd.DataFrame(rows)


# ------------------------------------------------------- into the models' Behaviour
#: The committed identification (``quiclab trace identify --write``): per stack, the
#: congestion controller its traces ran, the run ids, and every parameter of
#: :data:`PARAMETERS` with value, interval, traces and events.
IDENTIFIED_FILE = "trace-behaviour.json"
#: Fewest reductions a β rests on before it replaces the source-read value.
MIN_REDUCTIONS = 30


def load_identified(path: Path | None = None) -> dict[str, Any]:
    """The committed identification (``models/trace-behaviour.json``), {} if absent."""
    if path is None:
        from importlib import resources

        ref = resources.files("quiclab.models") / IDENTIFIED_FILE
        if not ref.is_file():
            return {}
        return dict(json.loads(ref.read_text()))
    return dict(json.loads(Path(path).read_text())) if Path(path).is_file() else {}


def write_identified(tables: dict[str, tuple[str, pd.DataFrame]], path: Path) -> dict[str, Any]:
    """Write ``{stack: (cc, identification table)}`` as the committed file."""
    out: dict[str, Any] = {"_about": (
        "Transport behaviour identified from qlog traces of fresh testbed runs "
        "(quiclab trace identify --write; calibration/traces.py). Values with 95 % "
        "intervals; null where the traces cannot show the parameter (why says so).")}
    for stack, (cc, table) in sorted(tables.items()):
        params = {}
        for _, row in table.iterrows():
            params[row["parameter"]] = {
                k: (None if v is None or (isinstance(v, float) and not math.isfinite(v))
                    else (round(float(v), 6) if isinstance(v, float | np.floating) else v))
                for k, v in (("value", row["value"]), ("lo", row["lo"]), ("hi", row["hi"]),
                             ("traces", int(row["traces"])), ("events", int(row["events"])),
                             ("unit", row["unit"]), ("why", row["why"]))}
        runs = sorted({r for r in ",".join(table.runs.astype(str)).split(",") if r})
        out[stack] = {"cc": cc, "runs": runs, "parameters": params}
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def _provenance(entry: dict[str, Any], name: str) -> str:
    p = entry["parameters"][name]
    interval = (f" [{p['lo']:.3g}, {p['hi']:.3g}]" if p.get("lo") is not None
                and p.get("hi") is not None else "")
    return (f"trace: {p['value']:.3g}{interval} from {p['events']} events in {p['traces']} "
            f"trace(s) of runs {', '.join(entry['runs'])} (calibration/traces.py)")


def apply(name: str, behaviour: Any, identified: dict[str, Any] | None = None
          ) -> tuple[Any, dict[str, str]]:
    """``behaviour`` with the fields its stack's traces identify, and their provenance
    (``provenance.knowledge`` keys). Applied: NewReno's β (``reno_beta``) for a stack
    whose traces ran NewReno, from at least :data:`MIN_REDUCTIONS` reductions. The other
    identified parameters are recorded with their value, interval and runs, under
    ``trace:<parameter>``, beside the source-read field they check."""
    from dataclasses import replace

    table = load_identified() if identified is None else identified
    entry = table.get(name.split("@")[0])
    if not entry:
        return behaviour, {}
    params = entry.get("parameters", {})
    notes: dict[str, str] = {}
    beta = params.get("reduction_factor", {})
    if (entry.get("cc") == "reno" and beta.get("value") is not None
            and beta.get("events", 0) >= MIN_REDUCTIONS and 0.3 < beta["value"] < 0.95):
        behaviour = replace(behaviour, reno_beta=round(float(beta["value"]), 3))
        notes["reno_beta"] = _provenance(entry, "reduction_factor")
    # ack_floor_packets is recorded, not applied: as a fixed tolerance with the 25 ms
    # timer behind it (Behaviour.ack_threshold_floor_packets) it collapses quiche and
    # quic-go at 1-2.5 % loss in the DES (6.8 and 10 Mbit/s against 157 and 175 measured
    # here), while the traces show those receivers ACK per receive batch instead.
    for key, p in params.items():
        if (p.get("value") is not None and key != "reduction_factor") or (
                key == "reduction_factor" and "reno_beta" not in notes
                and p.get("value") is not None):
            notes[f"trace:{key}"] = _provenance(entry, key)
    return behaviour, notes
