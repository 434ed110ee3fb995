"""The What-if page: one scenario (several pairs), every engine, every measurement.

The analytic engine answers on every change; DES and ns-3 run on a button
(:mod:`quiclab.app.jobs`). Beside the predictions: the limiting resource and
the headroom of the others, CPU utilisation per side, and every measured
point of the catalog that matches the conditions (:mod:`quiclab.app.measured`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from quiclab.app import jobs
from quiclab.app.charts import (
    cpu_chart,
    goodput_chart,
    limits_chart,
    limits_table,
    pair_label,
    prediction_table,
)
from quiclab.app.config import AppConfig
from quiclab.app.measured import COLUMNS
from quiclab.app.resources import (
    analytic_predictions,
    catalog_measured,
    catalog_stamp,
    load_registry,
    models_stamp,
)
from quiclab.app.urlstate import Selection
from quiclab.errors import QuiclabError
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

#: Metric label of the first pair's analytic goodput (the browser test reads it).
GOODPUT_LABEL = "Predicted goodput (analytic)"


def show(config: AppConfig, selection: Selection, started: float, first_run: bool = False
         ) -> None:
    """Draw the page; ``started`` is when this run began (for the response time).

    ``first_run``: the session's first run, which also loads models and catalog.
    """
    st.header("What-if")
    scenarios = selection.scenarios()
    stamp = models_stamp(config.models_dir)
    st.caption(scenarios[0].describe() if len(scenarios) == 1 else
               f"{len(scenarios)} pairs · " + scenarios[0].describe().split(" ", 1)[-1])
    try:
        analytic = analytic_predictions(config.models_dir, stamp, tuple(scenarios))
    except QuiclabError as err:
        st.error(str(err))
        return
    first = analytic[0]
    _metrics(first)
    timing = st.empty()

    packet_engines = [e for e in selection.engines if e != "analytic"]
    job_list = [(e, s) for e in packet_engines for s in scenarios]
    results = jobs.store()
    packet, errors = jobs.finished(job_list, results)
    predictions = [*analytic, *packet]
    table = prediction_table(predictions)
    st.dataframe(table.drop(columns=["server", "client"]), hide_index=True,
                 width="stretch", column_config=_table_columns())
    elapsed_ms = (time.perf_counter() - started) * 1000
    cold = " (first run: models and catalog loaded)" if first_run else ""
    timing.caption(f"Analytic answer in {elapsed_ms:.0f} ms{cold} · models: "
                   f"{config.models_dir} · CPU rule: {first.cpu_rule}")
    for line in errors:
        st.error(line)

    registry = load_registry(config.models_dir, stamp)
    cpu = registry.cpus.find(scenarios[0].cpu).name
    measured = _measured(config, scenarios, cpu)
    left, right = st.columns(2)
    with left:
        st.subheader("Goodput: predicted and measured")
        st.vega_lite_chart(spec=goodput_chart(table, measured), width="stretch")
        st.caption(_measured_summary(measured))
    with right:
        st.subheader("CPU utilisation per side")
        st.vega_lite_chart(spec=cpu_chart(table), width="stretch")
    st.subheader("Limiting resource and headroom of the others")
    limits = limits_table(predictions)
    if not limits.empty:
        st.vega_lite_chart(spec=limits_chart(limits))
    with st.expander(f"Measured points matching these conditions ({len(measured)})",
                     expanded=False):
        st.dataframe(measured, hide_index=True, width="stretch")
    with st.expander("Notes and provenance of the predictions"):
        for p in predictions:
            st.markdown(f"**{pair_label(p.scenario.server, p.scenario.client)} · {p.engine} "
                        f"{p.engine_version}** — models {_versions(p)}")
            for note in p.notes:
                st.markdown(f"- {note}")

    if packet_engines:
        _packet_section(config, job_list, results, stamp)


def _metrics(p: Prediction) -> None:
    cols = st.columns(4)
    interval = ("no interval" if math.isnan(p.goodput_lo_mbps) else
                f"interval {p.goodput_lo_mbps:,.0f} … {p.goodput_hi_mbps:,.0f} Mbit/s")
    label = GOODPUT_LABEL if p.engine == "analytic" else f"Predicted goodput ({p.engine})"
    cols[0].metric(label, f"{p.goodput_mbps:,.0f} Mbit/s",
                   help=f"{pair_label(p.scenario.server, p.scenario.client)}; {interval}")
    cols[1].metric("Limit", p.limit)
    cols[2].metric("Server CPU", f"{p.server_cpu_util * 100:.1f} %")
    cols[3].metric("Client CPU", f"{p.client_cpu_util * 100:.1f} %")


def _table_columns() -> dict[str, Any]:
    number = st.column_config.NumberColumn
    return {
        "goodput_mbps": number("goodput (Mbit/s)", format="%.1f"),
        "goodput_lo_mbps": number("low", format="%.1f"),
        "goodput_hi_mbps": number("high", format="%.1f"),
        "server_cpu_pct": number("server CPU %", format="%.1f"),
        "client_cpu_pct": number("client CPU %", format="%.1f"),
    }


def _measured(config: AppConfig, scenarios: Sequence[Scenario], cpu: str) -> pd.DataFrame:
    stamp = catalog_stamp(config.catalog)
    parts = []
    for s in scenarios:
        try:
            parts.append(catalog_measured(config.catalog, stamp, s, cpu))
        except QuiclabError as err:
            st.info(f"No measured points: {err}")
            break
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def _measured_summary(measured: pd.DataFrame) -> str:
    if measured.empty:
        return "No measured point in the catalog matches these conditions."
    parts = [f"{source}: {len(rows)} (median {rows['goodput_mbps'].median():,.0f} Mbit/s)"
             for source, rows in measured.groupby("source")]
    return ("Measured points matching the conditions (a condition a source leaves "
            "unstated does not exclude it) — " + "; ".join(parts))


def _versions(p: Prediction) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.model_versions.items()) or "—"


def _packet_section(config: AppConfig, job_list: list[jobs.Job], results: jobs.Store,
                    stamp: float) -> None:
    st.subheader("Packet-level engines")
    todo = [j for j in job_list if not isinstance(results.get((j[0], j[1].key())),
                                                  Prediction)]
    names = sorted({e for e, _ in job_list})

    if not todo:
        st.caption(f"{', '.join(names)}: all {len(job_list)} run(s) done for this scenario.")
        return
    if st.button(f"Run {' and '.join(names)} ({len(todo)} run(s))", key="run_packet",
                 type="primary", help="seconds to minutes per run; the first ns-3 run "
                                      "builds the simulator once"):
        jobs.forget_errors(job_list, results)
        jobs.submit(job_list, results, config.models_dir, stamp, config.ns3_cache_dir)
    running = jobs.pending(job_list, results)
    if running:
        jobs.wait_with_progress(running, results, "packet-level engines")
        st.rerun()
