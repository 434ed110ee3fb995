"""Reproduction specs: ``experiments/repro-<source>-<figure>.yaml``, one per seed figure/table.

A reproduction names the scenarios that predict a figure, the published
points (by ``point_id`` of ``datasets/published/*.csv``) it must match, and
for each finding a tolerance with its reason and the engine that predicts it::

    kind: reproduction
    title: König et al. 2025, Fig. 9a — GSO/GRO and MTU 9000
    source: {document: "000", figure: Fig. 9a, section: VI-C, VI-D}
    engine: analytic
    repetitions: 5                   # optional: runs per point of the DES / ns-3 (mean)
    base: {cpu: Intel Xeon W-2145, app: perf, rcvbuf_bytes: 6815744}
    scenarios:                       # named single points (overrides of base)
      quiche-1500-off: {implementation: quiche@quicperf, gso: false, gro: false}
    series:                          # named grids; points are name[v1,v2,…]
      rtt: {set: {implementation: quiche@quicperf},
            axes: [{field: rtt_ms, values: [0, 5, 10]}]}
    findings:
      - id: quiche-offload
        claim: quiche gains 0.66 Gbit/s with GSO/GRO (3.5 → 4.16 Gbit/s)
        engine: analytic               # optional, default the spec's; a list runs each
        checks:
          - {point: koenig25-039, scenario: quiche-1500-off,
             tolerance: {rel: 0.15}, reason: "…"}
          - {point: koenig25-041, scenario: quiche-1500-on, baseline: quiche-1500-off,
             tolerance: {abs: 0.3}, reason: "…"}
        shapes:
          - {type: ratio, scenario: "rtt[5]", baseline: "rtt[0]", max: 0.2, reason: "…"}
    plot: {kind: lines, series: [rtt], x: rtt_ms}

``repetitions: N`` predicts every point of a stochastic engine (the DES, ns-3)
N times, with ``run`` = 0 … N−1, and checks the mean, as the seeds report
means over repeated runs; the predictions table keeps the spread
(``runs``, ``goodput_sd_mbps``, ``goodput_min_mbps``, ``goodput_max_mbps``).

``status: not-covered`` with ``reason`` marks a reproduction the engines
cannot run yet (request workloads); its checks are still listed.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quiclab.experiments.axes import IMPLEMENTATION, Axis, expand, parse_axes
from quiclab.experiments.schema import (
    check_keys,
    fail,
    load_yaml,
    need_choice,
    need_list,
    need_number,
    need_str,
)
from quiclab.experiments.spec import parse_engine_options
from quiclab.sim.engine import ENGINES
from quiclab.sim.scenario import Scenario, field_names

if TYPE_CHECKING:
    from quiclab.experiments.registry_check import ModelCheck
    from quiclab.models.registry import Registry

REPRO_KEYS = ("kind", "name", "title", "description", "source", "status", "reason", "engine",
              "engine_options", "repetitions", "base", "scenarios", "series", "findings", "plot")

SOURCE_KEYS = ("document", "figure", "section", "title")
FINDING_KEYS = ("id", "claim", "engine", "checks", "shapes", "published")
CHECK_KEYS = ("point", "points", "scenario", "baseline", "baseline_point", "metric", "compare",
              "tolerance", "reason", "note", "over")
#: ``over: max|min``: scenario and baseline are series; the extreme of the per-point values.
#: ``over: mean``: scenario is a series, baseline a named scenario; the series' mean against it
#: (seed 002 Fig. 11: a heatmap's mean over all pinnings against the unpinned run).
OVER = ("max", "min", "mean")


def series_refs(over: str | None) -> tuple[str, ...]:
    """The keys of a check (``scenario``, ``baseline``) that name a series under ``over``."""
    if over is None:
        return ()
    return ("scenario",) if over == "mean" else ("scenario", "baseline")
TOLERANCE_KEYS = ("rel", "abs", "factor")
SHAPE_KEYS = ("type", "scenario", "baseline", "series", "among", "expect", "metric", "min",
              "max", "direction", "slack", "from", "reason", "description", "mode")
SHAPE_TYPES = ("ratio", "monotone", "flat_beyond", "argmax", "argmin", "series_ratio", "limit",
               "dominant_axis")
SERIES_KEYS = ("set", "axes")
PLOT_KEYS = ("kind", "series", "x", "metric", "title", "xlabel", "ylabel", "xlog", "ylog",
             "baseline_series", "findings", "unit")
PLOT_KINDS = ("bars", "lines", "heatmap", "table")
COMPARES = ("value", "change_pct", "ratio", "relative_pct", "delta")
#: Engines a finding may name: the three simulators, or the Table 3 crypto fit.
FINDING_ENGINES = (*ENGINES, "crypto-fit")
STATUSES = ("covered", "not-covered")


@dataclass(frozen=True)
class Check:
    """A published number (or stated range) and how to predict it."""

    points: tuple[str, ...]  # one id, or (low id, high id) of a stated range
    scenario: str | None
    baseline: str | None = None
    baseline_point: str | None = None
    metric: str | None = None
    compare: str | None = None
    tolerance: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    note: str = ""
    over: str | None = None


@dataclass(frozen=True)
class Shape:
    """A qualitative finding checked as a predicate on predictions."""

    type: str
    params: dict[str, Any]
    reason: str
    description: str


@dataclass(frozen=True)
class Finding:
    id: str
    claim: str
    engine: str
    checks: tuple[Check, ...]
    shapes: tuple[Shape, ...]
    published: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReproSpec:
    name: str
    path: str
    title: str
    description: str
    source: dict[str, str]
    status: str
    reason: str
    engine: str
    engine_options: dict[str, dict[str, Any]]
    base: dict[str, Any]
    named: dict[str, Scenario]  # every named point: scenarios and series points
    series: dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]]
    findings: tuple[Finding, ...]
    plots: tuple[dict[str, Any], ...]
    repetitions: int = 1

    def engines(self) -> list[str]:
        return sorted({f.engine for f in self.findings})

    def finding_ids(self) -> list[str]:
        """Finding ids in spec order (a finding run by two engines appears once)."""
        return list(dict.fromkeys(f.id for f in self.findings))

    def claim(self, finding_id: str) -> str:
        return next(f.claim for f in self.findings if f.id == finding_id)

    def scenarios_for(self, finding: Finding) -> list[str]:
        """Names of the points a finding needs (its checks and shapes)."""
        names: list[str] = []
        for c in finding.checks:
            refs = series_refs(c.over)
            for key, n in (("scenario", c.scenario), ("baseline", c.baseline)):
                if n and key in refs:
                    names += self.series[n][2]
                elif n:
                    names.append(n)
        for s in finding.shapes:
            for key in ("scenario", "baseline"):
                ref = s.params.get(key)
                if ref and ref in self.series and s.type == "series_ratio":
                    names += self.series[ref][2]
                elif ref:
                    names.append(ref)
            for key in ("series", "among"):
                ref = s.params.get(key)
                if ref:
                    names += self.series[ref][2]
        return list(dict.fromkeys(names))

    def plotted(self) -> list[str]:
        """Points of the series the plots draw (predicted even if no finding needs them)."""
        names: list[str] = []
        for plot in self.plots:
            refs = plot.get("series", [])
            for ref in [refs] if isinstance(refs, str) else refs:
                names += self.series[ref][2]
            if plot.get("baseline_series"):
                names += self.series[plot["baseline_series"]][2]
        return names

    def resolved(self) -> dict[str, Any]:
        return {"kind": "reproduction", "name": self.name, "path": self.path,
                "base": self.base, "engine_options": self.engine_options,
                "repetitions": self.repetitions,
                "points": {n: s.to_dict() for n, s in sorted(self.named.items())}}


def point_name(series: str, values: tuple[Any, ...]) -> str:
    """``rtt[5]``, ``h3[quic-go,quiche]``: how a series point is referred to."""
    return f"{series}[{','.join(_fmt(v) for v in values)}]"


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _overrides(data: Any, source: str, path: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise fail(source, path, "expected a mapping of Scenario fields")
    out = dict(data)
    if IMPLEMENTATION in out:
        impl = out.pop(IMPLEMENTATION)
        out.setdefault("server", impl)
        out.setdefault("client", impl)
    return out


def _on_testbed(base: dict[str, Any], source: str) -> dict[str, Any]:
    """``base: {testbed: "000", …}``: the document's calibrated testbed under the base's
    own fields (quiclab.models.testbeds; the base's keys win)."""
    from quiclab.models.testbeds import Testbeds, on_testbed

    try:
        return on_testbed(dict(base), Testbeds.packaged())
    except KeyError as err:
        raise fail(source, "base.testbed", str(err.args[0])) from None


def _scenario(base: dict[str, Any], overrides: dict[str, Any], where: str) -> Scenario:
    return Scenario.from_dict({**base, **overrides}, source=where)


def _parse_series(data: Any, base: dict[str, Any], source: str, named: dict[str, Scenario],
                  check: ModelCheck | None = None, raw_base: Any = None
                  ) -> dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]]:
    out: dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]] = {}
    for name, spec in (data or {}).items():
        path = f"series.{name}"
        check_keys(spec, SERIES_KEYS, source, path, required=("axes",))
        fixed = _overrides(spec.get("set", {}), source, f"{path}.set")
        axes: list[Axis] = parse_axes(spec["axes"], source, f"{path}.axes")
        fields_: tuple[str, ...] = tuple(f for a in axes for f in a.fields)
        values: list[tuple[Any, ...]] = []
        names: list[str] = []
        for overrides in expand(axes):
            step = []
            for a in axes:
                for f in a.fields:
                    step.append(overrides["server"] if f == IMPLEMENTATION else overrides[f])
            key = point_name(name, tuple(step))
            named[key] = _scenario(base, {**fixed, **overrides}, f"{source}: {key}")
            if check is not None:
                check.point(named[key], f"{path} ({key})",
                            [(f"{path}.set", spec.get("set") or {}), ("base", raw_base or {})],
                            axes)
            values.append(tuple(step))
            names.append(key)
        out[name] = (fields_, values, names)
    return out


def _parse_check(data: Any, source: str, path: str, named: dict[str, Scenario],
                 series: dict[str, Any]) -> Check:
    check_keys(data, CHECK_KEYS, source, path, required=("tolerance", "reason"))
    if ("point" in data) == ("points" in data):
        raise fail(source, path, "give exactly one of point (an id) or points ([low, high])")
    points = (need_str(data["point"], source, f"{path}.point"),) if "point" in data else \
        tuple(need_str(p, source, f"{path}.points") for p in need_list(data["points"], source,
                                                                         f"{path}.points", 2))
    over = data.get("over")
    if over is not None:
        need_choice(over, OVER, source, f"{path}.over")
    refs = series_refs(over)
    for key in refs:
        if key in data and data[key] not in series:
            raise fail(source, f"{path}.{key}", f"with over: {over}, {data[key]!r} must be "
                       f"a series; known: {', '.join(sorted(series))}")
    for key in ("scenario", "baseline"):
        if key not in refs and key in data and data[key] not in named:
            raise fail(source, f"{path}.{key}", f"{data[key]!r} is not a named scenario or "
                       f"series point; known: {', '.join(sorted(named)[:12])}"
                       + (" …" if len(named) > 12 else ""))
    tol = check_keys(data["tolerance"], TOLERANCE_KEYS, source, f"{path}.tolerance")
    if len(tol) != 1:
        raise fail(source, f"{path}.tolerance", "give exactly one of rel, abs, factor")
    tolerance = {k: need_number(v, source, f"{path}.tolerance.{k}", lo=0) for k, v in tol.items()}
    compare = data.get("compare")
    if compare is not None:
        need_choice(compare, COMPARES, source, f"{path}.compare")
    return Check(points=points, scenario=data.get("scenario"), baseline=data.get("baseline"),
                 baseline_point=data.get("baseline_point"), metric=data.get("metric"),
                 compare=compare, tolerance=tolerance,
                 reason=need_str(data["reason"], source, f"{path}.reason"),
                 note=str(data.get("note", "")), over=over)


def _parse_shape(data: Any, source: str, path: str, named: dict[str, Scenario],
                 series: dict[str, Any]) -> Shape:
    check_keys(data, SHAPE_KEYS, source, path, required=("type", "reason"))
    kind = need_choice(data["type"], SHAPE_TYPES, source, f"{path}.type")
    params = {k: v for k, v in data.items() if k not in ("type", "reason", "description")}
    refs = ["scenario"] + (["baseline"] if kind != "series_ratio" else []) \
        + (["expect"] if kind in ("argmax", "argmin") else [])
    for key in refs:
        if key in params and params[key] not in named:
            raise fail(source, f"{path}.{key}", f"{params[key]!r} is not a named scenario or "
                                                "series point")
    for key in ("series", "among"):
        if key in params and params[key] not in series:
            raise fail(source, f"{path}.{key}", f"{params[key]!r} is not a series; known: "
                       + ", ".join(sorted(series)))
    if kind == "series_ratio" and params.get("baseline") not in series:
        raise fail(source, f"{path}.baseline", "series_ratio needs a series as baseline")
    if kind == "dominant_axis":
        fields_ = series.get(str(params.get("series")), ((),))[0]
        if len(fields_) < 2:
            raise fail(source, f"{path}.series", "dominant_axis needs a series with two or "
                                                 "more axes: " + str(params.get("series")))
        if params.get("expect") not in fields_:
            raise fail(source, f"{path}.expect", "dominant_axis expects one of the series' "
                                                 "fields: " + ", ".join(fields_))
    return Shape(kind, params, need_str(data["reason"], source, f"{path}.reason"),
                 str(data.get("description", "")))


def _engines(value: Any, source: str, path: str) -> tuple[str, ...]:
    """``engine: des`` or ``engine: [des, analytic]``."""
    items = value if isinstance(value, list) else [value]
    need_list(items, source, path)
    return tuple(dict.fromkeys(need_choice(e, FINDING_ENGINES, source, path) for e in items))


def _check_point_ids(findings: Any, source: str, known: Collection[str]) -> None:
    """Every published point id a finding names (its checks' ``point``, ``points``,
    ``baseline_point`` and its ``published`` list) must be one of ``known``."""
    def need(pid: Any, path: str) -> None:
        if str(pid) not in known:
            close = difflib.get_close_matches(str(pid), list(known), n=3)
            raise fail(source, path, f"{pid!r} is not a published point id"
                       + (f"; close: {', '.join(close)}" if close else ""))

    for i, f in enumerate(findings):
        for j, c in enumerate(f.get("checks") or []):
            path = f"findings[{i}].checks[{j}]"
            if "point" in c:
                need(c["point"], f"{path}.point")
            for k, pid in enumerate(c.get("points") or []):
                need(pid, f"{path}.points[{k}]")
            if c.get("baseline_point"):
                need(c["baseline_point"], f"{path}.baseline_point")
        for k, pid in enumerate(f.get("published") or []):
            need(pid, f"findings[{i}].published[{k}]")


def parse_repro(data: dict[str, Any], source: str, name: str, registry: Registry | None = None,
                point_ids: Collection[str] | None = None) -> ReproSpec:
    """Validate a reproduction spec. With ``registry``, every point of a covered spec must
    name known implementations and CPUs; with ``point_ids``, every published point id
    a finding names must be one of them (both raise SpecError naming file and key path)."""
    if isinstance(data, dict) and data.get("kind") == "sweep":
        raise fail(source, "kind", "'sweep': a sweep spec — run it with `quiclab sweep`")
    check_keys(data, REPRO_KEYS, source, "", required=("kind", "title", "source", "findings"))
    if data["kind"] != "reproduction":
        raise fail(source, "kind", f"{data['kind']!r}: this loader reads kind: reproduction")
    src = check_keys(data["source"], SOURCE_KEYS, source, "source", required=("document",))
    status = need_choice(data.get("status", "covered"), STATUSES, source, "status")
    engines = _engines(data.get("engine", "analytic"), source, "engine")
    engine = engines[0]
    # The base alone need not be a valid Scenario (e.g. request_bytes set per series);
    # its keys are checked here, every named point is validated whole below.
    raw_base = data.get("base") or {}
    base = _overrides(raw_base, source, "base")
    if "testbed" in base:
        base = _on_testbed(base, source)
    check_keys(base, field_names(), source, "base")
    named: dict[str, Scenario] = {}
    scen = data.get("scenarios") or {}
    if not isinstance(scen, dict):
        raise fail(source, "scenarios", "expected a mapping name → Scenario fields")
    check = None
    if registry is not None and status == "covered":
        # A not-covered spec may name what no model covers (e.g. implementation: udp).
        from quiclab.experiments.registry_check import ModelCheck

        check = ModelCheck(registry, source)
    for key, overrides in scen.items():
        named[str(key)] = _scenario(base, _overrides(overrides, source, f"scenarios.{key}"),
                                    f"{source}: scenarios.{key}")
        if check is not None:
            check.point(named[str(key)], f"scenarios.{key}",
                        [(f"scenarios.{key}", overrides), ("base", raw_base)])
    series = _parse_series(data.get("series"), base, source, named, check, raw_base)
    findings = []
    ids: set[str] = set()
    for i, f in enumerate(need_list(data["findings"], source, "findings")):
        path = f"findings[{i}]"
        check_keys(f, FINDING_KEYS, source, path, required=("id", "claim"))
        fid = need_str(f["id"], source, f"{path}.id")
        if fid in ids:
            raise fail(source, f"{path}.id", f"duplicate finding id {fid!r}")
        ids.add(fid)
        checks = tuple(_parse_check(c, source, f"{path}.checks[{j}]", named, series)
                       for j, c in enumerate(f.get("checks") or []))
        shapes = tuple(_parse_shape(s, source, f"{path}.shapes[{j}]", named, series)
                       for j, s in enumerate(f.get("shapes") or []))
        if not checks and not shapes:
            raise fail(source, path, "a finding needs at least one check or shape")
        # A finding checked by several engines is one Finding per engine (same id).
        for fe in _engines(f["engine"], source, f"{path}.engine") if "engine" in f else engines:
            findings.append(Finding(fid, need_str(f["claim"], source, f"{path}.claim"), fe,
                                    checks, shapes,
                                    tuple(str(p) for p in f.get("published") or ())))
    plots_raw = data.get("plot") or []
    plots_raw = plots_raw if isinstance(plots_raw, list) else [plots_raw]
    plots = []
    for i, p in enumerate(plots_raw):
        check_keys(p, PLOT_KEYS, source, f"plot[{i}]", required=("kind",))
        need_choice(p["kind"], PLOT_KINDS, source, f"plot[{i}].kind")
        for ref in ([p["series"]] if isinstance(p.get("series"), str) else p.get("series", [])):
            if ref not in series:
                raise fail(source, f"plot[{i}].series", f"{ref!r} is not a series")
        plots.append(dict(p))
    if point_ids is not None:
        _check_point_ids(data["findings"], source, point_ids)
    return ReproSpec(
        name=str(data.get("name") or name), path=source, title=str(data["title"]),
        description=str(data.get("description", "")),
        source={k: str(v) for k, v in src.items()}, status=status,
        reason=str(data.get("reason", "")), engine=engine,
        engine_options=parse_engine_options(data.get("engine_options"), source),
        base=base, named=named, series=series, findings=tuple(findings), plots=tuple(plots),
        repetitions=int(need_number(data.get("repetitions", 1), source, "repetitions", lo=1,
                                    integer=True)))


def load_repro(path: Path | str, registry: Registry | None = None,
               point_ids: Collection[str] | None = None) -> ReproSpec:
    """Load and validate a reproduction spec (see :func:`parse_repro`)."""
    file = Path(path)
    return parse_repro(load_yaml(file), str(file), file.stem, registry, point_ids)
