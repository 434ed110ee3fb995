"""Results of a sweep on disk: one Parquet part file per finished point (or batch of points).

Layout of a sweep's output folder (named by spec and content hash, never by
wall-clock time)::

    <out>/provenance.json                 resolved spec, git, packages, models
    <out>/parts/<engine>/<scenario_key>.parquet          one point
    <out>/parts/<engine>/batch-<digest>-<n>.parquet      n points computed together

A part is written to a hidden temporary file in the same folder and moved
into place with :func:`os.replace`, which is atomic on POSIX: a reader sees
the whole part or none of it. A ``kill -9`` therefore loses at most the
points in flight, and a rerun computes exactly the points whose keys no
part holds yet. Every row carries ``scenario_key`` (``Scenario.key()``) and
``engine``; reading deduplicates on them anyway, first part wins.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TMP_SUFFIX = ".tmp"


def write_atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_bytes(path, json.dumps(data, indent=1, sort_keys=True, default=str).encode())


class PartStore:
    """The part files of one output folder (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.parts = self.root / "parts"

    def engine_dir(self, engine: str) -> Path:
        return self.parts / engine

    def clean_temporaries(self) -> int:
        """Remove half-written temporaries left by a killed run. Returns how many."""
        removed = 0
        if self.parts.is_dir():
            for tmp in self.parts.glob(f"*/.*{TMP_SUFFIX}"):
                tmp.unlink(missing_ok=True)
                removed += 1
        return removed

    def part_files(self, engine: str | None = None) -> list[Path]:
        pattern = f"{engine}/*.parquet" if engine else "*/*.parquet"
        return sorted(self.parts.glob(pattern)) if self.parts.is_dir() else []

    def done_keys(self, engine: str) -> set[str]:
        """Scenario keys that already have a result for ``engine``."""
        keys: set[str] = set()
        for path in self.part_files(engine):
            if not path.name.startswith("batch-"):
                keys.add(path.stem)
                continue
            table = pq.read_table(path, columns=["scenario_key"])
            keys.update(table.column("scenario_key").to_pylist())
        return keys

    def write(self, engine: str, rows: Sequence[dict[str, Any]]) -> Path:
        """Write the rows of finished points as one part, atomically. Returns its path."""
        if not rows:
            raise ValueError("write() needs at least one row")
        folder = self.engine_dir(engine)
        folder.mkdir(parents=True, exist_ok=True)
        keys = [str(r["scenario_key"]) for r in rows]
        if len(rows) == 1:
            name = f"{keys[0]}.parquet"
        else:
            blob = hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()[:16]
            name = f"batch-{blob}-{len(rows)}.parquet"
        path = folder / name
        table = pa.Table.from_pylist(list(rows))
        tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path

    def read(self, engine: str | None = None) -> pa.Table:
        """All rows (of one engine or all), one per (scenario_key, engine), sorted by both."""
        files = self.part_files(engine)
        if not files:
            return pa.table({"scenario_key": pa.array([], pa.string()),
                             "engine": pa.array([], pa.string())})
        tables = [pq.read_table(f) for f in files]
        table = pa.concat_tables(tables, promote_options="permissive")
        keys = list(zip(table.column("scenario_key").to_pylist(),
                        table.column("engine").to_pylist(), strict=True))
        seen: set[tuple[str, str]] = set()
        keep = []
        for i, key in enumerate(keys):
            if key not in seen:
                seen.add(key)
                keep.append(i)
        if len(keep) != len(keys):
            table = table.take(pa.array(keep, pa.int64()))
        return table.sort_by([("engine", "ascending"), ("scenario_key", "ascending")])
