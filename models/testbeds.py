"""Testbeds: where every measurement was made, as Scenario defaults and identity.

A testbed is a pair of hosts (CPU, NIC, kernel) and the path between them. Every
dataset run and published point belongs to one, and so does every Scenario
(its ``testbed`` field). The testbed decides two things:

- **defaults**: the Scenario fields its measurements ran with (CPU, link rate,
  buffers, the path's base RTT). Most of them the documents state; what they
  leave out is assumed (with the reason) or fitted by the calibration from the
  testbed's own measurements (the base RTT of König et al.'s NetEm path; the
  speed of hosts whose CPU is not recorded, as UCLouvain's);
- **scope**: effects fitted to one testbed's goodput (a pair's interplay) act
  only on Scenarios of that testbed. A Scenario on ``unseen`` — a user's own
  hosts — gets none of them, and says so.

The calibration writes the result as ``models/fitted/testbeds.json``;
reproduction specs name a testbed (``base: {testbed: koenig25}``, or the
document id ``"000"``) instead of repeating its numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.errors import DataError

SCHEMA = "quiclab.testbeds/2"
#: The first schema keyed testbeds by document id ("000"); still read.
SCHEMA_V1 = "quiclab.testbeds/1"
FILE = "testbeds.json"
#: The testbed of hosts no measurement came from (sim.scenario.UNSEEN_TESTBED).
UNSEEN = "unseen"


@dataclass(frozen=True)
class Speed:
    """Single-core speed of hosts whose CPU model is not recorded, in the CPU
    rule's unit (GHz × IPC relative to Zen 3: the EPYC 7543 at 3.7 GHz is 3.7),
    with its interval and where it comes from."""

    value: float
    lo: float
    hi: float
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"value": float(f"{self.value:.6g}"), "lo": float(f"{self.lo:.6g}"),
                "hi": float(f"{self.hi:.6g}"), "source": self.source}


@dataclass(frozen=True)
class Testbed:
    """One testbed: its id, the documents measured on it, its Scenario defaults
    (with a source for each) and, for hosts of unknown CPU, a fitted speed."""

    __test__ = False  # not a pytest test class

    id: str
    description: str
    fields: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    documents: tuple[str, ...] = ()
    speed: Speed | None = None

    @property
    def cpu_name(self) -> str:
        """The CPU catalog name of the hosts (a stand-in entry when unknown)."""
        return str(self.fields.get("cpu", ""))

    def scenario_fields(self) -> dict[str, Any]:
        """Scenario fields of a transfer on this testbed (its id included)."""
        return {**self.fields, "testbed": self.id}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"description": self.description, "fields": dict(self.fields),
                               "sources": dict(self.sources),
                               "documents": list(self.documents)}
        if self.speed is not None:
            out["speed"] = self.speed.to_json()
        return out


def unknown_cpu_name(testbed_id: str) -> str:
    """The CPU catalog's stand-in entry for a testbed whose CPU is not recorded."""
    return f"{testbed_id} hosts (CPU not recorded)"


#: What the documents and dataset READMEs state (and the assumptions where they
#: are silent). Ids are the papers' short names, or the dataset's.
STATED: dict[str, Testbed] = {
    "qir10g": Testbed(
        "qir10g", "Kempf et al. 2024 §3.2 and the QIR-10G dataset: AMD EPYC 7543 pairs "
                  "(goracle, gard), Broadcom BCM57416 10 Gbit/s NICs, Debian bullseye, "
                  "kernel 5.10, default 208 KiB UDP buffers; seed 002's other CPUs (Table 1) "
                  "are hosts of the same lab",
        {"cpu": "AMD EPYC 7543", "link_gbps": 10.0},
        {"cpu": "seed 002 §3.2, Table 1 (AMD-2); dataset README (goracle-gard)",
         "link_gbps": "seed 002 §3.2"},
        documents=("002",)),
    "koenig25": Testbed(
        "koenig25", "König et al. 2025, Table I: two Xeon W-2145 hosts, 10 Gbit/s through a "
                    "hardware switch and a NetEm software switch (Fig. 2)",
        {"cpu": "Intel Xeon W-2145", "link_gbps": 10.0, "rcvbuf_bytes": 6815744,
         "base_rtt_us": 100.0},
        {"cpu": "seed 000 Table I", "link_gbps": "seed 000 §IV",
         "rcvbuf_bytes": "seed 000 §IV: send and receive buffers increased (32 × 208 KiB as "
                         "in seed 002)",
         "base_rtt_us": "assumed: two switches, one of them a NetEm host, in the path; the "
                        "calibration refines it"},
        documents=("000",)),
    "mukherjee25": Testbed(
        "mukherjee25", "Mukherjee et al. 2025 §5: Intel E5-2640 v4 pairs (EPYC 7302P for "
                       "quicly), 25 Gbit/s, GSO",
        {"cpu": "Intel Xeon E5-2640 v4", "link_gbps": 25.0, "rcvbuf_bytes": 6815744},
        {"cpu": "seed 001 §5", "link_gbps": "seed 001 §5",
         "rcvbuf_bytes": "assumed: tuned hosts (seed 001 optimises the UDP path)"},
        documents=("001",)),
    "tquic": Testbed(
        "tquic", "TQUIC benchmark: client and server on one AMD EPYC 7K62 host, different "
                 "cores, Linux 4.14",
        {"cpu": "AMD EPYC 7K62"},
        {"cpu": "seed 003 (AMD EPYC 7K62 48-Core)"},
        documents=("003",)),
    "litespeed": Testbed(
        "litespeed", "LiteSpeed QUIC benchmarks: two machines on a private 10 Gbit/s "
                     "network",
        {"link_gbps": 10.0},
        {"link_gbps": "seed 004: private network, 10G link between two machines"},
        documents=("004",)),
    "uclouvain": Testbed(
        "uclouvain", "UCLouvain picoquic-dpdk experiments: two directly connected hosts "
                     "(grincheux client, dormeur server) with Mellanox ConnectX-5 NICs, one "
                     "NIC queue, interrupts on core 2; CPU model, clock and kernel not "
                     "recorded",
        {"cpu": unknown_cpu_name("uclouvain"), "link_gbps": 100.0},
        {"cpu": "not recorded (dataset README): a speed fitted from the testbed's runs",
         "link_gbps": "assumed: ConnectX-5 at 100 Gbit/s (dataset README: cards.txt; "
                      "iperf3 over TCP reaches 32.7 Gbit/s, so the link does not bind)"},
        speed=Speed(3.7, 1.5, 6.0, "prior: unknown server CPU, 1.5–6 GHz×IPC (Zen 3 units); "
                                   "the calibration fits it from the testbed's runs")),
}

#: Document id → testbed id (the seeds' testbeds).
DOCUMENTS: dict[str, str] = {doc: tb.id for tb in STATED.values() for doc in tb.documents}


def for_document(document: Any) -> str:
    """The testbed id of a seed document ("000" → "koenig25")."""
    key = str(document).zfill(3)
    if key not in DOCUMENTS:
        raise KeyError(f"no testbed for document {document!r} (known: "
                       f"{', '.join(sorted(DOCUMENTS))})")
    return DOCUMENTS[key]


def on_testbed(fields: dict[str, Any], testbeds: Testbeds) -> dict[str, Any]:
    """Scenario fields on the testbed ``fields["testbed"]`` names: that testbed's
    defaults under the given fields (which win), its id normalised (a document id
    such as ``"000"`` becomes ``koenig25``). Without a testbed, or on ``unseen``,
    the fields unchanged. Raises KeyError naming the known testbeds."""
    key = fields.get("testbed")
    if key is None or str(key) == UNSEEN:
        return dict(fields)
    tb = testbeds.get(str(key))
    return {**tb.fields, **fields, "testbed": tb.id}


class Testbeds:
    """Testbeds by id; a seed's document id (``"000"``) is an alias of its testbed."""

    __test__ = False  # not a pytest test class

    def __init__(self, items: dict[str, Testbed], source: str = "<stated>"):
        self.items = dict(items)
        self.source = source

    @classmethod
    def stated(cls) -> Testbeds:
        return cls(STATED)

    def ids(self) -> list[str]:
        return sorted(self.items)

    def __contains__(self, key: object) -> bool:
        try:
            self.get(str(key))
        except KeyError:
            return False
        return True

    def get(self, key: str) -> Testbed:
        """The testbed ``key`` names (an id, or a document id such as ``"000"``)."""
        key = str(key)
        if key in self.items:
            return self.items[key]
        for tb in self.items.values():
            if key.zfill(3) in tb.documents:
                return tb
        docs = sorted(d for t in self.items.values() for d in t.documents)
        raise KeyError(f"no testbed {key!r} (known: {', '.join(self.ids())}, or a document "
                       f"id: {', '.join(docs)})")

    def with_fields(self, key: str, values: dict[str, Any],
                    sources: dict[str, str]) -> Testbeds:
        """A copy in which testbed ``key`` has ``values`` (with their sources)."""
        tb = self.get(key)
        items = dict(self.items)
        items[tb.id] = Testbed(tb.id, tb.description, {**tb.fields, **values},
                               {**tb.sources, **sources}, tb.documents, tb.speed)
        return Testbeds(items, self.source)

    def with_speed(self, key: str, speed: Speed) -> Testbeds:
        """A copy in which testbed ``key``'s hosts have the fitted ``speed``."""
        tb = self.get(key)
        items = dict(self.items)
        items[tb.id] = Testbed(tb.id, tb.description, dict(tb.fields), dict(tb.sources),
                               tb.documents, speed)
        return Testbeds(items, self.source)

    def with_testbed(self, testbed: Testbed) -> Testbeds:
        """A copy with one more (or a replaced) testbed, e.g. this host's namespaces."""
        return Testbeds({**self.items, testbed.id: testbed}, self.source)

    def unknown_cpus(self) -> list[Testbed]:
        """Testbeds whose hosts' CPU is not recorded (they carry a fitted speed)."""
        return [tb for tb in self.items.values() if tb.speed is not None]

    def dumps(self) -> str:
        data = {"schema": SCHEMA,
                "testbeds": {k: v.to_json() for k, v in sorted(self.items.items())}}
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def load(cls, path: Path) -> Testbeds:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise DataError(path, f"unreadable testbeds file ({err})") from None
        if not isinstance(data, dict) or data.get("schema") not in (SCHEMA, SCHEMA_V1):
            raise DataError(path, f"schema: expected {SCHEMA!r}")
        items = dict(STATED) if data.get("schema") == SCHEMA_V1 else {}
        for key, entry in (data.get("testbeds") or {}).items():
            if not isinstance(entry, dict) or not isinstance(entry.get("fields"), dict):
                raise DataError(path, f"testbeds.{key}: expected description, fields, sources")
            speed = entry.get("speed")
            if speed is not None:
                try:
                    speed = Speed(float(speed["value"]), float(speed["lo"]), float(speed["hi"]),
                                  str(speed.get("source", "")))
                except (KeyError, TypeError, ValueError):
                    raise DataError(path, f"testbeds.{key}.speed: expected value, lo, hi, "
                                          "source") from None
            if data.get("schema") == SCHEMA_V1:
                # Version 1 was keyed by document id and held only the seeds' testbeds.
                tid = DOCUMENTS.get(str(key).zfill(3), str(key))
                base = items.get(tid)
                items[tid] = Testbed(tid, str(entry.get("description", "")),
                                     dict(entry["fields"]), dict(entry.get("sources") or {}),
                                     base.documents if base else (str(key),),
                                     base.speed if base else None)
                continue
            items[str(key)] = Testbed(str(key), str(entry.get("description", "")),
                                      dict(entry["fields"]), dict(entry.get("sources") or {}),
                                      tuple(str(d) for d in entry.get("documents") or ()),
                                      speed)
        return cls(items, str(path))

    @classmethod
    def packaged(cls) -> Testbeds:
        """The calibrated testbeds shipped with the models (the stated ones if absent)."""
        path = Path(str(resources.files("quiclab.models").joinpath("fitted"))) / FILE
        return cls.load(path) if path.is_file() else cls.stated()
