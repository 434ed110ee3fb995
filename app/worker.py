"""What the packet-level worker process runs: one engine prediction per call.

Imported in a separate process (``spawn``), so it imports no Streamlit and
keeps its engines in a per-process cache keyed by the model directory and its
stamp. The DES is pure Python: run in the app's own process it would hold
the GIL against every session's script thread, so the analytic answers would
slow down while it runs.

Every DES run records its time series (the Dynamics page draws them): the DES
samples its counters every :func:`sample_interval_s`, chosen so that the
simulated part of the transfer gives about :data:`SAMPLES` points. Sampling
reads the simulation's state and changes none of it, so the Prediction is the
one ``quiclab predict --engine des`` prints. The ns-3 engine records none yet,
and the page says so.

The worker ends itself when the app's server process is gone (its parent
changes), so that a killed server leaves no simulation running.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from pathlib import Path

from quiclab.errors import QuiclabError
from quiclab.models.registry import Registry
from quiclab.sim.engine import Engine, get_engine
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

#: About this many samples per run's time series.
SAMPLES = 400
#: The shortest and longest sampling interval, s of simulated time.
MIN_INTERVAL_S = 1e-4
MAX_INTERVAL_S = 0.05


@functools.lru_cache(maxsize=16)
def _engine(models_dir: str, stamp: float, name: str, ns3_cache_dir: str,
            interval_s: float) -> Engine:
    registry = Registry.load(Path(models_dir))
    if name == "ns3":
        return get_engine(name, registry, cache_dir=ns3_cache_dir, progress=None)
    if name == "des":
        return get_engine(name, registry, timeseries=True, timeseries_interval_s=interval_s)
    return get_engine(name, registry)


def sample_interval_s(models_dir: str, stamp: float, scenario: Scenario) -> float:
    """A sampling interval that gives about :data:`SAMPLES` points: the analytic
    engine's duration of the part a packet engine simulates (at most ~1 s of a
    10 Gbit/s transfer), rounded to a power of two of 100 µs."""
    analytic = _engine(models_dir, stamp, "analytic", "", 0.0).predict(scenario)
    simulated_bytes = min(scenario.transfer_bytes, 2**30)
    seconds = simulated_bytes * 8 / max(analytic.goodput_mbps * 1e6, 1.0)
    interval = MIN_INTERVAL_S
    while interval * SAMPLES < seconds and interval < MAX_INTERVAL_S:
        interval *= 2
    return min(interval, MAX_INTERVAL_S)


def predict(models_dir: str, stamp: float, engine: str, ns3_cache_dir: str,
            scenario: Scenario) -> Prediction | str:
    """The engine's Prediction with its time series, or the one-line reason it could
    not make one."""
    _watch_parent()
    try:
        interval = sample_interval_s(models_dir, stamp, scenario)
        return _engine(models_dir, stamp, engine, ns3_cache_dir, interval).predict(scenario)
    except (QuiclabError, ValueError, OSError) as err:
        return f"{engine}: {err}"


@functools.cache
def _watch_parent() -> None:
    """Exit this process when its parent (the app's server) has gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="quiclab-parent-watch", daemon=True).start()
