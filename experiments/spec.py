"""Sweep specs: ``experiments/sweep-<topic>.yaml`` loaded, validated and expanded.

A sweep spec names a base Scenario, the axes to vary, the engines, how many
repetitions (runs) per point and which Prediction outputs to record::

    kind: sweep
    description: MTU × GSO/GRO × implementation (König et al. 2025 §VI-C/D)
    base: {cpu: Intel Xeon W-2145, app: perf, rcvbuf_bytes: 6815744}
    axes:
      - {field: implementation, values: [lsquic, quiche@quicperf, ngtcp2@quicperf]}
      - {field: mtu_bytes, values: [1500, 9000]}
      - {zip: {gso: [false, true], gro: [false, true]}}
    engines: [analytic]
    engine_options: {des: {granularity: batch}}
    repetitions: 1
    record: [goodput_mbps, limit, server_cpu_util, client_cpu_util]

Validation happens on load: an unknown key names the file, the key path and
the allowed keys (:class:`~quiclab.errors.SpecError`); a bad Scenario value
is the one-line :class:`~quiclab.errors.ScenarioError` of
``Scenario.from_dict`` with the file and point as its source.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from quiclab.errors import excerpt
from quiclab.experiments.axes import Axis, expand, grid_size, parse_axes
from quiclab.experiments.schema import (
    check_keys,
    fail,
    load_yaml,
    need_choice,
    need_list,
    need_number,
    need_str,
)
from quiclab.sim.engine import ENGINES
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

SWEEP_KEYS = ("kind", "name", "description", "base", "axes", "engines", "engine_options",
              "repetitions", "record", "chunk")
KINDS = ("sweep", "reproduction")
#: Engine constructor options a spec may set (parallelism belongs to the runner).
ENGINE_OPTION_KEYS: dict[str, tuple[str, ...]] = {
    "analytic": (),
    "des": ("granularity", "max_packets", "unit_packets", "max_units", "unit_cwnd_divisor",
            "max_sim_s"),
    "ns3": ("prefix_packets", "warm_fraction"),
}
#: What each engine option may be: ("choice", allowed) or ("int" | "number", lo, hi,
#: lo excluded?, hi excluded?); None bounds are open. The engines check the same
#: ranges when they are built (quiclab.sim.des.engine, quiclab.sim.ns3.engine).
OptionRule = tuple[Any, ...]
ENGINE_OPTION_RULES: dict[str, dict[str, OptionRule]] = {
    "des": {
        "granularity": ("choice", ("packet", "batch")),
        "max_packets": ("int", 0, None, False, False),   # 0: the whole transfer
        "unit_packets": ("int", 1, None, False, False),
        "max_units": ("int", 0, None, False, False),     # 0: no limit
        "unit_cwnd_divisor": ("int", 1, None, False, False),
        "max_sim_s": ("number", 0, None, True, False),
    },
    "ns3": {
        "prefix_packets": ("int", 1000, None, False, False),
        "warm_fraction": ("number", 0, 0.9, True, True),
    },
}
#: Prediction outputs a sweep can record (scenario fields and keys are always recorded).
OUTPUT_FIELDS = tuple(f.name for f in fields(Prediction)
                      if f.name not in ("scenario", "timeseries"))
#: Always recorded: identity and provenance of each row, and how sure its goodput is
#: (the predictive band and the fields outside the evidence; its level is in
#: ``model_versions`` as ``interval-level``).
ALWAYS_RECORDED = ("engine", "engine_version", "goodput_mbps", "goodput_lo_mbps",
                   "goodput_hi_mbps", "extrapolated", "limit", "model_versions")
#: A grid larger than this is refused (a typo in a range should not fill the disk).
MAX_POINTS = 2_000_000


def parse_engine_options(data: Any, source: str, path: str = "engine_options"
                         ) -> dict[str, dict[str, Any]]:
    if data is None:
        return {}
    check_keys(data, ENGINES, source, path)
    out: dict[str, dict[str, Any]] = {}
    for engine, options in data.items():
        check_keys(options, ENGINE_OPTION_KEYS[engine] or ("(none)",), source,
                   f"{path}.{engine}")
        rules = ENGINE_OPTION_RULES.get(engine, {})
        out[engine] = {key: _option(value, rules.get(key), source, f"{path}.{engine}.{key}")
                       for key, value in options.items()}
    return out


def _option(value: Any, rule: OptionRule | None, source: str, path: str) -> Any:
    """One engine option checked against its rule (type and range), as the engine takes it."""
    if rule is None:
        return value
    if rule[0] == "choice":
        return need_choice(value, rule[1], source, path)
    kind, lo, hi, lo_open, hi_open = rule
    number = need_number(value, source, path, integer=kind == "int")
    below = lo is not None and (number <= lo if lo_open else number < lo)
    above = hi is not None and (number >= hi if hi_open else number > hi)
    if below or above:
        low = "" if lo is None else f"{'>' if lo_open else '≥'} {lo:g}"
        high = "" if hi is None else f"{'<' if hi_open else '≤'} {hi:g}"
        bounds = f"{low} and {high}" if low and high else low or high
        raise fail(source, path, f"{excerpt(value)} is out of range; allowed {bounds}")
    return int(number) if kind == "int" else number


def parse_engines(data: Any, source: str, path: str = "engines") -> tuple[str, ...]:
    if data is None:
        return ("analytic",)
    items = need_list(data, source, path)
    return tuple(need_choice(e, ENGINES, source, f"{path}[{i}]") for i, e in enumerate(items))


def parse_base(data: Any, source: str, path: str = "base") -> dict[str, Any]:
    """Base Scenario fields, validated by building the Scenario once."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise fail(source, path, "expected a mapping of Scenario fields")
    Scenario.from_dict(data, source=f"{source}: {path}")
    return dict(data)


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: build its points with :meth:`scenarios`."""

    name: str
    path: str
    description: str
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    engines: tuple[str, ...]
    engine_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    repetitions: int = 1
    record: tuple[str, ...] = OUTPUT_FIELDS
    chunk: int = 0
    #: The expanded points, built once by :func:`parse_sweep` (validation) and reused.
    points: tuple[Scenario, ...] = field(default=(), repr=False, compare=False)

    def __len__(self) -> int:
        return grid_size(list(self.axes)) * self.repetitions

    def scenarios(self) -> list[Scenario]:
        """Every point × repetition, in grid order (repetition innermost, ``run`` = 0 … n−1)."""
        if self.points:
            return list(self.points)
        out = []
        for i, overrides in enumerate(expand(list(self.axes))):
            fields_ = {**self.base, **overrides}
            first = int(fields_.get("run", 0))
            for r in range(self.repetitions):
                fields_["run"] = first + r
                out.append(Scenario.from_dict(fields_, source=f"{self.path}: point {i}"))
        return out

    def resolved(self) -> dict[str, Any]:
        """The spec as run (axes expanded to their values), JSON-safe, for provenance."""
        return {
            "kind": "sweep", "name": self.name, "path": self.path,
            "description": self.description, "base": self.base,
            "axes": [{"fields": list(a.fields), "values": [list(v) for v in a.values]}
                     for a in self.axes],
            "engines": list(self.engines), "engine_options": self.engine_options,
            "repetitions": self.repetitions, "record": list(self.record),
            "points": len(self),
        }

    def with_engines(self, engines: tuple[str, ...]) -> SweepSpec:
        return replace(self, engines=engines)


def digest(data: Any) -> str:
    """A short stable hash of JSON-safe data (12 hex digits)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def parse_sweep(data: dict[str, Any], source: str, name: str) -> SweepSpec:
    if isinstance(data, dict) and data.get("kind") == "reproduction":
        raise fail(source, "kind", "'reproduction': a reproduction spec — run it with "
                                   "`quiclab reproduce`")
    check_keys(data, SWEEP_KEYS, source, "", required=("kind",))
    if data["kind"] != "sweep":
        raise fail(source, "kind", f"{excerpt(data['kind'])}: this loader reads kind: sweep")
    base = parse_base(data.get("base"), source)
    axes = parse_axes(data.get("axes"), source)
    engines = parse_engines(data.get("engines"), source)
    options = parse_engine_options(data.get("engine_options"), source)
    repetitions = int(need_number(data.get("repetitions", 1), source, "repetitions", lo=1,
                                  hi=10_000, integer=True))
    record: tuple[str, ...] = OUTPUT_FIELDS
    if "record" in data:
        items = need_list(data["record"], source, "record")
        chosen = [need_choice(x, OUTPUT_FIELDS, source, f"record[{i}]")
                  for i, x in enumerate(items)]
        record = tuple(dict.fromkeys([*ALWAYS_RECORDED, *chosen]))
    chunk = int(need_number(data.get("chunk", 0), source, "chunk", lo=0, integer=True))
    spec = SweepSpec(name=str(data.get("name") or name), path=source,
                     description=str(data.get("description", "")), base=base,
                     axes=tuple(axes), engines=engines, engine_options=options,
                     repetitions=repetitions, record=record, chunk=chunk)
    if "name" in data:
        need_str(data["name"], source, "name")
    if len(spec) > MAX_POINTS:
        raise fail(source, "axes", f"{len(spec)} points; at most {MAX_POINTS}")
    # Build every point once so that a bad value fails now, with its point number.
    return replace(spec, points=tuple(spec.scenarios()))


def spec_kind(path: Path) -> str:
    """``kind`` of a spec file (for dispatching to the sweep or reproduction loader)."""
    data = load_yaml(path)
    return need_choice(data.get("kind"), KINDS, str(path), "kind")


def load_sweep(path: Path | str) -> SweepSpec:
    """Load and validate a sweep spec; raises SpecError / ScenarioError (one line)."""
    file = Path(path)
    return parse_sweep(load_yaml(file), str(file), file.stem)


def packaged_dir() -> Path:
    """The folder of the shipped specs (``experiments/`` in the checkout)."""
    from importlib import resources

    return Path(str(resources.files("quiclab.experiments")))


def find_spec(name_or_path: str, kind_prefix: str = "") -> Path:
    """A spec by path, or by name among the shipped specs (``sweep-mtu`` or ``mtu``)."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.is_file():
            raise fail(str(candidate), "", "no such spec file")
        return candidate
    folder = packaged_dir()
    for stem in (name_or_path, f"{kind_prefix}{name_or_path}"):
        path = folder / f"{stem}.yaml"
        if path.is_file():
            return path
    known = sorted(p.stem for p in folder.glob(f"{kind_prefix}*.yaml"))
    raise fail(name_or_path, "", "no such spec; shipped: " + ", ".join(known))
