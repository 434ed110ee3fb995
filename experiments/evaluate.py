"""Checking findings: predicted vs published values, tolerances, bounds and shape predicates.

One :class:`Result` row per check or shape. A check's published number comes
from its point (``datasets/published/*.csv``) with the point's unit and
``bound=`` condition; the predicted number is a metric of a predicted
scenario (or a comparison of two: change in %, ratio, relative %, delta),
converted to the published unit. Tolerance semantics:

- ``rel: r`` — |predicted − published| ≤ r · |published|;
- ``abs: a`` — |predicted − published| ≤ a, in the published unit
  (percentage points for ``change_pct``);
- ``factor: f`` — predicted within a factor f of published (both > 0).

A stated bound widens the test on its open side: ``lower_limit`` passes
when predicted ≥ published − slack, ``upper_limit`` when ≤ published +
slack (for a negative ``change_pct`` the bound is on the magnitude, as the
published README says), a stated range ``points: [low, high]`` when inside
[low − slack, high + slack]; slack is what the tolerance allows at that value.

Beside the tolerance verdict, a check of a predicted goodput value (not a
comparison of two predictions) gets a band verdict: ``consistent`` when the
published value, range or bound meets the prediction's predictive interval
(``goodput_lo_mbps`` … ``goodput_hi_mbps``, at its ``interval_level``: model
error learned from held-out residuals, :mod:`quiclab.models.intervals`),
``outside`` when it does not; '' where no band applies.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from quiclab.experiments.findings import Check, Finding, ReproSpec, Shape

#: Status of one row.
PASS, FAIL, NOT_COVERED = "pass", "fail", "not covered"

#: Metric used for a published quantity when the check names none.
DEFAULT_METRIC = {
    "goodput": "goodput_mbps", "throughput": "goodput_mbps", "change_pct": "goodput_mbps",
    "ratio": "goodput_mbps", "relative_pct": "goodput_mbps", "goodput_delta": "goodput_mbps",
    "ack_packets": "acks", "packets": "client_packets_sent", "dropped_packets": "rcvbuf_drops",
    "loss_rate": "loss_rate_pct", "cpu_idle": "idle_pct", "cpu_sys": "sender_kernel_pct",
}
COMPARE_OF = {"change_pct": "change_pct", "ratio": "ratio", "relative_pct": "relative_pct",
              "goodput_delta": "delta"}


@dataclass
class Result:
    """One row of a reproduction table."""

    reproduction: str
    finding: str
    check: str  # point id(s) or shape type
    quantity: str
    unit: str
    published: float
    published_text: str
    predicted: float
    predicted_text: str
    abs_error: float
    rel_error: float
    tolerance: str
    engine: str
    status: str
    in_fit: bool
    reason: str
    scenario: str = ""
    #: "consistent" / "outside" the predictive band, '' where none applies.
    band: str = ""
    band_text: str = ""

    @property
    def passed(self) -> bool | None:
        return None if self.status == NOT_COVERED else self.status == PASS

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pass"] = self.passed
        return d


def condition(point: Mapping[str, Any], key: str) -> str | None:
    m = re.search(rf"(?:^|;\s*){re.escape(key)}=([^;]+)", str(point.get("conditions") or ""))
    return m.group(1).strip().split(" ")[0] if m else None


def tolerance_text(tol: Mapping[str, float], unit: str) -> str:
    if "rel" in tol:
        return f"±{tol['rel'] * 100:g} %"
    if "abs" in tol:
        return f"±{tol['abs']:g} {'pp' if unit == '%' else unit}"
    return f"×/÷ {tol['factor']:g}"


def _slack(tol: Mapping[str, float], at: float, above: bool = False) -> float:
    """What the tolerance admits beyond the published value ``at``: below it, or above it
    when ``above``. A factor f admits [at / f, at · f]: at·(1 − 1/f) below, at·(f − 1) above."""
    if "rel" in tol:
        return tol["rel"] * abs(at)
    if "abs" in tol:
        return tol["abs"]
    f = tol["factor"]
    return abs(at) * ((f - 1.0) if above else (1.0 - 1.0 / f))


def verdict(predicted: float, low: float, high: float, bound: str | None,
            tol: Mapping[str, float]) -> tuple[bool, float]:
    """(passes, signed error to the nearest admissible published value)."""
    if not math.isfinite(predicted):
        return False, math.nan
    if bound in (None, "approx") and low == high:
        err = predicted - low
        if "factor" in tol:
            ok = low > 0 and predicted > 0 and max(predicted / low, low / predicted) \
                <= tol["factor"] + 1e-12
            return ok, err
        return abs(err) <= _slack(tol, low) + 1e-12, err
    sign = -1.0 if (low < 0 and high <= 0 and bound in ("lower_limit", "upper_limit")) else 1.0
    p, lo, hi = predicted * sign, low * sign, high * sign
    if bound == "lower_limit":
        hi = math.inf
    elif bound == "upper_limit":
        lo = -math.inf
    err = 0.0 if lo <= p <= hi else (p - lo if p < lo else p - hi)
    near = lo if p < lo else hi
    return abs(err) <= _slack(tol, near if math.isfinite(near) else 0.0, above=p > hi) \
        + 1e-12 or err == 0.0, err * sign


class Context:
    """What checks read: predicted rows by scenario name, published points, derived metrics."""

    def __init__(self, spec: ReproSpec, rows: Mapping[tuple[str, str], Mapping[str, Any]],
                 points: Mapping[str, Mapping[str, Any]], fitted: set[str],
                 derived: Callable[..., float] | None = None,
                 failures: Mapping[tuple[str, str], str] | None = None):
        self.spec = spec
        self.rows = rows
        self.points = points
        self.fitted = fitted
        self.derived = derived
        self.failures = failures or {}

    def metric(self, name: str, engine: str, metric: str) -> float:
        """A metric of a predicted scenario; KeyError with the reason if it has none."""
        if engine == "crypto-fit":
            if self.derived is None:
                raise KeyError("no crypto fit")
            return self.derived(name, metric)
        key = (name, engine)
        if key not in self.rows:
            raise KeyError(self.failures.get(key, f"no prediction for {name} ({engine})"))
        row = self.rows[key]
        if metric in row and row[metric] is not None:
            return float(row[metric])
        util = {"server": row.get("server_cpu_util"), "client": row.get("client_cpu_util")}
        if metric in ("server_cpu_pct", "client_cpu_pct"):
            return 100.0 * float(util[metric.split("_")[0]] or math.nan)
        if metric in ("server_idle_pct", "client_idle_pct"):
            return 100.0 * max(0.0, 1.0 - float(util[metric.split("_")[0]] or math.nan))
        if metric == "loss_rate_pct":
            return 100.0 * float(row["losses"]) / max(float(row["server_packets_sent"]), 1.0)
        if self.derived is not None:
            return self.derived(name, metric, row)
        raise KeyError(f"unknown metric {metric!r}")


def _unit_factor(metric: str, unit: str) -> float:
    if metric == "goodput_mbps":
        return {"Gbit/s": 1e-3, "Mbit/s": 1.0}.get(unit, 1.0)
    return 1.0


def _metric_for(check: Check, point: Mapping[str, Any]) -> str:
    if check.metric:
        return check.metric
    quantity = str(point.get("quantity"))
    if quantity == "cpu_util":
        side = condition(point, "side") or "server"
        return f"{'client' if side in ('client', 'receiver') else 'server'}_cpu_pct"
    if quantity == "cpu_idle":
        side = condition(point, "side") or "sender"
        return f"{'client' if side in ('client', 'receiver') else 'server'}_idle_pct"
    return DEFAULT_METRIC.get(quantity, "goodput_mbps")


def evaluate_check(ctx: Context, finding: Finding, check: Check) -> Result:
    first = ctx.points.get(check.points[0])
    label = "–".join(check.points)
    if first is None:
        return _not_covered(ctx, finding, label, f"unknown point id {check.points[0]}")
    last = ctx.points.get(check.points[-1], first)
    quantity, unit = str(first["quantity"]), str(first["unit"])
    low, high = sorted((float(first["value"]), float(last["value"])))
    bound = condition(first, "bound")
    bound = None if len(check.points) > 1 else bound
    pub_text = f"{low:g}–{high:g}" if len(check.points) > 1 else f"{low:g}"
    if bound in ("lower_limit", "upper_limit"):
        # A negative change's bound is on its magnitude: "over 50 % less" is ≤ −50.
        flip = low < 0 and quantity == "change_pct"
        pub_text = ("≥ " if (bound == "lower_limit") != flip else "≤ ") + pub_text
    elif bound == "approx":
        pub_text = "≈ " + pub_text
    metric = _metric_for(check, first)
    if finding.engine == "crypto-fit" and not check.metric:
        metric = f"crypto:{check.points[0]}"
    compare = check.compare or COMPARE_OF.get(quantity, "value")
    try:
        predicted, scenario = _predict(ctx, finding, check, metric, compare, unit)
    except KeyError as err:
        return _not_covered(ctx, finding, label, str(err.args[0]), quantity, unit, low,
                            pub_text, check)
    ok, error = verdict(predicted, low, high, bound, check.tolerance)
    ref = low if bound != "upper_limit" or len(check.points) == 1 else high
    band, band_text = _band(ctx, finding, check, metric, compare, unit, low, high, bound)
    return Result(
        reproduction=ctx.spec.name, finding=finding.id, check=label, quantity=quantity,
        unit=unit, published=low if len(check.points) == 1 else (low + high) / 2,
        published_text=pub_text, predicted=predicted, predicted_text=f"{predicted:.4g}",
        abs_error=error, rel_error=error / abs(ref) if ref else math.nan,
        tolerance=tolerance_text(check.tolerance, unit), engine=finding.engine,
        status=PASS if ok else FAIL, in_fit=any(p in ctx.fitted for p in check.points),
        reason=check.reason, scenario=scenario, band=band, band_text=band_text)


#: Band verdicts.
CONSISTENT, OUTSIDE = "consistent", "outside"


def _band(ctx: Context, finding: Finding, check: Check, metric: str, compare: str,
          unit: str, low: float, high: float, bound: str | None) -> tuple[str, str]:
    """Whether the published value (range, bound) meets the predicted goodput's band."""
    if metric != "goodput_mbps" or compare != "value" or check.over or not check.scenario:
        return "", ""
    row = ctx.rows.get((check.scenario, finding.engine))
    if not row:
        return "", ""
    try:
        lo = float(row["goodput_lo_mbps"]) * _unit_factor(metric, unit)
        hi = float(row["goodput_hi_mbps"]) * _unit_factor(metric, unit)
        level = float(row.get("interval_level") or math.nan)
    except (KeyError, TypeError, ValueError):
        return "", ""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "", ""
    if bound == "lower_limit":
        high = math.inf
    elif bound == "upper_limit":
        low = -math.inf
    meets = lo <= high and low <= hi
    shown = f"{lo:.4g}–{hi:.4g}" + (f" ({level * 100:g} %)" if math.isfinite(level) else "")
    return (CONSISTENT if meets else OUTSIDE), shown


def _compare(a: float, b: float, compare: str, factor: float) -> float:
    if compare == "value":
        return a * factor
    return {"change_pct": 100.0 * (a / b - 1.0) if b else math.nan,
            "ratio": a / b if b else math.nan,
            "relative_pct": 100.0 * a / b if b else math.nan,
            "delta": (a - b) * factor}[compare]


def _predict(ctx: Context, finding: Finding, check: Check, metric: str, compare: str,
             unit: str) -> tuple[float, str]:
    """The predicted value of a check and a label of what it was computed from."""
    if check.over:
        return _over(ctx, finding, check, metric, compare, unit)
    scenario = check.scenario or ""
    label = scenario + (f" vs {check.baseline}" if check.baseline else "")
    a = ctx.metric(scenario, finding.engine, metric)
    if compare == "value":
        return a * _unit_factor(metric, unit), label
    if check.baseline_point:
        ref = ctx.points[check.baseline_point]
        b = float(ref["value"])
        a *= _unit_factor(metric, str(ref["unit"]))
        return _compare(a, b, compare, 1.0), f"{scenario} vs {check.baseline_point}"
    b = ctx.metric(check.baseline or "", finding.engine, metric)
    return _compare(a, b, compare, _unit_factor(metric, unit)), label


def _over(ctx: Context, finding: Finding, check: Check, metric: str, compare: str,
          unit: str) -> tuple[float, str]:
    """Extreme over a series (``over: max|min``) and the point that attains it, or its mean."""
    names = ctx.spec.series[check.scenario or ""][2]
    if check.over == "mean":
        a = sum(ctx.metric(n, finding.engine, metric) for n in names) / len(names)
        label = f"mean over {check.scenario} ({len(names)} points)"
        if compare == "value":
            return a * _unit_factor(metric, unit), label
        b = ctx.metric(check.baseline or "", finding.engine, metric)
        return _compare(a, b, compare, _unit_factor(metric, unit)), f"{label} vs {check.baseline}"
    bases = ctx.spec.series[check.baseline][2] if check.baseline else [None] * len(names)
    values = []
    for n, base_name in zip(names, bases, strict=True):
        a = ctx.metric(n, finding.engine, metric)
        base = ctx.metric(base_name, finding.engine, metric) if base_name else math.nan
        values.append((_compare(a, base, compare, _unit_factor(metric, unit)), n))
    pick = (max if check.over == "max" else min)(values, key=lambda t: t[0])
    return pick[0], f"{check.over} over {check.scenario}: {pick[1]}"


def _not_covered(ctx: Context, finding: Finding, label: str, reason: str, quantity: str = "",
                 unit: str = "", published: float = math.nan, pub_text: str = "",
                 check: Check | None = None) -> Result:
    return Result(ctx.spec.name, finding.id, label, quantity, unit, published, pub_text,
                  math.nan, "", math.nan, math.nan,
                  tolerance_text(check.tolerance, unit) if check else "", finding.engine,
                  NOT_COVERED, False, reason, (check.scenario or "") if check else "")


def _series_values(ctx: Context, series: str, engine: str, metric: str
                   ) -> list[tuple[tuple[Any, ...], str, float]]:
    _fields, values, names = ctx.spec.series[series]
    return [(v, n, ctx.metric(n, engine, metric)) for v, n in zip(values, names, strict=True)]


def evaluate_shape(ctx: Context, finding: Finding, shape: Shape) -> Result:
    p = shape.params
    metric = p.get("metric", "goodput_mbps")
    lo, hi = p.get("min"), p.get("max")
    slack = float(p.get("slack", 0.0))
    text = shape.description or shape.type
    try:
        if shape.type == "ratio":
            # Without a baseline the predicate is on the metric itself.
            value = ctx.metric(p["scenario"], finding.engine, metric)
            if p.get("baseline"):
                value /= ctx.metric(p["baseline"], finding.engine, metric)
            ok = (lo is None or value >= lo) and (hi is None or value <= hi)
            shown = f"{value:.3g}"
            pub = _interval(lo, hi)
        elif shape.type in ("monotone", "flat_beyond"):
            pts = _series_values(ctx, p["series"], finding.engine, metric)
            ys = [y for _, _, y in pts]
            if shape.type == "monotone":
                down = p.get("direction", "decreasing") == "decreasing"
                steps = [(b / a if a else math.inf) for a, b in pairwise(ys)]
                value = max(steps) if down else min(steps)
                ok = all((s <= 1 + slack) if down else (s >= 1 - slack) for s in steps)
                pub = f"{'non-increasing' if down else 'non-decreasing'} (slack {slack:g})"
            else:
                tail = [y for (x, _, y) in pts if float(x[-1]) >= float(p["from"])]
                value = max(abs(y / tail[-1] - 1) for y in tail) if tail else math.nan
                ok = bool(tail) and value <= slack
                pub = f"flat from {p['from']} (±{slack:g})"
            shown = f"{value:.3g}"
        elif shape.type in ("argmax", "argmin"):
            pts = _series_values(ctx, p["among"], finding.engine, metric)
            pick = (max if shape.type == "argmax" else min)(pts, key=lambda t: t[2])
            value, shown = pick[2], pick[1]
            ok = pick[1] == p["expect"]
            # ``slack``: the expected point may trail the extreme by this fraction
            # (near-ties the seeds' own values do not order).
            slack = float(p.get("slack", 0.0))
            expected = [t[2] for t in pts if t[1] == p["expect"]]
            if not ok and slack > 0 and expected:
                gap = abs(expected[0] / pick[2] - 1.0) if pick[2] else math.inf
                ok = gap <= slack
                shown = f"{pick[1]} ({p['expect']} within {gap * 100:.1f} %)"
            pub = str(p["expect"]) + (f" (slack {slack:g})" if slack else "")
        elif shape.type == "series_ratio":
            num = _series_values(ctx, p["series"], finding.engine, metric)
            den = _series_values(ctx, p["baseline"], finding.engine, metric)
            ratios = [a[2] / b[2] for a, b in zip(num, den, strict=True)]
            inside = [(lo is None or r >= lo) and (hi is None or r <= hi) for r in ratios]
            ok = all(inside) if p.get("mode", "all") == "all" else any(inside)
            value = min(ratios) if lo is not None else max(ratios)
            shown = f"{min(ratios):.3g}…{max(ratios):.3g}"
            pub = f"{p.get('mode', 'all')} in {_interval(lo, hi)}"
        elif shape.type == "dominant_axis":
            # A heatmap's row/column pattern (seed 002 Fig. 11): the range of the mean
            # along each axis (the other axes averaged out); the expected axis's range
            # must be at least `min` times every other axis's.
            fields_, values, names = ctx.spec.series[p["series"]]
            ys = [ctx.metric(n, finding.engine, metric) for n in names]
            effects: dict[str, float] = {}
            for i, name in enumerate(fields_):
                groups: dict[Any, list[float]] = {}
                for v, y in zip(values, ys, strict=True):
                    groups.setdefault(v[i], []).append(y)
                means = [sum(g) / len(g) for g in groups.values()]
                effects[name] = max(means) - min(means)
            others = max([e for f, e in effects.items() if f != p["expect"]] or [0.0])
            own = effects[p["expect"]]
            # A flat grid has no pattern: the expected axis must move the metric at all.
            value = own / others if others > 0 else (math.inf if own > 0 else 0.0)
            ok = value >= float(lo if lo is not None else 1.0)
            shown = (", ".join(f"{f} {e:.3g}" for f, e in effects.items())
                     + f" (ratio {value:.2g})")
            pub = f"{p['expect']} ≥ {float(lo if lo is not None else 1.0):g}× every other axis"
        else:  # limit
            key = (p["scenario"], finding.engine)
            if key not in ctx.rows:
                raise KeyError(ctx.failures.get(key, f"no prediction for {p['scenario']}"))
            shown = str(ctx.rows[key].get("limit_resource"))
            expect = p["expect"] if isinstance(p["expect"], list) else [p["expect"]]
            ok, value, pub = shown in expect, math.nan, " or ".join(expect)
    except (KeyError, ZeroDivisionError) as err:
        reason = str(err.args[0]) if err.args else "no prediction"
        return Result(ctx.spec.name, finding.id, f"shape:{shape.type}", "shape", "", math.nan,
                      text, math.nan, "", math.nan, math.nan, "", finding.engine, NOT_COVERED,
                      False, reason)
    return Result(ctx.spec.name, finding.id, f"shape:{shape.type}", "shape", "", math.nan,
                  f"{text}: {pub}", value, shown, math.nan, math.nan, "predicate",
                  finding.engine, PASS if ok else FAIL,
                  any(x in ctx.fitted for x in finding.published), shape.reason,
                  str(p.get("scenario") or p.get("series") or p.get("among") or ""))


def _interval(lo: Any, hi: Any) -> str:
    if lo is not None and hi is not None:
        return f"[{lo:g}, {hi:g}]"
    return f"≥ {lo:g}" if lo is not None else f"≤ {hi:g}"


def evaluate(ctx: Context) -> list[Result]:
    out: list[Result] = []
    for finding in ctx.spec.findings:
        out += [evaluate_check(ctx, finding, c) for c in finding.checks]
        out += [evaluate_shape(ctx, finding, s) for s in finding.shapes]
    return out


def band_verdicts(results: list[Result]) -> dict[str, str]:
    """Per finding: ``outside`` if a check's published value misses its predictive band,
    ``consistent`` if every check with a band meets it, '' if no check has one."""
    out: dict[str, str] = {}
    for r in results:
        if not r.band:
            out.setdefault(r.finding, "")
        elif r.band == OUTSIDE or out.get(r.finding) == OUTSIDE:
            out[r.finding] = OUTSIDE
        else:
            out[r.finding] = CONSISTENT
    return out


def finding_verdicts(results: list[Result]) -> dict[str, str]:
    """Per finding: fail if any row fails, pass if every row passes, else not covered.

    A row that could not be evaluated (an engine error, a metric the engine lacks)
    keeps its finding from passing: the rows that did pass say nothing about it.
    """
    out: dict[str, str] = {}
    for r in results:
        prev = out.get(r.finding)
        if r.status == FAIL or prev == FAIL:
            out[r.finding] = FAIL
        elif r.status == PASS and prev in (None, PASS):
            out[r.finding] = PASS
        elif r.status != PASS:
            out[r.finding] = NOT_COVERED
    return out
