"""Time series of simulated and measured runs in one long table, and out as qlog.

Simulated: a DES or ns-3 Prediction's ``timeseries`` (``sim/des/timeseries.py``
:data:`SERIES`; the ns-3 engine writes the same names), one sample per
interval of simulated time from the connection's start. Measured: the
catalog's ``cpu_samples`` of a run (per second, per side, % of one core) and,
where the catalog has them, its qlog traces' ``recovery`` metrics
(``qlog_events``: cwnd, bytes in flight, smoothed RTT) and losses per second.
Every value goes into one long table — time (s), metric, value, series — that
the Dynamics page draws and the CSV download holds.

:func:`to_qlog` writes a simulated run's series as a qlog trace (JSON-SEQ,
RFC 7464 records, qlog 0.3 event names as quiche writes them): a
``recovery:metrics_updated`` event per sample (cwnd, bytes in flight,
smoothed RTT) and a ``quiclab:interval`` event with the rest (goodput, CPU,
buffer, losses), so the series open in qvis beside a real stack's trace.

Pure functions without Streamlit, so they are tested directly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from quiclab.sim.prediction import Prediction

#: Metrics drawn, in order: name → (plain title with unit, scale from the raw unit).
METRICS: dict[str, tuple[str, float]] = {
    "goodput_mbps": ("goodput (Mbit/s)", 1.0),
    "cwnd_bytes": ("congestion window (KiB)", 1 / 1024),
    "inflight_bytes": ("bytes in flight (KiB)", 1 / 1024),
    "rtt_ms": ("smoothed RTT (ms)", 1.0),
    "cpu_pct": ("CPU busy (% of one core)", 1.0),
    "rcvbuf_bytes": ("receive-buffer occupancy (KiB)", 1 / 1024),
    "losses": ("losses and drops per interval (packets)", 1.0),
}
COLUMNS = ["t_s", "metric", "value", "series"]
RS = "\x1e"


def simulated(p: Prediction) -> pd.DataFrame:
    """A packet engine's series as long rows (empty without a time series). CPU busy
    is in cores in the Prediction and in % of one core here; the receive buffer's
    drops are counted with the sender's declared losses, each its own series."""
    ts = p.timeseries or {}
    t = ts.get("t_s", [])
    if not t:
        return pd.DataFrame(columns=COLUMNS)
    parts = []

    def add(metric: str, values: Sequence[float], series: str, scale: float = 1.0) -> None:
        parts.append(pd.DataFrame({"t_s": t, "metric": metric,
                                   "value": [v * scale for v in values], "series": series}))

    name = p.engine
    for metric in ("goodput_mbps", "cwnd_bytes", "inflight_bytes", "rtt_ms", "rcvbuf_bytes"):
        if metric in ts:
            add(metric, ts[metric], name)
    if "sender_cpu_busy" in ts:
        add("cpu_pct", ts["sender_cpu_busy"], f"{name} · server", 100.0)
    if "receiver_cpu_busy" in ts:
        add("cpu_pct", ts["receiver_cpu_busy"], f"{name} · client", 100.0)
    if "losses" in ts:
        add("losses", ts["losses"], f"{name} · declared lost")
    if "rcvbuf_drops" in ts:
        add("losses", ts["rcvbuf_drops"], f"{name} · receive-buffer drops")
    return pd.concat(parts, ignore_index=True)


def measured_cpu(samples: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """A run's ``cpu_samples`` (``side``, ``t_s``, ``total_pct``) as long rows."""
    if samples.empty:
        return pd.DataFrame(columns=COLUMNS)
    return pd.DataFrame({"t_s": samples["t_s"].astype(float), "metric": "cpu_pct",
                         "value": samples["total_pct"].astype(float),
                         "series": "measured " + run_id + " · " + samples["side"]})


def measured_qlog(events: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """A run's qlog events (``side``, ``t_ms``, ``event``, ``cwnd_bytes``,
    ``bytes_in_flight``, ``smoothed_rtt_ms``) as long rows: each metrics update, and
    the losses per second."""
    if events.empty:
        return pd.DataFrame(columns=COLUMNS)
    parts = []
    t_s = events["t_ms"].astype(float) / 1e3
    label = "qlog " + run_id + " · " + events["side"].astype(str)
    for column, metric in (("cwnd_bytes", "cwnd_bytes"), ("bytes_in_flight", "inflight_bytes"),
                           ("smoothed_rtt_ms", "rtt_ms")):
        if column not in events.columns:
            continue
        keep = events[column].notna()
        parts.append(pd.DataFrame({"t_s": t_s[keep], "metric": metric,
                                   "value": events.loc[keep, column].astype(float),
                                   "series": label[keep]}))
    lost = events[events["event"] == "packet_lost"]
    if not lost.empty:
        per_s = lost.assign(t_s=(lost["t_ms"].astype(float) // 1000).astype(float)) \
            .groupby(["side", "t_s"]).size().reset_index(name="value")
        parts.append(pd.DataFrame({"t_s": per_s["t_s"] + 1.0, "metric": "losses",
                                   "value": per_s["value"].astype(float),
                                   "series": "qlog " + run_id + " · " + per_s["side"]
                                   + " · lost per s"}))
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def thin(frame: pd.DataFrame, points: int = 1500) -> pd.DataFrame:
    """At most about ``points`` rows per (metric, series): every k-th row, so that the
    browser draws a long trace without hundreds of thousands of points."""
    if frame.empty:
        return frame
    parts = []
    for _, part in frame.groupby(["metric", "series"], sort=False):
        step = max(1, math.ceil(len(part) / points))
        parts.append(part.iloc[::step])
    return pd.concat(parts, ignore_index=True)


def chart(frame: pd.DataFrame) -> dict[str, Any]:
    """One panel per metric (own y scale), time on a shared x axis, a line per series."""
    from quiclab.app.charts import SCHEMA, records

    order = [m for m in METRICS if m in set(frame["metric"])]
    data = frame.assign(
        title=frame["metric"].map(lambda m: METRICS[m][0]),
        shown=[v * METRICS[m][1] for m, v in zip(frame["metric"], frame["value"],
                                                   strict=True)])
    titles = [METRICS[m][0] for m in order]
    return {
        "$schema": SCHEMA, "data": {"values": records(data, ["t_s", "title", "shown",
                                                              "series"])},
        "facet": {"row": {"field": "title", "type": "nominal", "sort": titles,
                          "title": None, "header": {"labelAngle": 0, "labelAlign": "left",
                                                    "labelAnchor": "start"}}},
        "spec": {"width": 720, "height": 130, "mark": {"type": "line", "interpolate": "step-after",
                                                       "strokeWidth": 1.5},
                 "encoding": {
                     "x": {"field": "t_s", "type": "quantitative", "title": "time since the "
                           "connection started (s)"},
                     "y": {"field": "shown", "type": "quantitative", "title": None},
                     "color": {"field": "series", "type": "nominal", "title": None,
                               "legend": {"orient": "bottom", "columns": 3, "labelLimit": 0}},
                     "tooltip": [{"field": "series", "type": "nominal"},
                                 {"field": "title", "type": "nominal"},
                                 {"field": "t_s", "type": "quantitative", "format": ".3f"},
                                 {"field": "shown", "type": "quantitative",
                                  "format": ",.4g"}]}},
        "resolve": {"scale": {"y": "independent"}}}


def to_qlog(p: Prediction, description: str = "") -> str:
    """A simulated run's series as a qlog JSON-SEQ trace (see the module docstring)."""
    ts: Mapping[str, list[float]] = p.timeseries or {}
    s = p.scenario
    title = f"quiclab {p.engine} {s.server} → {s.client} (time series)"
    header = {
        "qlog_version": "0.3", "qlog_format": "JSON-SEQ", "title": title,
        "description": description or s.describe(),
        "trace": {"title": title, "description": f"{p.engine_version}; scenario {s.key()}",
                  "vantage_point": {"type": "server", "name": f"quiclab {p.engine}"},
                  "common_fields": {"time_format": "relative", "reference_time": 0}}}
    lines = [RS + json.dumps(header, sort_keys=True)]
    extras = [k for k in ("goodput_mbps", "sender_cpu_busy", "receiver_cpu_busy",
                          "link_busy", "rcvbuf_bytes", "rcvbuf_drops", "losses") if k in ts]
    for i, t in enumerate(ts.get("t_s", [])):
        time_ms = t * 1e3
        metrics: dict[str, Any] = {}
        if "cwnd_bytes" in ts:
            metrics["congestion_window"] = round(ts["cwnd_bytes"][i])
        if "inflight_bytes" in ts:
            metrics["bytes_in_flight"] = round(ts["inflight_bytes"][i])
        rtt = ts.get("rtt_ms", [math.nan] * (i + 1))[i]
        if math.isfinite(rtt):
            metrics["smoothed_rtt"] = rtt
        if metrics:
            lines.append(RS + json.dumps({"time": time_ms, "name": "recovery:metrics_updated",
                                          "data": metrics}, sort_keys=True))
        lines.append(RS + json.dumps({"time": time_ms, "name": "quiclab:interval", "data": {
            k: ts[k][i] for k in extras if math.isfinite(ts[k][i])}}, sort_keys=True))
    return "\n".join(lines) + "\n"
