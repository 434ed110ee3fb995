"""Packet-level predictions (DES, ns-3) run in a worker process, with progress.

A run of the DES or ns-3 takes seconds to minutes, so the pages submit them to
one background worker process and poll, drawing a progress bar. One run at a
time, since the machine's cores are shared; a process, so that the
pure-Python DES does not hold the app's GIL (:mod:`quiclab.app.worker`).

Each job's Future — replaced by its Prediction or error line once it is done —
goes into a per-session store keyed by ``(engine, scenario key)``. When the
user changes a widget mid-run, Streamlit stops the script but not the worker:
the run finishes, its result lands in the store, and the page shows it next
time.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import streamlit as st

from quiclab.app import worker as engines
from quiclab.app.charts import pair_label
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

#: Session-state key of the store: (engine, scenario key) → Prediction | error text | Future.
STORE_KEY = "app.packet_results"
POLL_S = 0.25

Job = tuple[str, Scenario]
Store = MutableMapping[tuple[str, str], object]


@st.cache_resource(show_spinner=False)
def worker() -> ProcessPoolExecutor:
    """The app's one worker process for packet-level engines (started on first use)."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def store() -> Store:
    """This session's finished and running packet-level predictions."""
    return st.session_state.setdefault(STORE_KEY, {})


def submit(jobs: Sequence[Job], results: Store, models_dir: str, stamp: float,
           ns3_cache_dir: str) -> int:
    """Queue the jobs that have no result and are not running; returns how many.

    A worker process that died (killed, out of memory) is replaced.
    """
    queued = 0
    for engine, scenario in jobs:
        key = (engine, scenario.key())
        current = _settle(results, key)
        if isinstance(current, Prediction | Future):
            continue
        try:
            results[key] = worker().submit(engines.predict, models_dir, stamp, engine,
                                           ns3_cache_dir, scenario)
        except BrokenProcessPool:
            worker.clear()
            results[key] = worker().submit(engines.predict, models_dir, stamp, engine,
                                           ns3_cache_dir, scenario)
        queued += 1
    return queued


def _settle(results: Store, key: tuple[str, str]) -> object:
    """The stored value, with a finished Future replaced by its result."""
    value = results.get(key)
    if isinstance(value, Future) and value.done():
        try:
            value = results[key] = value.result()
        except BrokenProcessPool:
            value = results[key] = f"{key[0]}: the worker process died during the run"
    return value


def pending(jobs: Sequence[Job], results: Store) -> list[Job]:
    """The jobs still queued or running."""
    return [j for j in jobs if isinstance(_settle(results, (j[0], j[1].key())), Future)]


def wait_with_progress(jobs: Sequence[Job], results: Store, label: str) -> None:
    """Block the script until ``jobs`` are done, drawing which run is going and how long."""
    total = len(jobs)
    bar = st.progress(0.0, text=f"{label}: starting …")
    started = time.monotonic()
    while True:
        waiting = pending(jobs, results)
        done = total - len(waiting)
        if not waiting:
            break
        engine, scenario = waiting[0]
        hint = " (a first ns-3 run builds the simulator, about a minute)" \
            if engine == "ns3" and done == 0 else ""
        bar.progress(done / total, text=(
            f"{label}: {engine} {pair_label(scenario.server, scenario.client)} — "
            f"run {done + 1} of {total}, {time.monotonic() - started:.0f} s{hint}"))
        time.sleep(POLL_S)
    bar.progress(1.0, text=f"{label}: {total} run(s) done in {time.monotonic() - started:.1f} s")


def finished(jobs: Sequence[Job], results: Store) -> tuple[list[Prediction], list[str]]:
    """(predictions, error lines) of the jobs that have finished."""
    predictions: list[Prediction] = []
    errors: list[str] = []
    for engine, scenario in jobs:
        value = _settle(results, (engine, scenario.key()))
        if isinstance(value, Prediction):
            predictions.append(value)
        elif isinstance(value, str):
            errors.append(value)
    return predictions, errors


def forget_errors(jobs: Sequence[Job], results: Store) -> None:
    """Drop the error entries of ``jobs`` so that they can be tried again."""
    for engine, scenario in jobs:
        if isinstance(results.get((engine, scenario.key())), str):
            del results[(engine, scenario.key())]
