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
from quiclab.models.pipelines import HostParams
from quiclab.models.testbeds import Testbeds
from quiclab.paths import tree_digest

INTEROP_SCHEMA = "quiclab.interop/1"
#: The calibrated pipeline/placement parameters beside the cost models.
PIPELINE_FILE = "pipeline.json"
TESTBEDS_FILE = "testbeds.json"


@dataclass(frozen=True)
class Interop:
    """How much of the time a (server, client) pair's bottleneck side is busy.

    Seed 002 §4.3: heterogeneous pairs are "usually not CPU-limited" — LSQUIC
    server with quiche client runs at ~70 % CPU on both sides, limited by how the
    two libraries' ACK and flow-control behaviour interlock. ``busy`` is that
    fraction: ``exp(server_effect + client_effect + pair_effect)``, capped at 1.
    Effects are log-scale, fitted with shrinkage (see quiclab.calibration.interop).
    """

    server_effect: dict[str, float] = field(default_factory=dict)
    client_effect: dict[str, float] = field(default_factory=dict)
    pair_effect: dict[str, float] = field(default_factory=dict)  # key "server|client"
    pair_sd: dict[str, float] = field(default_factory=dict)
    #: Measured data packets per ACK of a pair ("server|client"), which can differ
    #: much from the client's usual frequency (QIR-10G: LSQUIC server with quiche
    #: client, ~770 packets per ACK; quiche with quiche, ~14).
    pair_ack_every: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    #: log of the CPU cost per packet of a pair relative to the stacks' own costs
    #: ("server|client"), both sides: a pair whose interplay leaves its endpoints
    #: partly idle also spends more CPU per packet (smaller batches per event-loop
    #: turn; QIR-10G: LSQUIC server with quiche client, 70 % CPU on both sides at
    #: 1372 Mbit/s, 5.5 µs per packet instead of 3.5). Fitted only where a pair's
    #: CPU utilisation was measured; 0 elsewhere.
    pair_overhead: dict[str, float] = field(default_factory=dict)

    def overhead(self, server: str, client: str) -> float:
        """Factor on both endpoints' CPU costs in this pairing (1.0 if not fitted)."""
        import math

        return math.exp(self.pair_overhead.get(f"{server}|{client}", 0.0))

    def ack_every(self, server: str, client: str) -> float | None:
        return self.pair_ack_every.get(f"{server}|{client}")

    def busy(self, server: str, client: str) -> tuple[float, float, float, str]:
        """(busy fraction, lo, hi, source) for a pair; 1.0 for unknown implementations."""
        import math

        s = self.server_effect.get(server, 0.0)
        c = self.client_effect.get(client, 0.0)
        key = f"{server}|{client}"
        if key in self.pair_effect:
            e = s + c + self.pair_effect[key]
            sd = self.pair_sd.get(key, 0.05)
            src = f"fit: pair {key}"
        else:
            e = s + c
            sd = self.pair_sd.get("_unseen", 0.3)
            src = "fit: server and client effects (pair not measured)"
        value = min(1.0, math.exp(e))
        return value, min(1.0, math.exp(e - 1.96 * sd)), min(1.0, math.exp(e + 1.96 * sd)), src

    def to_json(self) -> dict[str, Any]:
        r = lambda d: {k: float(f"{v:.6g}") for k, v in sorted(d.items())}  # noqa: E731
        return {"schema": INTEROP_SCHEMA, "server_effect": r(self.server_effect),
                "client_effect": r(self.client_effect), "pair_effect": r(self.pair_effect),
                "pair_sd": r(self.pair_sd), "pair_ack_every": r(self.pair_ack_every),
                "pair_overhead": r(self.pair_overhead),
                "provenance": self.provenance}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> Interop:
        if data.get("schema") != INTEROP_SCHEMA:
            raise DataError(where, f"schema={data.get('schema')!r}, expected {INTEROP_SCHEMA!r}")
        return cls({k: float(v) for k, v in data.get("server_effect", {}).items()},
                   {k: float(v) for k, v in data.get("client_effect", {}).items()},
                   {k: float(v) for k, v in data.get("pair_effect", {}).items()},
                   {k: float(v) for k, v in data.get("pair_sd", {}).items()},
                   {k: float(v) for k, v in data.get("pair_ack_every", {}).items()},
                   dict(data.get("provenance", {})),
                   {k: float(v) for k, v in data.get("pair_overhead", {}).items()})


class Registry:
    """Cost models by implementation name, plus CPUs and pair interplay."""

    def __init__(self, models: dict[str, CostModel], cpus: CpuCatalog,
                 interop: Interop | None = None, source: str = "<memory>",
                 track_versions: bool = True, host: HostParams | None = None):
        self.models = dict(models)
        #: Calibrated pipeline, placement and runtime-thread parameters
        #: (``pipeline.json``); assumed values when absent.
        self.host = host or HostParams.assumed()
        #: The seeds' testbeds (``testbeds.json``); the stated ones when absent.
        self.testbeds = Testbeds.stated()
        self._host_fitted = host is not None
        if not track_versions:
            # Calibration builds thousands of throw-away registries: skip hashing.
            self._versions: dict[str, str] | None = {"calibration": "in-progress"}
        self.cpus = cpus
        self.interop = interop or Interop()
        self.source = source

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
            if path.name == TESTBEDS_FILE:
                continue  # the seeds' testbeds (quiclab.models.testbeds), not a cost model
            model = CostModel.load(path)
            models[model.implementation] = model
        if not models:
            raise DataError(directory, "no cost models (*.json) found (run `quiclab calibrate`)")
        registry = cls(models, cpus, interop, str(directory), host=host)
        if (directory / TESTBEDS_FILE).is_file():
            registry.testbeds = Testbeds.load(directory / TESTBEDS_FILE)
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
        if self.interop.pair_effect or self.interop.server_effect:
            blob = json.dumps(self.interop.to_json(), sort_keys=True).encode()
            out["interop"] = hashlib.sha256(blob).hexdigest()[:10]
        if self._host_fitted:
            out["pipeline"] = hashlib.sha256(self.host.dumps().encode()).hexdigest()[:10]
        out["cpus"] = _digest(_cpus_json(self.cpus))
        out["pipelines"] = _digest(_packaged_text("pipelines.json"))
        out["testbeds"] = _digest({k: v.to_json() for k, v in sorted(self.testbeds.items.items())})
        out["models-code"] = models_code_digest()
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
