"""Reproductions that need the fitted models: seed 002 Figs. 3–4 and seed 000 Fig. 10.

Nothing here is tuned per figure: each function builds the published
setting as Scenarios, runs an engine (the DES by default) on the registry's
fitted models and returns plain rows; the ``compare_*`` / ``*_shapes``
functions set them beside the published numbers.

- :func:`buffer_sweep` — Kempf et al. 2024 §4.1, Figs. 3 and 4: goodput and
  client ACKs for UDP receive buffers of 0.5 … 32 × 208 KiB, LSQUIC and
  quiche pairs on the QIR-10G path (AMD EPYC 7543, HTTP/3, 8 GiB);
  :func:`compare_seed002` gives the errors against the stated numbers.
- :func:`rtt_sweep` / :func:`loss_sweep` — König et al. 2025 §VI-E,
  Fig. 10a/b (scenarios B and C of Table II): quicperf-driven transfers on the
  Intel Xeon W-2145 testbed with enlarged buffers; :func:`seed000_shapes`
  checks the shapes the text states.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

from quiclab.errors import ScenarioError
from quiclab.models.registry import Registry
from quiclab.sim.engine import Engine
from quiclab.sim.scenario import DEFAULT_RCVBUF_BYTES, Scenario

#: Kempf et al. 2024 Fig. 3/4 x-axis: multiples of the 208 KiB default buffer
#: (the published raw data holds 0.5 … 32, see datasets/published/README.md).
BUFFER_MULTIPLES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
#: Stated numbers of Kempf et al. 2024 §4.1 (datasets/published/kempf24.csv, rows 008–020).
SEED002_STATED: dict[str, dict[str, float]] = {
    "lsquic": {
        "goodput_at_32x_mbps": 3250.0,  # kempf24-010
        "change_32x_vs_1x_pct": 7.0,  # kempf24-011
        "acks_at_1x": 180_000.0,  # kempf24-012
        "acks_at_32x": 46_000.0,  # kempf24-013 (largest buffer, presumably)
        "drops_at_1x": 11_400.0,  # kempf24-008
    },
    "quiche": {
        "goodput_at_32x_mbps": 2530.0,  # kempf24-019 (larger buffers, size not stated)
        "change_32x_vs_1x_pct": 3.0,  # kempf24-018
        "change_0.5x_vs_1x_pct": -40.0,  # kempf24-020
        "drops_at_1x": 7_000.0,  # kempf24-015
    },
}
#: Kempf et al. 2024 Fig. 4: ACK counts within 20 % (the figure's bars are read by eye).
ACK_TOLERANCE = 0.20

#: König et al. 2025 Table II, scenario B (0 … 300 ms added RTT) and C (0 … 2.5 % loss).
FIG10_RTTS_MS = (0.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 300.0)
FIG10_LOSS_PCT = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5)
#: The implementations of Fig. 10 as the catalog names them (quicperf generator).
FIG10_IMPLEMENTATIONS = ("quiche@quicperf", "ngtcp2@quicperf", "lsquic@quicperf")
#: The testbed of König et al. 2025 §IV (Table I): Intel Xeon W-2145 hosts,
#: enlarged UDP buffers (as the published points in koenig25.csv record them),
#: quicperf (raw QUIC, app "perf"), CUBIC.
SEED000_BASE: dict[str, Any] = {"cpu": "Intel Xeon W-2145", "app": "perf",
                                "rcvbuf_bytes": 32 * DEFAULT_RCVBUF_BYTES,
                                "base_rtt_us": 100.0, "cc": "cubic"}


def _default_engine(registry: Registry) -> Engine:
    from quiclab.sim.des import DesEngine

    return DesEngine(registry)


def _run(engine: Engine, scenarios: Sequence[Scenario]) -> list[Any]:
    return engine.predict_batch(list(scenarios))


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return sum(items) / len(items)


# ---------------------------------------------------------------- seed 002
def buffer_sweep(registry: Registry, engine: Engine | None = None,
                 implementations: Sequence[str] = ("lsquic", "quiche"),
                 multiples: Sequence[float] = BUFFER_MULTIPLES, runs: int = 1,
                 base: Scenario | None = None) -> list[dict[str, Any]]:
    """Goodput and client ACKs per receive-buffer multiple (Kempf et al. 2024 Figs. 3–4).

    Each implementation talks to itself (server = client) on ``base``
    (default: the Scenario defaults, i.e. the QIR-10G baseline). Rows:
    ``implementation, multiple, rcvbuf_bytes, goodput_mbps, acks,
    rcvbuf_drops, losses, limit, runs`` (means over ``runs`` runs). An
    implementation missing from the registry gives one row with ``error``.
    """
    engine = engine or _default_engine(registry)
    base = base or Scenario()
    rows: list[dict[str, Any]] = []
    for impl in implementations:
        try:
            scenarios = [base.with_(server=impl, client=impl,
                                    rcvbuf_bytes=int(m * DEFAULT_RCVBUF_BYTES), run=r)
                         for m in multiples for r in range(runs)]
            preds = _run(engine, scenarios)
        except ScenarioError as err:
            rows.append({"implementation": impl, "error": str(err)})
            continue
        for i, m in enumerate(multiples):
            group = preds[i * runs:(i + 1) * runs]
            rows.append({
                "implementation": impl,
                "multiple": m,
                "rcvbuf_bytes": int(m * DEFAULT_RCVBUF_BYTES),
                "goodput_mbps": _mean(p.goodput_mbps for p in group),
                "acks": _mean(p.acks for p in group),
                "rcvbuf_drops": _mean(p.rcvbuf_drops for p in group),
                "losses": _mean(p.losses for p in group),
                "limit": group[0].limit,
                "runs": runs,
                "engine": group[0].engine,
            })
    return rows


def compare_seed002(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Predicted vs stated numbers of Kempf et al. 2024 §4.1 for a :func:`buffer_sweep`.

    Rows: ``implementation, quantity, stated, predicted, error`` (relative
    error for counts and goodput, percentage points for ``change_*_pct``).
    """
    by_impl: dict[str, dict[float, dict[str, Any]]] = {}
    for row in rows:
        if "error" not in row:
            by_impl.setdefault(row["implementation"], {})[row["multiple"]] = row
    out = []
    for impl, stated in SEED002_STATED.items():
        sweep = by_impl.get(impl)
        if not sweep or 1.0 not in sweep:
            continue
        one = sweep[1.0]
        largest = sweep[max(sweep)]
        predicted: dict[str, float] = {
            "goodput_at_32x_mbps": largest["goodput_mbps"],
            "change_32x_vs_1x_pct": 100 * (largest["goodput_mbps"] / one["goodput_mbps"] - 1),
            "acks_at_1x": one["acks"],
            "acks_at_32x": largest["acks"],
            "drops_at_1x": one["rcvbuf_drops"],
        }
        if 0.5 in sweep:
            predicted["change_0.5x_vs_1x_pct"] = 100 * (
                sweep[0.5]["goodput_mbps"] / one["goodput_mbps"] - 1)
        for quantity, value in stated.items():
            if quantity not in predicted:
                continue
            p = predicted[quantity]
            error = p - value if quantity.endswith("_pct") else p / value - 1
            out.append({"implementation": impl, "quantity": quantity, "stated": value,
                        "predicted": p, "error": error,
                        "unit": "pp" if quantity.endswith("_pct") else "relative"})
    return out


# ---------------------------------------------------------------- seed 000
def _sweep(registry: Registry, engine: Engine | None, implementations: Sequence[str],
           field: str, values: Sequence[float], base: Scenario | None) -> list[dict[str, Any]]:
    engine = engine or _default_engine(registry)
    base = base or Scenario().with_(**SEED000_BASE)
    rows: list[dict[str, Any]] = []
    for impl in implementations:
        try:
            preds = _run(engine, [base.with_(server=impl, client=impl, **{field: v})
                                  for v in values])
        except ScenarioError as err:
            rows.append({"implementation": impl, "error": str(err)})
            continue
        for v, p in zip(values, preds, strict=True):
            rows.append({"implementation": impl, field: v, "goodput_mbps": p.goodput_mbps,
                         "limit": p.limit, "losses": p.losses, "engine": p.engine})
    return rows


def rtt_sweep(registry: Registry, engine: Engine | None = None,
              implementations: Sequence[str] = FIG10_IMPLEMENTATIONS,
              rtts_ms: Sequence[float] = FIG10_RTTS_MS,
              base: Scenario | None = None) -> list[dict[str, Any]]:
    """Goodput vs added RTT (König et al. 2025 Fig. 10a, scenario B). Rows per point."""
    return _sweep(registry, engine, implementations, "rtt_ms", rtts_ms, base)


def loss_sweep(registry: Registry, engine: Engine | None = None,
               implementations: Sequence[str] = FIG10_IMPLEMENTATIONS,
               losses_pct: Sequence[float] = FIG10_LOSS_PCT,
               base: Scenario | None = None) -> list[dict[str, Any]]:
    """Goodput vs random loss (König et al. 2025 Fig. 10b, scenario C). Rows per point."""
    return _sweep(registry, engine, implementations, "loss_pct", losses_pct, base)


def seed000_shapes(rtt_rows: Sequence[dict[str, Any]],
                   loss_rows: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The shapes König et al. 2025 §VI-E states, checked on sweep rows.

    - quiche collapses at +5 ms: 4.16 → 0.15 Gbit/s, a ratio of 0.036
      (koenig25-051/052); checked as ratio < 0.2;
    - ngtcp2 and lsquic "decrease gradually and consistently": goodput never
      rises with RTT (2 % slack) and keeps > 50 % at +5 ms;
    - with loss, all but quiche stay "relatively stable or decrease only
      slightly" (judgement: > 50 % at the largest loss), quiche falls most.

    Returns per implementation the goodput ratios to the 0 ms / 0 % point and
    the booleans under ``checks``.
    """
    def curves(rows: Sequence[dict[str, Any]], key: str) -> dict[str, list[tuple[float, float]]]:
        out: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            if "error" not in r:
                out.setdefault(r["implementation"].split("@")[0], []).append(
                    (r[key], r["goodput_mbps"]))
        return {k: sorted(v) for k, v in out.items()}

    result: dict[str, Any] = {"rtt_ratio": {}, "loss_ratio": {}, "checks": {}}
    rtt = curves(rtt_rows, "rtt_ms")
    for impl, points in rtt.items():
        g0 = points[0][1]
        result["rtt_ratio"][impl] = {x: g / g0 for x, g in points}
    loss = curves(loss_rows, "loss_pct")
    for impl, points in loss.items():
        g0 = points[0][1]
        result["loss_ratio"][impl] = {x: g / g0 for x, g in points}
    checks = result["checks"]
    ratios = result["rtt_ratio"]
    if "quiche" in ratios and 5.0 in ratios["quiche"]:
        checks["quiche collapses at +5 ms (ratio < 0.2; published 0.036)"] = \
            ratios["quiche"][5.0] < 0.2
    for impl in ("ngtcp2", "lsquic"):
        if impl in ratios:
            values = [ratios[impl][x] for x in sorted(ratios[impl])]
            checks[f"{impl} declines gradually (monotone, > 50 % at +5 ms)"] = (
                all(b <= a * 1.02 for a, b in pairwise(values))
                and ratios[impl].get(5.0, 1.0) > 0.5)
    lr = result["loss_ratio"]
    if lr:
        worst = {impl: min(r.values()) for impl, r in lr.items()}
        others = [v for k, v in worst.items() if k != "quiche"]
        if others:
            checks["non-quiche stable under loss (> 50 % at the largest loss)"] = \
                all(v > 0.5 for v in others)
        if "quiche" in worst and others:
            checks["quiche falls most under loss"] = worst["quiche"] <= min(others)
    return result
