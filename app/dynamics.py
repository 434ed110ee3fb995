"""The Dynamics page: a run over time — simulated by DES and ns-3, and measured.

For the sidebar's scenario (its first pair, or the pair chosen here), the page
draws the time series of each packet engine's run (goodput, cwnd, bytes in
flight, smoothed RTT, CPU busy per side, receive-buffer occupancy, losses;
the runs are the What-if page's, kept by scenario, or run here on a button)
and overlays a measured run of the catalog that matches the conditions: its
per-second CPU samples, and its qlog metrics where the catalog holds qlog
(the ``qlog_events`` table; a catalog without it is said so, not an error).
The table downloads as CSV, each simulated run as qlog.
"""

from __future__ import annotations

import math

import duckdb
import pandas as pd
import streamlit as st

from quiclab.app import jobs, timeseries
from quiclab.app.charts import pair_label, three_digits
from quiclab.app.config import AppConfig
from quiclab.app.labels import cpu_pct_text, limit_help, limit_name
from quiclab.app.resources import (
    catalog_measured,
    catalog_query,
    catalog_stamp,
    catalog_table_names,
    load_registry,
    models_stamp,
    packet_results,
)
from quiclab.app.urlstate import Selection
from quiclab.errors import QuiclabError
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

PACKET_ENGINES = ("des", "ns3")
#: The measured run last chosen (its id), by scenario key.
RUN_KEY = "w.dyn.run"


def engines_ui(selection: Selection) -> list[str]:
    """The packet engines to show: the sidebar's, else the DES."""
    chosen = [e for e in selection.engines if e in PACKET_ENGINES]
    return chosen or ["des"]


def pair_ui(selection: Selection) -> Scenario:
    """Which of the selection's pairs (the first, unless chosen here)."""
    scenarios = selection.scenarios()
    if len(scenarios) == 1:
        return scenarios[0]
    labels = [pair_label(s.server, s.client) for s in scenarios]
    chosen = st.selectbox("Pair", labels, key="w.dyn.pair")
    return scenarios[labels.index(chosen)]


def run_ui(runs: pd.DataFrame) -> str | None:
    """Which measured run to overlay (fresh runs first), None for none."""
    if runs.empty:
        return None
    options = ["(none)", *runs["run_id"]]
    labels = dict(zip(runs["run_id"], runs["label"], strict=True))
    if st.session_state.get(RUN_KEY) not in options:
        st.session_state[RUN_KEY] = options[1]
    chosen = st.selectbox("Measured run to overlay", options, key=RUN_KEY,
                          format_func=lambda r: labels.get(r, r))
    return None if chosen == "(none)" else str(chosen)


def show(config: AppConfig, selection: Selection) -> dict[str, str]:
    st.header("Dynamics")
    scenario = pair_ui(selection)
    st.caption(scenario.describe())
    stamp = models_stamp(config.models_dir)
    results = packet_results(config)
    engines = engines_ui(selection)
    job_list = [(e, scenario) for e in engines]
    done, errors = jobs.finished(job_list, results)
    for line in errors:
        st.error(line)
    _run_button(config, job_list, results, stamp, len(done))
    parts = [timeseries.simulated(p) for p in done]
    cols = st.columns(max(len(done), 1) + 1)
    for col, p in zip(cols, done, strict=False):
        _summary(col, p)

    runs, problem = _runs(config, scenario)
    if problem:
        st.info(f"No measured run to overlay: {problem}")
    run_id = run_ui(runs)
    qlog_note = ""
    if run_id is not None:
        samples, events, qlog_note = _measured(config, run_id)
        parts += [timeseries.measured_cpu(samples, run_id),
                  timeseries.measured_qlog(events, run_id)]
        _run_summary(cols[-1], runs[runs["run_id"] == run_id].iloc[0], samples)
    frame = pd.concat([p for p in parts if not p.empty] or [pd.DataFrame(
        columns=timeseries.COLUMNS)], ignore_index=True)
    if frame.empty:
        st.info("Nothing to draw yet: run a packet engine (above), or choose conditions "
                "that a measured run with CPU samples matches.")
        return {}
    st.vega_lite_chart(spec=timeseries.chart(timeseries.thin(frame)), width="content")
    st.caption("Simulated series: the part of the transfer the engine simulated (it "
               "extrapolates the rest), one sample per interval of simulated time. Measured: "
               "per-second CPU of each side's process (pidstat or the testbed's collector), "
               "qlog metrics where recorded; all from the start of the connection. "
               + qlog_note)
    _downloads(frame, done, scenario)
    return {}


def _run_button(config: AppConfig, job_list: list[jobs.Job], results: jobs.Results,
                stamp: float, shown: int) -> None:
    todo = [j for j in job_list if not isinstance(results.get((j[0], j[1].key())),
                                                  Prediction)]
    if len(job_list) - len(todo) > shown:
        st.rerun()  # a run finished after ``shown`` were counted: draw it now
    if not todo:
        return
    running = jobs.pending(job_list, results)
    names = " and ".join(sorted({e for e, _ in todo}))
    st.button(f"Running {names} …" if running else f"Run {names} for its time series",
              key="run_dynamics", type="primary", disabled=bool(running),
              on_click=jobs.start,
              args=(job_list, results, config.models_dir, stamp, config.ns3_cache_dir))
    if running:
        jobs.wait_with_progress(running, results, "packet-level engines")
        st.rerun()


def _summary(col: st.delta_generator.DeltaGenerator, p: Prediction) -> None:
    samples = len((p.timeseries or {}).get("t_s", []))
    col.metric(f"Predicted goodput ({p.engine})", f"{three_digits(p.goodput_mbps)} Mbit/s",
               delta=f"{samples} samples" if samples else "no time series recorded",
               delta_color="off", delta_arrow="off",
               help=f"{p.engine_version}; limited by {limit_name(p.limit)} — "
                    f"{limit_help(p.limit)}")


def _run_summary(col: st.delta_generator.DeltaGenerator, run: pd.Series,
                 samples: pd.DataFrame) -> None:
    server = samples[samples["side"] == "server"]["total_pct"]
    window = samples[(samples["side"] == "server") & samples["in_window"].fillna(False)]
    mean = window["total_pct"].mean() if not window.empty else server.mean()
    col.metric(f"Measured server CPU ({run['run_id']})",
               cpu_pct_text(mean / 100) if math.isfinite(mean) else "—",
               delta=f"{three_digits(run['goodput_mbps'])} Mbit/s", delta_color="off",
               delta_arrow="off",
               help="mean of the per-second samples in the run's steady window "
                    "(cpu_samples.in_window), as runs.server_cpu_pct")


def _runs(config: AppConfig, scenario: Scenario) -> tuple[pd.DataFrame, str | None]:
    """Matching measured runs that have CPU samples: run_id, goodput, a label."""
    stamp = catalog_stamp(config.catalog)
    try:
        registry = load_registry(config.models_dir, models_stamp(config.models_dir))
        cpu = registry.cpus.find(scenario.cpu).name
        found = catalog_measured(config.catalog, stamp, scenario, cpu)
        ids = found[found["source"] != "published"]["id"].tolist()
        if not ids:
            return pd.DataFrame(columns=["run_id", "goodput_mbps", "label"]), \
                "no run of the catalog matches these conditions"
        placeholders = ", ".join("?" for _ in ids)
        with_samples = catalog_query(
            config.catalog, stamp,
            f"SELECT r.run_id, r.source, r.goodput_mbps, r.experiment, r.setting, "
            f"r.repetition, count(c.t_s) AS samples FROM runs r JOIN cpu_samples c "
            f"USING (run_id) WHERE r.run_id IN ({placeholders}) "
            f"GROUP BY r.run_id, r.source, r.goodput_mbps, r.experiment, r.setting, "
            f"r.repetition ORDER BY r.source = 'fresh' DESC, r.run_id", tuple(ids))
    except (QuiclabError, duckdb.Error) as err:
        return pd.DataFrame(columns=["run_id", "goodput_mbps", "label"]), str(err)
    if with_samples.empty:
        return with_samples.assign(label=""), (f"none of the {len(ids)} matching runs has "
                                               "per-second CPU samples")
    label = (with_samples["source"] + " " + with_samples["experiment"] + " "
             + with_samples["setting"].fillna("") + " #"
             + with_samples["repetition"].astype(str) + " — "
             + with_samples["goodput_mbps"].map(three_digits) + " Mbit/s, "
             + with_samples["samples"].astype(str) + " CPU samples")
    return with_samples.assign(label=label), None


def _measured(config: AppConfig, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """A run's CPU samples, its qlog events (empty where there are none) and a note."""
    stamp = catalog_stamp(config.catalog)
    samples = catalog_query(config.catalog, stamp,
                            "SELECT side, t_s, total_pct, in_window FROM cpu_samples "
                            "WHERE run_id = ? ORDER BY side, t_s", (run_id,))
    tables = catalog_table_names(config.catalog, stamp)
    if not {"qlog_events", "qlog_traces"} <= tables:
        return samples, pd.DataFrame(), ("This catalog holds no qlog events (no "
                                         "qlog_events table): a testbed run with qlog=true "
                                         "writes qlog files into its log folder, which "
                                         "`quiclab data ingest` does not read yet.")
    try:
        events = catalog_query(
            config.catalog, stamp,
            "SELECT t.side, e.t_ms, e.event, e.cwnd_bytes, e.bytes_in_flight, "
            "e.smoothed_rtt_ms FROM qlog_events e JOIN qlog_traces t USING (trace_id) "
            "WHERE t.run_id = ? ORDER BY t.side, e.t_ms", (run_id,))
    except duckdb.Error as err:
        return samples, pd.DataFrame(), f"qlog unreadable: {str(err).splitlines()[0]}"
    note = "" if not events.empty else "No qlog was recorded for this run."
    return samples, events, note


def _downloads(frame: pd.DataFrame, done: list[Prediction], scenario: Scenario) -> None:
    name = f"dynamics-{scenario.server}-{scenario.client}-{scenario.key()}"
    cols = st.columns(1 + len(done))
    cols[0].download_button("Download the series (CSV)", frame.to_csv(index=False).encode(),
                            file_name=f"{name}.csv", mime="text/csv", key="dl.dyn.csv",
                            on_click="ignore")
    for col, p in zip(cols[1:], done, strict=True):
        col.download_button(f"Download the {p.engine} run as qlog",
                            timeseries.to_qlog(p).encode(),
                            file_name=f"{name}-{p.engine}.sqlog", mime="application/json-seq",
                            key=f"dl.dyn.qlog.{p.engine}", on_click="ignore")
