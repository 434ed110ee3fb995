"""The Engine protocol and the registry of engines.

Every engine turns one Scenario into one Prediction, with the same inputs
(:func:`quiclab.sim.resolve.resolve`). Engines are interchangeable so that they
can be compared on the same work (docs/explanation/design.md, "Rules of the house").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from quiclab.errors import ScenarioError
from quiclab.models.registry import Registry
from quiclab.paths import tree_digest
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import DEFAULT_SNDBUF_BYTES, Scenario

ENGINES = ("analytic", "des", "ns3")
#: Engines whose Prediction depends on ``Scenario.run`` (random loss, reordering,
#: receiver stalls): one run is one sample. The analytic engine is deterministic.
STOCHASTIC_ENGINES = ("des", "ns3")


def code_digest() -> str:
    """SHA-256 (16 hex digits) of every source file of the engines (``quiclab.sim``:
    Python, ns-3 C++), read once per process."""
    return tree_digest(Path(__file__).resolve().parent, (".py", ".cc", ".h"))[:16]


def versioned(base: str) -> str:
    """An engine's version: its base version and the digest of the engines' code,
    so that a Prediction's ``engine_version`` names the code that made it."""
    return f"{base}+{code_digest()[:8]}"


def goodput_spread(goodput: Sequence[float]) -> dict[str, float]:
    """``runs`` and the mean, sample standard deviation, minimum and maximum of the
    goodput of several runs of one scenario (Mbit/s)."""
    mean = sum(goodput) / len(goodput)
    sd = math.sqrt(sum((g - mean) ** 2 for g in goodput) / max(1, len(goodput) - 1))
    return {"runs": len(goodput), "goodput_mean_mbps": mean, "goodput_sd_mbps": sd,
            "goodput_min_mbps": min(goodput), "goodput_max_mbps": max(goodput)}


def unmodelled_notes(scenario: Scenario, engine: str, reordering: bool) -> list[str]:
    """Prediction notes for the Scenario fields ``engine`` ignores, so that setting
    one is never silent: reordering (``reordering``: whether the engine simulates
    it) and the send buffer, which no engine models."""
    notes = []
    if scenario.reorder_pct > 0 and not reordering:
        elsewhere = ("the DES and ns-3 simulate it" if scenario.workload == "bulk"
                     else "no engine does for request workloads")
        notes.append(f"reorder_pct={scenario.reorder_pct:g}: reordering is not modelled by "
                     f"the {engine} engine ({elsewhere})")
    if scenario.sndbuf_bytes != DEFAULT_SNDBUF_BYTES:
        notes.append(f"sndbuf_bytes={scenario.sndbuf_bytes}: the send buffer is not modelled "
                     f"by the {engine} engine (nor by the others)")
    return notes


def prefix_transient(completed: bool, total_events: float, window_events: float,
                     min_events: int, simulated_s: float) -> str | None:
    """The ``loss-cycle-not-reached`` mechanism of a packet engine's prefix (the DES's and
    ns-3's), or None: a prefix with congestion events, but fewer than ``min_events`` in
    its measurement window, extrapolates a transient (experiments/agreement.py)."""
    if completed or total_events <= 0 or window_events >= min_events:
        return None
    return (f"loss-cycle-not-reached: the simulated prefix ({simulated_s:.3g} s) has "
            f"{window_events:.0f} congestion events in its measurement window (< "
            f"{min_events}); the extrapolated rate is not a loss-driven steady state, "
            "which the analytic engine takes as its average loss cycle")


@runtime_checkable
class Engine(Protocol):
    """``predict(scenario) -> Prediction`` plus a batch form."""

    name: str
    version: str

    def predict(self, scenario: Scenario) -> Prediction: ...

    def predict_batch(self, scenarios: Sequence[Scenario]) -> list[Prediction]: ...


def get_engine(name: str, registry: Registry, **options: Any) -> Engine:
    """Construct an engine by name. Heavy engines are imported only when asked for."""
    factories: dict[str, Callable[[], Engine]] = {}

    def analytic() -> Engine:
        from quiclab.sim.analytic import AnalyticEngine
        return AnalyticEngine(registry, **options)

    def des() -> Engine:
        from quiclab.sim.des import DesEngine
        return DesEngine(registry, **options)

    def ns3() -> Engine:
        from quiclab.sim.ns3 import Ns3Engine
        return Ns3Engine(registry, **options)

    factories.update(analytic=analytic, des=des, ns3=ns3)
    if name not in factories:
        raise ScenarioError("engine", name, " | ".join(ENGINES))
    return factories[name]()
