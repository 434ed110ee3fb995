"""The seeds' testbeds as Scenario defaults: what each document states, and what it does not.

A published point is measured on its document's testbed (CPU, link rate,
buffers, the path's base RTT). Most of that the documents state; what they
leave out is either assumed (with the reason) or fitted by the calibration
from the document's own points — e.g. the base RTT of König et al.'s path
through a NetEm software switch, which only their window-bound quiche points
identify. The calibration writes the result as ``models/fitted/testbeds.json``;
reproduction specs name a testbed (``base: {testbed: "000"}``) instead of
repeating its numbers, so that they always use the calibrated values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.errors import DataError

SCHEMA = "quiclab.testbeds/1"
FILE = "testbeds.json"


@dataclass(frozen=True)
class Testbed:
    """One document's testbed: Scenario fields and where each value comes from."""

    document: str
    description: str
    fields: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description, "fields": dict(self.fields),
                "sources": dict(self.sources)}


#: What the documents state (and the assumptions where they are silent).
STATED: dict[str, Testbed] = {
    "000": Testbed(
        "000", "König et al. 2025, Table I: two Xeon W-2145 hosts, 10 Gbit/s through a "
               "hardware switch and a NetEm software switch (Fig. 2)",
        {"cpu": "Intel Xeon W-2145", "link_gbps": 10.0, "rcvbuf_bytes": 6815744,
         "base_rtt_us": 100.0},
        {"cpu": "seed 000 Table I", "link_gbps": "seed 000 §IV",
         "rcvbuf_bytes": "seed 000 §IV: send and receive buffers increased (32 × 208 KiB as "
                         "in seed 002)",
         "base_rtt_us": "assumed: two switches, one of them a NetEm host, in the path; the "
                        "calibration refines it (fit: D|000)"}),
    "001": Testbed(
        "001", "Mukherjee et al. 2025 §5: Intel E5-2640 v4 pairs (EPYC 7302P for quicly), "
               "25 Gbit/s, GSO",
        {"cpu": "Intel Xeon E5-2640 v4", "link_gbps": 25.0, "rcvbuf_bytes": 6815744},
        {"cpu": "seed 001 §5", "link_gbps": "seed 001 §5",
         "rcvbuf_bytes": "assumed: tuned hosts (seed 001 optimises the UDP path)"}),
    "002": Testbed(
        "002", "Kempf et al. 2024 §3.2: AMD EPYC 7543 pairs, 10 Gbit/s, default 208 KiB "
               "buffers",
        {"cpu": "AMD EPYC 7543", "link_gbps": 10.0},
        {"cpu": "seed 002 §3.2, Table 1 (AMD-2)", "link_gbps": "seed 002 §3.2"}),
}


class Testbeds:
    """Testbeds by document id (``"000"`` …)."""

    def __init__(self, items: dict[str, Testbed], source: str = "<stated>"):
        self.items = dict(items)
        self.source = source

    @classmethod
    def stated(cls) -> Testbeds:
        return cls(STATED)

    def get(self, document: str) -> Testbed:
        key = str(document).zfill(3)
        if key not in self.items:
            raise KeyError(f"no testbed {document!r} (known: {', '.join(sorted(self.items))})")
        return self.items[key]

    def with_fields(self, document: str, values: dict[str, Any],
                    sources: dict[str, str]) -> Testbeds:
        """A copy in which ``document``'s testbed has ``values`` (with their sources)."""
        tb = self.get(document)
        items = dict(self.items)
        items[tb.document] = Testbed(tb.document, tb.description, {**tb.fields, **values},
                                     {**tb.sources, **sources})
        return Testbeds(items, self.source)

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
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise DataError(path, f"schema: expected {SCHEMA!r}")
        items = {}
        for key, entry in (data.get("testbeds") or {}).items():
            if not isinstance(entry, dict) or not isinstance(entry.get("fields"), dict):
                raise DataError(path, f"testbeds.{key}: expected description, fields, sources")
            items[str(key)] = Testbed(str(key), str(entry.get("description", "")),
                                      dict(entry["fields"]), dict(entry.get("sources") or {}))
        return cls(items, str(path))

    @classmethod
    def packaged(cls) -> Testbeds:
        """The calibrated testbeds shipped with the models (the stated ones if absent)."""
        path = Path(str(resources.files("quiclab.models").joinpath("fitted"))) / FILE
        return cls.load(path) if path.is_file() else cls.stated()
