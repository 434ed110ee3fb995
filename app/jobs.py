"""Packet-level predictions (DES, ns-3) run in a worker process, kept by scenario.

A run of the DES or ns-3 takes seconds to minutes, so the pages submit them to
one background worker process and poll, drawing a progress bar. One run at a
time, since the machine's cores are shared; a process, so that the
pure-Python DES does not hold the app's GIL (:mod:`quiclab.app.worker`).

Results are kept by what decides them — engine, scenario key, the models'
stamp and the engines' code digest — in two places:

- the server's **store** (one per server process, shared by every session):
  a run's Future while it goes, then its Prediction or error line. A second
  tab, a reload or a shared URL sees a run that is going or done;
- a **disk cache** of finished Predictions (pickles under
  ``<data dir>/cache/app-results/``), so that a result survives a restart of
  the app. Only what this app's worker computed is written there, and a file
  that does not unpickle to a Prediction is ignored.

When the user changes a widget mid-run, Streamlit stops the script but not the
worker: the run finishes, its result lands in the store, and the page shows it
next time.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import pickle
import threading
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import streamlit as st

from quiclab.app import worker as engines
from quiclab.app.charts import pair_label
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

POLL_S = 0.25
#: Seconds a run of each engine is expected to take before any has finished here
#: (a DES prefix of an 8 GiB transfer on the development VM; ns-3 with its first build).
EXPECTED_S = {"des": 20.0, "ns3": 90.0}

Job = tuple[str, Scenario]
Key = tuple[str, str]
Store = MutableMapping[Key, object]


class Results:
    """The server's packet-level results: Futures, Predictions, error lines, by
    (engine, scenario key), backed by a disk cache of Predictions (see the module
    docstring). ``version`` names the models and code the results belong to."""

    def __init__(self, directory: Path, version: str):
        self.directory = directory
        self.version = version
        self.values: dict[Key, object] = {}
        #: Wall seconds of the runs finished here, by engine (the progress estimate).
        self.durations: dict[str, list[float]] = {}
        self.started: dict[Key, float] = {}
        self.lock = threading.Lock()

    def path(self, key: Key) -> Path:
        digest = hashlib.sha256(f"{key[0]}|{key[1]}|{self.version}".encode()).hexdigest()
        return self.directory / f"{key[0]}-{digest[:24]}.pickle"

    def get(self, key: Key) -> object:
        """The value for ``key``: a finished Future is replaced by its result (and a
        Prediction written to disk); a key not in memory is looked up on disk."""
        with self.lock:
            value = self.values.get(key)
            if value is None:
                value = self._load(key)
                if value is not None:
                    self.values[key] = value
            if isinstance(value, Future) and value.done():
                try:
                    value = value.result()
                except BrokenProcessPool:
                    value = f"{key[0]}: the worker process died during the run"
                self.values[key] = value
                started = self.started.pop(key, None)
                if isinstance(value, Prediction):
                    if started is not None:
                        self.durations.setdefault(key[0], []).append(time.monotonic() - started)
                    self._save(key, value)
            return value

    def put(self, key: Key, value: object) -> None:
        with self.lock:
            self.values[key] = value
            if isinstance(value, Future):
                self.started[key] = time.monotonic()

    def forget(self, key: Key) -> None:
        with self.lock:
            self.values.pop(key, None)

    def expected_s(self, engine: str) -> float:
        """How long a run of ``engine`` is expected to take: the median of the runs
        finished here, else :data:`EXPECTED_S`."""
        done = sorted(self.durations.get(engine, []))
        return done[len(done) // 2] if done else EXPECTED_S.get(engine, 30.0)

    def _load(self, key: Key) -> Prediction | None:
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            value = pickle.loads(path.read_bytes())
        except Exception:  # a damaged or foreign file: as if absent
            return None
        return value if isinstance(value, Prediction) else None

    def _save(self, key: Key, value: Prediction) -> None:
        with contextlib.suppress(OSError):
            self.directory.mkdir(parents=True, exist_ok=True)
            part = self.path(key).with_suffix(".part")
            part.write_bytes(pickle.dumps(value))
            part.replace(self.path(key))


@st.cache_resource(show_spinner=False)
def worker() -> ProcessPoolExecutor:
    """The app's one worker process for packet-level engines (started on first use)."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


@st.cache_resource(show_spinner=False, max_entries=4)
def results(directory: str, models_stamp: float, code: str) -> Results:
    """The server's results for one version of the models and engines."""
    return Results(Path(directory), f"{models_stamp!r}|{code}")


def submit(jobs: Sequence[Job], store: Results, models_dir: str, stamp: float,
           ns3_cache_dir: str) -> int:
    """Queue the jobs that have no result and are not running; returns how many.

    A worker process that died (killed, out of memory) is replaced.
    """
    queued = 0
    for engine, scenario in jobs:
        key = (engine, scenario.key())
        if isinstance(store.get(key), Prediction | Future):
            continue
        args = (models_dir, stamp, engine, ns3_cache_dir, scenario)
        try:
            future = worker().submit(engines.predict, *args)
        except BrokenProcessPool:
            worker.clear()
            future = worker().submit(engines.predict, *args)
        store.put(key, future)
        queued += 1
    return queued


def pending(jobs: Sequence[Job], store: Results) -> list[Job]:
    """The jobs still queued or running."""
    return [j for j in jobs if isinstance(store.get((j[0], j[1].key())), Future)]


def wait_with_progress(jobs: Sequence[Job], store: Results, label: str) -> None:
    """Block the script until ``jobs`` are done, drawing which run is going, for how
    long, and how far along the batch is. Within a run the bar moves with the time
    it has taken against what runs of its engine took here before (an estimate,
    and the text says so), stopping at 95 % until the run is done."""
    total = len(jobs)
    bar = st.progress(0.0, text=f"{label}: starting …")
    started = time.monotonic()
    current: Key | None = None
    current_started = started
    while True:
        waiting = pending(jobs, store)
        done = total - len(waiting)
        if not waiting:
            break
        engine, scenario = waiting[0]
        key = (engine, scenario.key())
        if key != current:
            current, current_started = key, time.monotonic()
        elapsed = time.monotonic() - current_started
        expected = store.expected_s(engine)
        within = min(elapsed / expected, 0.95) if expected > 0 else 0.0
        hint = " (a first ns-3 run builds the simulator, about a minute)" \
            if engine == "ns3" and not store.durations.get("ns3") else ""
        bar.progress(min((done + within) / total, 0.99), text=(
            f"{label}: {engine} {pair_label(scenario.server, scenario.client)} — "
            f"run {done + 1} of {total}, {elapsed:.0f} s of about {expected:.0f} s "
            f"(estimated from earlier runs){hint}"))
        time.sleep(POLL_S)
    bar.progress(1.0, text=f"{label}: {total} run(s) done in {time.monotonic() - started:.1f} s")


def finished(jobs: Sequence[Job], store: Results) -> tuple[list[Prediction], list[str]]:
    """(predictions, error lines) of the jobs that have finished."""
    predictions: list[Prediction] = []
    errors: list[str] = []
    for engine, scenario in jobs:
        value = store.get((engine, scenario.key()))
        if isinstance(value, Prediction):
            predictions.append(value)
        elif isinstance(value, str):
            errors.append(value)
    return predictions, errors


def forget_errors(jobs: Sequence[Job], store: Results) -> None:
    """Drop the error entries of ``jobs`` so that they can be tried again."""
    for engine, scenario in jobs:
        if isinstance(store.get((engine, scenario.key())), str):
            store.forget((engine, scenario.key()))


def start(jobs: Sequence[Job], store: Results, models_dir: str, stamp: float,
          ns3_cache_dir: str) -> None:
    """A button's ``on_click``: forget the jobs' old errors and queue them. Run before
    the script, so that the rerun it starts already draws the button disabled."""
    forget_errors(jobs, store)
    submit(jobs, store, models_dir, stamp, ns3_cache_dir)

