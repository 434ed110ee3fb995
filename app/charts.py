"""Altair figures of the app, built from plain tables (no Streamlit here).

- :func:`prediction_table` turns Predictions into rows (one per pair and engine);
- :func:`goodput_chart`: predicted goodput with its interval beside every
  measured point, coloured by source;
- :func:`limits_chart`: the goodput each resource alone would allow, the
  limiting one marked, the others labelled with their headroom;
- :func:`cpu_chart`: CPU utilisation of server and client;
- :func:`sweep_chart`: goodput curves along a sweep axis with measured points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd
from quiclab.sim.prediction import Prediction

#: Colours of the measurement sources (predictions use the engine's colour).
SOURCE_COLOURS = {"qir10g": "#4c78a8", "fresh": "#54a24b", "published": "#e45756"}
ENGINE_COLOURS = {"analytic": "#222222", "des": "#f58518", "ns3": "#b279a2"}


def pair_label(server: str, client: str) -> str:
    """``server → client`` (the bulk data flows server to client)."""
    return f"{server} → {client}"


def _finite(value: float) -> float | None:
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def prediction_table(predictions: Sequence[Prediction]) -> pd.DataFrame:
    """One row per prediction: pair, engine, goodput and interval, limit, CPU (%)."""
    rows = []
    for p in predictions:
        s = p.scenario
        rows.append({
            "pair": pair_label(s.server, s.client), "server": s.server, "client": s.client,
            "engine": p.engine, "goodput_mbps": p.goodput_mbps,
            "goodput_lo_mbps": _finite(p.goodput_lo_mbps),
            "goodput_hi_mbps": _finite(p.goodput_hi_mbps), "limit": p.limit,
            "server_cpu_pct": _finite(p.server_cpu_util * 100),
            "client_cpu_pct": _finite(p.client_cpu_util * 100),
            "engine_version": p.engine_version,
        })
    return pd.DataFrame(rows)


def limits_table(predictions: Sequence[Prediction]) -> pd.DataFrame:
    """Per prediction and resource: the rate it allows, its headroom, whether it limits.

    An unbounded resource (infinite rate) is left out. When an engine names a
    limit that is not one of the evaluated resources (``rcvbuf`` acts through
    the congestion window), the resource with the lowest rate is marked.
    """
    rows = []
    for p in predictions:
        rates = {k: v for k, v in p.rates_mbps.items() if _finite(v) is not None}
        if not rates:
            continue
        marked = p.limit if p.limit in rates else min(rates, key=lambda k: rates[k])
        for resource, rate in rates.items():
            headroom = rate / p.goodput_mbps - 1.0 if p.goodput_mbps > 0 else math.inf
            limit = resource == marked
            rows.append({
                "pair": pair_label(p.scenario.server, p.scenario.client), "engine": p.engine,
                "resource": f"{resource} ({p.limit})" if limit and p.limit != resource
                else resource,
                "rate_mbps": rate, "headroom_pct": headroom * 100,
                "role": "limit" if limit else "headroom",
                "label": "limit" if limit else f"+{headroom * 100:.0f} %",
            })
    return pd.DataFrame(rows)


def goodput_chart(predicted: pd.DataFrame, measured: pd.DataFrame
                  ) -> alt.LayerChart | alt.FacetChart:
    """Predicted goodput (diamond, interval as a bar) and measured points per pair."""
    pred = predicted.assign(series=predicted["engine"] + " (predicted)")
    pred["goodput_lo_mbps"] = pred["goodput_lo_mbps"].fillna(pred["goodput_mbps"])
    pred["goodput_hi_mbps"] = pred["goodput_hi_mbps"].fillna(pred["goodput_mbps"])
    meas = measured.assign(
        pair=[pair_label(s, c) for s, c in zip(measured["server"], measured["client"],
                                               strict=True)],
        series=measured["source"].astype(str) + " (measured)",
        bound=measured["bound"].fillna("value"))
    domain = [*(f"{e} (predicted)" for e in ENGINE_COLOURS),
              *(f"{s} (measured)" for s in SOURCE_COLOURS)]
    colours = [*ENGINE_COLOURS.values(), *SOURCE_COLOURS.values()]
    colour = alt.Color("series:N", title=None, scale=alt.Scale(domain=domain, range=colours),
                       legend=alt.Legend(orient="bottom", columns=3))
    x = alt.X("goodput_mbps:Q", title="goodput (Mbit/s)")
    y = alt.Y("pair:N", title=None)
    interval = alt.Chart(pred).mark_rule(strokeWidth=6, opacity=0.35).encode(
        x="goodput_lo_mbps:Q", x2="goodput_hi_mbps:Q", y=y, yOffset="engine:N", color=colour)
    centre = alt.Chart(pred).mark_point(shape="diamond", size=160, filled=True).encode(
        x=x, y=y, yOffset="engine:N", color=colour,
        tooltip=["pair", "engine", alt.Tooltip("goodput_mbps:Q", format=",.0f"),
                 alt.Tooltip("goodput_lo_mbps:Q", format=",.0f"),
                 alt.Tooltip("goodput_hi_mbps:Q", format=",.0f"), "limit"])
    layers: list[Any] = [interval, centre]
    if not meas.empty:
        layers.append(alt.Chart(meas).mark_circle(size=45, opacity=0.6).encode(
            x=x, y=y, color=colour, shape=alt.Shape("bound:N", title="published bound"),
            tooltip=["source", "id", "detail", alt.Tooltip("goodput_mbps:Q", format=",.0f"),
                     "bound"]))
    return alt.layer(*layers).properties(height=alt.Step(40))


def limits_chart(limits: pd.DataFrame) -> alt.FacetChart:
    """Each resource's goodput bound (log scale), limit in red, headroom as labels.

    One panel per pair and engine. Bars start at the decade below the smallest
    rate, since a logarithmic axis has no zero.
    """
    floor = 10 ** math.floor(math.log10(max(float(limits["rate_mbps"].min()), 1e-3)))
    data = limits.assign(base=floor, case=limits["pair"] + " · " + limits["engine"])
    x = alt.X("rate_mbps:Q", title="goodput this resource alone allows (Mbit/s)",
              scale=alt.Scale(type="log"))
    y = alt.Y("resource:N", title=None, sort=alt.EncodingSortField("rate_mbps"))
    bars = alt.Chart().mark_bar().encode(
        x=x, x2="base:Q", y=y,
        color=alt.Color("role:N", title=None, legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=["limit", "headroom"],
                                        range=["#e45756", "#9ecae9"])),
        tooltip=["pair", "engine", "resource", alt.Tooltip("rate_mbps:Q", format=",.0f"),
                 alt.Tooltip("headroom_pct:Q", format="+.0f")])
    text = alt.Chart().mark_text(align="left", dx=4).encode(x=x, y=y, text="label:N")
    return alt.layer(bars, text, data=data).properties(width=560).facet(
        row=alt.Row("case:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))


def cpu_chart(predicted: pd.DataFrame) -> alt.Chart:
    """CPU utilisation (% of one core) of each side, per pair and engine."""
    long = predicted.melt(id_vars=["pair", "engine"],
                          value_vars=["server_cpu_pct", "client_cpu_pct"],
                          var_name="side", value_name="cpu_pct")
    long["side"] = long["side"].str.replace("_cpu_pct", "", regex=False)
    return alt.Chart(long.dropna()).mark_bar().encode(
        x=alt.X("cpu_pct:Q", title="CPU utilisation (% of one core)"),
        y=alt.Y("pair:N", title=None), yOffset="side:N",
        color=alt.Color("side:N", title=None),
        tooltip=["pair", "engine", "side", alt.Tooltip("cpu_pct:Q", format=".1f")],
    ).properties(height=alt.Step(18))


def sweep_chart(table: pd.DataFrame, measured: pd.DataFrame, axis: str,
                axis2: str | None, log_x: bool = False) -> alt.LayerChart | alt.FacetChart:
    """Goodput vs ``axis`` per pair (and ``axis2`` value), interval band, measured points."""
    scale = alt.Scale(type="log") if log_x else alt.Scale(zero=False)
    x = alt.X(f"{axis}:Q", title=axis, scale=scale)
    series = table.assign(curve=table["pair"] if not axis2 else
                          table["pair"] + " · " + axis2 + "=" + table[axis2].astype(str))
    colour = alt.Color("curve:N", title=None)
    band = alt.Chart(series).mark_area(opacity=0.15).encode(
        x=x, y="goodput_lo_mbps:Q", y2="goodput_hi_mbps:Q", color=colour)
    line = alt.Chart(series).mark_line(point=True).encode(
        x=x, y=alt.Y("goodput_mbps:Q", title="goodput (Mbit/s)"), color=colour,
        strokeDash=alt.StrokeDash("engine:N", title="engine"),
        tooltip=["pair", "engine", axis, *([axis2] if axis2 else []),
                 alt.Tooltip("goodput_mbps:Q", format=",.0f"), "limit"])
    layers: list[Any] = [band, line]
    if not measured.empty and axis in measured.columns:
        meas = measured.dropna(subset=[axis]).assign(
            curve=[pair_label(s, c) for s, c in zip(measured.dropna(subset=[axis])["server"],
                                                    measured.dropna(subset=[axis])["client"],
                                                    strict=True)])
        layers.append(alt.Chart(meas).mark_point(size=40, opacity=0.5).encode(
            x=x, y="goodput_mbps:Q", color=colour,
            shape=alt.Shape("source:N", title="measured"),
            tooltip=["source", "id", "detail", alt.Tooltip("goodput_mbps:Q", format=",.0f")]))
    return alt.layer(*layers).properties(height=420)
