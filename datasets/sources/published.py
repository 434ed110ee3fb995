"""Source 2: the seeds' reported figures, curated in ``datasets/published/*.csv``.

One row per number a seed states in its text or tables, with its conditions
and exact source (see ``datasets/published/README.md``). ``load(catalog)``
validates every row and replaces the ``published_points`` table; a bad cell
is one line naming the file, the row and the column.
"""

from __future__ import annotations

import csv
import hashlib
import math
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.datasets.catalog import Catalog
from quiclab.errors import DataError

SOURCE = "published"
PARSER_VERSION = "published-2"  # 2: each point's testbed (datasets/testbeds.py)
COLUMNS = ("point_id", "document", "section", "locator", "quantity", "value", "unit", "server",
           "client", "app", "cpu", "link_gbps", "mtu_bytes", "gso", "gro", "rtt_ms", "loss_pct",
           "reorder_pct", "cipher", "rcvbuf_bytes", "streams", "chunks", "transfer_bytes",
           "workload", "request_bytes", "requests", "connections", "conditions", "stated", "note")
REQUIRED = ("point_id", "document", "quantity", "value", "unit")
#: Columns a file's header must have: the required cells, and ``conditions``,
#: whose bound and duplicate markers decide what a row may be used for (without
#: the column, a bound would read as an exact value).
HEADER_REQUIRED = (*REQUIRED, "conditions")
FLOATS = ("value", "link_gbps", "rtt_ms", "loss_pct", "reorder_pct")
INTS = ("mtu_bytes", "rcvbuf_bytes", "streams", "chunks", "transfer_bytes", "request_bytes",
        "requests", "connections")
BOOLS = ("gso", "gro")
#: Quantities that may be negative: changes and differences (README "Quantity
#: vocabulary"); every other quantity is a magnitude.
SIGNED_SUFFIXES = ("change_pct", "_delta")
#: The units ``datasets/published/README.md`` defines; any other is a typo.
UNITS = ("Mbit/s", "Gbit/s", "%", "ns", "s", "packets", "x", "count", "KiB", "MiB")


def _ranges() -> dict[str, tuple[float, float]]:
    """Possible values of the condition columns: the Scenario's own bounds."""
    from quiclab.sim.scenario import Scenario

    return {c: Scenario.RANGES[c] for c in (*FLOATS, *INTS) if c in Scenario.RANGES}


def packaged_dir() -> Path:
    return Path(str(resources.files("quiclab.datasets").joinpath("published")))


def read_csv(path: Path,
             on_error: Callable[[DataError], None] | None = None) -> list[dict[str, Any]]:
    """Read and validate one curated CSV; raises DataError naming file, row and column.

    With ``on_error``, a bad row is passed to it and skipped instead (a bad
    header or an empty file still raises: no row of that file can be read).
    """
    text = Path(path).read_text(encoding="utf-8")
    if not text.strip():
        raise DataError(path, "empty file")
    reader = csv.DictReader(text.splitlines())
    header = tuple(reader.fieldnames or ())
    missing = [c for c in HEADER_REQUIRED if c not in header]
    if missing:
        raise DataError(path, f"missing column(s) {', '.join(missing)}", field="header")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        raise DataError(path, f"unknown column(s) {', '.join(unknown)} "
                        f"(allowed: {', '.join(COLUMNS)})", field="header")
    rows = []
    ranges = _ranges()
    for raw in reader:
        where = f"{path}:{reader.line_num}"
        try:
            if None in raw:  # DictReader's key for the cells beyond the header
                extra = raw[None]
                raise DataError(where, f"{len(header) + len(extra)} fields, "
                                       f"header has {len(header)}")
            short = [c for c, v in raw.items() if v is None]
            if short:  # DictReader's value for the cells a short row lacks
                raise DataError(where, f"{len(header) - len(short)} fields, header has "
                                       f"{len(header)} (a cut row?)", field=short[0])
            rows.append(_read_row(raw, where, Path(path).name, ranges))
        except DataError as err:
            if on_error is None:
                raise
            on_error(err)
    return rows


def _read_row(raw: dict[str, str], where: str, file_name: str,
              ranges: dict[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """One validated row; ``where`` (file:line) names it in a DataError.

    ``ranges`` bounds numeric columns (default: the Scenario's bounds).
    """
    ranges = _ranges() if ranges is None else ranges
    row: dict[str, Any] = {}
    for col in COLUMNS:
        cell = (raw.get(col) or "").strip()
        if col in REQUIRED and not cell:
            raise DataError(where, "required cell is empty", field=col)
        if not cell:
            row[col] = None
        elif col in FLOATS:
            try:
                row[col] = float(cell)
            except ValueError:
                raise DataError(where, f"{cell!r} is not a number", field=col) from None
            if not math.isfinite(row[col]):
                raise DataError(where, f"{cell!r} is not a finite number", field=col)
        elif col in INTS:
            try:
                number = float(cell)
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or not number.is_integer():
                # "1500.5" is not silently cut to 1500, nor "inf" a traceback
                raise DataError(where, f"{cell!r} is not a whole number", field=col)
            row[col] = int(number)
        elif col in BOOLS:
            if cell.lower() not in ("true", "false"):
                raise DataError(where, f"{cell!r} is not true/false", field=col)
            row[col] = cell.lower() == "true"
        elif col == "unit" and cell not in UNITS:
            raise DataError(where, f"{cell!r} is not a known unit: allowed "
                                   f"{', '.join(UNITS)}", field=col)
        else:
            row[col] = cell
        if row[col] is not None and col in ranges:
            lo, hi = ranges[col]
            if not lo <= row[col] <= hi:
                raise DataError(where, f"{cell} is impossible: allowed {lo:g} … {hi:g}",
                                field=col)
    if row["value"] < 0 and not str(row["quantity"]).endswith(SIGNED_SUFFIXES):
        raise DataError(where, f"{row['value']:g} is negative, which a "
                        f"{row['quantity']!r} cannot be (only changes carry a sign)",
                        field="value")
    row["source_file"] = file_name
    row["testbed"] = _testbed(str(row["document"]), where)
    return row


def _testbed(document: str, where: str) -> str:
    """The testbed the document's numbers were measured on; a document without
    one is refused (every published point belongs to a testbed)."""
    from quiclab.datasets.testbeds import DOCUMENT_TESTBEDS

    key = document.zfill(3) if document.isdigit() else document
    if key not in DOCUMENT_TESTBEDS:
        raise DataError(where, f"document {document!r} has no testbed (known: "
                               f"{', '.join(sorted(DOCUMENT_TESTBEDS))})", field="document")
    return DOCUMENT_TESTBEDS[key]


def load(catalog: Catalog, directory: Path | None = None, strict: bool = True) -> int:
    """Replace ``published_points`` with every row of ``directory/*.csv``. Returns rows.

    With ``strict=False`` a bad file (empty, bad header) or a bad row (bad
    number, impossible value, negative magnitude, unknown unit, more or fewer
    cells than the header, empty required cell, repeated ``point_id``) is skipped and recorded
    in ``ingest_issues`` (one line naming file, row and reason) and counted in
    ``sources.skipped``; with ``strict=True`` it raises DataError. Re-running
    replaces this source's rows and issues.
    """
    directory = Path(directory) if directory else packaged_dir()
    files = sorted(directory.glob("*.csv"))
    if not files:
        raise DataError(directory, "no *.csv files with published points")
    rows: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    digest = hashlib.sha256()
    file_rows = []
    skipped: list[DataError] = []

    def skip(err: DataError) -> None:
        if strict:
            raise err
        skipped.append(err)

    for path in files:
        try:
            part = read_csv(path, on_error=skip)
        except DataError as err:
            skip(err)
            continue
        data = path.read_bytes()
        digest.update(data)
        file_rows.append({"source": SOURCE, "path": path.name,
                          "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
        for row in part:
            pid = row["point_id"]
            if pid in seen:
                skip(DataError(path, f"point_id {pid!r} repeats (first in {seen[pid]})",
                               field="point_id"))
                continue
            seen[pid] = path.name
            rows.append(row)
    with catalog.transaction():
        catalog.con.execute("DELETE FROM published_points")
        catalog.con.execute("DELETE FROM files WHERE source = ?", [SOURCE])
        catalog.con.execute("DELETE FROM ingest_issues WHERE source = ?", [SOURCE])
        catalog.upsert("published_points", rows)
        catalog.upsert("files", file_rows)
        for skipped_one in skipped:
            catalog.record_issue(SOURCE, skipped_one.path, skipped_one.reason,
                                 skipped_one.field)
        catalog.upsert("sources", [{
            "source": SOURCE, "kind": "curated figures stated in the seeds",
            "location": str(directory), "sha256": digest.hexdigest(),
            "parser_version": PARSER_VERSION, "ingested_at": time.time(),
            "runs": len(rows), "skipped": len(skipped)}])
    return len(rows)
