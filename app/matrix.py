"""The Matrix page: every server × client under the sidebar's conditions.

Seed 002 Fig. 6 and seed 000 Fig. 3 are such matrices. One vectorised analytic
call predicts every cell (a pair the models refuse is a grey cell and one
line below); the catalog's measured values that match the conditions are
matched for all pairs at once (:func:`quiclab.app.resources.catalog_all_rows`)
and marked on their cells (a ring, the measured median in the tooltip, and
optionally as the colour). Clicking a cell opens that pair on the What-if page
with the same conditions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from quiclab.app.charts import SCHEMA, Spec, pair_label, records, three_digits
from quiclab.app.config import AppConfig
from quiclab.app.labels import limit_name
from quiclab.app.measured import match, unrecorded, unrecorded_reason
from quiclab.app.resources import (
    analytic_by_pair,
    catalog_all_rows,
    catalog_stamp,
    load_registry,
    models_stamp,
)
from quiclab.app.urlstate import Selection
from quiclab.errors import QuiclabError
from quiclab.models.registry import Registry

#: What the cells' colour shows: URL value → label.
COLOURS = {"predicted": "predicted goodput", "measured": "measured median",
           "ratio": "predicted ÷ measured median"}
#: Cell size (px) and the fixed space of the axes' labels, so that a cell's place on
#: the chart is known; cells narrow down to MIN_CELL_W so that the matrix fits the
#: page's PLOT_W px (17 stacks: 48 px).
CELL_W, CELL_H, LABEL_W, LABEL_H = 62, 26, 130, 90
MIN_CELL_W, PLOT_W = 40, 820
CHART_KEY = "matrix.chart"


def seed_from_url(params: dict[str, str]) -> list[str]:
    """The matrix's own URL parameters into its widgets' state; returns the problems."""
    problems = []
    colour = params.get("matrix_colour", "predicted")
    if colour not in COLOURS:
        problems.append(f"URL: matrix_colour={colour!r} is impossible: allowed "
                        + " | ".join(COLOURS))
        colour = "predicted"
    st.session_state["w.matrix.colour"] = colour
    st.session_state["w.matrix.variants"] = params.get("matrix_variants", "false") == "true"
    return problems


def matrix_ui() -> tuple[str, bool]:
    """The colour and whether variants (``lsquic@march``) get rows and columns."""
    state = st.session_state
    state.setdefault("w.matrix.colour", "predicted")
    state.setdefault("w.matrix.variants", False)
    cols = st.columns([2, 1])
    colour = cols[0].radio("Colour", list(COLOURS), format_func=COLOURS.__getitem__,
                           key="w.matrix.colour", horizontal=True)
    variants = cols[1].checkbox("Include variants (@march, @2025, …)", key="w.matrix.variants")
    return str(colour), bool(variants)


def names(registry: Registry, variants: bool) -> list[str]:
    """The implementations on the axes (with their variants if asked)."""
    out: list[str] = []
    for name in registry.names():
        out.append(name)
        if variants:
            out += [f"{name}@{v}" for v in sorted(registry.models[name].variants)]
    return out


def cells(config: AppConfig, selection: Selection, impls: list[str]) -> tuple[pd.DataFrame,
                                                                                 list[str]]:
    """One row per server × client: predicted goodput, band and limit (NaN where the
    models refuse the pair), and the matching measured values' count and median.
    Returns the table and the refused pairs' error lines."""
    stamp = models_stamp(config.models_dir)
    base = selection.base
    scenarios = [base.with_(server=s, client=c) for s in impls for c in impls]
    predictions, refused = analytic_by_pair(config.models_dir, stamp, scenarios)
    by_pair = {(p.scenario.server, p.scenario.client): p for p in predictions}
    measured, _ = measured_cells(config, selection, impls)
    rows = []
    for s in scenarios:
        p = by_pair.get((s.server, s.client))
        m = measured.get((s.server, s.client))
        rows.append({
            "server": s.server, "client": s.client, "pair": pair_label(s.server, s.client),
            "goodput_mbps": p.goodput_mbps if p else math.nan,
            "goodput_lo_mbps": p.goodput_lo_mbps if p else math.nan,
            "goodput_hi_mbps": p.goodput_hi_mbps if p else math.nan,
            "limit": p.limit if p else "refused",
            "limit_name": limit_name(p.limit) if p else "the models refuse this pair",
            "extrapolated": p.extrapolated if p else "",
            "measured_n": int(m[0]) if m else 0,
            "measured_median_mbps": m[1] if m else math.nan,
        })
    table = pd.DataFrame(rows)
    table["ratio"] = table["goodput_mbps"] / table["measured_median_mbps"]
    return table, refused


def measured_cells(config: AppConfig, selection: Selection, impls: list[str]
                   ) -> tuple[dict[tuple[str, str], tuple[int, float]], str | None]:
    """(count, median) of the exact measured values per pair under the conditions, and
    why none can match (None when they can)."""
    settings = unrecorded(selection.base)
    if settings:
        return {}, unrecorded_reason(settings)
    stamp = catalog_stamp(config.catalog)
    try:
        every = catalog_all_rows(config.catalog, stamp)
        registry = load_registry(config.models_dir, models_stamp(config.models_dir))
        cpu = registry.cpus.find(selection.base.cpu).name
    except QuiclabError as err:
        return {}, str(err)
    out = {}
    for (server, client), rows in every.items():
        if server not in impls or client not in impls:
            continue
        found = match(rows, selection.base.with_(server=server, client=client), cpu)
        values = found.loc[found["bound"].isna(), "goodput_mbps"].astype(float)
        if len(values):
            out[(server, client)] = (len(values), float(np.median(values)))
    return out, None


def heatmap(table: pd.DataFrame, colour: str, impls: list[str]) -> Spec:
    """Rectangles coloured by ``colour`` (log scale), the predicted goodput written in
    each (Gbit/s), a ring on the cells with measured values; a click selects a cell."""
    field = {"predicted": "goodput_mbps", "measured": "measured_median_mbps",
             "ratio": "ratio"}[colour]
    data = table.assign(text=table["goodput_mbps"].map(
        lambda v: "—" if not math.isfinite(v) else f"{v / 1000:.3g}" if v < 100_000
        else f"{v / 1000:.0f}"))
    values = records(data)
    scale: dict[str, Any] = {"type": "log", "scheme": "viridis"}
    # Dark text on the light part of the scale (viridis: the upper half on a log scale;
    # redblue: near 1), white on the dark part.
    shown = table[field].replace([np.inf, -np.inf], np.nan).dropna()
    shown = shown[shown > 0]
    light = f"datum.{field} > {math.sqrt(shown.min() * shown.max()) if len(shown) else 0!r}"
    if colour == "ratio":
        scale = {"type": "log", "scheme": "redblue", "domainMid": 1, "reverse": True}
        light = "datum.ratio > 0.67 && datum.ratio < 1.5"
    valid = f"isValid(datum.{field}) && isFinite(datum.{field}) && datum.{field} > 0"
    x = {"field": "client", "type": "nominal", "sort": impls, "title": "client (receives)",
         "axis": {"orient": "top", "labelAngle": -50, "labelLimit": LABEL_H - 10,
                  "minExtent": LABEL_H, "maxExtent": LABEL_H}}
    y = {"field": "server", "type": "nominal", "sort": impls, "title": "server (sends)",
         "axis": {"labelLimit": LABEL_W - 10, "minExtent": LABEL_W, "maxExtent": LABEL_W}}
    tooltip = [{"field": "pair", "type": "nominal"},
               {"field": "goodput_mbps", "type": "quantitative", "format": ",.0f",
                "title": "predicted (Mbit/s)"},
               {"field": "goodput_lo_mbps", "type": "quantitative", "format": ",.0f",
                "title": "band low"},
               {"field": "goodput_hi_mbps", "type": "quantitative", "format": ",.0f",
                "title": "band high"},
               {"field": "limit_name", "type": "nominal", "title": "limited by"},
               {"field": "measured_n", "type": "quantitative", "title": "measured values"},
               {"field": "measured_median_mbps", "type": "quantitative", "format": ",.0f",
                "title": "measured median (Mbit/s)"},
               {"field": "ratio", "type": "quantitative", "format": ".2f",
                "title": "predicted ÷ measured"}]
    return {
        "$schema": SCHEMA, "data": {"values": values},
        "width": max(MIN_CELL_W, min(CELL_W, PLOT_W // max(len(impls), 1))) * len(impls),
        "height": CELL_H * len(impls),
        "autosize": {"type": "pad"},
        "encoding": {"x": x, "y": y},
        "layer": [
            # Every cell grey first: a pair the models refuse, or one without a value of
            # the chosen colour (no measured median), stays a visible grey cell.
            {"mark": {"type": "rect", "stroke": "white", "fill": "#d9d9d9",
                      "cursor": "pointer"},
             "encoding": {"tooltip": tooltip}},
            {"params": [{"name": "cell", "select": {"type": "point",
                                                    "fields": ["server", "client"],
                                                    "on": "click", "clear": False}}],
             "transform": [{"filter": valid}],
             "mark": {"type": "rect", "stroke": "white", "cursor": "pointer"},
             "encoding": {"color": {"field": field, "type": "quantitative", "scale": scale,
                                    "title": COLOURS[colour] + (" (Mbit/s)" if colour != "ratio"
                                                                else ""),
                                    "legend": {"orient": "bottom", "gradientLength": 240,
                                               "format": ".2f" if colour == "ratio"
                                               else ",.0f"}},
                          "tooltip": tooltip}},
            {"mark": {"type": "text", "fontSize": 10, "cursor": "pointer"},
             "encoding": {"text": {"field": "text", "type": "nominal"},
                          "color": {"condition": {"test": light, "value": "#111111"},
                                    "value": "white"},
                          "tooltip": tooltip}},
            {"transform": [{"filter": "datum.measured_n > 0"}],
             "mark": {"type": "rect", "filled": False, "stroke": "#ff7f0e",
                      "strokeWidth": 3, "cursor": "pointer"},
             "encoding": {"tooltip": tooltip}},
        ]}


def open_cell() -> None:
    """``on_select`` of the heatmap: the clicked pair on the What-if page."""
    event = st.session_state.get(CHART_KEY) or {}
    chosen = (event.get("selection") or {}).get("cell") or []
    if not chosen:
        return
    cell = chosen[0]
    st.session_state["w.servers"] = [str(cell["server"])]
    st.session_state["w.clients"] = [str(cell["client"])]
    st.session_state["w.page"] = "whatif"


def show(config: AppConfig, selection: Selection) -> dict[str, str]:
    st.header("Matrix")
    base = selection.base
    st.caption("Every server × client under the sidebar's conditions: "
               + base.describe().split(" ", 1)[-1])
    colour, variants = matrix_ui()
    registry = load_registry(config.models_dir, models_stamp(config.models_dir))
    impls = names(registry, variants)
    table, refused = cells(config, selection, impls)
    _, why = measured_cells(config, selection, impls)
    # width="content": the spec's own cell size, its axes' labels added around it (a
    # stretched chart is fitted, labels included, into the plot's height: no cells).
    st.vega_lite_chart(spec=heatmap(table, colour, impls), key=CHART_KEY, on_select=open_cell,
                       selection_mode="cell", width="content")
    measured = table[table["measured_n"] > 0]
    st.caption(f"{len(impls)} × {len(impls)} pairs, analytic engine; numbers in the cells: "
               f"predicted Gbit/s. Orange ring: {len(measured)} pair(s) with measured values "
               "under these conditions"
               + (f" ({why})" if why else "")
               + ". Click a cell to open that pair on the What-if page.")
    if refused:
        with st.expander(f"{len(refused)} pair(s) the models refuse (grey)"):
            st.markdown("\n".join(f"- {line}" for line in refused))
    shown = table.drop(columns=["pair"])
    st.dataframe(shown, hide_index=True, width="stretch", column_config={
        "goodput_mbps": st.column_config.NumberColumn("predicted (Mbit/s)", format="%.0f"),
        "goodput_lo_mbps": st.column_config.NumberColumn("band low", format="%.0f"),
        "goodput_hi_mbps": st.column_config.NumberColumn("band high", format="%.0f"),
        "limit_name": st.column_config.TextColumn("limited by"),
        "limit": st.column_config.TextColumn("limit (engine name)"),
        "measured_n": st.column_config.NumberColumn("measured values"),
        "measured_median_mbps": st.column_config.NumberColumn("measured median (Mbit/s)",
                                                              format="%.0f"),
        "ratio": st.column_config.NumberColumn("predicted ÷ measured", format="%.2f")})
    if not measured.empty:
        ratio = measured["ratio"].dropna()
        st.caption(f"Measured cells: predicted ÷ measured median {three_digits(ratio.min())} "
                   f"… {three_digits(ratio.max())} (median {three_digits(ratio.median())}).")
    return {"matrix_colour": colour, **({"matrix_variants": "true"} if variants else {})}
