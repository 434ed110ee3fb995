"""A curated published-points row read back with the types and values it states."""

from __future__ import annotations

import csv
import io

from quiclab.datasets.sources.published import COLUMNS, read_csv


def test_a_row_reads_back_typed(tmp_path):
    row = {c: "" for c in COLUMNS}
    row.update({"point_id": "x-001", "document": "002", "section": "4.5", "locator": "Fig. 9",
                "quantity": "goodput", "value": "4.2", "unit": "Gbit/s", "server": "msquic",
                "client": "msquic", "mtu_bytes": "1500", "gso": "True", "gro": "false",
                "rtt_ms": "0.5", "conditions": "bound=approx", "stated": "text"})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerow(row)
    path = tmp_path / "x.csv"
    path.write_text(out.getvalue())
    [got] = read_csv(path)
    assert got["gso"] is True and got["gro"] is False  # "True" / "false", any case
    assert got["value"] == 4.2 and got["rtt_ms"] == 0.5 and got["mtu_bytes"] == 1500
    assert got["server"] == "msquic" and got["unit"] == "Gbit/s"
    assert got["link_gbps"] is None and got["cpu"] is None  # empty cells are missing values
