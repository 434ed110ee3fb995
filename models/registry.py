"""The model registry: every CostModel, the CPU catalog and the pair-interplay table.

Engines are constructed with a Registry; nothing here reads environment
variables. ``Registry.packaged()`` loads the models shipped in
``quiclab/models/fitted`` (written by ``quiclab calibrate``); ``Registry.load(dir)``
loads another directory (e.g. models fitted from fresh testbed runs).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.errors import DataError, ScenarioError
from quiclab.models.costmodel import CostModel
from quiclab.models.cpus import CpuCatalog
from quiclab.models.domain import FILE as DOMAIN_FILE
from quiclab.models.domain import Domain
from quiclab.models.intervals import DEFAULT_LEVEL, IntervalModel, check_level
from quiclab.models.intervals import FILE as INTERVALS_FILE
from quiclab.models.pipelines import HostParams
from quiclab.models.testbeds import UNSEEN, Testbed, Testbeds
from quiclab.paths import tree_digest

FRESH_PREFIX = "fresh-"  # fresh-run hosts: fresh-<hostname> (datasets.testbeds.fresh_id)

INTEROP_SCHEMA = "quiclab.interop/2"
#: One set of effects for every testbed; read as QIR-10G's.
INTEROP_SCHEMA_V1 = "quiclab.interop/1"
#: The calibrated pipeline/placement parameters beside the cost models.
PIPELINE_FILE = "pipeline.json"
TESTBEDS_FILE = "testbeds.json"


@dataclass(frozen=True)
class PairEffects:
    """One testbed's fitted pair interplay (log-scale effects; see :class:`Interop`)."""

    server_effect: dict[str, float] = field(default_factory=dict)
    client_effect: dict[str, float] = field(default_factory=dict)
    pair_effect: dict[str, float] = field(default_factory=dict)  # key "server|client"
    pair_sd: dict[str, float] = field(default_factory=dict)
    #: log of the CPU cost per packet of a pair relative to the stacks' own costs
    #: ("server|client"), both sides: a pair whose interplay leaves its endpoints
    #: partly idle also spends more CPU per packet (smaller batches per event-loop
    #: turn; QIR-10G: LSQUIC server with quiche client, 70 % CPU on both sides at
    #: 1372 Mbit/s, 5.5 µs per packet instead of 3.5). Fitted only where a pair's
    #: CPU utilisation was measured; 0 elsewhere.
    pair_overhead: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        r = lambda d: {k: float(f"{v:.6g}") for k, v in sorted(d.items())}  # noqa: E731
        return {"server_effect": r(self.server_effect), "client_effect": r(self.client_effect),
                "pair_effect": r(self.pair_effect), "pair_sd": r(self.pair_sd),
                "pair_overhead": r(self.pair_overhead)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> PairEffects:
        if not isinstance(data, dict):
            raise DataError(where, "expected a mapping of effects")
        try:
            return cls(*({k: float(v) for k, v in (data.get(name) or {}).items()}
                         for name in ("server_effect", "client_effect", "pair_effect",
                                      "pair_sd", "pair_overhead")))
        except (TypeError, ValueError, AttributeError) as err:
            raise DataError(where, f"an effect is not a number ({err})") from None

    def empty(self) -> bool:
        return not (self.server_effect or self.client_effect or self.pair_effect
                    or self.pair_overhead)


@dataclass(frozen=True)
class Interop:
    """How much of the time a (server, client) pair's bottleneck side is busy, per testbed.

    Seed 002 §4.3: heterogeneous pairs are "usually not CPU-limited" — LSQUIC
    server with quiche client runs at ~70 % CPU on both sides, limited by how the
    two libraries' ACK and flow-control behaviour interlock. ``busy`` is that
    fraction: ``exp(server_effect + client_effect + pair_effect)``, capped at 1.
    The effects are fitted to one testbed's goodput (with shrinkage; see
    quiclab.calibration.fit), so they act only on Scenarios of that testbed: on
    any other (``unseen`` included) a pair is never capped by them, and the
    prediction says so and carries the spread of the effects seen elsewhere in
    its parameter interval.
    """

    #: Fitted effects by testbed id.
    testbeds: dict[str, PairEffects] = field(default_factory=dict)
    #: Measured data packets per ACK of a pair ("server|client"), which can differ
    #: much from the client's usual frequency (QIR-10G: LSQUIC server with quiche
    #: client, ~770 packets per ACK; quiche with quiche, ~14). A measurement of the
    #: two stacks' ACK behaviour (UDP counters), not a fit to goodput.
    pair_ack_every: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_testbed(cls, testbed: str, **effects: dict[str, float]) -> Interop:
        """An Interop with one testbed's effects (``server_effect=…``, ``pair_effect=…``)."""
        return cls({testbed: PairEffects(**effects)})

    def effects(self, testbed: str) -> PairEffects | None:
        return self.testbeds.get(testbed)

    def overhead(self, server: str, client: str, testbed: str) -> float:
        """Factor on both endpoints' CPU costs in this pairing (1.0 if not fitted)."""
        import math

        fx = self.testbeds.get(testbed)
        return math.exp(fx.pair_overhead.get(f"{server}|{client}", 0.0)) if fx else 1.0

    def ack_every(self, server: str, client: str) -> float | None:
        return self.pair_ack_every.get(f"{server}|{client}")

    def spread(self) -> float:
        """The sd (log units) of the busy fractions below 1 fitted on any testbed: how
        far a pair's interplay can take it below its CPU rate where none was fitted."""
        import math

        values = [min(0.0, fx.server_effect.get(p.split("|")[0], 0.0)
                      + fx.client_effect.get(p.split("|")[1], 0.0) + e)
                  for fx in self.testbeds.values() for p, e in fx.pair_effect.items()]
        if len(values) < 2:
            return 0.3
        mean = sum(values) / len(values)
        return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))

    def busy(self, server: str, client: str, testbed: str) -> tuple[float, float, float, str]:
        """(busy fraction, lo, hi, source) for a pair on ``testbed``.

        1.0 where ``testbed`` has no fitted effects: an effect fitted on another
        testbed never binds here; lo then spans the effects seen elsewhere.
        """
        import math

        fx = self.testbeds.get(testbed)
        if fx is None or fx.empty():
            sd = self.spread()
            lo = min(1.0, math.exp(-1.96 * sd))
            fitted = ", ".join(sorted(self.testbeds)) or "none"
            # Where this very pair was measured, its interplay there bounds the interval:
            # the pair's behaviour may come along to this testbed, or may not.
            elsewhere = {tb: self.busy(server, client, tb) for tb, other in
                         sorted(self.testbeds.items()) if f"{server}|{client}" in other.pair_effect}
            seen = "; ".join(f"busy {b[0]:.2f} on {tb}" for tb, b in elsewhere.items())
            if elsewhere:
                lo = min(lo, *(b[1] for b in elsewhere.values()))
            return (1.0, lo, 1.0,
                    f"none: no pair interplay fitted on testbed {testbed} (fitted on: "
                    f"{fitted}); the interval spans theirs"
                    + (f"; this pair: {seen}" if seen else ""))
        s = fx.server_effect.get(server, 0.0)
        c = fx.client_effect.get(client, 0.0)
        key = f"{server}|{client}"
        if key in fx.pair_effect:
            e = s + c + fx.pair_effect[key]
            sd = fx.pair_sd.get(key, 0.05)
            src = f"fit: pair {key} on {testbed}"
        else:
            e = s + c
            sd = fx.pair_sd.get("_unseen", 0.3)
            src = f"fit: server and client effects on {testbed} (pair not measured)"
        value = min(1.0, math.exp(e))
        return value, min(1.0, math.exp(e - 1.96 * sd)), min(1.0, math.exp(e + 1.96 * sd)), src

    def empty(self) -> bool:
        return all(fx.empty() for fx in self.testbeds.values())

    def to_json(self) -> dict[str, Any]:
        r = lambda d: {k: float(f"{v:.6g}") for k, v in sorted(d.items())}  # noqa: E731
        return {"schema": INTEROP_SCHEMA,
                "testbeds": {k: v.to_json() for k, v in sorted(self.testbeds.items())},
                "pair_ack_every": r(self.pair_ack_every), "provenance": self.provenance}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Interop:
        schema = data.get("schema")
        if schema == INTEROP_SCHEMA_V1:
            # Version 1 held one set of effects, fitted to QIR-10G and seed 000 together.
            effects = PairEffects.from_json(data, where)
            return cls({"qir10g": effects},
                       {k: float(v) for k, v in data.get("pair_ack_every", {}).items()},
                       dict(data.get("provenance", {})))
        if schema != INTEROP_SCHEMA:
            raise DataError(where, f"schema={schema!r}, expected {INTEROP_SCHEMA!r}")
        testbeds = data.get("testbeds") or {}
        if not isinstance(testbeds, dict):
            raise DataError(where, "testbeds: expected a mapping of testbed id to effects")
        return cls({str(k): PairEffects.from_json(v, f"{where}: testbeds.{k}")
                    for k, v in testbeds.items()},
                   {k: float(v) for k, v in data.get("pair_ack_every", {}).items()},
                   dict(data.get("provenance", {})))


class Registry:
    """Cost models by implementation name, plus CPUs and pair interplay."""

    def __init__(self, models: dict[str, CostModel], cpus: CpuCatalog,
                 interop: Interop | None = None, source: str = "<memory>",
                 track_versions: bool = True, host: HostParams | None = None,
                 testbeds: Testbeds | None = None):
        self.models = dict(models)
        #: Calibrated pipeline, placement and runtime-thread parameters
        #: (``pipeline.json``); assumed values when absent.
        self.host = host or HostParams.assumed()
        self._host_fitted = host is not None
        self._track_versions = track_versions
        # Calibration builds thousands of throw-away registries: skip hashing.
        self._versions: dict[str, str] | None = (
            None if track_versions else {"calibration": "in-progress"})
        self.cpus = cpus
        #: The testbeds (``testbeds.json``); the stated ones when absent.
        self.testbeds = Testbeds.stated()
        self.set_testbeds(testbeds or Testbeds.stated())
        self.interop = interop or Interop()
        self.source = source
        #: The evidence's envelope per model and pair (``domain.json``); None: unknown.
        self.domain: Domain | None = None
        #: The predictive-interval model (``intervals.json``); None: parameter intervals only.
        self.intervals: IntervalModel | None = None
        #: Why the interval model may not describe these models ('' when it does).
        self.intervals_stale = ""
        self._level = DEFAULT_LEVEL

    @property
    def interval_level(self) -> float:
        """The level of every Prediction's interval (default 0.9; ``--level``)."""
        return self._level

    @interval_level.setter
    def interval_level(self, level: float) -> None:
        check_level(level)
        self._level = float(level)
        cached = getattr(self, "_versions", None)
        if cached is not None and "calibration" not in cached:
            self._versions = None  # the level is part of what a prediction depends on

    def set_testbeds(self, testbeds: Testbeds) -> None:
        """Use ``testbeds``; hosts of unknown CPU join the CPU catalog as stand-in
        entries carrying their testbed's fitted speed (models.cpus.unknown_cpu)."""
        from quiclab.models.cpus import unknown_cpu

        self.testbeds = testbeds
        for tb in testbeds.unknown_cpus():
            assert tb.speed is not None
            self.cpus = self.cpus.with_cpu(unknown_cpu(
                tb.cpu_name, (tb.speed.value, tb.speed.lo, tb.speed.hi),
                f"testbed {tb.id}: {tb.speed.source}"))
        if self._track_versions:
            self._versions = None  # the testbeds are part of every prediction's provenance

    def testbed(self, key: str, field: str = "testbed") -> Testbed | None:
        """The testbed a Scenario names (None for ``unseen``); ScenarioError lists the known.

        Fresh runs name their host (``fresh-<hostname>``); a host these models
        were never fitted on is, to them, an unseen testbed — predicted with no
        testbed-specific effect and flagged by the domain check — not an error.
        """
        if key == UNSEEN:
            return None
        try:
            return self.testbeds.get(key)
        except KeyError:
            if key.startswith(FRESH_PREFIX):
                return None
            raise ScenarioError(field, key, "one of: " + ", ".join(
                [*self.testbeds.ids(), UNSEEN])) from None

    # -- loading ------------------------------------------------------------
    @classmethod
    def load(cls, directory: Path, cpus: CpuCatalog | None = None) -> Registry:
        directory = Path(directory)
        if not directory.is_dir():
            raise DataError(directory, "model directory does not exist (run `quiclab calibrate`)")
        models: dict[str, CostModel] = {}
        interop = None
        host = None
        cpus = cpus or CpuCatalog.packaged()
        extra = directory / "cpus.json"
        if extra.is_file():
            # Models fitted on another host (fresh testbed runs) carry that host's CPU.
            data = json.loads(extra.read_text())
            more = CpuCatalog.from_json({**data, "microarchitectures":
                                         {k: vars(v) | {"ipc": v.ipc} for k, v in
                                          cpus.microarchitectures.items()}}, str(extra))
            for cpu in more.cpus:
                cpus = cpus.with_cpu(cpu)
        for path in sorted(directory.glob("*.json")):
            if path.name == "cpus.json":
                continue
            if path.name == "interop.json":
                interop = Interop.from_json(json.loads(path.read_text()), str(path))
                continue
            if path.name == PIPELINE_FILE:
                host = HostParams.load(path)
                continue
            if path.name in (TESTBEDS_FILE, DOMAIN_FILE, INTERVALS_FILE):
                continue  # the seeds' testbeds, the evidence's envelope, the intervals
            model = CostModel.load(path)
            models[model.implementation] = model
        if not models:
            raise DataError(directory, "no cost models (*.json) found (run `quiclab calibrate`)")
        testbeds = (Testbeds.load(directory / TESTBEDS_FILE)
                    if (directory / TESTBEDS_FILE).is_file() else None)
        registry = cls(models, cpus, interop, str(directory), host=host, testbeds=testbeds)
        if (directory / DOMAIN_FILE).is_file():
            registry.domain = Domain.load(directory / DOMAIN_FILE)
        if (directory / INTERVALS_FILE).is_file():
            from quiclab.models.intervals import models_digest

            registry.intervals = IntervalModel.load(directory / INTERVALS_FILE)
            registry._level = registry.intervals.level
            digest = models_digest(directory)
            fitted_for = registry.intervals.models_digest
            if fitted_for and fitted_for != digest:
                registry.intervals_stale = (
                    f"{INTERVALS_FILE} was fitted for other models ({fitted_for}, these are "
                    f"{digest}): re-run `quiclab calibrate --cv all`")
        return registry

    @classmethod
    def packaged(cls) -> Registry:
        root = resources.files("quiclab.models").joinpath("fitted")
        return cls.load(Path(str(root)))

    # -- lookup -------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.models)

    def model(self, name: str, field: str = "server") -> CostModel:
        """The model for ``name`` or ``name@variant``; ScenarioError lists what exists."""
        base, _, variant = name.partition("@")
        if base not in self.models:
            raise ScenarioError(field, name, "one of: " + ", ".join(self.names())
                                + " (optionally @variant)")
        model = self.models[base]
        if not variant:
            return model
        cache: dict[str, CostModel] = self.__dict__.setdefault("_variant_cache", {})
        if name in cache:
            return cache[name]
        try:
            cache[name] = model.with_variant(variant)
            return cache[name]
        except KeyError:
            known = ", ".join(f"{base}@{v}" for v in sorted(model.variants)) or "none"
            raise ScenarioError(field, name, f"a known variant: {known}") from None

    def versions(self) -> dict[str, str]:
        """Model name → version string plus a short content hash, for provenance.

        Also the other inputs every prediction depends on, each as a short hash:
        the CPU catalog as loaded (``models/cpus.json`` with a ``cpus.json`` of the
        models directory), the pipeline presets (``models/pipelines.json``), the
        testbeds and the Python of ``quiclab.models``. Sweep content hashes, the
        reproduction cache and ``quiclab validate``'s staleness check use these
        versions, so a change to any of them computes afresh.
        """
        cached = getattr(self, "_versions", None)
        if cached is not None:
            return cached
        out = {}
        for name, m in sorted(self.models.items()):
            digest = hashlib.sha256(m.dumps().encode()).hexdigest()[:10]
            out[name] = f"{m.version}+{digest}"
        if not self.interop.empty():
            blob = json.dumps(self.interop.to_json(), sort_keys=True).encode()
            out["interop"] = hashlib.sha256(blob).hexdigest()[:10]
        if self._host_fitted:
            out["pipeline"] = hashlib.sha256(self.host.dumps().encode()).hexdigest()[:10]
        out["cpus"] = _digest(_cpus_json(self.cpus))
        out["pipelines"] = _digest(_packaged_text("pipelines.json"))
        out["testbeds"] = _digest({k: v.to_json() for k, v in sorted(self.testbeds.items.items())})
        out["models-code"] = models_code_digest()
        if self.domain is not None:
            out["domain"] = _digest(self.domain.to_json())
        if self.intervals is not None:
            out["intervals"] = _digest(self.intervals.to_json())
            out["interval-level"] = f"{self._level:g}"
        self._versions = out
        return out


def _digest(data: Any) -> str:
    """SHA-256 (10 hex digits) of text or JSON-safe data."""
    text = data if isinstance(data, str) else json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _cpus_json(cpus: CpuCatalog) -> dict[str, Any]:
    """Everything of a CPU catalog that a prediction can depend on, JSON-safe."""
    return {"rule": cpus.rule,
            "microarchitectures": {k: vars(v) for k, v in sorted(cpus.microarchitectures.items())},
            "cpus": sorted((vars(c) for c in cpus.cpus), key=lambda c: str(c["name"]))}


def _packaged_text(name: str) -> str:
    return resources.files("quiclab.models").joinpath(name).read_text()


def models_code_digest() -> str:
    """SHA-256 (10 hex digits) of the Python of ``quiclab.models``, read once per process."""
    return tree_digest(Path(__file__).resolve().parent, (".py",))[:10]
