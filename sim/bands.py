"""Every Prediction's predictive interval and its place in the domain of validity.

Engines compute the goodput and the interval of the fitted parameters alone;
this module turns that into what the user sees (DESIGN.md, "A Prediction"):

- ``goodput_lo_mbps``/``goodput_hi_mbps``: the predictive band at the registry's
  ``interval_level``, learned from held-out residuals
  (:class:`~quiclab.models.intervals.IntervalModel`, ``intervals.json``);
- ``param_lo_mbps``/``param_hi_mbps``: the parameter interval the engine gave;
- ``extrapolated``: the fields on which the Scenario lies outside the evidence
  of its models and pair, and how far (:class:`~quiclab.models.domain.Domain`,
  ``domain.json``), which also widens the band as far as the extrapolation
  folds' residuals showed;
- ``interval_source``: which residuals set the band and what widened it.

:func:`band_columns` does it for a whole batch with numpy (the analytic
engine's path); :func:`with_band` for one Prediction (the packet engines).
Without ``intervals.json`` beside the models the band is the parameter
interval, and ``interval_source`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from quiclab.models.intervals import (
    FEATURES,
    MAX_DISTANCE,
    REGIME_NAMES,
    REGIMES,
    bin_label,
)
from quiclab.sim.prediction import Prediction

#: interval_source when the models carry no interval model.
NO_INTERVALS = ("parameter interval only: no intervals.json beside these models "
                "(run `quiclab calibrate --cv all`)")
NO_DOMAIN = "whether the scenario lies inside the evidence is unknown (no domain.json)"


@dataclass(frozen=True)
class BandColumns:
    """Per prediction of a batch: the band, its level, the extrapolated line, the source."""

    lo_mbps: np.ndarray
    hi_mbps: np.ndarray
    level: float
    extrapolated: list[str]
    source: list[str]


def architectures(registry: Any, scenarios: Sequence[Any]) -> list[str]:
    """The CPU microarchitecture of each Scenario (``unknown`` when the name is not in
    the catalog; resolve() refuses such a scenario anyway)."""
    from quiclab.models.domain import microarchitecture

    cache: dict[str, str] = registry.__dict__.setdefault("_arch_cache", {})
    out = []
    for s in scenarios:
        arch = cache.get(s.cpu)
        if arch is None:
            arch = cache[s.cpu] = microarchitecture(s.cpu, registry.cpus)
        out.append(arch)
    return out


def cpu_scaled(registry: Any, scenarios: Sequence[Any]) -> np.ndarray:
    """Whether each Scenario's CPU differs from its models' reference CPU (the CPU rule
    moves the costs: another testbed's hosts)."""
    cache: dict[tuple[str, str, str], bool] = registry.__dict__.setdefault("_scaled_cache", {})
    out = np.zeros(len(scenarios), dtype=bool)
    for i, s in enumerate(scenarios):
        key = (s.cpu, s.server, s.client)
        value = cache.get(key)
        if value is None:
            try:
                name = registry.cpus.find(s.cpu).name
                refs = {registry.model(side).reference_cpu for side in (s.server, s.client)}
                value = any(ref != name for ref in refs)
            except Exception:  # an unknown name or model: resolve() refuses it anyway
                value = True
            cache[key] = value
        out[i] = value
    return out


def band_columns(registry: Any, scenarios: Sequence[Any], limits: Sequence[str], engine: str,
                 goodput_mbps: np.ndarray, param_lo_mbps: np.ndarray,
                 param_hi_mbps: np.ndarray, link_mbps: np.ndarray | None = None
                 ) -> BandColumns:
    """Bands for a batch of predictions of ``engine`` (numpy over the batch)."""
    n = len(scenarios)
    if registry.domain is not None:
        batch = registry.domain.check_many(scenarios, architectures(registry, scenarios))
        lines = batch.lines()
    else:
        batch, lines = None, [""] * n
    model = registry.intervals
    if model is None:
        source = NO_INTERVALS + ("" if batch is not None else f"; {NO_DOMAIN}")
        return BandColumns(np.minimum(param_lo_mbps, goodput_mbps),
                           np.maximum(param_hi_mbps, goodput_mbps), math.nan, lines,
                           [source] * n)
    level = registry.interval_level
    rows = np.zeros((n, len(FEATURES)))
    regimes = [REGIMES.get(k, "cpu") for k in limits]
    col = {name: j for j, name in enumerate(FEATURES)}
    codes = np.array([REGIME_NAMES.index(g) for g in regimes])
    for k, r in enumerate(REGIME_NAMES):
        if f"regime:{r}" in col:
            rows[:, col[f"regime:{r}"]] = codes == k
    if f"engine:{engine}" in col:
        rows[:, col[f"engine:{engine}"]] = 1.0
    if batch is not None:
        rows[:, col["pair never measured"]] = ~batch.pair_measured
        rows[:, col["cpu microarchitecture never measured"]] = ~batch.cpu_measured
        rows[:, col["model never measured"]] = ~batch.model_measured
        rows[:, col["knobs outside the evidence"]] = batch.knobs_outside
        rows[:, col["log distance outside"]] = np.minimum(batch.distance, MAX_DISTANCE)
        rows[:, col["outside the pair's own evidence"]] = batch.pair_knobs_outside > 0
        rows[:, col["testbed never measured"]] = ~batch.testbed_measured
    scaled = cpu_scaled(registry, scenarios)
    rows[:, col["another CPU than the reference"]] = scaled
    bins = [bin_label(model.bin_by, g, s) for g, s in zip(regimes, scaled.tolist(), strict=True)]
    lo, hi, sigma, used, thin = model.band_arrays(goodput_mbps, rows, bins, level, link_mbps)
    stale = f"; {registry.intervals_stale}" if registry.intervals_stale else ""
    absent = "" if batch is not None else f"; {NO_DOMAIN}"
    texts = model.describe_many(rows, sigma, used, level, thin)
    if stale or absent:
        texts = [text + stale + absent for text in texts]
    return BandColumns(lo, hi, level, lines, texts)


def with_band(pred: Prediction, registry: Any) -> Prediction:
    """``pred`` with its band, level, parameter interval, extrapolated line and source."""
    g = np.array([pred.goodput_mbps])
    p_lo = pred.goodput_lo_mbps if math.isfinite(pred.goodput_lo_mbps) else pred.goodput_mbps
    p_hi = pred.goodput_hi_mbps if math.isfinite(pred.goodput_hi_mbps) else pred.goodput_mbps
    cols = band_columns(registry, [pred.scenario], [pred.limit], pred.engine, g,
                        np.array([p_lo]), np.array([p_hi]),
                        np.array([pred.scenario.link_gbps * 1e3]))
    return replace(pred, goodput_lo_mbps=float(cols.lo_mbps[0]),
                   goodput_hi_mbps=float(cols.hi_mbps[0]), interval_level=cols.level,
                   param_lo_mbps=p_lo, param_hi_mbps=p_hi,
                   extrapolated=cols.extrapolated[0], interval_source=cols.source[0])
