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
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from quiclab.datasets.catalog import Catalog
from quiclab.errors import DataError, ScenarioError, excerpt
from quiclab.sim.scenario import whole_number

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
    return [row for _, row in _read_rows(path, on_error)]


def _read_rows(path: Path, on_error: Callable[[DataError], None] | None = None,
               ) -> list[tuple[str, dict[str, Any]]]:
    """:func:`read_csv` with each row's ``file:line``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(path, f"not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise DataError(path, f"cannot be read ({err.strerror or err})") from None
    if not text.strip():
        raise DataError(path, "empty file")
    reader = csv.DictReader(text.splitlines())
    header = tuple(reader.fieldnames or ())
    missing = [c for c in HEADER_REQUIRED if c not in header]
    if missing:
        raise DataError(path, f"missing column(s) {', '.join(missing)}", field="header")
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        names = ", ".join(c if len(c) <= 40 and c.isprintable() else excerpt(c)
                          for c in unknown[:3])
        raise DataError(path, f"unknown column(s) {names}"
                        f"{' …' if len(unknown) > 3 else ''} (allowed: {', '.join(COLUMNS)})",
                        field="header")
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
            rows.append((where, _read_row(raw, where, Path(path).name, ranges)))
        except DataError as err:
            if on_error is None:
                raise
            on_error(err)
    return rows


def _cell(cell: str) -> str:
    """A cell as quoted in a message: itself, or a bounded excerpt of a long one."""
    return cell if len(cell) <= 40 and cell.isprintable() else excerpt(cell)


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
                raise DataError(where, f"{excerpt(cell)} is not a number", field=col) from None
            if not math.isfinite(row[col]):
                raise DataError(where, f"{excerpt(cell)} is not a finite number", field=col)
        elif col in INTS:
            # The one reader of whole numbers: "1500.5" is not cut to 1500, "inf" and
            # 400 digits are refused in one line, 2**53 + 1 is read exactly.
            try:
                row[col] = whole_number(col, cell)
            except ScenarioError as err:
                reason = ("is not a whole number" if err.allowed.startswith("a whole number")
                          else f"is impossible: allowed {err.allowed}")  # 400 digits
                raise DataError(where, f"{excerpt(cell)} {reason}", field=col) from None
        elif col in BOOLS:
            if cell.lower() not in ("true", "false"):
                raise DataError(where, f"{excerpt(cell)} is not true/false", field=col)
            row[col] = cell.lower() == "true"
        elif col == "unit" and cell not in UNITS:
            raise DataError(where, f"{excerpt(cell)} is not a known unit: allowed "
                                   f"{', '.join(UNITS)}", field=col)
        else:
            row[col] = cell
        if row[col] is not None and col in ranges:
            lo, hi = ranges[col]
            if not lo <= row[col] <= hi:
                raise DataError(where, f"{_cell(cell)} is impossible: allowed {lo:g} … {hi:g}",
                                field=col)
    if row["value"] < 0 and not str(row["quantity"]).endswith(SIGNED_SUFFIXES):
        raise DataError(where, f"{row['value']:g} is negative, which a "
                        f"{excerpt(row['quantity'])} cannot be (only changes carry a sign)",
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
        raise DataError(where, f"document {excerpt(document)} has no testbed (known: "
                               f"{', '.join(sorted(DOCUMENT_TESTBEDS))})", field="document")
    return DOCUMENT_TESTBEDS[key]


@dataclass
class Parsed:
    """What :func:`read` found in a folder: valid rows, files read, rows skipped."""

    directory: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[DataError] = field(default_factory=list)
    sha256: str = ""


def read(directory: Path | None = None, strict: bool = True) -> Parsed:
    """Read and validate every ``directory/*.csv`` without touching a catalog.

    With ``strict=False`` a bad file (empty, not UTF-8, bad header) or a bad row
    (bad number, impossible value, negative magnitude, unknown unit, more or fewer
    cells than the header, empty required cell, repeated ``point_id``) is skipped
    with one line naming file, row and reason; with ``strict=True`` it raises
    DataError.
    """
    directory = Path(directory) if directory else packaged_dir()
    files = sorted(directory.glob("*.csv"))
    if not files:
        raise DataError(directory, "no *.csv files with published points")
    parsed = Parsed(directory)
    seen: dict[str, str] = {}
    digest = hashlib.sha256()

    def skip(err: DataError) -> None:
        if strict:
            raise err
        parsed.skipped.append(err)

    for path in files:
        try:
            part = _read_rows(path, on_error=skip)
        except DataError as err:
            skip(err)
            continue
        data = path.read_bytes()
        digest.update(data)
        parsed.files.append({"source": SOURCE, "path": path.name,
                             "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
        for where, row in part:
            pid = row["point_id"]
            if pid in seen:
                skip(DataError(where, f"point_id {excerpt(pid)} repeats (first at "
                                      f"{seen[pid]})", field="point_id"))
                continue
            seen[pid] = f"{path.name}:{where.rsplit(':', 1)[-1]}"
            parsed.rows.append(row)
    parsed.sha256 = digest.hexdigest()
    return parsed


def write(catalog: Catalog, parsed: Parsed) -> int:
    """Replace ``published_points`` with ``parsed``'s rows (one transaction). Returns rows.

    Refused (DataError, the catalog unchanged) when no row was read: a folder of
    other CSVs must not replace the points already there with none.
    """
    why = str(parsed.skipped[0]) if parsed.skipped else "no rows in the files"
    with catalog.replacing(SOURCE, parsed.directory, len(parsed.rows), why):
        catalog.con.execute("DELETE FROM published_points")
        catalog.con.execute("DELETE FROM files WHERE source = ?", [SOURCE])
        catalog.con.execute("DELETE FROM ingest_issues WHERE source = ?", [SOURCE])
        catalog.upsert("published_points", parsed.rows)
        catalog.upsert("files", parsed.files)
        for skipped_one in parsed.skipped:
            catalog.record_issue(SOURCE, skipped_one.path, skipped_one.reason,
                                 skipped_one.field)
        catalog.upsert("sources", [{
            "source": SOURCE, "kind": "curated figures stated in the seeds",
            "location": str(parsed.directory), "sha256": parsed.sha256,
            "parser_version": PARSER_VERSION, "ingested_at": time.time(),
            "runs": len(parsed.rows), "skipped": len(parsed.skipped)}])
    return len(parsed.rows)


def load(catalog: Catalog, directory: Path | None = None, strict: bool = True) -> int:
    """Replace ``published_points`` with every row of ``directory/*.csv``. Returns rows.

    :func:`read` then :func:`write`: bad files and rows are skipped and recorded
    in ``ingest_issues`` (``strict=False``) or raise DataError; a folder that
    yields no row is refused and leaves the catalog unchanged. Re-running
    replaces this source's rows and issues.
    """
    return write(catalog, read(directory, strict))
