"""The domain of validity: the conditions the calibration's evidence covers.

For every implementation (any role, any variant) and every measured
(server, client) pair, the envelope of the evidence that involves it: the
range of each numeric condition (MTU, round-trip time, loss, receive buffer,
link rate) and the set of each categorical one (CPU microarchitecture,
GSO, GRO, application protocol, workload, cipher). ``quiclab calibrate``
writes it beside the models (``domain.json``); every Prediction says on which
fields its Scenario lies outside it, and how far (:meth:`Domain.check`).

A field is extrapolated when the Scenario's value lies outside the envelope of
the server's or the client's model (the model named in the line is the one
whose evidence does not reach it). A pair that no evidence measured is named
too: its interplay is then the server's and client's effects alone. Whether
the values lie inside the *pair's* own envelope is reported as well
(``pair_fields``), since a pair measured at one setting says nothing about its
interplay at another.

The round-trip time is the path's: ``rtt_ms`` (added delay) plus the base RTT.
How far a numeric value lies outside is a ratio to the nearest bound (×4.0),
or, above a bound of 0 (a loss rate), the difference in the field's unit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from quiclab.errors import DataError

SCHEMA = "quiclab.domain/1"
FILE = "domain.json"

#: Numeric conditions: field → (unit for the line, how the Scenario gives it).
NUMERIC: dict[str, str] = {
    "mtu_bytes": "B",
    "rtt_ms": "ms",
    "loss_pct": "%",
    "rcvbuf_bytes": "B",
    "link_gbps": "Gbit/s",
}
#: Categorical conditions ("cpu" is the CPU's microarchitecture).
CATEGORICAL: tuple[str, ...] = ("cpu", "gso", "gro", "app", "workload", "cipher")
FIELDS: tuple[str, ...] = (*NUMERIC, *CATEGORICAL)
#: Loss rates (%) are compared in log(loss + this): 0 → 0.1 % is as far as 0.1 → 1.1 %.
LOSS_FLOOR_PCT = 0.01


def scenario_conditions(scenario: Any, microarchitecture: str) -> dict[str, Any]:
    """The Scenario's values of :data:`FIELDS` (round-trip time = added + base)."""
    return {
        "mtu_bytes": float(scenario.mtu_bytes),
        "rtt_ms": float(scenario.rtt_ms) + float(scenario.base_rtt_us) / 1e3,
        "loss_pct": float(scenario.loss_pct),
        "rcvbuf_bytes": float(scenario.rcvbuf_bytes),
        "link_gbps": float(scenario.link_gbps),
        "cpu": microarchitecture,
        "gso": str(bool(scenario.gso)).lower(),
        "gro": str(bool(scenario.gro)).lower(),
        "app": scenario.app,
        "workload": scenario.workload,
        "cipher": scenario.cipher,
    }


def log_distance(name: str, value: float, lo: float, hi: float) -> float:
    """How far ``value`` lies outside [lo, hi] in log units (0 inside)."""
    if lo <= value <= hi:
        return 0.0
    bound = hi if value > hi else lo
    if name == "loss_pct":
        return abs(math.log((value + LOSS_FLOOR_PCT) / (bound + LOSS_FLOOR_PCT)))
    if bound <= 0 or value <= 0:
        return math.inf
    return abs(math.log(value / bound))


def _number(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True)
class Envelope:
    """The conditions of ``items`` evidence items: numeric ranges, categorical sets."""

    items: int
    ranges: dict[str, tuple[float, float]]
    values: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, conditions: Sequence[dict[str, Any]]) -> Envelope:
        ranges = {name: (min(c[name] for c in conditions), max(c[name] for c in conditions))
                  for name in NUMERIC}
        values = {name: tuple(sorted({str(c[name]) for c in conditions}))
                  for name in CATEGORICAL}
        return cls(len(conditions), ranges, values)

    def to_json(self) -> dict[str, Any]:
        return {"items": self.items,
                "ranges": {k: [float(f"{lo:.6g}"), float(f"{hi:.6g}")]
                           for k, (lo, hi) in self.ranges.items()},
                "values": {k: list(v) for k, v in self.values.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Envelope:
        try:
            ranges = {k: (float(data["ranges"][k][0]), float(data["ranges"][k][1]))
                      for k in NUMERIC}
            values = {k: tuple(str(v) for v in data["values"][k]) for k in CATEGORICAL}
            return cls(int(data["items"]), ranges, values)
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise DataError(where, f"envelope is incomplete ({err!r})") from None


@dataclass(frozen=True)
class Extrapolated:
    """One field of a Scenario outside the evidence."""

    field: str
    value: str
    models: tuple[str, ...]  # whose evidence does not reach it
    distance: float  # log units (1.0 for a categorical value)
    how_far: str

    def text(self) -> str:
        return f"{self.field}={self.value} ({'/'.join(self.models)}: {self.how_far})"


@dataclass(frozen=True)
class DomainCheck:
    """Where one Scenario lies relative to the domain of validity."""

    server: str
    client: str
    pair_measured: bool
    cpu_measured: bool
    fields: tuple[Extrapolated, ...] = ()
    #: Fields inside both models' envelopes but outside the measured pair's own.
    pair_fields: tuple[str, ...] = ()
    #: Models (or variants) with no evidence at all.
    unmeasured: tuple[str, ...] = ()
    #: The Scenario's testbed, if no evidence comes from it ('' when some does).
    testbed_unmeasured: str = ""

    @property
    def testbed_measured(self) -> bool:
        return not self.testbed_unmeasured

    @property
    def inside(self) -> bool:
        return (not self.fields and self.pair_measured and not self.unmeasured
                and self.testbed_measured)

    @property
    def names(self) -> tuple[str, ...]:
        """The extrapolated fields (``pair`` and ``model`` included), in order."""
        out = [f.field for f in self.fields]
        if not self.pair_measured:
            out.append("pair")
        if self.unmeasured:
            out.append("model")
        if not self.testbed_measured:
            out.append("testbed")
        return tuple(out)

    @property
    def distance(self) -> float:
        """The largest log distance of a numeric field outside (0 if none)."""
        return max((f.distance for f in self.fields if f.field in NUMERIC), default=0.0)

    def line(self) -> str:
        """One line naming each extrapolated field and how far ('' inside)."""
        parts = [f.text() for f in self.fields]
        if self.unmeasured:
            parts.append("no evidence runs " + ", ".join(self.unmeasured))
        if not self.pair_measured:
            parts.append(f"pair {self.server}→{self.client} never measured")
        if self.testbed_unmeasured:
            parts.append(f"testbed {self.testbed_unmeasured}: no evidence from it")
        return "; ".join(parts)


@dataclass
class Domain:
    """Envelopes per implementation and per measured pair (see the module docstring)."""

    models: dict[str, Envelope]
    pairs: dict[str, Envelope]
    #: Full names (``name@variant``) that some evidence runs.
    variants: frozenset[str] = frozenset()
    provenance: dict[str, Any] = field(default_factory=dict)
    #: The testbeds the evidence comes from (empty: not recorded, every one counts).
    testbeds: frozenset[str] = frozenset()

    # -- building ------------------------------------------------------------
    @classmethod
    def from_evidence(cls, evidence: Iterable[Any], cpus: Any,
                      provenance: dict[str, Any] | None = None) -> Domain:
        """The envelopes of Evidence items (``.scenario``; one-sided points count:
        they are conditions the fit used)."""
        return cls.from_scenarios([e.scenario for e in evidence], cpus, provenance)

    @classmethod
    def from_scenarios(cls, scenarios: Sequence[Any], cpus: Any,
                       provenance: dict[str, Any] | None = None) -> Domain:
        by_model: dict[str, list[dict[str, Any]]] = {}
        by_pair: dict[str, list[dict[str, Any]]] = {}
        variants: set[str] = set()
        testbeds: set[str] = set()
        arch: dict[str, str] = {}
        for s in scenarios:
            testbeds.add(str(getattr(s, "testbed", "")))
            if s.cpu not in arch:
                arch[s.cpu] = microarchitecture(s.cpu, cpus)
            c = scenario_conditions(s, arch[s.cpu])
            server, client = base(s.server), base(s.client)
            for name in {server, client}:
                by_model.setdefault(name, []).append(c)
            by_pair.setdefault(f"{server}|{client}", []).append(c)
            variants.update((s.server, s.client))
        return cls({k: Envelope.of(v) for k, v in sorted(by_model.items())},
                   {k: Envelope.of(v) for k, v in sorted(by_pair.items())},
                   frozenset(variants), dict(provenance or {}), frozenset(testbeds - {""}))

    # -- checking ------------------------------------------------------------
    def check(self, scenario: Any, cpus: Any = None, arch: str | None = None) -> DomainCheck:
        """Where ``scenario`` lies: extrapolated fields, pair and CPU measured or not.

        ``arch`` (the CPU's microarchitecture) may be given; else it is looked up
        in ``cpus`` (``"unknown"`` when it cannot be)."""
        if arch is None:
            arch = microarchitecture(scenario.cpu, cpus) if cpus is not None else "unknown"
        return self.check_many([scenario], [arch]).check(0)

    def check_many(self, scenarios: Sequence[Any], archs: Sequence[str]) -> DomainBatch:
        """:meth:`check` for many Scenarios at once (numpy over each group of scenarios
        that share the implementations and categorical conditions)."""
        n = len(scenarios)
        # NUMERIC's order: MTU, round-trip time (added + base), loss, buffer, link.
        values = np.array([(s.mtu_bytes, s.rtt_ms + s.base_rtt_us / 1e3, s.loss_pct,
                            s.rcvbuf_bytes, s.link_gbps) for s in scenarios],
                          dtype=float).reshape(n, len(NUMERIC))
        flag = ("false", "true")
        groups: dict[tuple[Any, ...], list[int]] = {}
        keys = [(s.server, s.client, arch, flag[s.gso], flag[s.gro], s.app, s.workload,
                 s.cipher) for s, arch in zip(scenarios, archs, strict=True)]
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        batch = DomainBatch(self, values, n)
        if self.testbeds:
            batch.testbeds = [str(getattr(s, "testbed", "")) for s in scenarios]
            batch.testbed_measured = np.array([t in self.testbeds for t in batch.testbeds],
                                              dtype=bool)
        for key, idx in groups.items():
            batch.add_group(key, np.asarray(idx))
        return batch

    # -- storage -------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "fields": list(FIELDS),
                "models": {k: v.to_json() for k, v in sorted(self.models.items())},
                "pairs": {k: v.to_json() for k, v in sorted(self.pairs.items())},
                "variants": sorted(self.variants), "provenance": self.provenance,
                "testbeds": sorted(self.testbeds)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"

    def dump(self, path: Path) -> None:
        Path(path).write_text(self.dumps())

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Domain:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            got = data.get("schema") if isinstance(data, dict) else type(data).__name__
            raise DataError(where, f"schema={got!r}, expected {SCHEMA!r}", field="schema")
        return cls({k: Envelope.from_json(v, f"{where}: models.{k}")
                    for k, v in data.get("models", {}).items()},
                   {k: Envelope.from_json(v, f"{where}: pairs.{k}")
                    for k, v in data.get("pairs", {}).items()},
                   frozenset(data.get("variants", [])), dict(data.get("provenance", {})),
                   frozenset(str(t) for t in data.get("testbeds", [])))

    @classmethod
    def load(cls, path: Path) -> Domain:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise DataError(path, f"cannot be read as JSON ({err})") from None
        return cls.from_json(data, str(path))


class DomainBatch:
    """The domain checks of many Scenarios: arrays for the interval model, a line each."""

    def __init__(self, domain: Domain, values: np.ndarray, n: int):
        self.domain = domain
        self.values = values
        self.pair_measured = np.ones(n, dtype=bool)
        self.cpu_measured = np.ones(n, dtype=bool)
        self.model_measured = np.ones(n, dtype=bool)
        #: Knobs outside the models' evidence (numeric and categorical, cpu not counted).
        self.knobs_outside = np.zeros(n, dtype=np.int64)
        #: The largest log distance of a numeric knob outside (0 inside).
        self.distance = np.zeros(n)
        #: Knobs inside the models' evidence but outside the measured pair's own.
        self.pair_knobs_outside = np.zeros(n, dtype=np.int64)
        #: Whether some evidence comes from the Scenario's testbed (and which it is).
        self.testbed_measured = np.ones(n, dtype=bool)
        self.testbeds = [""] * n
        self._groups: list[tuple[tuple[Any, ...], np.ndarray, dict[str, Any]]] = []
        self._row_group = np.zeros(n, dtype=np.int64)

    def add_group(self, key: tuple[Any, ...], idx: np.ndarray) -> None:
        server_full, client_full, arch = key[0], key[1], key[2]
        cats = dict(zip(CATEGORICAL, (arch, *key[3:]), strict=True))
        server, client = base(server_full), base(client_full)
        d = self.domain
        names = list(dict.fromkeys((server, client)))
        unmeasured = [m for m in names if m not in d.models]
        unmeasured += [f for f in dict.fromkeys((server_full, client_full))
                       if "@" in f and f not in d.variants and base(f) not in unmeasured]
        v = self.values[idx]
        m = len(idx)
        out = np.zeros((m, len(NUMERIC)), dtype=bool)
        dist = np.zeros((m, len(NUMERIC)))
        who: list[list[tuple[str, np.ndarray, np.ndarray]]] = [[] for _ in NUMERIC]
        cat_out: dict[str, list[str]] = {}
        for name in names:
            env = d.models.get(name)
            if env is None:
                continue
            o, dd = _outside(env, v)
            out |= o
            dist = np.maximum(dist, dd)
            for j in range(len(NUMERIC)):
                if o[:, j].any():
                    who[j].append((name, o[:, j], dd[:, j]))
            for f in CATEGORICAL:
                if str(cats[f]) not in env.values[f]:
                    cat_out.setdefault(f, []).append(name)
        pair = d.pairs.get(f"{server}|{client}")
        rows = idx
        self.pair_measured[rows] = pair is not None
        self.model_measured[rows] = not unmeasured
        self.cpu_measured[rows] = "cpu" not in cat_out and not any(
            m in unmeasured for m in (server, client))
        knobs = out.sum(axis=1) + sum(1 for f in cat_out if f != "cpu")
        self.knobs_outside[rows] = knobs
        self.distance[rows] = dist.max(axis=1)
        if pair is not None:
            po, _ = _outside(pair, v)
            pcat = sum(1 for f in CATEGORICAL if f not in cat_out
                       and str(cats[f]) not in pair.values[f])
            self.pair_knobs_outside[rows] = (po & ~out).sum(axis=1) + pcat
        self._row_group[rows] = len(self._groups)
        self._groups.append((key, idx, {"out": out, "dist": dist, "who": who,
                                        "cat_out": cat_out, "unmeasured": unmeasured,
                                        "pair": pair, "cats": cats,
                                        "pos": {int(i): k for k, i in enumerate(idx)}}))

    def check(self, i: int) -> DomainCheck:
        """The full :class:`DomainCheck` of row ``i``."""
        key, _idx, g = self._groups[self._row_group[i]]
        k = g["pos"][i]
        server_full, client_full = key[0], key[1]
        fields = []
        for j, name in enumerate(NUMERIC):
            if not g["out"][k, j]:
                continue
            value = float(self.values[i, j])
            models = tuple(mname for mname, mask, _ in g["who"][j] if mask[k])
            far = max((_far(name, value, self.domain.models[mname].ranges[name])
                       for mname in models), key=lambda t: t[0])
            fields.append(Extrapolated(name, _shown(name, value), models,
                                       float(g["dist"][k, j]), far[1]))
        for name in CATEGORICAL:
            if name in g["cat_out"]:
                models = tuple(g["cat_out"][name])
                known = sorted(set().union(*(self.domain.models[mm].values[name]
                                             for mm in models)))
                fields.append(Extrapolated(name, str(g["cats"][name]), models, 1.0,
                                           "evidence: " + ", ".join(known)))
        order = {f: n for n, f in enumerate(FIELDS)}
        fields.sort(key=lambda f: order[f.field])
        pair_fields: tuple[str, ...] = ()
        if g["pair"] is not None:
            named = {f.field for f in fields}
            pair_fields = tuple(
                f for f in FIELDS if f not in named and f in NUMERIC
                and not g["pair"].ranges[f][0] <= self.values[i, list(NUMERIC).index(f)]
                <= g["pair"].ranges[f][1]) + tuple(
                f for f in CATEGORICAL if f not in named
                and str(g["cats"][f]) not in g["pair"].values[f])
        return DomainCheck(server_full, client_full, bool(self.pair_measured[i]),
                           bool(self.cpu_measured[i]), tuple(fields), pair_fields,
                           tuple(g["unmeasured"]),
                           "" if self.testbed_measured[i] else self.testbeds[i])

    def lines(self) -> list[str]:
        """The one-line description of every row ('' inside the evidence), as
        :meth:`DomainCheck.line` gives it, built field by field over each group."""
        out = [""] * len(self.values)
        for key, idx, g in self._groups:
            server_full, client_full = key[0], key[1]
            tail = []
            for name in CATEGORICAL:
                if name in g["cat_out"]:
                    models = g["cat_out"][name]
                    known = sorted(set().union(*(self.domain.models[m].values[name]
                                                 for m in models)))
                    tail.append(f"{name}={g['cats'][name]} ({'/'.join(models)}: evidence: "
                                f"{', '.join(known)})")
            if g["unmeasured"]:
                tail.append("no evidence runs " + ", ".join(g["unmeasured"]))
            if g["pair"] is None:
                tail.append(f"pair {server_full}→{client_full} never measured")
            if not tail and not g["out"].any():
                continue
            columns = [self._field_texts(j, name, idx, g) for j, name in enumerate(NUMERIC)
                       if g["out"][:, j].any()]
            ending = "; ".join(tail)
            rows = zip(*columns, strict=True) if columns else ([] for _ in idx)
            for i, parts in zip(idx.tolist(), rows, strict=True):
                text = "; ".join(p for p in parts if p)
                out[i] = f"{text}; {ending}" if text and ending else text or ending
        for i in np.flatnonzero(~self.testbed_measured).tolist():
            note = f"testbed {self.testbeds[i]}: no evidence from it"
            out[i] = f"{out[i]}; {note}" if out[i] else note
        return out

    def _field_texts(self, j: int, name: str, idx: np.ndarray, g: dict[str, Any]
                     ) -> list[str]:
        """Per row of a group: the text of numeric field ``j`` outside ('' inside)."""
        unit = NUMERIC[name]
        who = g["who"][j]
        names = [m for m, _, _ in who]
        masks = np.stack([mask for _, mask, _ in who], axis=1)
        dists = np.where(masks, np.stack([d for _, _, d in who], axis=1), -np.inf)
        worst = np.argmax(dists, axis=1).tolist()
        combos = (masks * (1 << np.arange(len(who)))).sum(axis=1).tolist()
        labels = {c: "/".join(n for k, n in enumerate(names) if c >> k & 1)
                  for c in set(combos)}
        spans = [self.domain.models[m].ranges[name] for m in names]
        shown = [(lo, hi, _number(lo) if lo == hi else f"{_number(lo)}–{_number(hi)}")
                 for lo, hi in spans]
        values = self.values[idx, j].tolist()
        out = []
        for value, inside, w, c in zip(values, ~g["out"][:, j], worst, combos, strict=True):
            if inside:
                out.append("")
                continue
            lo, hi, span = shown[w]
            bound = hi if value > hi else lo
            if bound > 0 and value > 0:
                r = value / bound if value > hi else bound / value
                far = ("×" if value > hi else "÷") + (f"{r:.2g}" if r < 10 else str(round(r)))
            else:
                far = f"{value - bound:+.3g} {unit}"
            out.append(f"{name}={value:.4g} ({labels[c]}: {span} {unit}, {far})")
        return out


def _outside(env: Envelope, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which values of ``v`` (rows × NUMERIC) lie outside ``env``, and how far (log units)."""
    lo = np.array([env.ranges[f][0] for f in NUMERIC])
    hi = np.array([env.ranges[f][1] for f in NUMERIC])
    out = (v < lo) | (v > hi)
    bound = np.where(v > hi, hi, lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        dist = np.abs(np.log(v / bound))
        j = list(NUMERIC).index("loss_pct")
        dist[:, j] = np.abs(np.log((v[:, j] + LOSS_FLOOR_PCT) / (bound[:, j] + LOSS_FLOOR_PCT)))
    dist = np.where(out, np.nan_to_num(dist, nan=math.inf, posinf=math.inf), 0.0)
    return out, dist


def _far(name: str, value: float, span: tuple[float, float]) -> tuple[float, str]:
    """(log distance, text) of ``value`` outside ``span``: the envelope and how far."""
    lo, hi = span
    unit = NUMERIC[name]
    bound = hi if value > hi else lo
    if bound > 0 and value > 0:
        far = f"×{_ratio(value / bound)}" if value > hi else f"÷{_ratio(bound / value)}"
    else:
        far = f"{value - bound:+.3g} {unit}"
    shown = _number(lo) if lo == hi else f"{_number(lo)}–{_number(hi)}"
    return log_distance(name, value, lo, hi), f"{shown} {unit}, {far}"


def base(name: str) -> str:
    """An implementation's name without its ``@variant``."""
    return name.partition("@")[0]


def microarchitecture(query: str, cpus: Any) -> str:
    """The microarchitecture of a catalog CPU named by ``query``, or ``"unknown"``."""
    try:
        return str(cpus.find(query).microarchitecture)
    except Exception:  # an unknown or ambiguous name: resolve() refuses it elsewhere
        return "unknown"


def _ratio(r: float) -> str:
    return f"{r:.2g}" if r < 10 else str(round(r))


def _shown(name: str, value: Any) -> str:
    if name in NUMERIC:
        return _number(float(value))
    return str(value)
