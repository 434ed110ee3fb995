"""Where each side's CPU goes: the model's components beside the measured profiles.

Predicted: the resolved cost of one data packet on each side
(:class:`quiclab.sim.resolve.Endpoint`), split as the cost model splits it —
QUIC protocol work, crypto, the application layer, the kernel's per-datagram
work, the share of a system call (one per GSO/GRO batch), the ACKs (received
by the sender, built and sent by the receiver, per data packet) and pipeline
hand-offs. Each component's share of the sum is what a profile of a
CPU-bound run would show.

Measured: the catalog's perf categories (``perf_categories``: seed 002's six
traces, the authors' category mappings) of runs of the same stacks, and the
shares seed 001 states (``published_points``, quantity ``cpu_share``, Table 1:
by shared object). Neither is taken under the scenario's conditions: a
profile belongs to its stack and its run, which the table names.

The two vocabularies meet in three groups, the calibration's own mapping
(``calibration/pipeline.py`` ``PERF_STAGES``, seed 002 §4.4): packet I/O
(``PACKET_IO``: sendmsg/recvmsg and the kernel) ↔ kernel per datagram +
system calls; ``CRYPTO`` ↔ crypto; ``CONN_MGMT`` ↔ protocol, application and
ACKs. File I/O (``IO``) and uncategorised samples (``GENERAL``) have no model
component: the comparison leaves them out and renormalises, as the fit does.
Seed 001's ``io`` (kernel and I/O libraries), ``crypto`` and ``protocol``
map the same way; its ``libc`` is left out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from quiclab.app.charts import SCHEMA, Spec, records
from quiclab.sim.resolve import Endpoint, Resolved

#: Model components, in drawing order: (column, plain name, comparison group).
COMPONENTS = (
    ("segment", "kernel per datagram (UDP/IP, driver)", "packet I/O"),
    ("call", "system calls (per batch)", "packet I/O"),
    ("crypto", "crypto (AEAD, header protection)", "crypto"),
    ("protocol", "QUIC protocol (packets, streams, CC)", "protocol"),
    ("app", "application layer", "protocol"),
    ("acks", "ACKs", "protocol"),
    ("handoff", "pipeline hand-offs", "protocol"),
)
#: Measured categories → comparison group (None: no model component, left out).
PERF_GROUPS = {"PACKET_IO": "packet I/O", "CRYPTO": "crypto", "CONN_MGMT": "protocol",
               "IO": None, "GENERAL": None}
#: Seed 001 Table 1 components → comparison group.
PUBLISHED_GROUPS = {"io": "packet I/O", "crypto": "crypto", "protocol": "protocol",
                    "libc": None}
GROUPS = ("packet I/O", "crypto", "protocol")
GROUP_COLOURS = ("#4c78a8", "#e45756", "#54a24b")


def endpoint_costs(ep: Endpoint, acks_per_packet: float) -> dict[str, float]:
    """ns of one data packet on ``ep``, by component (the keys of :data:`COMPONENTS`)."""
    return {"segment": ep.ns_segment, "call": ep.ns_per_call / max(ep.segments_per_call, 1),
            "crypto": ep.ns_crypto, "protocol": ep.ns_protocol, "app": ep.ns_app,
            "acks": acks_per_packet * ep.ns_per_ack, "handoff": ep.ns_handoff}


def predicted_shares(resolved: Resolved, acks_per_packet: float | None = None
                     ) -> pd.DataFrame:
    """One row per side and component: ns per data packet and share of the side's sum.

    ``acks_per_packet``: ACK packets per data packet (a prediction's ``acks /
    server_packets_sent``); by default the receiver's loss-free policy.
    """
    acks = acks_per_packet if acks_per_packet is not None and math.isfinite(acks_per_packet) \
        else resolved.acks_per_packet
    rows = []
    for side, ep in (("server", resolved.sender), ("client", resolved.receiver)):
        costs = endpoint_costs(ep, acks)
        total = sum(costs.values())
        for key, name, group in COMPONENTS:
            rows.append({"side": side, "stack": ep.impl, "component": name, "group": group,
                         "ns_per_packet": costs[key],
                         "share": costs[key] / total if total > 0 else math.nan})
    return pd.DataFrame(rows)


def shares_text(predicted: pd.DataFrame) -> list[str]:
    """One line per side: its stack and each component's share, largest first
    (``server (lsquic): QUIC protocol 41 % · crypto 22 % · …``), components of
    less than 0.5 % left out."""
    lines = []
    for side, part in predicted.groupby("side", sort=False):
        part = part.sort_values("share", ascending=False)
        items = [f"{row.component} {row.share * 100:.0f} %"
                 for row in part.itertuples(index=False) if row.share >= 0.005]
        lines.append(f"{side} ({part['stack'].iloc[0]}): " + " · ".join(items))
    return lines


def grouped_text(table: pd.DataFrame) -> list[str]:
    """One line per row of :func:`grouped`'s comparison (the model and each measured
    profile, per side): ``server · qir10g perf: lsquic (run): packet I/O 50 % · …``."""
    lines = []
    for (side, what), part in table.groupby(["side", "what"], sort=False):
        shares = dict(zip(part["group"], part["share"], strict=True))
        lines.append(f"{side} · {what}: " + " · ".join(
            f"{group} {shares.get(group, math.nan) * 100:.0f} %" for group in GROUPS))
    return lines


def perf_shares(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured perf categories (columns ``run_id``, ``side``, ``stack``, ``category``,
    ``share``, ``source``) with each category's comparison group."""
    return frame.assign(group=frame["category"].map(PERF_GROUPS))


def published_shares(frame: pd.DataFrame) -> pd.DataFrame:
    """Seed 001's ``cpu_share`` points (``point_id``, ``server``, ``value`` in %,
    ``conditions``) as rows like :func:`perf_shares`'s: side from ``side=``
    (sender → server), category from ``component=``; duplicates (``dup_of=``) and
    points without a component are left out."""
    rows = []
    for _, p in frame.iterrows():
        cond = str(p.get("conditions") or "")
        component = re.search(r"component=([a-z_]+)", cond)
        side = re.search(r"side=([a-z]+)", cond)
        if "dup_of=" in cond or component is None or side is None:
            continue
        rows.append({"run_id": p["point_id"],
                     "side": "server" if side.group(1) in ("sender", "server") else "client",
                     "stack": p["server"], "category": component.group(1),
                     "share": float(p["value"]) / 100.0, "source": "seed 001 Table 1",
                     "group": PUBLISHED_GROUPS.get(component.group(1))})
    return pd.DataFrame(rows, columns=["run_id", "side", "stack", "category", "share",
                                       "source", "group"])


def grouped(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """The comparison: per side, what (the model, or each measured trace) and group,
    the share among the three groups (categories without a group left out and the
    rest renormalised)."""
    rows: list[dict[str, Any]] = []
    for side, part in predicted.groupby("side", sort=False):
        sums = part.groupby("group")["share"].sum()
        total = float(sums.sum())
        for group in GROUPS:
            rows.append({"side": side, "what": f"model ({part['stack'].iloc[0]})",
                         "group": group, "share": float(sums.get(group, 0.0)) / total
                         if total > 0 else math.nan})
    kept = measured.dropna(subset=["group"]) if not measured.empty else measured
    for (side, run, source, stack), part in kept.groupby(
            ["side", "run_id", "source", "stack"], sort=False):
        sums = part.groupby("group")["share"].sum()
        total = float(sums.sum())
        for group in GROUPS:
            rows.append({"side": side, "what": f"{source}: {stack} ({run})", "group": group,
                         "share": float(sums.get(group, 0.0)) / total if total > 0
                         else math.nan})
    return pd.DataFrame(rows, columns=["side", "what", "group", "share"])


def components_chart(predicted: pd.DataFrame) -> Spec:
    """Stacked bars: each side's predicted components (share of its per-packet CPU)."""
    order = [name for _, name, _ in COMPONENTS]
    data = predicted.assign(pct=predicted["share"] * 100,
                            order=predicted["component"].map(order.index))
    return {"$schema": SCHEMA, "data": {"values": records(data)}, "mark": "bar",
            "height": {"step": 34},
            "encoding": {
                "y": {"field": "side", "type": "nominal", "title": None,
                      "sort": ["server", "client"]},
                "x": {"field": "pct", "type": "quantitative", "stack": "normalize",
                      "title": "share of the side's CPU per data packet (model)",
                      "axis": {"format": "%"}},
                "color": {"field": "component", "type": "nominal", "title": None,
                          "sort": order, "legend": {"orient": "bottom", "columns": 2,
                                                    "labelLimit": 0}},
                "order": {"field": "order", "type": "quantitative"},
                "tooltip": [{"field": "side", "type": "nominal"},
                            {"field": "stack", "type": "nominal"},
                            {"field": "component", "type": "nominal"},
                            {"field": "ns_per_packet", "type": "quantitative",
                             "format": ",.0f", "title": "ns per data packet"},
                            {"field": "pct", "type": "quantitative", "format": ".1f",
                             "title": "share (%)"}]}}


def comparison_chart(table: pd.DataFrame) -> Spec:
    """Side by side per side: the model's three groups and each measured profile's."""
    data = table.assign(pct=table["share"] * 100,
                        order=table["group"].map(list(GROUPS).index))
    return {"$schema": SCHEMA, "data": {"values": records(data)}, "mark": "bar",
            "facet": {"row": {"field": "side", "type": "nominal", "title": None,
                              "sort": ["server", "client"],
                              "header": {"labelAngle": 0, "labelAlign": "left"}}},
            # Sized for half the page: 240 px of bars beside labels of at most 220 px.
            "spec": {"mark": "bar", "height": {"step": 24}, "width": 240,
                     "encoding": {
                         "y": {"field": "what", "type": "nominal", "title": None,
                               "axis": {"labelLimit": 220}},
                         "x": {"field": "pct", "type": "quantitative", "stack": "normalize",
                               "title": "share of the categorised CPU",
                               "axis": {"format": "%"}},
                         "color": {"field": "group", "type": "nominal", "title": None,
                                   "scale": {"domain": list(GROUPS),
                                             "range": list(GROUP_COLOURS)},
                                   "legend": {"orient": "bottom", "labelLimit": 0}},
                         "order": {"field": "order", "type": "quantitative"},
                         "tooltip": [{"field": "what", "type": "nominal"},
                                     {"field": "group", "type": "nominal"},
                                     {"field": "pct", "type": "quantitative",
                                      "format": ".1f", "title": "share (%)"}]}},
            "resolve": {"scale": {"y": "independent"}}}


def measured_sql(stacks: Sequence[str]) -> tuple[str, str]:
    """The two read-only queries of the measured profiles of ``stacks`` (their base
    names): seed 002's perf categories by side and stack, and seed 001's shares."""
    names = ", ".join("'" + s.replace("'", "''") + "'" for s in stacks)
    perf = f"""
        SELECT p.run_id, p.side, CASE p.side WHEN 'server' THEN r.server_impl
                                             ELSE r.client_impl END AS stack,
               p.category, p.share, 'qir10g perf' AS source
        FROM perf_categories p JOIN runs r USING (run_id)
        WHERE (p.side = 'server' AND r.server_impl IN ({names}))
           OR (p.side = 'client' AND r.client_impl IN ({names}))
        ORDER BY p.run_id, p.side, p.category"""
    published = f"""
        SELECT point_id, server, value, conditions FROM published_points
        WHERE quantity = 'cpu_share' AND server IN ({names})"""
    return perf, published
