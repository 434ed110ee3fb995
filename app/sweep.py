"""The Sweep page: goodput along one or two axes, per implementation pair.

The base scenario and the pairs come from the sidebar; this page picks the
axis (a numeric Scenario field and its range, linear or logarithmic), an
optional second axis (a list of values of any field, one curve each) and the
engine. The analytic engine evaluates the whole grid in one vectorised call
(at most :data:`MAX_SWEEP_POINTS` predictions; a pair the models refuse is one
error line, the others are drawn), and its table is cached by the sidebar's
selection and the sweep's parameters. DES and ns-3 run on a button. Measured
points of the catalog that match the base conditions on every other field are
drawn on the curves; the table (with the engine's and the models' versions)
downloads as CSV or Parquet, made only when a download is clicked.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from quiclab.app import jobs
from quiclab.app.charts import model_label, pair_label, sweep_chart, three_digits
from quiclab.app.config import AppConfig
from quiclab.app.labels import limit_name
from quiclab.app.measured import COLUMNS, UNRECORDED, unrecorded, unrecorded_reason
from quiclab.app.resources import (
    analytic_by_pair,
    catalog_measured,
    catalog_stamp,
    load_engine,
    load_registry,
    models_stamp,
    packet_results,
    predict_by_pair,
)
from quiclab.app.urlstate import Selection, encode
from quiclab.errors import QuiclabError, ScenarioError
from quiclab.sim.engine import ENGINES
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import IP_UDP_HEADER_BYTES
from quiclab.sim.scenario import CCS, Scenario, coerce, field_names

#: Sweepable numeric fields: (default low, default high, logarithmic by default);
#: :func:`axis_defaults` fits them to the sidebar's scenario.
AXES: dict[str, tuple[float, float, bool]] = {
    "rtt_ms": (0.0, 100.0, False),
    "mtu_bytes": (1280, 9000, False),
    "rcvbuf_bytes": (106496, 6815744, True),
    "sndbuf_bytes": (106496, 6815744, True),
    "loss_pct": (0.001, 5.0, True),
    "link_gbps": (0.1, 100.0, True),
    "streams": (1, 64, True),
    "udp_payload_bytes": (1200, 8972, False),
    "cpu_ghz": (1.0, 5.0, False),
    "reorder_pct": (0.0, 5.0, False),
    "queue_bdp": (0.1, 10.0, True),
    "transfer_bytes": (10**6, 2**33, True),
}
#: Fields a second axis may take (values typed as a comma-separated list).
SECOND_AXES = ("none", "gso", "gro", "cipher", "app", "cc", "cpu", "mtu_bytes", "rtt_ms",
               "loss_pct", "rcvbuf_bytes", "link_gbps", "streams", "pin", "pipeline",
               "server_core", "client_core")
MAX_POINTS = 200
#: At most this many predictions in one sweep (pairs × second-axis values × points).
MAX_SWEEP_POINTS = 2400
#: Packet-level engines are offered for at most this many runs per click.
MAX_PACKET_RUNS = 60


@dataclass(frozen=True)
class SweepParams:
    axis: str
    lo: float
    hi: float
    points: int
    log: bool
    axis2: str | None
    values2: tuple[object, ...]
    engines: tuple[str, ...]


#: Session-state key of the last sweep drawn (its URL parameters).
LAST_KEY = "app.sweep"


def _keys(axis: str, axis2: str) -> dict[str, str]:
    """Widget keys; the range, spacing and values are kept per axis."""
    return {"axis": "w.sweep.axis", "lo": f"w.sweep.lo.{axis}", "hi": f"w.sweep.hi.{axis}",
            "points": "w.sweep.points", "log": f"w.sweep.log.{axis}",
            "axis2": "w.sweep.axis2", "values": f"w.sweep.values.{axis2}",
            "engines": "w.sweep.engines"}


def seed_from_url(params: dict[str, str]) -> list[str]:
    """Put a shared sweep's parameters into the widgets' state; returns the problems.

    Called once per session, before the widgets exist.
    """
    problems: list[str] = []
    axis = params.get("sweep_axis", "rtt_ms")
    if axis not in AXES:
        problems.append(f"URL: sweep_axis={axis!r} is impossible: allowed {' | '.join(AXES)}")
        axis = "rtt_ms"
    axis2 = params.get("sweep_axis2", "none")
    if axis2 not in SECOND_AXES:
        problems.append(f"URL: sweep_axis2={axis2!r} is impossible: allowed "
                        + " | ".join(SECOND_AXES))
        axis2 = "none"
    keys = _keys(axis, axis2)
    state: dict[str, object] = {keys["axis"]: axis, keys["axis2"]: axis2}
    for name, key in (("sweep_from", "lo"), ("sweep_to", "hi"), ("sweep_points", "points")):
        if name not in params:
            continue
        try:
            number = float(params[name])
        except ValueError:
            problems.append(f"URL: {name}={params[name]!r} is impossible: a number")
            continue
        state[keys[key]] = min(max(round(number), 2), MAX_POINTS) if key == "points" \
            else number
    if "sweep_log" in params:
        state[keys["log"]] = params["sweep_log"].lower() in ("1", "true", "yes", "on")
    if "sweep_values" in params and axis2 != "none":
        state[keys["values"]] = params["sweep_values"]
    # sweep_engine (one) is what shared sweeps said before engines could be compared.
    name = "sweep_engines" if "sweep_engines" in params else "sweep_engine"
    chosen = [e.strip() for e in params.get(name, "analytic").split(",") if e.strip()]
    for bad in [e for e in chosen if e not in ENGINES]:
        problems.append(f"URL: {name}={bad!r} is impossible: allowed " + " | ".join(ENGINES))
    state[keys["engines"]] = [e for e in ENGINES if e in chosen] or ["analytic"]
    for key, value in state.items():
        st.session_state[key] = value
    return problems


def url_params(params: SweepParams) -> dict[str, str]:
    """The sweep's part of the URL."""
    out = {"sweep_axis": params.axis, "sweep_from": f"{params.lo:g}",
           "sweep_to": f"{params.hi:g}", "sweep_points": str(params.points),
           "sweep_log": "true" if params.log else "false",
           "sweep_engines": ",".join(params.engines)}
    if params.axis2:
        out["sweep_axis2"] = params.axis2
        out["sweep_values"] = ",".join(str(v).lower() if isinstance(v, bool) else str(v)
                                       for v in params.values2)
    return out


def axis_defaults(axis: str, base: Scenario) -> tuple[float, float, bool]:
    """An axis's default range for the sidebar's ``base`` scenario: the UDP payload ends
    at the largest one its MTU carries (``mtu_bytes`` − 28)."""
    lo, hi, log = AXES[axis]
    if axis == "udp_payload_bytes":
        hi = min(hi, base.mtu_bytes - IP_UDP_HEADER_BYTES)
    return lo, hi, log


def allowed_ccs(config: AppConfig, selection: Selection) -> tuple[str, ...]:
    """The congestion controllers every chosen server runs (the engines check the
    server's model); every one when the models cannot be read (the page says why)."""
    try:
        registry = load_registry(config.models_dir, models_stamp(config.models_dir))
        models = [registry.model(s.server) for s in selection.scenarios()]
    except QuiclabError:
        return CCS
    return tuple(cc for cc in CCS if all(cc in m.behaviour.ccs for m in models)) or CCS


def sweep_ui(base: Scenario | None = None, ccs: tuple[str, ...] = CCS
             ) -> tuple[SweepParams | None, str | None]:
    """The sweep's own widgets (main area); returns (params, None) or (None, problem).

    ``base`` (the sidebar's scenario) and ``ccs`` (what its servers run) set the
    defaults of a newly chosen axis.
    """
    state = st.session_state
    cols = st.columns([2, 1, 1, 1, 1])
    state.setdefault("w.sweep.axis", "rtt_ms")
    axis = cols[0].selectbox("Axis", list(AXES), key="w.sweep.axis")
    state.setdefault("w.sweep.axis2", "none")
    keys = _keys(axis, state["w.sweep.axis2"])
    lo_default, hi_default, log_default = axis_defaults(axis, base or Scenario())
    for key, default in ((keys["lo"], float(lo_default)), (keys["hi"], float(hi_default)),
                         (keys["points"], 25), (keys["log"], log_default),
                         (keys["engines"], ["analytic"])):
        state.setdefault(key, default)
    lo = cols[1].number_input("from", key=keys["lo"], format="%g")
    hi = cols[2].number_input("to", key=keys["hi"], format="%g")
    points = int(cols[3].number_input("points", min_value=2, max_value=MAX_POINTS, step=1,
                                      key=keys["points"]))
    log = cols[4].checkbox("log spacing", key=keys["log"])
    cols = st.columns([2, 3, 2])
    axis2 = cols[0].selectbox("Second axis", SECOND_AXES, key=keys["axis2"])
    values_key = _keys(axis, axis2)["values"]
    state.setdefault(values_key, _default_values(axis2, ccs))
    raw2 = cols[1].text_input("its values (comma-separated)", key=values_key,
                              disabled=axis2 == "none")
    engines = cols[2].multiselect("Engines", ENGINES, key=keys["engines"],
                                  help="analytic draws at once; des and ns3 run on a button; "
                                       "several engines share one chart")
    if hi <= lo:
        return None, f"the axis range is empty: from {lo:g} to {hi:g}"
    if log and lo <= 0:
        return None, f"log spacing needs a positive start, got {lo:g}"
    values2: tuple[object, ...] = ()
    if axis2 != "none":
        try:
            values2 = tuple(coerce(axis2, v.strip(), source="second axis")
                            for v in raw2.split(",") if v.strip())
        except ScenarioError as err:
            return None, str(err)
        if not values2:
            return None, f"give at least one value of {axis2}"
        if axis2 == axis:
            return None, "the second axis must differ from the first"
    if not engines:
        return None, "choose at least one engine"
    return SweepParams(axis, float(lo), float(hi), points, bool(log),
                       None if axis2 == "none" else axis2, values2,
                       tuple(e for e in ENGINES if e in engines)), None


def _default_values(axis2: str, ccs: tuple[str, ...] = CCS) -> str:
    return {"gso": "true, false", "gro": "true, false", "pin": "false, true",
            "cipher": "aes-ni, aes-sw, chacha20", "app": "perf, hq, h3",
            "cc": ", ".join(ccs), "cpu": "AMD EPYC 7543, Intel Xeon W-2145",
            "mtu_bytes": "1500, 9000", "rtt_ms": "0, 10, 50", "loss_pct": "0, 0.1, 1",
            "rcvbuf_bytes": "212992, 6815744", "link_gbps": "10, 40",
            "streams": "1, 8", "pipeline": "none, mukherjee-simple, mukherjee-best",
            "server_core": "0, 8, 16, 24", "client_core": "0, 8, 16, 24"}.get(axis2, "")


def axis_values(params: SweepParams) -> list[float | int]:
    """The swept values: ``points`` from ``lo`` to ``hi``, whole numbers for integer fields."""
    if params.log:
        raw = np.geomspace(params.lo, params.hi, params.points)
    else:
        raw = np.linspace(params.lo, params.hi, params.points)
    if isinstance(getattr(Scenario(), params.axis), int):
        return sorted({round(float(v)) for v in raw})
    return [float(v) for v in raw]


def grid(selection: Selection, params: SweepParams) -> list[Scenario]:
    """Every scenario of the sweep: pair × second-axis value × axis value.

    Raises ScenarioError for a value the Scenario refuses (naming it).
    """
    out = []
    for base in selection.scenarios():
        for v2 in params.values2 or (None,):
            row = base if params.axis2 is None else base.with_(**{params.axis2: v2})
            for v in axis_values(params):
                out.append(row.with_(**{params.axis: v}))
    return out


def point_count(selection: Selection, params: SweepParams) -> int:
    """How many predictions the sweep asks for: pairs × second-axis values × axis values."""
    return len(selection.pairs()) * max(len(params.values2), 1) * len(axis_values(params))


def sweep_table(predictions: Sequence[Prediction]) -> pd.DataFrame:
    """A flat table for plot, view and download, built column by column: ``pair``, the
    scenario fields, the scalar outputs, the engine's and the two models' versions
    (``server_model``, ``client_model``) and each resource's rate (``rate_<name>_mbps``).
    The interval is the goodput where the engine gives none."""
    scenarios = [p.scenario for p in predictions]
    columns: dict[str, Any] = {"pair": [pair_label(s.server, s.client) for s in scenarios]}
    for name in field_names():
        columns[name] = [getattr(s, name) for s in scenarios]
    for name in _OUTPUTS:
        columns[name] = [getattr(p, name) for p in predictions]
    columns["server_model"] = [model_label(p, "server") for p in predictions]
    columns["client_model"] = [model_label(p, "client") for p in predictions]
    resources = dict.fromkeys(k for p in predictions for k in p.rates_mbps)
    for name in resources:
        columns[f"rate_{name}_mbps"] = [p.rates_mbps.get(name, math.nan) for p in predictions]
    table = pd.DataFrame(columns)
    for side in ("lo", "hi"):
        column = f"goodput_{side}_mbps"
        table[column] = table[column].astype(float).fillna(table["goodput_mbps"])
    return table


#: Scalar outputs of a Prediction in the sweep's table, in the Prediction's order.
_OUTPUTS = tuple(f.name for f in fields(Prediction)
                 if f.name not in ("scenario", "rates_mbps", "model_versions", "notes",
                                   "timeseries"))


def full_rows(predictions: Sequence[Prediction]) -> pd.DataFrame:
    """Every field of every prediction (:meth:`Prediction.to_row`: scenario key, notes
    and model versions as JSON too), for the downloads only."""
    table = pd.DataFrame([p.to_row() for p in predictions])
    table.insert(0, "pair", [pair_label(p.scenario.server, p.scenario.client)
                             for p in predictions])
    return table


@st.cache_data(show_spinner=False, max_entries=32)
def analytic_sweep(models_dir: str, stamp: float, selection: Selection, params: SweepParams
                   ) -> tuple[pd.DataFrame, list[str]]:
    """The analytic sweep's table and the error line of each pair the models refuse.

    Cached by the sidebar's selection and the sweep's parameters, so a rerun that
    changes neither (a download, another widget) builds nothing. Raises
    ScenarioError for a value the Scenario refuses.
    """
    predictions, errors = analytic_by_pair(models_dir, stamp, grid(selection, params))
    return sweep_table(predictions), errors


def _download(rows: Callable[[], pd.DataFrame], kind: str) -> Callable[[], bytes]:
    """A download's contents, made when the button is clicked (Streamlit then runs it,
    outside the script: it calls no Streamlit cache)."""
    if kind == "csv":
        return lambda: rows().to_csv(index=False).encode()
    return lambda: _parquet(rows())


def show(config: AppConfig, selection: Selection) -> dict[str, str]:
    """Draw the page; returns the sweep's URL parameters (empty if it has a problem)."""
    st.header("Sweep")
    if "w.sweep.axis" not in st.session_state and LAST_KEY in st.session_state:
        # Back from another page: Streamlit forgot the widgets, the session did not.
        seed_from_url(st.session_state[LAST_KEY])
    params, problem = sweep_ui(selection.base, allowed_ccs(config, selection))
    if params is None:
        st.error(problem)
        return {}
    st.session_state[LAST_KEY] = url_params(params)
    _draw(config, selection, params)
    return url_params(params)


def _draw(config: AppConfig, selection: Selection, params: SweepParams) -> None:
    count = point_count(selection, params)
    if count > MAX_SWEEP_POINTS:
        st.warning(f"This sweep has {count:,} points ({len(selection.pairs())} pair(s) × "
                   f"{max(len(params.values2), 1)} second-axis value(s) × "
                   f"{len(axis_values(params))} axis values): the app draws at most "
                   f"{MAX_SWEEP_POINTS:,}. Fewer points, pairs or values, or `quiclab sweep` "
                   "from the command line.")
        return
    stamp = models_stamp(config.models_dir)
    errors: list[str] = []
    tables: list[pd.DataFrame] = []
    makers: list[Callable[[], pd.DataFrame]] = []
    try:
        scenarios = grid(selection, params)
        if "analytic" in params.engines:
            table, errors = analytic_sweep(config.models_dir, stamp, selection, params)
            engine = load_engine(config.models_dir, stamp, "analytic")
            tables.append(table)
            makers.append(lambda: full_rows(predict_by_pair(engine.predict_batch,
                                                            scenarios)[0]))
        for name in params.engines:
            if name == "analytic":
                continue
            done = _packet_predictions(config, stamp, name, scenarios)
            if done:
                tables.append(sweep_table(done))
                makers.append(functools.partial(full_rows, done))
    except ScenarioError as err:
        st.error(str(err))
        return
    for line in errors:
        st.error(line)
    tables = [t for t in tables if not t.empty]
    if not tables:
        return
    table = pd.concat(tables, ignore_index=True)

    def rows() -> pd.DataFrame:
        return pd.concat([make() for make in makers], ignore_index=True)

    measured, reason = _measured(config, selection, params)
    st.vega_lite_chart(spec=sweep_chart(table, measured, params.axis, params.axis2, params.log),
                       width="stretch")
    engines = " + ".join(sorted(set(table["engine"]), key=ENGINES.index))
    st.caption(f"{len(table)} predictions ({engines}) · {len(measured)} measured points "
               "with every other condition as in the sidebar" + (f" ({reason})" if reason
                                                                  else ""))
    if len(set(table["engine"])) > 1:
        _disagreement_note(table, params)
    table = table.assign(limit_name=table["limit"].map(limit_name),
                         server_cpu_pct=table["server_cpu_util"] * 100,
                         client_cpu_pct=table["client_cpu_util"] * 100)
    st.dataframe(table[["pair", params.axis, *([params.axis2] if params.axis2 else []),
                        "engine", "goodput_mbps", "goodput_lo_mbps", "goodput_hi_mbps",
                        "extrapolated", "limit_name", "limit", "server_cpu_pct",
                        "client_cpu_pct", "engine_version", "server_model", "client_model"]],
                 hide_index=True, width="stretch", column_config={
                     "limit_name": st.column_config.TextColumn("limited by"),
                     "limit": st.column_config.TextColumn("limit (engine name)"),
                     "server_cpu_pct": st.column_config.NumberColumn("server CPU %",
                                                                     format="%.1f"),
                     "client_cpu_pct": st.column_config.NumberColumn("client CPU %",
                                                                     format="%.1f")})
    name = f"sweep-{params.axis}" + (f"-{params.axis2}" if params.axis2 else "")
    cols = st.columns(3)
    # Built only when clicked (Streamlit runs the callable then).
    cols[0].download_button("Download CSV", _download(rows, "csv"), file_name=f"{name}.csv",
                            mime="text/csv", key="dl.csv", on_click="ignore")
    cols[1].download_button("Download Parquet", _download(rows, "parquet"),
                            file_name=f"{name}.parquet", mime="application/vnd.apache.parquet",
                            key="dl.parquet", on_click="ignore")
    if not measured.empty:
        cols[2].download_button("Download measured points (CSV)",
                                _download(lambda: measured, "csv"),
                                file_name=f"{name}-measured.csv", mime="text/csv",
                                key="dl.measured", on_click="ignore")


def sweep_disagreements(table: pd.DataFrame, params: SweepParams) -> pd.DataFrame:
    """Points of the sweep where two engines' bands do not overlap: one row per point
    and engine pair, with both goodputs and limits."""
    keys = ["pair", params.axis, *([params.axis2] if params.axis2 else [])]
    columns = [*keys, "engine", "goodput_mbps", "goodput_lo_mbps", "goodput_hi_mbps",
               "limit"]
    rows = []
    for _, point in table[columns].groupby(keys, sort=False):
        point = point.sort_values("engine", key=lambda e: e.map(ENGINES.index))
        items = list(point.itertuples(index=False))
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                a_lo = min(a.goodput_lo_mbps, a.goodput_mbps)
                a_hi = max(a.goodput_hi_mbps, a.goodput_mbps)
                b_lo = min(b.goodput_lo_mbps, b.goodput_mbps)
                b_hi = max(b.goodput_hi_mbps, b.goodput_mbps)
                if a_hi < b_lo or b_hi < a_lo:
                    rows.append({**{k: getattr(a, k) for k in keys},
                                 "engines": f"{a.engine} vs {b.engine}",
                                 "first": a.goodput_mbps, "first_limit": a.limit,
                                 "second": b.goodput_mbps, "second_limit": b.limit})
    return pd.DataFrame(rows, columns=[*keys, "engines", "first", "first_limit", "second",
                                       "second_limit"])


def _disagreement_note(table: pd.DataFrame, params: SweepParams) -> None:
    """Say where the engines' bands do not overlap along the sweep, with the limit each
    found, and link the first such scenario."""
    found = sweep_disagreements(table, params)
    if found.empty:
        st.success("The engines agree along the whole sweep: their bands overlap at "
                   "every point.")
        return
    lines = []
    for (pair, which), part in found.groupby(["pair", "engines"], sort=False):
        first, second = which.split(" vs ")
        values = part[params.axis]
        limits_a = ", ".join(f"{limit_name(x)} (`{x}`)" for x in
                             dict.fromkeys(part["first_limit"]))
        limits_b = ", ".join(f"{limit_name(x)} (`{x}`)" for x in
                             dict.fromkeys(part["second_limit"]))
        at = part.iloc[0]
        link = _point_link(table, at, params)
        lines.append(f"- **{pair}**, {which}: bands do not overlap at {len(part)} of "
                     f"{int((table['pair'] == pair).sum() / table['engine'].nunique())} "
                     f"points ({params.axis} {values.min():g} … {values.max():g}); "
                     f"{first} limited by {limits_a}, {second} by {limits_b}. "
                     f"At {params.axis}={at[params.axis]:g}: {first} "
                     f"{three_digits(at['first'])} Mbit/s, {second} "
                     f"{three_digits(at['second'])} Mbit/s"
                     + (f" — [open this scenario]({link})" if link else ""))
    st.warning("The engines disagree beyond their bands:\n" + "\n".join(lines))


def _point_link(table: pd.DataFrame, point: pd.Series, params: SweepParams) -> str:
    """A What-if URL (all engines) for one sweep point, '' if its row is not found."""
    mask = (table["pair"] == point["pair"]) & (table[params.axis] == point[params.axis])
    if params.axis2:
        mask &= table[params.axis2] == point[params.axis2]
    rows = table[mask]
    if rows.empty:
        return ""
    fields = {name: rows.iloc[0][name] for name in field_names()}
    try:
        scenario = Scenario.from_dict({k: (v.item() if hasattr(v, "item") else v)
                                       for k, v in fields.items()})
    except ScenarioError:
        return ""
    selection = Selection(scenario, (scenario.server,), (scenario.client,), ENGINES)
    return "?" + urlencode(encode(selection, "whatif"))


def _parquet(table: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    table.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _measured(config: AppConfig, selection: Selection, params: SweepParams
              ) -> tuple[pd.DataFrame, str | None]:
    """The measured points on the sweep's curves, and why there are none where the
    catalog cannot have any (None otherwise)."""
    none = pd.DataFrame(columns=COLUMNS)
    if params.axis not in COLUMNS:
        return none, f"the catalog records no {params.axis}"
    free = (params.axis, *([params.axis2] if params.axis2 else []))
    settings = unrecorded(selection.base, free)
    if settings:
        return none, unrecorded_reason(settings)
    axis2 = params.axis2 or ""
    axis2_default: Any = None
    if axis2 in UNRECORDED:
        # Measurements are taken at its default: on that curve, if it is one.
        axis2_default = getattr(Scenario(), axis2)
        if axis2_default not in params.values2:
            return none, (f"the catalog does not record {axis2}: its measurements are "
                          f"taken at the default ({axis2}={axis2_default}), which is none "
                          "of the curves")
    stamp = catalog_stamp(config.catalog)
    registry = load_registry(config.models_dir, models_stamp(config.models_dir))
    cpu = registry.cpus.find(selection.base.cpu).name
    parts = []
    for scenario in selection.scenarios():
        try:
            found = catalog_measured(config.catalog, stamp, scenario, cpu, free)
        except QuiclabError:
            break
        # A condition the row does not state is NULL (pd.NA): not on this axis.
        column = pd.to_numeric(found[params.axis], errors="coerce").astype(float)
        parts.append(found[column.notna() & (column >= params.lo) & (column <= params.hi)])
    parts = [p for p in parts if not p.empty]
    if not parts:
        return none, None
    out = pd.concat(parts, ignore_index=True)
    if axis2_default is not None:
        out = out.assign(**{axis2: axis2_default})
    elif axis2 and axis2 in out.columns:
        allowed = {str(v).lower() for v in params.values2}
        values = out[axis2].astype(str).str.lower()
        out = out[out[axis2].isna() | values.isin(allowed)]
    return out, None


def _packet_predictions(config: AppConfig, stamp: float, engine: str,
                        scenarios: list[Scenario]) -> list[Prediction]:
    """Finished packet-level runs of the grid; offers the button for the rest."""
    job_list = [(engine, s) for s in scenarios]
    results = packet_results(config)
    done, errors = jobs.finished(job_list, results)
    for line in errors[:5]:
        st.error(line)
    missing = len(job_list) - len(done)
    if missing:
        if len(job_list) > MAX_PACKET_RUNS:
            st.warning(f"{len(job_list)} runs of {engine} is too many for the app "
                       f"(at most {MAX_PACKET_RUNS}); fewer points or pairs, or "
                       "`quiclab sweep` from the command line.")
        running = jobs.pending(job_list, results)
        if not running and len(jobs.finished(job_list, results)[0]) > len(done):
            st.rerun()  # runs finished since ``done`` was read: draw them now
        if len(job_list) <= MAX_PACKET_RUNS:
            st.button(f"Running {engine} …" if running else
                      f"Run {engine} on {missing} point(s)", key=f"run_sweep.{engine}",
                      type="primary", disabled=bool(running), on_click=jobs.start,
                      args=(job_list, results, config.models_dir, stamp,
                            config.ns3_cache_dir))
        if running:
            jobs.wait_with_progress(running, results, f"{engine} sweep")
            st.rerun()
    if not done:
        st.info(f"No {engine} result yet for this sweep.")
    elif missing:
        st.caption(f"Showing {len(done)} of {len(job_list)} points.")
    return done
