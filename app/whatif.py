"""The What-if page: one scenario (several pairs), every engine, every measurement.

The analytic engine answers on every change; DES and ns-3 run on a button
(:mod:`quiclab.app.jobs`). Beside the predictions: the limiting resource and
the headroom of the others, CPU utilisation per side, the request rates and
latencies of a request workload, every measured point of the catalog that
matches the conditions (:mod:`quiclab.app.measured`), and which model served
each side with the sources of its parameters. A pair the models refuse is one
error line; the other pairs are still shown.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from quiclab.app import jobs, panels
from quiclab.app.charts import (
    REQUEST_OUTPUTS,
    cpu_chart,
    goodput_chart,
    limits_chart,
    limits_table,
    pair_label,
    prediction_table,
    three_digits,
)
from quiclab.app.config import AppConfig
from quiclab.app.engines import Disagreement, disagreements
from quiclab.app.labels import cpu_pct_text, limit_help, limit_name
from quiclab.app.measured import COLUMNS, unrecorded, unrecorded_reason
from quiclab.app.resources import (
    analytic_by_pair,
    catalog_measured,
    catalog_stamp,
    load_registry,
    models_stamp,
    packet_results,
    resolved_for,
)
from quiclab.app.urlstate import Selection
from quiclab.errors import QuiclabError
from quiclab.models.costmodel import variant_cost_factor
from quiclab.models.registry import Registry
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

#: Metric label of the first pair's analytic goodput (the browser test reads it).
GOODPUT_LABEL = "Predicted goodput (analytic)"
#: The parameters of a side's role whose source is shown (with the app's and cipher's).
MAIN_PARAMS = ("ns_per_packet", "ns_per_byte", "ns_per_syscall", "ns_per_segment",
               "ns_per_ack")
#: The same for request workloads.
REQUEST_PARAMS = ("ns_per_request", "ns_per_connection")
#: Engines whose predictions depend on the scenario's seed and run.
SEEDED_ENGINES = ("des", "ns3")


@dataclass(frozen=True)
class Answer:
    """What :func:`answer` drew: the analytic predictions, and the place of the caption
    that states the response time."""

    analytic: list[Prediction]
    timing: Any


def answer(config: AppConfig, selection: Selection) -> Answer | None:
    """Draw the page's head: title, scenario, an error line per pair the models refuse,
    and the first pair's analytic goodput, limit and CPU (and request rates). None when
    no pair could be predicted.

    The app draws this before the sidebar, so that the browser shows the new answer
    before it redraws the widgets.
    """
    st.header("What-if")
    scenarios = selection.scenarios()
    stamp = models_stamp(config.models_dir)
    st.caption(scenarios[0].describe() if len(scenarios) == 1 else
               f"{len(scenarios)} pairs · " + scenarios[0].describe().split(" ", 1)[-1])
    analytic, refused = analytic_by_pair(config.models_dir, stamp, scenarios)
    for line in refused:
        st.error(line)
    if not analytic:
        return None
    _metrics(analytic[0])
    return Answer(analytic, st.empty())


@dataclass(frozen=True)
class Body:
    """Everything the page draws below its head, computed without drawing."""

    predictions: list[Prediction]
    errors: list[str]
    table: pd.DataFrame
    shown: pd.DataFrame
    measured: pd.DataFrame
    measured_note: str
    catalog_problem: str | None
    charts: tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]
    provenance: pd.DataFrame
    notes: str
    job_list: list[jobs.Job]
    results: jobs.Results
    stamp: float
    uncertainty: list[str]
    disagreements: list[Disagreement]
    breakdown: panels.Breakdown | None


def prepare(config: AppConfig, selection: Selection, head: Answer) -> Body:
    """Compute the rest of the page: packet-level results, tables, measured points, chart
    specs and provenance. No Streamlit element: the app runs it between the answer and
    the sidebar, which gives the browser the time to show the answer first."""
    analytic = head.analytic
    stamp = models_stamp(config.models_dir)
    packet_engines = [e for e in selection.engines if e != "analytic"]
    accepted = [p.scenario for p in analytic]
    job_list = [(e, s) for e in packet_engines for s in accepted]
    results = packet_results(config)
    packet, errors = jobs.finished(job_list, results)
    predictions = [*analytic, *packet]
    table = prediction_table(predictions)
    shown = table.drop(columns=["server", "client"])
    if table[list(REQUEST_OUTPUTS)].isna().all().all():
        shown = shown.drop(columns=list(REQUEST_OUTPUTS))
    registry = load_registry(config.models_dir, stamp)
    cpu = registry.cpus.find(accepted[0].cpu).name
    measured, why, problem = _measured(config, accepted, cpu)
    limits = limits_table(predictions)
    sides = dict.fromkeys((side, getattr(p.scenario, side))
                          for p in predictions for side in ("server", "client"))
    try:
        split = panels.cpu_breakdown(config, resolved_for(config.models_dir, stamp,
                                                          accepted[0]), analytic[0])
    except QuiclabError:
        split = None
    return Body(
        predictions, errors, table, shown, measured, _measured_summary(measured, why),
        problem, (goodput_chart(table, measured), cpu_chart(table),
                  None if limits.empty else limits_chart(limits)),
        model_provenance(registry, accepted[0], list(sides)),
        "\n\n".join(prediction_provenance(registry, p) for p in predictions),
        job_list, results, stamp, panels.uncertainty_lines(predictions, measured),
        disagreements(predictions), split)


def show(config: AppConfig, selection: Selection, started: float, first_run: bool = False,
         head: Answer | None = None, body: Body | None = None) -> Callable[[], None] | None:
    """Draw the page below its head (``head``: what :func:`answer` drew, ``body``: what
    :func:`prepare` computed; else both now); ``started`` is when this run began.

    Returns what writes the response-time caption, to be called when the script
    has drawn everything (None when the page shows no prediction).
    ``first_run``: the session's first run, which also loads models and catalog.
    """
    head = head or answer(config, selection)
    if head is None:
        return None
    body = body or prepare(config, selection, head)
    first = head.analytic[0]
    st.dataframe(body.shown, hide_index=True, width="stretch", column_config=_table_columns())
    for line in body.errors:
        st.error(line)
    if body.catalog_problem:
        st.info(f"No measured points: {body.catalog_problem}")
    goodput, cpu, limits = body.charts
    left, right = st.columns(2)
    with left:
        st.subheader("Goodput: predicted and measured")
        st.vega_lite_chart(spec=goodput, width="stretch")
        st.caption("Per pair, one row per engine: wide bar = predictive band, thin black "
                   "bar = the fitted parameters alone, diamond = prediction; one row per "
                   "measured source: box = quartiles, whiskers = 5th–95th percentile, "
                   "black tick = median, dots = every matching value.")
        st.caption(body.measured_note)
    with right:
        st.subheader("CPU utilisation per side")
        st.vega_lite_chart(spec=cpu, width="stretch")
    with st.expander("How sure: the band, what it covers, the measured spread",
                     expanded=True):
        st.markdown("\n".join(body.uncertainty))
    st.subheader("Engines side by side")
    panels.show_engines(body.predictions, body.disagreements)
    st.subheader("Limiting resource and headroom of the others")
    if limits is not None:
        st.vega_lite_chart(spec=limits)
    if body.breakdown is not None:
        st.subheader("CPU breakdown per side")
        panels.show_breakdown(body.breakdown)
    with st.expander(f"Measured points matching these conditions ({len(body.measured)})",
                     expanded=False):
        st.dataframe(body.measured, hide_index=True, width="stretch")
    with st.expander("Notes and provenance of the predictions"):
        st.caption("The model that served each side, and the value and source of its main "
                   "parameters (from the model's JSON):")
        st.dataframe(body.provenance, hide_index=True, width="stretch")
        st.markdown(body.notes)

    cols = st.columns(3)
    cols[0].button("Dynamics of this scenario →", key="go.dynamics", on_click=go_to,
                   args=("dynamics",), help="time series of the packet engines' runs and of "
                                            "measured runs under these conditions")
    cols[1].button("All pairs under these conditions (Matrix) →", key="go.matrix",
                   on_click=go_to, args=("matrix",))
    if body.job_list:
        _packet_section(config, body.job_list, body.results, body.stamp,
                        sum(p.engine != "analytic" for p in body.predictions))

    def finish() -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        cold = " (first run: models and catalog loaded)" if first_run else ""
        head.timing.caption(f"Analytic answer in {elapsed_ms:.0f} ms{cold}: the whole script "
                            "run on the server (sidebar, predictions, measured points, "
                            "charts), before the browser draws it · models: "
                            f"{_models_label(first)} · CPU rule: {first.cpu_rule}")

    return finish


def band_text(p: Prediction) -> str:
    """``90 % band 62.1 … 131 Mbit/s`` (the parameter interval without a learned band)."""
    if math.isnan(p.goodput_lo_mbps):
        return "no interval"
    name = (f"{p.interval_level * 100:g} % band" if math.isfinite(p.interval_level)
            else "parameter interval")
    return (f"{name} {three_digits(p.goodput_lo_mbps)} … "
            f"{three_digits(p.goodput_hi_mbps)} Mbit/s")


def _metrics(p: Prediction) -> None:
    cols = st.columns([3, 4, 2, 2])  # the limit's plain name is the longest value
    interval = band_text(p)
    label = GOODPUT_LABEL if p.engine == "analytic" else f"Predicted goodput ({p.engine})"
    # The band is not a change: no arrow beside it.
    cols[0].metric(label, f"{three_digits(p.goodput_mbps)} Mbit/s", delta=interval,
                   delta_color="off", delta_arrow="off",
                   help=f"{pair_label(p.scenario.server, p.scenario.client)}; {interval}: "
                        f"{p.interval_source}")
    cols[1].metric("Limit", limit_name(p.limit), help=limit_help(p.limit))
    cols[2].metric("Server CPU", cpu_pct_text(p.server_cpu_util),
                   help="% of one core (200 % = two cores busy)")
    cols[3].metric("Client CPU", cpu_pct_text(p.client_cpu_util),
                   help="% of one core (200 % = two cores busy)")
    if p.extrapolated:
        st.warning(f"**Outside the evidence** — {p.extrapolated}", icon="⚠️")
    if p.scenario.workload != "bulk":
        rates = st.columns(4)
        rates[0].metric("Requests/s", three_digits(p.requests_per_s))
        rates[1].metric("Completion", f"{three_digits(p.completion_s)} s")
        rates[2].metric("Latency p50", f"{three_digits(p.latency_p50_ms)} ms")
        rates[3].metric("Latency p99", f"{three_digits(p.latency_p99_ms)} ms")


def _table_columns() -> dict[str, Any]:
    number = st.column_config.NumberColumn
    return {
        "goodput_mbps": number("goodput (Mbit/s)", format="%.1f"),
        "goodput_lo_mbps": number("band low", format="%.1f"),
        "goodput_hi_mbps": number("band high", format="%.1f"),
        "param_lo_mbps": number("parameters low", format="%.1f"),
        "param_hi_mbps": number("parameters high", format="%.1f"),
        "limit_name": st.column_config.TextColumn("limited by"),
        "limit": st.column_config.TextColumn("limit (engine name)"),
        "server_cpu_pct": number("server CPU %", format="%.1f"),
        "client_cpu_pct": number("client CPU %", format="%.1f"),
        "requests_per_s": number("requests/s", format="%.0f"),
        "completion_s": number("completion (s)", format="%.4f"),
        "latency_p50_ms": number("latency p50 (ms)", format="%.4f"),
        "latency_p99_ms": number("latency p99 (ms)", format="%.4f"),
    }


def _measured(config: AppConfig, scenarios: Sequence[Scenario], cpu: str
              ) -> tuple[pd.DataFrame, str | None, str | None]:
    """The measured points of every pair, what to say when there are none, and why the
    catalog could not be read (None when it could)."""
    none = pd.DataFrame(columns=COLUMNS)
    settings = unrecorded(scenarios[0])
    if settings:
        return none, unrecorded_reason(settings), None
    stamp = catalog_stamp(config.catalog)
    parts = []
    for s in scenarios:
        try:
            parts.append(catalog_measured(config.catalog, stamp, s, cpu))
        except QuiclabError as err:
            return none, None, str(err)
    parts = [p for p in parts if not p.empty]
    if parts:
        return pd.concat(parts, ignore_index=True), None, None
    if scenarios[0].workload != "bulk":
        return none, None, None
    # The QIR-10G runs of slow pairs moved 200-512 MiB, not 8 GiB: say so.
    sizes = sorted({int(size) for s in scenarios
                    for size in catalog_measured(config.catalog, stamp, s, cpu,
                                                 ("transfer_bytes",))["transfer_bytes"]
                    if pd.notna(size)})
    if not sizes:
        return none, None, None
    return none, ("the catalog has points under these conditions at another transfer size: "
                  + ", ".join(f"{size:,} bytes" for size in sizes)), None


def _measured_summary(measured: pd.DataFrame, why: str | None = None) -> str:
    if measured.empty:
        return "No measured point in the catalog matches these conditions" + (
            f": {why}." if why else ".")
    parts = [f"{source}: {len(rows)} (median {rows['goodput_mbps'].median():,.0f} Mbit/s)"
             for source, rows in measured.groupby("source")]
    return ("Measured points matching the conditions (a condition a source leaves "
            "unstated does not exclude it) — " + "; ".join(parts))


def model_provenance(registry: Registry, scenario: Scenario,
                     sides: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """One row per side and main parameter: which model (``name@variant``) served the
    side (``server``: its sender costs, ``client``: its receiver costs), its version,
    the parameter's value and its source in the model's JSON, for the scenario's app,
    cipher and workload. A variant adds a row for its cost factor."""
    rows: list[dict[str, Any]] = []
    for side, name in sides:
        role = "sender" if side == "server" else "receiver"
        base, _, variant = name.partition("@")
        try:
            model = registry.model(name, side)
        except QuiclabError as err:
            rows.append({"side": side, "model": name, "parameter": "—", "source": str(err)})
            continue
        head = {"side": side, "model": name,
                "version": registry.versions().get(base, model.version)}
        if variant:
            spec = registry.models[base].variants.get(variant, {})
            rows.append({**head, "parameter": f"variant {variant}: cost_factor",
                         "value": variant_cost_factor(spec), "unit": "×",
                         "source": f"{spec.get('description', '')} — "
                                   f"{spec.get('cost_factor_source') or spec.get('source')}"})
        params = dict(model.role(role).items())
        names = [*MAIN_PARAMS, f"app_ns_per_byte.{scenario.app}",
                 *(REQUEST_PARAMS if scenario.workload != "bulk" else ())]
        chosen = [(f"{role}.{key}", params[key]) for key in names if key in params]
        crypto = model.crypto.get(scenario.cipher)
        if crypto is not None:
            chosen.append((f"crypto.{scenario.cipher}.ns_per_packet", crypto.ns_per_packet))
        rows += [{**head, "parameter": key, "value": p.value, "unit": p.unit,
                  "source": p.source} for key, p in chosen]
    return pd.DataFrame(rows, columns=["side", "model", "version", "parameter", "value",
                                       "unit", "source"])


def prediction_provenance(registry: Registry, p: Prediction) -> str:
    """Markdown: one prediction's engine, the versions of what it used, the seed and run
    of a packet-level engine, and its notes."""
    own = {p.scenario.server.partition("@")[0], p.scenario.client.partition("@")[0]}
    versions = ", ".join(f"{k} {v}" for k, v in p.model_versions.items()
                         if k in own or k not in registry.models) or "—"
    lines = [f"**{pair_label(p.scenario.server, p.scenario.client)} · {p.engine} "
             f"{p.engine_version}** — models {versions}"]
    if p.engine in SEEDED_ENGINES:
        lines.append(f"- seed {p.scenario.seed} · run {p.scenario.run}")
    lines += [f"- {note}" for note in p.notes]
    return "\n".join(lines)


def _packet_section(config: AppConfig, job_list: list[jobs.Job], results: jobs.Results,
                    stamp: float, shown: int) -> None:
    """The Run button, disabled with a progress bar while runs go. ``shown``: how many
    packet-level results the page above drew; a run that finished since (between
    drawing the chart and reaching here) draws the page again, so it is never left
    out until the next change."""
    st.subheader("Packet-level engines")
    todo = [j for j in job_list if not isinstance(results.get((j[0], j[1].key())),
                                                  Prediction)]
    if len(job_list) - len(todo) > shown:
        st.rerun()
    names = sorted({e for e, _ in job_list})
    if not todo:
        st.caption(f"{', '.join(names)}: all {len(job_list)} run(s) done for this scenario "
                   "(kept by scenario: a reload or a shared URL shows them again).")
        return
    running = jobs.pending(job_list, results)
    label = (f"Running {' and '.join(names)} …" if running else
             f"Run {' and '.join(names)} ({len(todo)} run(s))")
    st.button(label, key="run_packet", type="primary", disabled=bool(running),
              on_click=jobs.start,
              args=(job_list, results, config.models_dir, stamp, config.ns3_cache_dir),
              help="seconds to minutes per run; the first ns-3 run builds the simulator once")
    if running:
        jobs.wait_with_progress(running, results, "packet-level engines")
        st.rerun()


def go_to(page: str) -> None:
    """A button's ``on_click``: switch to ``page`` with the same scenario."""
    st.session_state["w.page"] = page


def _models_label(p: Prediction) -> str:
    """The models that served a prediction, by name and version (not their folder)."""
    own = [p.scenario.server.partition("@")[0], p.scenario.client.partition("@")[0]]
    return ", ".join(f"{name} {p.model_versions.get(name, '?')}" for name in dict.fromkeys(own))
