"""Prospective validation: predictions registered before their runs, compared when they land.

A registration writes one row per (cell of a fresh testbed spec, engine) into
the catalog's ``registered_predictions``: the Scenario, the predicted goodput
with its interval at the host's probed state (and as if the host were as
calibrated), the engine and its version, the models' versions, the code's
revision and the host probe it used. When the spec's runs land, an outcome row
(``prediction_outcomes``) records the observed median and the error; a later
comparison with more runs appends another outcome, the report reads the latest.

Nothing registered can be edited afterwards. Both tables are append-only
ledgers: every row carries the SHA-256 of its canonical content together with
the previous row's hash (``row_sha256 = sha256(prev_sha256 + content)``), so
editing, reordering or deleting a row breaks the chain from there on
(:func:`verify`), and each row's columns must agree with its hashed content.
Each append also adds the new chain head to an anchor file beside the catalog
(``<catalog>.ledger``, one line per row), which catches a chain truncated from
its end. This module has no way to update or delete a row.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GENESIS = "0" * 64
PREDICTIONS = "registered_predictions"
OUTCOMES = "prediction_outcomes"
#: Columns of each table that repeat a field of the hashed content (checked by verify).
MIRRORED = {
    PREDICTIONS: ("registration", "experiment", "cell", "engine", "predicted_mbps",
                  "predicted_lo_mbps", "predicted_hi_mbps", "limit_resource", "probe_id"),
    OUTCOMES: ("prediction_seq", "prediction_sha256", "runs", "observed_mbps", "ape_pct",
               "signed_error_pct", "within_interval"),
}


def canonical(content: dict[str, Any]) -> str:
    """The JSON text that is hashed: sorted keys, no NaN (as null), compact."""
    def clean(v: Any) -> Any:
        if isinstance(v, float):
            return None if not math.isfinite(v) else float(f"{v:.10g}")
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(content), sort_keys=True, separators=(",", ":"), default=str)


def row_hash(prev: str, content_text: str) -> str:
    return hashlib.sha256((prev + content_text).encode()).hexdigest()


def anchor_path(catalog_path: Path) -> Path:
    """The anchor file beside a catalog (its chain heads, appended)."""
    return Path(str(catalog_path) + ".ledger")


def _head(con: Any, table: str) -> tuple[int, str]:
    row = con.execute(f"SELECT seq, row_sha256 FROM {table} ORDER BY seq DESC LIMIT 1"
                      ).fetchone()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def append(catalog_path: Path, table: str, entries: Sequence[dict[str, Any]]) -> list[int]:
    """Append ``entries`` (each: the mirrored columns plus ``content``) to a ledger
    table, chained, in one transaction; add the new heads to the anchor file.
    Returns the rows' sequence numbers."""
    from quiclab.datasets.catalog import Catalog

    if not entries:
        return []
    stamp = datetime.now(UTC).replace(tzinfo=None)
    seqs, heads = [], []
    with Catalog(catalog_path) as cat, cat.transaction() as con:
        seq, prev = _head(con, table)
        rows = []
        for entry in entries:
            seq += 1
            content = dict(entry["content"])
            text = canonical(content)
            digest = row_hash(prev, text)
            row = {k: entry.get(k) for k in MIRRORED[table]}
            row.update(seq=seq, content=text, row_sha256=digest, prev_sha256=prev)
            row["registered_at" if table == PREDICTIONS else "compared_at"] = stamp
            rows.append(row)
            seqs.append(seq)
            heads.append(f"{table} {seq} {digest}")
            prev = digest
        cat._insert_arrow(table, list(rows[0]), rows)
    with open(anchor_path(catalog_path), "a") as anchor:
        anchor.write("".join(f"{h}\n" for h in heads))
    return seqs


@dataclass(frozen=True)
class Verdict:
    ok: bool
    rows: dict[str, int]
    problems: tuple[str, ...]

    def describe(self) -> str:
        counts = ", ".join(f"{n} {t}" for t, n in self.rows.items())
        if self.ok:
            return f"ledger intact: {counts}, every hash and chain link checks"
        return f"ledger TAMPERED ({counts}): " + "; ".join(self.problems[:5]) + (
            f" (and {len(self.problems) - 5} more)" if len(self.problems) > 5 else "")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            fa, fb = float(a), float(b)
        except (TypeError, ValueError):
            return False
        if math.isnan(fa) and math.isnan(fb):
            return True
        return math.isclose(fa, fb, rel_tol=1e-9, abs_tol=1e-9)
    if a is None or b is None:
        return (a is None or a != a) and (b is None or b != b)
    return a == b


def verify(catalog_path: Path) -> Verdict:
    """Check both ledgers: each row's hash over (previous hash + content), the chain's
    links and sequence, the mirrored columns against the content, and every anchored
    head still present (a truncated chain)."""
    from quiclab.datasets.catalog import Catalog

    problems: list[str] = []
    counts: dict[str, int] = {}
    heads: dict[str, dict[int, str]] = {PREDICTIONS: {}, OUTCOMES: {}}
    with Catalog(catalog_path, read_only=True) as cat:
        tables = cat.tables()
        for table in (PREDICTIONS, OUTCOMES):
            if table not in tables:
                counts[table] = 0
                continue
            frame = cat.df(f"SELECT * FROM {table} ORDER BY seq")
            counts[table] = len(frame)
            prev = GENESIS
            for i, row in enumerate(frame.to_dict("records"), 1):
                where = f"{table} seq {row['seq']}"
                if int(row["seq"]) != i:
                    problems.append(f"{where}: expected seq {i} (a row removed or inserted)")
                if row["prev_sha256"] != prev:
                    problems.append(f"{where}: does not link to the row before")
                text = row["content"] if isinstance(row["content"], str) \
                    else json.dumps(row["content"])
                try:
                    content = json.loads(text)
                    recomputed = row_hash(row["prev_sha256"], canonical(content))
                except ValueError:
                    content, recomputed = {}, ""
                if recomputed != row["row_sha256"]:
                    problems.append(f"{where}: content does not match its hash")
                for col in MIRRORED[table]:
                    if not _same(row.get(col), content.get(col)):
                        problems.append(f"{where}: column {col}={row.get(col)!r} but the "
                                        f"hashed content says {content.get(col)!r}")
                heads[table][int(row["seq"])] = str(row["row_sha256"])
                prev = str(row["row_sha256"])
    anchor = anchor_path(catalog_path)
    if anchor.is_file():
        for line in anchor.read_text().splitlines():
            parts = line.split()
            if len(parts) != 3 or parts[0] not in heads:
                continue
            table, seq, digest = parts[0], int(parts[1]), parts[2]
            if heads[table].get(seq) != digest:
                problems.append(f"{table} seq {seq}: anchored {digest[:12]}… is "
                                + ("missing" if seq not in heads[table] else "replaced"))
    return Verdict(not problems, counts, tuple(problems))


def registered(catalog_path: Path) -> Any:
    """Every registered prediction with its latest outcome (a pandas DataFrame)."""
    import pandas as pd

    from quiclab.datasets.catalog import Catalog

    if not Path(catalog_path).exists():
        return pd.DataFrame()
    with Catalog(catalog_path, read_only=True) as cat:
        if PREDICTIONS not in cat.tables():
            return pd.DataFrame()
        preds = cat.df(f"SELECT * FROM {PREDICTIONS} ORDER BY seq")
        outs = cat.df(f"SELECT * FROM {OUTCOMES} ORDER BY seq") if OUTCOMES in cat.tables() \
            else pd.DataFrame(columns=["prediction_seq"])
    latest = outs.drop_duplicates("prediction_seq", keep="last")
    merged = preds.merge(latest.drop(columns=["seq", "content", "row_sha256", "prev_sha256"],
                                     errors="ignore"),
                         left_on="seq", right_on="prediction_seq", how="left")
    return merged
