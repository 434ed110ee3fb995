"""The one runner behind ``quiclab sweep`` and ``quiclab reproduce``.

:func:`run_points` takes Scenarios, engines and an executor; it skips every
point that a part file of the output folder already holds, cuts the rest
into tasks (the analytic engine: the whole sweep in one ``predict_batch``
call; the packet engines: one point per task), runs them, writes each
finished task as an atomic Parquet part (:mod:`quiclab.experiments.store`)
and shows a progress bar with rate and ETA. :func:`to_catalog` then upserts
the rows, with provenance, into the catalog's ``predictions`` table.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from quiclab.errors import SpecError
from quiclab.experiments import provenance as prov
from quiclab.experiments.executors import DaskExecutor, LocalExecutor, Outcome
from quiclab.experiments.progress import ProgressReporter
from quiclab.experiments.spec import OUTPUT_FIELDS, digest
from quiclab.experiments.store import PartStore, write_json_atomic
from quiclab.models.registry import Registry
from quiclab.paths import writable_folder
from quiclab.sim.engine import code_digest
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import DEFAULTS, LATER_FIELDS, Scenario, field_names

#: Points per analytic task: "a whole sweep in one predict_batch call" up to this size.
ANALYTIC_TASK_POINTS = 200_000
#: Rows per part file when one task returns many points.
PART_ROWS = 20_000
#: How many failed points are listed one per line (the rest are counted).
SHOW_FAILURES = 5


@dataclass
class RunReport:
    """What a run did: counts, failures, the output folder and the result table."""

    out: Path
    points: int = 0
    computed: int = 0
    reused: int = 0
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # engine, label, reason
    seconds: dict[str, float] = field(default_factory=dict)  # engine → wall time computing
    table: pa.Table | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    computed_by: dict[str, int] = field(default_factory=dict)  # engine → points computed

    def rate(self, engine: str) -> float:
        """Points per second computed by ``engine`` in this run (NaN if none)."""
        n = self.computed_by.get(engine, 0)
        s = self.seconds.get(engine, 0.0)
        return n / s if n and s > 0 else float("nan")


_FIELDS = tuple(field_names())


def scenario_dict(scenario: Scenario) -> dict[str, Any]:
    """``Scenario.to_dict()`` without ``dataclasses.asdict``'s deep copies (flat fields)."""
    return {name: getattr(scenario, name) for name in _FIELDS}


def scenario_key(scenario: Scenario) -> str:
    """``Scenario.key()``, computed the same way but ~10× faster (the runner hashes 10⁵ points)."""
    data = scenario_dict(scenario)
    for name in LATER_FIELDS:  # Scenario.key_dict: left out while at their default
        if data[name] == DEFAULTS[name]:
            del data[name]
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _json_value(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def prediction_row(prediction: Prediction, record: Sequence[str] = OUTPUT_FIELDS,
                   key: str | None = None) -> dict[str, Any]:
    """One flat row: every Scenario field, ``scenario_key``, and the recorded outputs.

    The same values as ``Prediction.to_row()`` (dicts and tuples as JSON text);
    ``limit`` is stored as ``limit_resource`` (LIMIT is a reserved word in SQL).
    """
    row = scenario_dict(prediction.scenario)
    row["scenario_key"] = key or scenario_key(prediction.scenario)
    for name in record:
        value = getattr(prediction, name)
        if isinstance(value, dict | tuple | list):
            value = json.dumps(_json_value(value), sort_keys=True)
        row["limit_resource" if name == "limit" else name] = value
    return row


def content_hash(spec: dict[str, Any], model_versions: dict[str, str]) -> str:
    """Hash of what determines a sweep's results (not its engines, path or wording):
    the resolved spec, the model versions and the engines' code (engine_code_digest),
    so that neither a refit nor a changed engine reuses stale results."""
    core = {k: v for k, v in spec.items()
            if k not in ("engines", "path", "description", "name", "kind")}
    return digest({"spec": core, "models": model_versions, "engines": engine_code_digest()})


def engine_code_digest() -> str:
    """SHA-256 (16 hex digits) of every source file of the engines
    (:func:`quiclab.sim.engine.code_digest`)."""
    return code_digest()


def default_out(data_dir: Path, kind: str, name: str, chash: str) -> Path:
    folder = {"sweep": "sweeps", "reproduction": "reproductions"}.get(kind, kind)
    return data_dir / folder / f"{name}-{chash}"


def _check_out(out: Path, chash: str) -> None:
    meta = out / "provenance.json"
    if not meta.is_file():
        return
    try:
        old = json.loads(meta.read_text()).get("content_hash")
    except (OSError, ValueError):
        return
    if old and old != chash:
        raise SpecError(f"{out}: holds results of another spec or model set "
                        f"(content hash {old}, this run {chash}); choose another --out")


def _tasks(engine: str, todo: list[Scenario], chunk: int) -> list[list[Scenario]]:
    size = chunk or (ANALYTIC_TASK_POINTS if engine == "analytic" else 1)
    return [todo[i:i + size] for i in range(0, len(todo), size)]


def run_points(*, name: str, kind: str, spec: dict[str, Any], scenarios: Sequence[Scenario],
               engines: Sequence[str], engine_options: dict[str, dict[str, Any]],
               registry: Registry, out: Path, executor: LocalExecutor | DaskExecutor,
               record: Sequence[str] = OUTPUT_FIELDS, chunk: int = 0,
               progress: bool = True, chash: str | None = None) -> RunReport:
    """Compute what is missing in ``out`` and return every row of these scenarios.

    ``engine_options`` are passed to each engine's constructor (spec options
    merged with runtime ones such as the ns-3 build cache).
    """
    versions = registry.versions()
    chash = chash or content_hash(spec, versions)
    writable_folder(out, "--out")  # a file in the way or a read-only disk: one line, now
    _check_out(out, chash)
    store = PartStore(out)
    store.clean_temporaries()
    by_key = {scenario_key(s): s for s in scenarios}
    key_of = {s: k for k, s in by_key.items()}
    unique = list(by_key.values())
    seeds = sorted({s.seed for s in unique})
    runs = sorted({s.run for s in unique})
    meta = prov.collect(spec, versions, registry.source,
                        {e: _json_safe_options(engine_options.get(e, {})) for e in engines})
    meta.update({"content_hash": chash, "name": name, "kind": kind,
                 "seeds": {"seed": seeds, "runs": [runs[0], runs[-1]] if runs else []},
                 "executor": executor.name, "jobs": executor.jobs, "out": str(out)})
    write_json_atomic(out / "provenance.json", meta)
    report = RunReport(out=out, points=len(unique) * len(engines), provenance=meta)
    # A part found unreadable only when all rows are read at the end is moved aside
    # then; one more pass computes the points it held (counted as reused before).
    reused: dict[str, set[str]] = {}
    for again in (False, True):
        for engine in engines:
            done = store.done_keys(engine)
            _say_set_aside(store)
            if again:
                todo = [s for k, s in by_key.items() if k in reused[engine] and k not in done]
                report.reused -= len(todo)
            else:
                todo = [s for k, s in by_key.items() if k not in done]
                reused[engine] = done & by_key.keys()
                report.reused += len(unique) - len(todo)
            if not todo:
                continue
            tasks = _tasks(engine, todo, chunk)
            started = time.perf_counter()
            with ProgressReporter(f"{name} · {engine}", len(todo), enabled=progress) as bar:
                for outcomes in executor.run(engine, engine_options.get(engine, {}), registry,
                                             tasks):
                    _write(store, engine, outcomes, record, report, key_of)
                    bar.advance(len(outcomes))
            report.seconds[engine] = report.seconds.get(engine, 0.0) \
                + time.perf_counter() - started
        table = store.read()
        if not _say_set_aside(store):
            break
    keys = set(by_key)
    if table.num_rows:
        mask = [k in keys and e in engines for k, e in zip(
            table.column("scenario_key").to_pylist(), table.column("engine").to_pylist(),
            strict=True)]
        table = table.filter(pa.array(mask))
    report.table = table
    return report


def _say_set_aside(store: PartStore, stream: Any = None) -> int:
    """One line per unreadable part moved aside since the last call; returns how many."""
    news = store.news()
    for path, target, reason in news:
        print(f"{path}: unreadable part ({reason}); moved aside to {target.name}, "
              f"its points are computed again", file=stream or sys.stderr)
    return len(news)


def _write(store: PartStore, engine: str, outcomes: list[Outcome], record: Sequence[str],
           report: RunReport, key_of: dict[Scenario, str]) -> None:
    rows = []
    for o in outcomes:
        if o.prediction is None:
            report.failed.append((engine, o.scenario.describe(), o.error or "failed"))
            continue
        rows.append(prediction_row(o.prediction, record, key_of.get(o.scenario)))
    for i in range(0, len(rows), PART_ROWS):
        store.write(engine, rows[i:i + PART_ROWS])
    report.computed += len(rows)
    report.computed_by[engine] = report.computed_by.get(engine, 0) + len(rows)


def _json_safe_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, int | float | str | bool) or v is None else str(v))
            for k, v in options.items()}


def print_failures(report: RunReport, stream: Any = None) -> None:
    stream = stream or sys.stderr
    for engine, label, reason in report.failed[:SHOW_FAILURES]:
        print(f"  failed [{engine}] {label}: {reason}", file=stream)
    if len(report.failed) > SHOW_FAILURES:
        print(f"  … and {len(report.failed) - SHOW_FAILURES} more failed points", file=stream)


class CatalogWrite(NamedTuple):
    """What :func:`to_catalog` did: rows written, and older rows of the sweep removed."""

    rows: int
    replaced: int


def to_catalog(catalog_path: Path, table: pa.Table, *, name: str, kind: str,
               provenance: dict[str, Any]) -> CatalogWrite:
    """Upsert rows into ``predictions`` (one per sweep, scenario and engine).

    With a content hash in ``provenance``, the rows of sweep ``name`` made from
    another one (an edited spec, other models) are deleted in the same
    transaction, so that the sweep's rows are only the current results.
    """
    from quiclab.datasets.catalog import Catalog

    if table.num_rows == 0:
        return CatalogWrite(0, 0)
    rows = table.to_pylist()
    git = provenance.get("git", {})
    common = {
        "sweep": name, "kind": kind, "content_hash": provenance.get("content_hash"),
        "spec_json": json.dumps(provenance.get("spec", {}), sort_keys=True, default=str),
        "git_revision": git.get("revision"), "git_dirty": git.get("dirty"),
        "packages_json": json.dumps(provenance.get("packages", {}), sort_keys=True),
        "models_source": provenance.get("models", {}).get("source"),
        "out_dir": str(provenance.get("out", "")) or None,
    }
    with Catalog(catalog_path) as catalog:
        columns = set(catalog.columns("predictions"))
        out = []
        for row in rows:
            merged = {**row, **common}
            extra = {k: v for k, v in merged.items() if k not in columns}
            kept = {k: v for k, v in merged.items() if k in columns}
            if extra and "extra" in columns:
                kept["extra"] = json.dumps(extra, sort_keys=True, default=str)
            out.append(kept)
        chash = provenance.get("content_hash")
        with catalog.transaction():
            replaced = catalog.delete_other_versions(name, chash) if chash else 0
            return CatalogWrite(catalog.upsert("predictions", out), replaced)
