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

A part that cannot be read (truncated by a full disk, damaged by a copy) is
renamed to ``<part>.parquet.corrupt`` and listed in :attr:`PartStore.set_aside`;
its points then count as not done, so the runner computes them again and
nothing else already computed is lost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TMP_SUFFIX = ".tmp"
#: Appended to the name of a part that cannot be read (it no longer matches *.parquet).
CORRUPT_SUFFIX = ".corrupt"
#: What reading a damaged Parquet file raises (ArrowInvalid, ArrowIOError, …).
#: What a damaged part raises when read: ArrowInvalid (bad magic bytes), or an
#: OSError without an errno (a column's metadata that does not deserialize).
#: An OSError with one (permissions, a full disk) is not the part's fault:
#: :func:`damaged` tells them apart and the store lets those propagate.
UNREADABLE = (pa.ArrowException, OSError)


def damaged(err: BaseException) -> bool:
    """Whether ``err`` from reading a part says the part itself is bad."""
    return not (isinstance(err, OSError) and err.errno is not None)


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
        #: Unreadable parts moved aside by this object: (part, new name, one-line reason).
        self.set_aside: list[tuple[Path, Path, str]] = []
        self._told = 0

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
        """Scenario keys that already have a result for ``engine``; an unreadable part
        is moved aside (:meth:`move_aside`) and its points are not done."""
        keys: set[str] = set()
        for path in self.part_files(engine):
            try:
                if not path.name.startswith("batch-"):
                    pq.read_metadata(path)  # a truncated file has no footer
                    keys.add(path.stem)
                    continue
                table = pq.read_table(path, columns=["scenario_key"])
            except UNREADABLE as err:
                if not damaged(err):
                    raise
                self.move_aside(path, err)
                continue
            keys.update(table.column("scenario_key").to_pylist())
        return keys

    def move_aside(self, path: Path, err: BaseException) -> Path:
        """Rename an unreadable part to ``<name>.corrupt`` (kept for a post-mortem,
        no longer read) and record it in :attr:`set_aside`. Returns the new path."""
        target = path.with_name(path.name + CORRUPT_SUFFIX)
        with contextlib.suppress(FileNotFoundError):  # another process set it aside first
            os.replace(path, target)
        text = str(err).strip().splitlines()
        self.set_aside.append((path, target, f"{type(err).__name__}: "
                                             f"{text[0] if text else 'unreadable'}"))
        return target

    def news(self) -> list[tuple[Path, Path, str]]:
        """The parts moved aside since the last call (to report each once)."""
        new = self.set_aside[self._told:]
        self._told = len(self.set_aside)
        return new

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
        """All rows (of one engine or all), one per (scenario_key, engine), sorted by both;
        an unreadable part is moved aside (:meth:`move_aside`)."""
        tables = []
        for path in self.part_files(engine):
            try:
                tables.append(pq.read_table(path))
            except UNREADABLE as err:
                if not damaged(err):
                    raise
                self.move_aside(path, err)
        if not tables:
            return pa.table({"scenario_key": pa.array([], pa.string()),
                             "engine": pa.array([], pa.string())})
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
