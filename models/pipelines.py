"""Pipeline presets (where each packet-processing stage runs) and their calibrated parameters.

Two kinds of data, kept apart as the CPU catalog keeps its rule apart from
fitted models:

- :class:`PipelineCatalog` — the named configurations of ``models/pipelines.json``
  (``Scenario.pipeline``): for each endpoint, which stages share a core, whether
  a core busy-polls, whether I/O bypasses the kernel, the inter-core queue depth.
  These are facts about the seeds' set-ups, each with its source.
- :class:`HostParams` — what calibration fits for them
  (``models/fitted/pipeline.json``, written by
  :mod:`quiclab.calibration.pipeline`): the per-message hand-off cost between
  cores, the kernel-bypass I/O costs, per-implementation stage profiles, the
  core-placement costs (near and far from the NIC) and the runtime threads that
  do not add capacity.
  Every value is a :class:`~quiclab.models.costmodel.Param` with its interval
  and provenance; times are ns on the reference CPU (AMD EPYC 7543), moved to
  a Scenario's CPU by the same clock×IPC rule as the cost models.

Stages (Mukherjee et al. 2025 §3): ``io`` (NIC driver, interrupts or busy
polling), ``udpip`` (network stack and socket calls), ``crypto``, ``protocol``
(QUIC without crypto) and ``app``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.errors import DataError, ScenarioError
from quiclab.models.costmodel import Param

SCHEMA = "quiclab.pipelines/1"
PARAMS_SCHEMA = "quiclab.pipeline-params/2"
STAGES = ("io", "udpip", "crypto", "protocol", "app")
IO_KINDS = ("kernel", "bypass")
#: The Scenario value for "the stack as shipped" (no preset applied).
NONE = "none"


@dataclass(frozen=True)
class Layout:
    """One endpoint's cores: ``cores[i]`` is the tuple of stages core ``i`` runs.

    Raises DataError (via :meth:`validate`) unless every stage is on exactly one
    core; with kernel I/O, ``io`` and ``udpip`` must share a core (the kernel,
    not the stack, decides where its network path runs).
    """

    cores: tuple[tuple[str, ...], ...]
    busy_poll: tuple[bool, ...]

    def validate(self, where: str, io: str) -> None:
        seen = [s for core in self.cores for s in core]
        unknown = sorted(set(seen) - set(STAGES))
        if unknown:
            raise DataError(where, f"unknown stage {unknown[0]!r} (known: {', '.join(STAGES)})")
        if sorted(seen) != sorted(STAGES):
            raise DataError(where, "every stage must run on exactly one core: "
                            + ", ".join(STAGES))
        if len(self.busy_poll) != len(self.cores):
            raise DataError(where, "busy_poll needs one flag per core")
        if io == "kernel" and self.core_of("io") != self.core_of("udpip"):
            raise DataError(where, "with kernel I/O, io and udpip must share a core")

    def core_of(self, stage: str) -> int:
        for i, core in enumerate(self.cores):
            if stage in core:
                return i
        raise KeyError(stage)

    def label(self) -> str:
        return " | ".join("+".join(c) + ("*" if bp else "")
                          for c, bp in zip(self.cores, self.busy_poll, strict=True))

    @classmethod
    def from_json(cls, data: Any, where: str) -> Layout:
        try:
            cores = tuple(tuple(str(s) for s in core) for core in data["cores"])
            busy = tuple(bool(b) for b in data.get("busy_poll", [False] * len(cores)))
        except (KeyError, TypeError) as err:
            raise DataError(where, f"malformed layout ({err})") from None
        return cls(cores, busy)


@dataclass(frozen=True)
class Preset:
    """A named pipeline configuration (see ``models/pipelines.json``)."""

    name: str
    description: str
    source: str
    io: str = "kernel"
    queue_messages: int = 256
    sender: Layout | None = None
    receiver: Layout | None = None
    #: For a preset that depends on the implementation (``mukherjee-best``):
    #: implementation → preset name, and the candidates tried for any other.
    per_implementation: dict[str, str] = field(default_factory=dict)
    candidates: tuple[str, ...] = ()

    @property
    def is_choice(self) -> bool:
        return bool(self.candidates)

    def layout(self, role: str) -> Layout:
        out = self.sender if role == "sender" else self.receiver
        if out is None:
            raise ValueError(f"preset {self.name!r} has no fixed layout")
        return out


@dataclass(frozen=True)
class Builtin:
    """A build whose stack is itself pipelined or kernel-bypassing (``picoquic@dpdk``).

    With ``Scenario.pipeline = none`` that endpoint runs ``preset``; ``crypto``
    names a crypto engine whose fitted cost factor
    (:attr:`HostParams.crypto_engines`) replaces the cost model's crypto (Fusion
    in ``picoquic@dpdk-fusion``).
    """

    implementation: str
    preset: str
    source: str
    crypto: str = ""


class PipelineCatalog:
    """All named presets; ``get`` refuses an unknown name with the list of known ones."""

    def __init__(self, presets: dict[str, Preset], stages: dict[str, str],
                 builtin: dict[str, Builtin] | None = None,
                 idle_polling: dict[str, str] | None = None):
        self.presets = dict(presets)
        self.stages = dict(stages)
        self.builtin = dict(builtin or {})
        #: Stacks whose loop polls its socket when idle (on the CPU, in the I/O path).
        self.idle_polling = dict(idle_polling or {})
        for p in self.presets.values():
            for name in (*p.per_implementation.values(), *p.candidates):
                if name not in self.presets or self.presets[name].is_choice:
                    raise DataError("pipelines.json", f"preset {p.name!r} refers to "
                                    f"{name!r}, which is not a fixed preset")
        for b in self.builtin.values():
            if b.preset not in self.presets or self.presets[b.preset].is_choice:
                raise DataError("pipelines.json", f"implementations.{b.implementation}: "
                                f"{b.preset!r} is not a fixed preset")

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "pipelines.json") -> PipelineCatalog:
        if data.get("schema") != SCHEMA:
            raise DataError(where, f"schema={data.get('schema')!r}, expected {SCHEMA!r}")
        presets: dict[str, Preset] = {}
        for name, p in data.get("presets", {}).items():
            at = f"{where}: presets.{name}"
            if name == NONE:
                raise DataError(at, f"{NONE!r} is reserved for the stack as shipped")
            io = str(p.get("io", "kernel"))
            if io not in IO_KINDS:
                raise DataError(at, f"io={io!r}: allowed {' | '.join(IO_KINDS)}", field="io")
            sender = Layout.from_json(p["sender"], f"{at}.sender") if "sender" in p else None
            receiver = Layout.from_json(p["receiver"], f"{at}.receiver") \
                if "receiver" in p else None
            for lay, role in ((sender, "sender"), (receiver, "receiver")):
                if lay is not None:
                    lay.validate(f"{at}.{role}", io)
            candidates = tuple(p.get("candidates", ()))
            if (sender is None or receiver is None) and not candidates:
                raise DataError(at, "needs sender and receiver layouts, or candidates")
            queue = int(p.get("queue_messages", 256))
            if queue < 1:
                raise DataError(at, f"queue_messages={queue}: allowed ≥ 1",
                                field="queue_messages")
            presets[name] = Preset(
                name=name, description=str(p.get("description", "")),
                source=str(p.get("source", "")), io=io, queue_messages=queue,
                sender=sender, receiver=receiver,
                per_implementation=dict(p.get("per_implementation", {})),
                candidates=candidates)
        builtin = {}
        for impl, b in data.get("implementations", {}).items():
            at = f"{where}: implementations.{impl}"
            if "@" not in impl or "preset" not in b:
                raise DataError(at, "needs an impl@variant name and a preset")
            builtin[impl] = Builtin(impl, str(b["preset"]), str(b.get("source", "")),
                                    str(b.get("crypto", "")))
        return cls(presets, dict(data.get("stages", {})), builtin,
                   {str(k): str(v) for k, v in data.get("idle_polling", {}).items()})

    @classmethod
    def packaged(cls) -> PipelineCatalog:
        return _packaged()

    def names(self) -> list[str]:
        return sorted(self.presets)

    def allowed(self) -> str:
        return " | ".join([NONE, *self.names()])

    def get(self, name: str, field: str = "pipeline") -> Preset:
        if name not in self.presets:
            raise ScenarioError(field, name, self.allowed())
        return self.presets[name]

    def choices(self, name: str, impl: str) -> list[Preset]:
        """The fixed presets ``name`` stands for with implementation ``impl``.

        One preset for a fixed configuration or an implementation the choice
        names (``mukherjee-best`` with quicly); otherwise every candidate, of
        which the engine keeps the fastest per endpoint.
        """
        preset = self.get(name)
        if not preset.is_choice:
            return [preset]
        base = impl.split("@")[0]
        if base in preset.per_implementation:
            return [self.presets[preset.per_implementation[base]]]
        return [self.presets[c] for c in preset.candidates]

    def polls_idle(self, impl: str) -> bool:
        """Whether ``impl`` (or its base name) spends idle time polling its socket."""
        return impl in self.idle_polling or impl.split("@")[0] in self.idle_polling

    def builtin_for(self, impl: str) -> Builtin | None:
        """The pipeline ``impl`` (``name@variant``) runs as shipped, if any."""
        return self.builtin.get(impl)


@lru_cache(maxsize=1)
def _packaged() -> PipelineCatalog:
    text = resources.files("quiclab.models").joinpath("pipelines.json").read_text()
    return PipelineCatalog.from_json(json.loads(text), "quiclab/models/pipelines.json")


def preset_names() -> tuple[str, ...]:
    """``none`` and every packaged preset (what ``Scenario.pipeline`` accepts)."""
    return (NONE, *_packaged().names())


# ------------------------------------------------------------------ fitted parameters
@dataclass(frozen=True)
class StageProfile:
    """Relative weights that re-split one implementation's cost over stages.

    ``kernel`` (the kernel network path: I/O and UDP/IP), ``crypto`` and
    ``protocol`` multiply the cost model's own split of those stages before it
    is scaled back to the model's total, so the profile moves work between
    stages without changing how much there is (pipeline ``none`` is untouched).
    """

    kernel: Param
    crypto: Param
    protocol: Param
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel.to_json(), "crypto": self.crypto.to_json(),
                "protocol": self.protocol.to_json(), "source": self.source}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> StageProfile:
        return cls(Param.from_json(data["kernel"], f"{where}.kernel"),
                   Param.from_json(data["crypto"], f"{where}.crypto"),
                   Param.from_json(data["protocol"], f"{where}.protocol"),
                   str(data.get("source", "")))


@dataclass(frozen=True)
class RuntimeThreads:
    """Cores a runtime burns beside the packet path without adding capacity.

    ``overhead_cores(streams)`` rises from ``at_one_stream`` to ``saturated``
    linearly in log2(streams) up to ``saturation_streams`` (König et al. 2025
    Fig. 7: quic-go reaches ~400 % CPU at ≥ 32 streams without more goodput).
    """

    at_one_stream: Param
    saturated: Param
    saturation_streams: int

    def overhead_cores(self, streams: int) -> float:
        import math

        if streams <= 1 or self.saturation_streams <= 1:
            frac = 0.0 if streams <= 1 else 1.0
        else:
            frac = min(1.0, math.log2(streams) / math.log2(self.saturation_streams))
        a, b = self.at_one_stream.value, self.saturated.value
        return max(0.0, a + (b - a) * frac)

    def to_json(self) -> dict[str, Any]:
        return {"at_one_stream": self.at_one_stream.to_json(),
                "saturated": self.saturated.to_json(),
                "saturation_streams": self.saturation_streams}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> RuntimeThreads:
        return cls(Param.from_json(data["at_one_stream"], f"{where}.at_one_stream"),
                   Param.from_json(data["saturated"], f"{where}.saturated"),
                   int(data.get("saturation_streams", 32)))


def _assumed(value: float, unit: str, why: str, rel: float = 0.5) -> Param:
    return Param.point(value, unit, f"assumed: {why}", rel)


@dataclass(frozen=True)
class HostParams:
    """Calibrated parameters of pipelines, placement and runtime threads (see module doc)."""

    #: Per message and per core on either side of an inter-core queue (ns, reference CPU).
    handoff_ns: Param
    #: Kernel-bypass driver work per packet on the I/O core (ns, reference CPU).
    bypass_io_ns: Param
    #: User-space UDP/IP per packet with kernel bypass (ns, reference CPU).
    bypass_udpip_ns: Param
    #: Share of a profile's libc samples that belong to the I/O path (packet copies).
    libc_io_fraction: Param
    #: Pinned on the NIC's NUMA node (four nodes per socket): CPU cost relative to the
    #: calibrated unpinned cost (one node per socket, the BIOS default), per role.
    sender_near_cost: Param
    receiver_near_cost: Param
    #: Pinned on another node than the NIC's: extra cost over the near one (δ, both roles).
    far_penalty: Param
    #: Share of the pair's interplay idleness (``Interop.busy``) that busy-polling
    #: I/O on both ends removes (no sleep and wake-up between the pair's packets).
    poll_interplay: Param = field(default_factory=lambda: Param(
        1.0, 0.5, 1.0, "", "assumed: the pair's interplay idleness is time each side "
        "sleeps until the other's packets wake it; a busy-polling loop never sleeps"))
    #: Share of a core's time that the NIC's interrupt handling (hard and soft IRQs
    #: of the queue the core serves: driver, GRO, IP/UDP demultiplexing, TX
    #: completions) takes when a stack is pinned to the same core: the stack runs
    #: at (1 − share) of the core (Scenario.irq_core).
    irq_core_share: Param = field(default_factory=lambda: Param(
        0.3, 0.1, 0.5, "", "assumed: a NIC queue's interrupt work at a stack's packet rate "
        "takes a third of a core (no measurement loaded)"))
    #: Crypto engine → its crypto cost relative to the cost model's (OpenSSL-class).
    crypto_engines: dict[str, Param] = field(default_factory=dict)
    #: Implementation → role (sender / receiver) → stage profile.
    profiles: dict[str, dict[str, StageProfile]] = field(default_factory=dict)
    threads: dict[str, dict[str, RuntimeThreads]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def assumed(cls) -> HostParams:
        """Wide, assumed values for a registry without ``pipeline.json``."""
        return cls(
            handoff_ns=_assumed(40.0, "ns", "a lock-free shared-memory queue costs tens of ns "
                                "per message on each side (no calibration data loaded)"),
            bypass_io_ns=_assumed(150.0, "ns", "user-space driver work per packet"),
            bypass_udpip_ns=_assumed(60.0, "ns", "user-space UDP/IP per packet"),
            libc_io_fraction=Param(1.0, 0.5, 1.0, "", "assumed: libc is mostly packet copies"),
            sender_near_cost=_assumed(1.0, "", "no placement data loaded"),
            receiver_near_cost=_assumed(1.0, "", "no placement data loaded"),
            far_penalty=_assumed(0.0, "", "no placement data loaded"))

    def profile(self, impl: str, role: str) -> StageProfile | None:
        """The stage profile of ``impl`` in ``role`` (``name@variant`` falls back to ``name``)."""
        per = self.profiles.get(impl) or self.profiles.get(impl.split("@")[0]) or {}
        return per.get(role)

    def runtime(self, impl: str, role: str) -> RuntimeThreads | None:
        per = self.threads.get(impl) or self.threads.get(impl.split("@")[0]) or {}
        return per.get(role)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": PARAMS_SCHEMA,
            "handoff_ns": self.handoff_ns.to_json(),
            "bypass_io_ns": self.bypass_io_ns.to_json(),
            "bypass_udpip_ns": self.bypass_udpip_ns.to_json(),
            "libc_io_fraction": self.libc_io_fraction.to_json(),
            "sender_near_cost": self.sender_near_cost.to_json(),
            "receiver_near_cost": self.receiver_near_cost.to_json(),
            "far_penalty": self.far_penalty.to_json(),
            "poll_interplay": self.poll_interplay.to_json(),
            "irq_core_share": self.irq_core_share.to_json(),
            "crypto_engines": {k: v.to_json() for k, v in sorted(self.crypto_engines.items())},
            "profiles": {k: {r: p.to_json() for r, p in sorted(v.items())}
                         for k, v in sorted(self.profiles.items())},
            "threads": {k: {r: t.to_json() for r, t in sorted(v.items())}
                        for k, v in sorted(self.threads.items())},
            "provenance": self.provenance,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "pipeline.json") -> HostParams:
        if data.get("schema") != PARAMS_SCHEMA:
            raise DataError(where, f"schema={data.get('schema')!r}, expected {PARAMS_SCHEMA!r}",
                            field="schema")
        try:
            return cls(
                handoff_ns=Param.from_json(data["handoff_ns"], f"{where}: handoff_ns"),
                bypass_io_ns=Param.from_json(data["bypass_io_ns"], f"{where}: bypass_io_ns"),
                bypass_udpip_ns=Param.from_json(data["bypass_udpip_ns"],
                                                f"{where}: bypass_udpip_ns"),
                libc_io_fraction=Param.from_json(data["libc_io_fraction"],
                                                 f"{where}: libc_io_fraction"),
                sender_near_cost=Param.from_json(data["sender_near_cost"],
                                                 f"{where}: sender_near_cost"),
                receiver_near_cost=Param.from_json(data["receiver_near_cost"],
                                                   f"{where}: receiver_near_cost"),
                far_penalty=Param.from_json(data["far_penalty"], f"{where}: far_penalty"),
                **({"poll_interplay": Param.from_json(data["poll_interplay"],
                                                      f"{where}: poll_interplay")}
                   if "poll_interplay" in data else {}),
                **({"irq_core_share": Param.from_json(data["irq_core_share"],
                                                      f"{where}: irq_core_share")}
                   if "irq_core_share" in data else {}),
                crypto_engines={k: Param.from_json(v, f"{where}: crypto_engines.{k}")
                                for k, v in data.get("crypto_engines", {}).items()},
                profiles={k: {r: StageProfile.from_json(p, f"{where}: profiles.{k}.{r}")
                              for r, p in v.items()}
                          for k, v in data.get("profiles", {}).items()},
                threads={k: {r: RuntimeThreads.from_json(t, f"{where}: threads.{k}.{r}")
                             for r, t in v.items()}
                         for k, v in data.get("threads", {}).items()},
                provenance=dict(data.get("provenance", {})))
        except KeyError as err:
            raise DataError(where, f"missing key {err}") from None

    @classmethod
    def load(cls, path: Path) -> HostParams:
        try:
            data = json.loads(Path(path).read_text())
        except json.JSONDecodeError as err:
            raise DataError(path, f"not valid JSON ({err.msg} at line {err.lineno})") from None
        return cls.from_json(data, str(path))
