"""The app's figures as Vega-Lite specifications, built from plain tables.

Plain dicts drawn with ``st.vega_lite_chart`` rather than Altair objects:
Altair validates every chart against the Vega-Lite schema when it is
serialised, which cost ~300 ms per rerun of the What-if page, more than the
whole analytic answer. The tests validate the same specs with Altair instead
(``alt.Chart.from_dict``).

- :func:`prediction_table` turns Predictions into rows (one per pair and engine);
- :func:`goodput_chart`: predicted goodput with its interval beside every
  measured point, coloured by source;
- :func:`limits_chart`: the goodput each resource alone would allow, the
  limiting one marked, the others labelled with their headroom;
- :func:`cpu_chart`: CPU utilisation of server and client;
- :func:`sweep_chart`: goodput curves along a sweep axis with measured points.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from quiclab.app.labels import headroom_text, limit_name
from quiclab.sim.prediction import Prediction

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
#: Colours of the measurement sources (predictions use the engine's colour).
SOURCE_COLOURS = {"qir10g": "#4c78a8", "fresh": "#54a24b", "published": "#e45756"}
ENGINE_COLOURS = {"analytic": "#222222", "des": "#f58518", "ns3": "#b279a2"}

Spec = dict[str, Any]


def pair_label(server: str, client: str) -> str:
    """``server → client`` (the bulk data flows server to client)."""
    return f"{server} → {client}"


def model_label(p: Prediction, side: str) -> str:
    """The model that served one side (``server`` or ``client``) of a prediction, with its
    version: ``lsquic@march 2026.11+49bcd6515d`` (the variant is the model's too)."""
    name = str(getattr(p.scenario, side))
    return f"{name} {p.model_versions.get(name.partition('@')[0], '(version unknown)')}"


def three_digits(value: float) -> str:
    """A number with at least three significant digits: ``3,085``, ``52.2``, ``0.512``,
    ``0.000123`` (not ``0`` for a rate under 1 Mbit/s); ``—`` when not finite."""
    if not math.isfinite(value):
        return "—"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _finite(value: float) -> float | None:
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def records(frame: pd.DataFrame, columns: Sequence[str] | None = None
            ) -> list[dict[str, Any]]:
    """JSON-safe records (NaN and NA become null) of some columns of a table."""
    part = frame if columns is None else frame[[c for c in columns if c in frame.columns]]
    rows: list[dict[str, Any]] = json.loads(part.to_json(orient="records"))
    return rows


def _tooltip(*fields: str | tuple[str, str]) -> list[dict[str, Any]]:
    """Tooltip entries; ``(field, format)`` for a number with a d3 format."""
    out = []
    for item in fields:
        if isinstance(item, tuple):
            out.append({"field": item[0], "type": "quantitative", "format": item[1]})
        else:
            out.append({"field": item, "type": "nominal"})
    return out


#: Outputs of request workloads (seeds 003/004), NaN for bulk transfers.
REQUEST_OUTPUTS = ("requests_per_s", "completion_s", "latency_p50_ms", "latency_p99_ms")


def prediction_table(predictions: Sequence[Prediction]) -> pd.DataFrame:
    """One row per prediction: pair, engine, goodput and its predictive interval, limit,
    whether the scenario lies inside the evidence (``evidence``), CPU (%),
    the request outputs (None for bulk), the engine's and the two models' versions."""
    rows = []
    for p in predictions:
        s = p.scenario
        rows.append({
            "pair": pair_label(s.server, s.client), "server": s.server, "client": s.client,
            "engine": p.engine, "goodput_mbps": p.goodput_mbps,
            "goodput_lo_mbps": _finite(p.goodput_lo_mbps),
            "goodput_hi_mbps": _finite(p.goodput_hi_mbps),
            "param_lo_mbps": _finite(p.param_lo_mbps),
            "param_hi_mbps": _finite(p.param_hi_mbps), "limit": p.limit,
            "limit_name": limit_name(p.limit),
            # A visible mark where the scenario lies outside its models' evidence.
            "evidence": ("⚠ outside: " + p.extrapolated) if p.extrapolated else "inside",
            "server_cpu_pct": _finite(p.server_cpu_util * 100),
            "client_cpu_pct": _finite(p.client_cpu_util * 100),
            **{name: _finite(getattr(p, name)) for name in REQUEST_OUTPUTS},
            "engine_version": p.engine_version,
            "server_model": model_label(p, "server"), "client_model": model_label(p, "client"),
        })
    return pd.DataFrame(rows)


def limits_table(predictions: Sequence[Prediction]) -> pd.DataFrame:
    """Per prediction and resource: the rate it allows, its headroom, whether it limits.

    An unbounded resource (infinite rate) is left out. A limit that is not one
    of the evaluated resources (the receive buffer, whose drops act through the
    congestion window) gets a bar of its own at the predicted goodput.
    """
    rows = []
    for p in predictions:
        pair = pair_label(p.scenario.server, p.scenario.client)
        rates = {k: v for k, v in p.rates_mbps.items() if _finite(v) is not None}
        if p.limit not in rates:
            rates = {p.limit: p.goodput_mbps, **rates}
        for resource, rate in rates.items():
            headroom = rate / p.goodput_mbps - 1.0 if p.goodput_mbps > 0 else math.inf
            limit = resource == p.limit
            rows.append({
                "pair": pair, "engine": p.engine, "resource": limit_name(resource),
                "code": resource, "rate_mbps": rate, "headroom_pct": headroom * 100,
                "role": "limit" if limit else "headroom",
                "label": "limit" if limit else headroom_text(headroom),
            })
    return pd.DataFrame(rows)


#: Rows of the goodput chart under each pair: the engines, then each measured source.
MEASURED_PREFIX = "measured · "


def measured_summary(measured: pd.DataFrame) -> pd.DataFrame:
    """Per pair and source: how many measured values, their median, quartiles and the
    5th–95th percentiles (published bounds are counted but not summarised)."""
    rows = []
    if measured.empty:
        return pd.DataFrame(columns=["pair", "source", "n", "median", "q1", "q3", "p5",
                                     "p95"])
    pairs = [pair_label(s, c) for s, c in zip(measured["server"], measured["client"],
                                              strict=True)]
    exact = measured.assign(pair=pairs)
    exact = exact[exact["bound"].isna()]
    for (pair, source), part in exact.groupby(["pair", "source"], sort=False):
        values = part["goodput_mbps"].astype(float).to_numpy()
        q = np.percentile(values, [5, 25, 50, 75, 95])
        rows.append({"pair": pair, "source": source, "n": len(values), "p5": q[0],
                     "q1": q[1], "median": q[2], "q3": q[3], "p95": q[4]})
    return pd.DataFrame(rows, columns=["pair", "source", "n", "median", "q1", "q3", "p5",
                                       "p95"])


def goodput_chart(predicted: pd.DataFrame, measured: pd.DataFrame) -> Spec:
    """Per pair, one row per engine — its predictive band (wide bar), the interval of
    the fitted parameters alone (thin black bar) and the prediction (diamond) — and one
    row per measured source beside it, not under it: the spread of the matching runs
    as a box (quartiles; whiskers at the 5th and 95th percentiles; tick at the median)
    over every value as a faint strip."""
    pred = predicted.assign(row=predicted["engine"])
    for side in ("lo", "hi"):
        pred[f"goodput_{side}_mbps"] = pred[f"goodput_{side}_mbps"].fillna(pred["goodput_mbps"])
        column = f"param_{side}_mbps"
        if column not in pred.columns:
            pred[column] = pred["goodput_mbps"]
        pred[column] = pred[column].fillna(pred["goodput_mbps"])
    sources = list(dict.fromkeys(measured["source"].astype(str))) if not measured.empty else []
    rows = [*[e for e in ENGINE_COLOURS if e in set(pred["engine"])],
            *[MEASURED_PREFIX + s for s in sources]]
    colours = {**ENGINE_COLOURS, **{MEASURED_PREFIX + s: SOURCE_COLOURS.get(s, "#888888")
                                    for s in sources}}
    colour = {"field": "row", "type": "nominal", "title": None,
              "scale": {"domain": rows, "range": [colours[r] for r in rows]},
              "legend": {"orient": "bottom", "columns": 4, "labelLimit": 0}}
    x = {"field": "goodput_mbps", "type": "quantitative", "title": "goodput (Mbit/s)"}
    y = {"field": "pair", "type": "nominal", "title": None, "axis": {"labelLimit": 0}}
    y_offset = {"field": "row", "type": "nominal", "scale": {"domain": rows}}
    pred_values = records(pred, ["pair", "engine", "row", "goodput_mbps", "goodput_lo_mbps",
                                 "goodput_hi_mbps", "param_lo_mbps", "param_hi_mbps",
                                 "limit", "limit_name"])
    layers: list[Spec] = [
        {"data": {"values": pred_values},
         "mark": {"type": "rule", "strokeWidth": 9, "opacity": 0.35},
         "encoding": {"x": {"field": "goodput_lo_mbps", "type": "quantitative"},
                      "x2": {"field": "goodput_hi_mbps"}, "y": y, "yOffset": y_offset,
                      "color": colour,
                      "tooltip": _tooltip("pair", "engine", ("goodput_lo_mbps", ",.0f"),
                                          ("goodput_hi_mbps", ",.0f"))}},
        {"data": {"values": pred_values},
         "mark": {"type": "point", "shape": "diamond", "size": 160, "filled": True},
         "encoding": {"x": x, "y": y, "yOffset": y_offset, "color": colour,
                      "tooltip": _tooltip("pair", "engine", ("goodput_mbps", ",.0f"),
                                          ("goodput_lo_mbps", ",.0f"),
                                          ("goodput_hi_mbps", ",.0f"),
                                          ("param_lo_mbps", ",.0f"),
                                          ("param_hi_mbps", ",.0f"), "limit_name",
                                          "limit")}},
        {"data": {"values": pred_values},
         "mark": {"type": "rule", "strokeWidth": 2, "color": "#111111"},
         "encoding": {"x": {"field": "param_lo_mbps", "type": "quantitative"},
                      "x2": {"field": "param_hi_mbps"}, "y": y, "yOffset": y_offset}},
    ]
    if not measured.empty:
        meas = measured.assign(
            pair=[pair_label(s, c) for s, c in zip(measured["server"], measured["client"],
                                                   strict=True)],
            row=MEASURED_PREFIX + measured["source"].astype(str),
            bound=measured["bound"].fillna("value"))
        layers.append({
            "data": {"values": records(meas, ["pair", "row", "source", "id", "detail",
                                              "goodput_mbps", "bound"])},
            "mark": {"type": "point", "filled": True, "size": 30, "opacity": 0.3},
            "encoding": {"x": x, "y": y, "yOffset": y_offset, "color": colour,
                         # A legend of bound shapes only when some point is a bound.
                         "shape": {"field": "bound", "type": "nominal",
                                   "title": "published bound",
                                   "legend": {"orient": "bottom"}
                                   if (meas["bound"] != "value").any() else None},
                         "tooltip": _tooltip("source", "id", "detail",
                                             ("goodput_mbps", ",.0f"), "bound")}})
        box = measured_summary(measured)
        if not box.empty:
            box = box.assign(row=MEASURED_PREFIX + box["source"].astype(str))
            values = records(box)
            tip = _tooltip("pair", "source", ("n", "d"), ("median", ",.0f"), ("q1", ",.0f"),
                           ("q3", ",.0f"), ("p5", ",.0f"), ("p95", ",.0f"))
            layers += [
                {"data": {"values": values}, "mark": {"type": "rule", "strokeWidth": 1.5},
                 "encoding": {"x": {"field": "p5", "type": "quantitative"},
                              "x2": {"field": "p95"}, "y": y, "yOffset": y_offset,
                              "color": colour, "tooltip": tip}},
                {"data": {"values": values},
                 "mark": {"type": "rule", "strokeWidth": 12, "opacity": 0.6},
                 "encoding": {"x": {"field": "q1", "type": "quantitative"},
                              "x2": {"field": "q3"}, "y": y, "yOffset": y_offset,
                              "color": colour, "tooltip": tip}},
                {"data": {"values": values},
                 "mark": {"type": "tick", "thickness": 3, "color": "#111111"},
                 "encoding": {"x": {"field": "median", "type": "quantitative"}, "y": y,
                              "yOffset": y_offset, "tooltip": tip}},
            ]
    return {"$schema": SCHEMA, "height": {"step": 22 * max(len(rows), 1)}, "layer": layers}


def limits_chart(limits: pd.DataFrame) -> Spec:
    """Each resource's goodput bound (log scale), limit in red, headroom as labels.

    One panel per pair and engine. Bars start at the decade below the smallest
    rate, since a logarithmic axis has no zero.
    """
    floor = 10 ** math.floor(math.log10(max(float(limits["rate_mbps"].min()), 1e-3)))
    data = limits.assign(base=floor, case=limits["pair"] + " · " + limits["engine"])
    x = {"field": "rate_mbps", "type": "quantitative", "scale": {"type": "log"},
         "title": "goodput this resource alone allows (Mbit/s)"}
    y = {"field": "resource", "type": "nominal", "title": None,
         "sort": {"field": "rate_mbps"}, "axis": {"labelLimit": 0}}
    bars = {"mark": "bar", "encoding": {
        "x": x, "x2": {"field": "base"}, "y": y,
        "color": {"field": "role", "type": "nominal", "title": None,
                  "legend": {"orient": "bottom"},
                  "scale": {"domain": ["limit", "headroom"], "range": ["#e45756", "#9ecae9"]}},
        "tooltip": _tooltip("pair", "engine", "resource", "code", ("rate_mbps", ",.0f"),
                            "label")}}
    text = {"mark": {"type": "text", "align": "left", "dx": 4},
            "encoding": {"x": x, "y": y, "text": {"field": "label", "type": "nominal"}}}
    return {"$schema": SCHEMA, "data": {"values": records(data)},
            "facet": {"row": {"field": "case", "type": "nominal", "title": None,
                              "header": {"labelAngle": 0, "labelAlign": "left"}}},
            "spec": {"width": 560, "layer": [bars, text]},
            "resolve": {"scale": {"y": "independent"}}}


def cpu_chart(predicted: pd.DataFrame) -> Spec:
    """CPU utilisation (% of one core) of each side, per pair and engine."""
    long = predicted.melt(id_vars=["pair", "engine"],
                          value_vars=["server_cpu_pct", "client_cpu_pct"],
                          var_name="side", value_name="cpu_pct")
    long["side"] = long["side"].str.replace("_cpu_pct", "", regex=False)
    long["bar"] = long["side"] + " · " + long["engine"]
    return {"$schema": SCHEMA, "data": {"values": records(long.dropna())},
            "height": {"step": 18}, "mark": "bar",
            "encoding": {
                "x": {"field": "cpu_pct", "type": "quantitative",
                      "title": "CPU utilisation (% of one core)"},
                "y": {"field": "pair", "type": "nominal", "title": None},
                "yOffset": {"field": "bar", "type": "nominal"},
                "color": {"field": "side", "type": "nominal", "title": None,
                          "scale": {"domain": ["server", "client"],
                                    "range": ["#4c78a8", "#f58518"]}},
                "opacity": {"field": "engine", "type": "nominal", "title": "engine"},
                "tooltip": _tooltip("pair", "engine", "side", ("cpu_pct", ".1f"))}}


def sweep_chart(table: pd.DataFrame, measured: pd.DataFrame, axis: str,
                axis2: str | None, log_x: bool = False) -> Spec:
    """Goodput vs ``axis`` per pair (and ``axis2`` value), interval band, measured points."""
    x = {"field": axis, "type": "quantitative", "title": axis,
         "scale": {"type": "log"} if log_x else {"zero": False}}
    curves = table.assign(curve=table["pair"] if not axis2 else
                          table["pair"] + " · " + axis2 + "=" + table[axis2].astype(str))
    # Full curve names in the legend, one per line: "lsquic → quiche · loss_pct=0.1".
    colour = {"field": "curve", "type": "nominal", "title": None,
              "scale": {"scheme": "tableau10"},
              "legend": {"orient": "bottom", "columns": 2, "labelLimit": 0}}
    curves = curves.assign(limit_name=curves["limit"].map(limit_name))
    points = records(curves, ["curve", "pair", "engine", axis, *([axis2] if axis2 else []),
                              "goodput_mbps", "goodput_lo_mbps", "goodput_hi_mbps", "limit",
                              "limit_name"])
    tooltip = _tooltip("pair", "engine", (axis, ",g"), *([axis2] if axis2 else []),
                       ("goodput_mbps", ",.0f"), ("goodput_lo_mbps", ",.0f"),
                       ("goodput_hi_mbps", ",.0f"), "limit_name", "limit")
    detail = {"field": "engine", "type": "nominal"}
    layers: list[Spec] = [
        {"data": {"values": points}, "mark": {"type": "area", "opacity": 0.15},
         "encoding": {"x": x, "y": {"field": "goodput_lo_mbps", "type": "quantitative"},
                      "y2": {"field": "goodput_hi_mbps"}, "color": colour,
                      "detail": detail}},
        {"data": {"values": points}, "mark": {"type": "line", "point": True},
         "encoding": {"x": x, "y": {"field": "goodput_mbps", "type": "quantitative",
                                    "title": "goodput (Mbit/s)"},
                      "color": colour, "detail": detail,
                      "strokeDash": {"field": "engine", "type": "nominal", "title": "engine",
                                     "legend": {"orient": "bottom"}},
                      "tooltip": tooltip}},
    ]
    if not measured.empty and axis in measured.columns:
        placed = measured.dropna(subset=[axis])
        meas = placed.assign(curve=measured_curves(placed, curves, axis2))
        shape = {"field": "source", "type": "nominal", "title": "measured"}
        tooltip = _tooltip("source", "id", "detail", ("goodput_mbps", ",.0f"))
        y = {"field": "goodput_mbps", "type": "quantitative"}
        columns = ["curve", "source", "id", "detail", axis, "goodput_mbps"]
        on_curve = meas["curve"].notna()
        if on_curve.any():
            layers.append({
                "data": {"values": records(meas[on_curve], columns)},
                "mark": {"type": "point", "size": 40, "opacity": 0.5},
                "encoding": {"x": x, "y": y, "color": colour, "shape": shape,
                             "tooltip": tooltip}})
        if not on_curve.all():
            # A point that states no value of the second axis belongs to no one curve:
            # grey, and no entry of its own in the curves' legend.
            off = meas[~on_curve].assign(note=f"states no {axis2} of the curves")
            layers.append({
                "data": {"values": records(off, [*columns, "note"])},
                "mark": {"type": "point", "size": 40, "opacity": 0.5, "color": "#888888"},
                "encoding": {"x": x, "y": y, "shape": shape,
                             "tooltip": [*tooltip, *_tooltip("note")]}})
    return {"$schema": SCHEMA, "height": 420, "layer": layers}


def measured_curves(measured: pd.DataFrame, curves: pd.DataFrame,
                    axis2: str | None) -> list[str | None]:
    """The curve (of ``curves``' ``curve`` column) each measured point belongs to: its
    pair's, and with a second axis the one of the value the point states (compared as
    numbers or case-blind text); None when it states none, or one no curve has."""
    pairs = [pair_label(s, c) for s, c in zip(measured["server"], measured["client"],
                                              strict=True)]
    if not axis2:
        return list(pairs)
    if axis2 not in measured.columns:
        return [None] * len(measured)
    keys = zip(curves["pair"], curves[axis2].map(_curve_key), strict=True)
    known = dict(zip(keys, curves["curve"], strict=True))
    return [None if pd.isna(value) else known.get((pair, _curve_key(value)))
            for pair, value in zip(pairs, measured[axis2], strict=True)]


def _curve_key(value: object) -> object:
    """A second-axis value as the curves and the catalog both spell it (1500 = 1500.0,
    True = "true")."""
    if isinstance(value, bool | np.bool_):
        return str(bool(value)).lower()
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value).strip().lower()
