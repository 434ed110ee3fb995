"""The CPU catalog and the one rule for moving a cost model from one CPU to another.

Rule (also printed in every Prediction): a single-threaded QUIC stack's packet
processing time scales inversely with clock × IPC, so::

    cost_on_target = cost_on_reference × speed(reference) / speed(target)
    speed(cpu)     = ghz × ipc(microarchitecture)

The clock is the CPU's maximum (boost) clock unless the Scenario overrides it
with ``cpu_ghz``: a bulk transfer keeps one core busy, which boosts. IPC factors
are relative to Zen 3 (EPYC 7543, the dataset's host); each carries its source.

The probe rule replaces clock × IPC where both CPUs carry a host probe
(``testbed/probe.py``: wall-clock ns per operation of each cost component, on
one core, measured beside the runs): each cost component moves by its own
probe's ratio, ``cost_on_target = cost_on_reference × probe_target / probe_reference``
(:data:`PROBE_COMPONENTS` says which probe stands for which part of a cost
model), with the two probes' spreads in the interval. The reference's probe is
the one taken when its models were calibrated (a fresh calibration session's);
a CPU with a probe but a reference without one falls back to clock × IPC.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.errors import DataError, ScenarioError

SCHEMA = "quiclab.cpus/1"
#: The microarchitecture of a stand-in CPU whose model is not recorded (its speed is
#: fitted per testbed: quiclab.models.testbeds).
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Microarchitecture:
    name: str
    ipc: float
    lo: float
    hi: float
    source: str


@dataclass(frozen=True)
class Cpu:
    """One CPU of the catalog (clock in GHz; topology for core placement)."""

    name: str
    vendor: str
    microarchitecture: str
    year: int
    max_ghz: float
    base_ghz: float
    cores: int
    threads: int
    numa_nodes: int
    nic_numa_node: int
    aes_ni: bool
    sources: tuple[str, ...]
    #: NICs of the hosts with this CPU as (rate Gbit/s, NUMA node), where the seeds
    #: name more than one (seed 002 Fig. 10); empty: one NIC on ``nic_numa_node``.
    nics: tuple[tuple[float, int], ...] = ()
    #: For hosts whose CPU model is not recorded (microarchitecture ``unknown``):
    #: their fitted single-core speed (value, lo, hi) in GHz × IPC, the rule's unit.
    fitted_speed: tuple[float, float, float] | None = None
    #: A host probe of this CPU in one state (component, wall-clock ns per operation,
    #: relative spread), sorted by component; empty for catalog CPUs. See the probe rule.
    probe: tuple[tuple[str, float, float], ...] = ()
    #: Which probe(s) ``probe`` comes from (ids, times, session).
    probe_source: str = ""

    def to_row(self) -> dict[str, Any]:
        row = dict(self.__dict__)
        row["sources"] = "; ".join(self.sources)
        # Not catalog columns: nic_numa_node is the default NIC; probes are host_probes;
        # a fitted speed is a calibrated testbed's.
        for key in ("nics", "probe", "probe_source", "fitted_speed"):
            row.pop(key, None)
        return row

    def probe_ns(self, component: str) -> tuple[float, float] | None:
        """(ns per operation, relative spread) of one probed component, or None."""
        for name, ns, spread in self.probe:
            if name == component and ns > 0:
                return ns, spread
        return None

    def probe_json(self) -> dict[str, Any]:
        """The probe as ``cpus.json`` holds it ({} without one)."""
        if not self.probe:
            return {}
        return {"components": {n: {"ns": ns, "spread": sp} for n, ns, sp in self.probe},
                "source": self.probe_source}


    def numa_node_of(self, core: int) -> int:
        """NUMA node of ``core``: cores are numbered node by node (hwloc's order on
        the EPYC 7543 in NPS4, seed 002 §4.7: cores 0, 8, 16, 24 cover the four nodes)."""
        per_node = max(1, self.cores // max(1, self.numa_nodes))
        return min(self.numa_nodes - 1, core // per_node)

    def nic_node(self, link_gbps: float) -> int:
        """NUMA node of the NIC a link of ``link_gbps`` runs on: the catalog NIC of
        exactly that rate, else the slowest one at least as fast, else the default."""
        exact = [node for gbps, node in self.nics if gbps == link_gbps]
        if exact:
            return exact[0]
        faster = sorted((gbps, node) for gbps, node in self.nics if gbps >= link_gbps)
        return faster[0][1] if faster else self.nic_numa_node


def probe_fields(data: dict[str, Any] | None) -> dict[str, Any]:
    """``Cpu`` keyword arguments for a probe in ``cpus.json``'s form (see
    :meth:`Cpu.probe_json`); {} for None or an empty one."""
    if not data or not data.get("components"):
        return {}
    comps = data["components"]
    return {"probe": tuple(sorted((str(k), float(v["ns"]), float(v.get("spread", 0.0)))
                                  for k, v in comps.items())),
            "probe_source": str(data.get("source", ""))}


#: The probe rule: which probe component moves which part of a cost model, by name
#: (sim/resolve.py asks for these parts). Where a part lists several components the
#: first one both probes have is used: protocol work is the short QUIC transfer's time
#: per packet (a stack's own code), else the header-parsing loop.
PROBE_COMPONENTS: dict[str, tuple[str, ...]] = {
    "protocol": ("quic_packet", "interp_packet"),
    "ack": ("quic_packet", "interp_packet"),
    "byte": ("copy_byte",),
    "app": ("copy_byte",),
    "crypto_packet:aes-ni": ("aes_gcm_packet",),
    "crypto_byte:aes-ni": ("aes_gcm_byte",),
    "crypto_packet:chacha20": ("chacha20_packet",),
    "crypto_byte:chacha20": ("chacha20_byte",),
    # Software AES has no probe of its own: ChaCha20 is the software cipher measured
    # (table-free arithmetic on general registers, as bitsliced AES).
    "crypto_packet:aes-sw": ("chacha20_packet",),
    "crypto_byte:aes-sw": ("chacha20_byte",),
    "call:sender": ("udp_send",),
    "call:receiver": ("udp_recv",),
    "segment:sender": ("udp_gso_segment",),
    "segment:receiver": ("udp_gro_segment",),
}


@dataclass(frozen=True)
class CpuScaling:
    """The resolved scaling from a model's reference CPU to a Scenario's CPU."""

    reference: str
    target: str
    reference_speed: float
    target_speed: float
    factor: float  # multiply reference costs by this
    factor_lo: float
    factor_hi: float
    rule: str
    #: The probe rule's factor per part of a cost model (:data:`PROBE_COMPONENTS`):
    #: (part, factor, lo, hi); empty under clock × IPC, where every part takes ``factor``.
    parts: tuple[tuple[str, float, float, float], ...] = ()

    def part(self, name: str) -> float:
        """The factor for one part of a cost model ("protocol", "crypto_packet:aes-ni",
        "call:sender", …): the probe rule's where it has one, else ``factor``."""
        for part, factor, _, _ in self.parts:
            if part == name:
                return factor
        return self.factor

    def describe(self) -> str:
        return (f"{self.reference} → {self.target}: costs × {self.factor:.3f} "
                f"[{self.factor_lo:.3f}, {self.factor_hi:.3f}] ({self.rule})")


class CpuCatalog:
    """All CPUs the workbench knows, looked up by any unambiguous part of their name."""

    def __init__(self, cpus: list[Cpu], microarchitectures: dict[str, Microarchitecture],
                 rule: str):
        self.cpus = list(cpus)
        self.microarchitectures = dict(microarchitectures)
        self.rule = rule
        self._found: dict[str, Cpu] = {}
        for cpu in self.cpus:
            if cpu.fitted_speed is not None and cpu.microarchitecture == UNKNOWN:
                continue
            if cpu.microarchitecture not in self.microarchitectures:
                raise DataError("cpus.json", f"{cpu.name}: unknown microarchitecture "
                                f"{cpu.microarchitecture!r}", field="microarchitecture")

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "cpus.json") -> CpuCatalog:
        if data.get("schema") != SCHEMA:
            raise DataError(where, f"schema={data.get('schema')!r}, expected {SCHEMA!r}")
        uarchs = {k: Microarchitecture(k, float(v["ipc"]), float(v["lo"]), float(v["hi"]),
                                       str(v["source"]))
                  for k, v in data["microarchitectures"].items()}
        cpus = []
        for i, c in enumerate(data["cpus"]):
            try:
                cpus.append(Cpu(
                    name=c["name"], vendor=c["vendor"], microarchitecture=c["microarchitecture"],
                    year=int(c["year"]), max_ghz=float(c["max_ghz"]),
                    base_ghz=float(c.get("base_ghz", c["max_ghz"])), cores=int(c["cores"]),
                    threads=int(c["threads"]), numa_nodes=int(c.get("numa_nodes", 1)),
                    nic_numa_node=int(c.get("nic_numa_node", 0)),
                    aes_ni=bool(c.get("aes_ni", True)), sources=tuple(c.get("sources", ())),
                    nics=tuple((float(n["gbps"]), int(n["numa_node"]))
                               for n in c.get("nics", ())),
                    **probe_fields(c.get("probe"))))
            except (KeyError, ValueError, TypeError) as err:
                raise DataError(where, f"cpus[{i}]: {err}") from None
        return cls(cpus, uarchs, str(data.get("rule", "")))

    @classmethod
    def packaged(cls) -> CpuCatalog:
        """The catalog shipped with quiclab (``models/cpus.json``)."""
        text = resources.files("quiclab.models").joinpath("cpus.json").read_text()
        return cls.from_json(json.loads(text), "quiclab/models/cpus.json")

    @classmethod
    def load(cls, path: Path) -> CpuCatalog:
        return cls.from_json(json.loads(Path(path).read_text()), str(path))

    def with_cpu(self, cpu: Cpu) -> CpuCatalog:
        """A catalog with one more CPU (e.g. this host, read from /proc/cpuinfo)."""
        others = [c for c in self.cpus if c.name != cpu.name]
        return CpuCatalog([*others, cpu], self.microarchitectures, self.rule)

    def names(self) -> list[str]:
        return [c.name for c in self.cpus]

    def find(self, query: str, field: str = "cpu") -> Cpu:
        """The CPU whose name contains ``query`` (case- and space-insensitive).

        Raises ScenarioError naming the candidates when none or several match.
        """
        if query in self._found:
            return self._found[query]
        norm = _norm(query)
        exact = [c for c in self.cpus if _norm(c.name) == norm]
        if exact:
            self._found[query] = exact[0]
            return exact[0]
        hits = [c for c in self.cpus if norm and norm in _norm(c.name)]
        if len(hits) == 1:
            self._found[query] = hits[0]
            return hits[0]
        if not hits:
            raise ScenarioError(field, query, "one of: " + ", ".join(self.names()))
        raise ScenarioError(field, query, "an unambiguous part of one name; matches: "
                            + ", ".join(c.name for c in hits))

    def speed(self, cpu: Cpu, ghz: float = 0.0) -> tuple[float, float, float]:
        """(speed, lo, hi) in GHz × IPC.

        Raises ScenarioError for a clock override on a CPU whose clock is not recorded.
        """
        if cpu.fitted_speed is not None:
            if ghz:
                raise ScenarioError("cpu_ghz", ghz, f"0 ({cpu.name}: the clock is not "
                                                    "recorded, only a fitted speed)")
            return cpu.fitted_speed
        u = self.microarchitectures[cpu.microarchitecture]
        clock = ghz or cpu.max_ghz
        return clock * u.ipc, clock * u.lo, clock * u.hi

    def scaling(self, reference: str, target: str, target_ghz: float = 0.0) -> CpuScaling:
        """How reference-CPU costs move to ``target`` (see the module docstring): the
        probe rule when both carry a probe (and no clock override), else clock × IPC."""
        ref = self.find(reference, field="reference_cpu")
        tgt = self.find(target)
        if ref.probe and tgt.probe and not target_ghz:
            return probe_scaling(ref, tgt)
        rs, rlo, rhi = self.speed(ref)
        ts, tlo, thi = self.speed(tgt, target_ghz)
        factor = rs / ts
        if ref.name == tgt.name and not target_ghz:
            lo = hi = 1.0
        else:
            lo, hi = rlo / thi, rhi / tlo
        clock = f"{target_ghz:g} GHz (override)" if target_ghz else f"{tgt.max_ghz:g} GHz max"
        ref_ipc = self.microarchitectures[ref.microarchitecture].ipc
        if tgt.fitted_speed is not None:
            rule = (f"clock×IPC: {ref.name} {ref.max_ghz:g} GHz × {ref_ipc:g}"
                    f" → {tgt.name}: fitted speed {ts:.3g} [{tlo:.3g}, {thi:.3g}] GHz×IPC")
        else:
            tgt_ipc = self.microarchitectures[tgt.microarchitecture].ipc
            rule = (f"clock×IPC: {ref.name} {ref.max_ghz:g} GHz × {ref_ipc:g}"
                    f" → {tgt.name} {clock} × {tgt_ipc:g}"
                    f" ({tgt.microarchitecture})")
        if tgt.probe and not ref.probe:
            rule += " (the target's probe is not used: the reference has none)"
        return CpuScaling(ref.name, tgt.name, rs, ts, factor, min(lo, factor), max(hi, factor),
                          rule)


def unknown_cpu(name: str, speed: tuple[float, float, float], source: str) -> Cpu:
    """A stand-in catalog entry for hosts whose CPU model is not recorded: only
    their fitted speed (GHz × IPC, with its interval) is known (``cores`` 0: not
    recorded either)."""
    return Cpu(name=name, vendor="unknown", microarchitecture=UNKNOWN, year=0,
               max_ghz=0.0, base_ghz=0.0, cores=0, threads=0, numa_nodes=1,
               nic_numa_node=0, aes_ni=True, sources=(source,), fitted_speed=speed)


def probe_scaling(ref: Cpu, tgt: Cpu) -> CpuScaling:
    """The probe rule: each part of a cost model × (probe of ``tgt`` / probe of ``ref``)
    for its component (:data:`PROBE_COMPONENTS`); its interval is the two probes'
    spreads added in quadrature. A part neither probe covers takes the protocol
    factor, which is also ``factor`` (what the rest of a prediction reports)."""
    parts: list[tuple[str, float, float, float]] = []
    used: dict[str, str] = {}
    for part, candidates in PROBE_COMPONENTS.items():
        for comp in candidates:
            a, b = ref.probe_ns(comp), tgt.probe_ns(comp)
            if a is None or b is None:
                continue
            factor = b[0] / a[0]
            rel = (a[1] ** 2 + b[1] ** 2) ** 0.5
            parts.append((part, factor, factor / (1.0 + rel), factor * (1.0 + rel)))
            used[part] = comp
            break
    by_part = {p[0]: p for p in parts}
    main = by_part.get("protocol") or (parts[0] if parts else ("protocol", 1.0, 1.0, 1.0))
    lo = min(p[2] / p[1] for p in parts) * main[1] if parts else 1.0
    hi = max(p[3] / p[1] for p in parts) * main[1] if parts else 1.0
    shown = ", ".join(f"{part} × {by_part[part][1]:.3f} ({comp})"
                      for part, comp in used.items() if not part.startswith(("ack", "app")))
    rule = (f"probe: {ref.name} [{ref.probe_source or 'probe'}] → {tgt.name} "
            f"[{tgt.probe_source or 'probe'}]: {shown or 'no common components: × 1'}")
    return CpuScaling(ref.name, tgt.name, 1.0, 1.0 / main[1], main[1], lo, hi, rule,
                      tuple(parts))


def _norm(text: str) -> str:
    return re.sub(r"[\s\-_]+", "", text.lower())


#: AMD family 25 (0x19) holds two microarchitectures: Zen 4 at models 0x10–0x1F
#: (Genoa), 0x60–0x7F (Raphael, Phoenix) and 0xA0–0xAF (Bergamo), Zen 3 at the
#: others (Milan 0x00–0x0F, Vermeer, Cezanne, Rembrandt). Family 23 (0x17) is
#: Zen/Zen+ below model 0x30 and Zen 2 from it; family 26 (0x1A) is Zen 5,
#: which the catalog does not hold (its nearest entry, Zen 4, stands in).
_ZEN4_MODELS_FAMILY_25 = (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0))


def _amd_uarch(family: str, model: str) -> str:
    try:
        fam, mod = int(family), int(model)
    except ValueError:
        return "zen3"
    if fam == 23:
        return "zen2" if mod >= 0x30 else "zen"
    if fam == 25:
        return "zen4" if any(mod in r for r in _ZEN4_MODELS_FAMILY_25) else "zen3"
    if fam >= 26:
        return "zen4"
    return "zen3"


def read_host_cpu(catalog: CpuCatalog, proc: Path = Path("/proc/cpuinfo"),
                  sys_cpufreq: Path = Path("/sys/devices/system/cpu/cpu0/cpufreq")) -> Cpu:
    """This machine's entry: ``/proc/cpuinfo``, with the clock from cpufreq's maximum.

    ``cpu MHz`` in /proc/cpuinfo is the current clock, which moves with load on
    a host that scales its frequency; ``cpuinfo_max_freq`` does not. (A VM
    often has no cpufreq: then the reported clock, fixed there, is used.)
    """
    text = proc.read_text() if proc.exists() else ""
    max_khz = None
    freq = sys_cpufreq / "cpuinfo_max_freq"
    if freq.exists():
        try:
            max_khz = float(freq.read_text().strip())
        except ValueError:
            max_khz = None
    return host_cpu_from_cpuinfo(text, catalog, max_khz=max_khz)


def host_cpu_from_cpuinfo(text: str, catalog: CpuCatalog, max_khz: float | None = None) -> Cpu:
    """A catalog entry for the machine described by ``/proc/cpuinfo`` text.

    The microarchitecture is guessed from the vendor, family and model number
    where known (Intel family 6 model 85 = Skylake-SP/Cascade Lake; AMD as
    ``_amd_uarch``); otherwise "skylake" with the wide interval that entry
    carries. The clock is the model name's "@ x GHz", else ``max_khz`` (cpufreq's
    maximum), else the reported ``cpu MHz``.
    """
    fields: dict[str, str] = {}
    processors = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            processors += 1
        if key and key not in fields:
            fields[key] = value.strip()
    name = fields.get("model name", "unknown CPU")
    ghz_match = re.search(r"@\s*([\d.]+)\s*GHz", name)
    if ghz_match:
        ghz = float(ghz_match.group(1))
    elif max_khz:
        ghz = max_khz / 1e6
    else:
        ghz = float(fields.get("cpu MHz", "2500")) / 1000
    vendor = "Intel" if "Intel" in fields.get("vendor_id", name) else (
        "AMD" if "AMD" in fields.get("vendor_id", name) else "unknown")
    family, model = fields.get("cpu family", ""), fields.get("model", "")
    uarch = "skylake"
    flags = fields.get("flags", "").split()
    if vendor == "Intel" and family == "6":
        uarch = {"85": "cascade-lake" if "avx512_vnni" in flags else "skylake",
                 "106": "sunny-cove", "108": "sunny-cove", "79": "broadwell",
                 "86": "broadwell"}.get(model, "skylake")
    elif vendor == "AMD":
        uarch = _amd_uarch(family, model)
    if uarch not in catalog.microarchitectures:
        uarch = "skylake"
    return Cpu(name=f"host: {name}", vendor=vendor, microarchitecture=uarch, year=0,
               max_ghz=ghz, base_ghz=ghz, cores=processors or 1, threads=processors or 1,
               numa_nodes=1, nic_numa_node=0, aes_ni="aes" in flags,
               sources=("/proc/cpuinfo of this host",))
