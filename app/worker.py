"""What the packet-level worker process runs: one engine prediction per call.

Imported in a separate process (``spawn``), so it imports no Streamlit and
keeps its engines in a per-process cache keyed by the model directory and its
stamp. The DES is pure Python: run in the app's own process it would hold
the GIL against every session's script thread, so the analytic answers would
slow down while it runs.
"""

from __future__ import annotations

import functools
from pathlib import Path

from quiclab.errors import QuiclabError
from quiclab.models.registry import Registry
from quiclab.sim.engine import Engine, get_engine
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario


@functools.lru_cache(maxsize=8)
def _engine(models_dir: str, stamp: float, name: str, ns3_cache_dir: str) -> Engine:
    registry = Registry.load(Path(models_dir))
    if name == "ns3":
        return get_engine(name, registry, cache_dir=ns3_cache_dir, progress=None)
    return get_engine(name, registry)


def predict(models_dir: str, stamp: float, engine: str, ns3_cache_dir: str,
            scenario: Scenario) -> Prediction | str:
    """The engine's Prediction, or the one-line reason it could not make one."""
    try:
        return _engine(models_dir, stamp, engine, ns3_cache_dir).predict(scenario)
    except (QuiclabError, ValueError, OSError) as err:
        return f"{engine}: {err}"
