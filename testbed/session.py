"""Runs into the catalog: repetitions, sweeps and the interop matrix.

A :class:`Session` runs configurations on a :class:`~quiclab.testbed.runner.Testbed`
and writes every run (``ok`` or ``failed``) into the catalog as it finishes,
so an interrupted sweep keeps what it finished and a rerun skips runs whose
``run_id`` is already there with status ``ok``.
"""

from __future__ import annotations

import itertools
import platform
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quiclab import yamlio
from quiclab.errors import SpecError
from quiclab.testbed import record
from quiclab.testbed.config import NOT_TESTBED, RunConfig, parse_set
from quiclab.testbed.runner import PACKAGE_DIR, RunResult, Testbed
from quiclab.testbed.stacks import TESTBED_KNOBS


@dataclass
class Session:
    """A testbed plus where its runs go. ``catalog_path=None`` records nothing."""

    testbed: Testbed
    catalog_path: Path | None
    log: Callable[[str], None] = print
    cpu_name: str = ""
    aes_ni: bool = True
    results: list[RunResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.cpu_name:
            self.cpu_name, self.aes_ni = record.host_cpu()

    def provenance(self) -> dict[str, Any]:
        records = self.testbed.builder.records()
        return {
            "git": record.git_revision(PACKAGE_DIR),
            "builds": {k: v.get("source_hash") for k, v in records.items()},
            "versions": {k: s.version for k, s in self.testbed.stacks.items()},
            "kernel": platform.release(), "python": platform.python_version(),
        }

    def _existing(self, run_ids: list[str]) -> dict[str, str]:
        if self.catalog_path is None or not Path(self.catalog_path).exists() or not run_ids:
            return {}
        from quiclab.datasets.catalog import Catalog

        with Catalog(self.catalog_path) as cat:
            rows = cat.con.execute(
                "SELECT run_id, status FROM runs WHERE run_id IN (SELECT unnest(?))",
                [run_ids]).fetchall()
        return {r[0]: r[1] for r in rows}

    def next_repetition(self, config: RunConfig) -> int:
        """First repetition number not yet in the catalog for this configuration."""
        if self.catalog_path is None or not Path(self.catalog_path).exists():
            return 0
        from quiclab.datasets.catalog import Catalog

        prefix = record.run_id(config.experiment, config.key(), 0)[:-1]
        with Catalog(self.catalog_path) as cat:
            row = cat.con.execute("SELECT max(repetition) FROM runs WHERE starts_with(run_id, ?)",
                                  [prefix]).fetchone()
        return 0 if row is None or row[0] is None else int(row[0]) + 1

    def store(self, result: RunResult) -> None:
        if self.catalog_path is None:
            return
        from quiclab.datasets.catalog import Catalog

        row = record.run_row(result, self.cpu_name, self.aes_ni, self.provenance())
        with Catalog(self.catalog_path) as cat, cat.transaction():
            cat.con.execute("DELETE FROM cpu_samples WHERE run_id = ?", [result.run_id])
            cat.upsert("runs", [row])
            cat.upsert("cpu_samples", record.sample_rows(result))

    def run(self, config: RunConfig, repeat: int = 1, first: int | None = None,
            resume: bool = False) -> list[RunResult]:
        """Run ``repeat`` repetitions; with ``resume``, skip ones already ``ok`` in the catalog."""
        start = self.next_repetition(config) if first is None else first
        reps = list(range(start, start + repeat))
        ids = [record.run_id(config.experiment, config.key(), r) for r in reps]
        done = self._existing(ids) if resume else {}
        out = []
        for rep, rid in zip(reps, ids, strict=True):
            if done.get(rid) == "ok":
                self.log(f"{rid}: already in the catalog, skipped")
                continue
            result = self.testbed.run(config, rep, rid)
            self.store(result)
            self.results.append(result)
            out.append(result)
            goodput, rps = result.goodput_mbps, result.requests_per_s
            self.log(f"{config.scenario.server} → {config.scenario.client} rep {rep}: "
                     f"{result.status}"
                     + (f", {rps:.0f} requests/s" if rps is not None else "")
                     + (f", {goodput:.0f} Mbit/s" if goodput is not None else "")
                     + (f" — {result.failure_reason}" if result.failure_reason else ""))
        return out


# -- sweep specs ------------------------------------------------------------------
SPEC_KEYS = {"name", "description", "base", "axes", "zip", "engines", "repetitions",
             "seeds", "record", "testbed", "kind"}
TESTBED_SPEC_KEYS = {"repeat", "knobs", "servers", "clients", "bytes", "pairs"}


def _values(spec: str, key: str, raw: Any) -> list[Any]:
    """An axis: a list, or {range: [lo, hi, step]} or {logrange: [lo, hi, n]}."""
    if isinstance(raw, list):
        return raw
    if isinstance(raw, dict) and "range" in raw:
        lo, hi, step = raw["range"]
        n = round((hi - lo) / step) + 1
        return [lo + i * step for i in range(n)]
    if isinstance(raw, dict) and "logrange" in raw:
        lo, hi, n = raw["logrange"]
        return [lo * (hi / lo) ** (i / (n - 1)) for i in range(int(n))] if n > 1 else [lo]
    raise SpecError(f"{spec}: axes.{key}={raw!r}: allowed a list, {{range: [lo, hi, step]}} "
                    "or {logrange: [lo, hi, n]}")


@dataclass(frozen=True)
class SweepPoint:
    server: str
    client: str
    changes: dict[str, Any]
    knobs: dict[str, Any]


def load_spec(path: Path) -> dict[str, Any]:
    try:
        spec = yamlio.load(Path(path).read_text())
    except OSError as err:
        raise SpecError(f"{path}: cannot read ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {yamlio.where(err)}") from None
    if not isinstance(spec, dict):
        raise SpecError(f"{path}: not a mapping")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise SpecError(f"{path}: unknown key {unknown[0]!r} (allowed: "
                        f"{', '.join(sorted(SPEC_KEYS))})")
    tb = spec.get("testbed") or {}
    bad = sorted(set(tb) - TESTBED_SPEC_KEYS)
    if bad:
        raise SpecError(f"{path}: unknown key testbed.{bad[0]!r} (allowed: "
                        f"{', '.join(sorted(TESTBED_SPEC_KEYS))})")
    return spec


def expand(spec: dict[str, Any], where: str = "spec") -> Iterator[SweepPoint]:
    """The points of a sweep spec (the same YAML as simulated sweeps).

    ``base`` and ``axes`` hold Scenario fields (grid product); ``zip`` holds
    lists walked together. An ``implementation`` axis sets server = client.
    Testbed knobs (``veth_segmentation``, …) may appear in base, axes or
    ``testbed.knobs``. Fields the testbed cannot set are dropped from the
    point with a note (a simulated-only axis such as ``cpu`` is skipped).
    """
    base = dict(spec.get("base") or {})
    axes = {k: _values(where, k, v) for k, v in (spec.get("axes") or {}).items()}
    zipped = spec.get("zip") or {}
    tb = spec.get("testbed") or {}
    zip_keys = list(zipped)
    zip_rows = list(zip(*[zipped[k] for k in zip_keys], strict=True)) if zip_keys else [()]
    grid_keys = list(axes)
    for combo in itertools.product(*[axes[k] for k in grid_keys]):
        for zrow in zip_rows:
            values = {**base, **dict(zip(grid_keys, combo, strict=True)),
                      **dict(zip(zip_keys, zrow, strict=True))}
            # A null in a zipped list leaves that field at the base/default for the row.
            values = {k: v for k, v in values.items() if v is not None}
            impl = values.pop("implementation", None)
            servers = [values.pop("server", impl)] if "server" in values or impl else list(
                tb.get("servers") or [])
            clients = [values.pop("client", impl)] if "client" in values or impl else list(
                tb.get("clients") or [])
            knobs = dict(tb.get("knobs") or {})
            changes: dict[str, Any] = {}
            for key, value in values.items():
                if key in TESTBED_KNOBS:
                    knobs[key] = value
                elif key not in NOT_TESTBED:
                    changes[key] = value
            if not servers or not clients:
                raise SpecError(f"{where}: no server/client: give an implementation axis, "
                                "base server/client, or testbed.servers/clients")
            for server, client in itertools.product(servers, clients):
                if server is None or client is None:
                    continue
                yield SweepPoint(str(server), str(client), changes, knobs)


def point_config(point: SweepPoint, experiment: str, transfer_bytes: int | None) -> RunConfig:
    items = [f"{k}={v}" for k, v in {**point.changes, **point.knobs}.items()]
    changes, knobs = parse_set(items, source=experiment)
    return RunConfig.build(point.server, point.client, changes, knobs,
                           transfer_bytes=transfer_bytes, experiment=experiment)


def sweep(session: Session, spec_path: Path, repeat: int | None = None,
          transfer_bytes: int | None = None) -> list[RunResult]:
    """Run every point of a sweep spec; resumable (finished runs are skipped)."""
    spec = load_spec(spec_path)
    name = str(spec.get("name") or Path(spec_path).stem)
    tb = spec.get("testbed") or {}
    reps = repeat or int(tb.get("repeat") or spec.get("repetitions") or 1)
    nbytes = transfer_bytes or tb.get("bytes")
    out: list[RunResult] = []
    points = list(expand(spec, str(spec_path)))
    for i, point in enumerate(points, 1):
        session.log(f"[{i}/{len(points)}] {point.server} → {point.client} "
                    f"{point.changes or ''} {point.knobs or ''}".rstrip())
        try:
            config = point_config(point, name, int(nbytes) if nbytes else None)
        except Exception as err:  # a refused point is reported and the sweep goes on
            session.log(f"  skipped: {err}")
            continue
        out += session.run(config, reps, first=0, resume=True)
    return out


def matrix(session: Session, stacks: Iterable[str], repeat: int = 3,
           changes: dict[str, Any] | None = None, knobs: dict[str, Any] | None = None,
           transfer_bytes: int | None = None,
           experiment: str = "interop-matrix") -> dict[tuple[str, str], dict[str, Any]]:
    """Every client × every server; cells carry the median goodput or why they cannot talk."""
    names = list(stacks)
    table = session.testbed.stacks
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for server in names:
        for client in names:
            reason = table[client].can_talk_to(table[server])
            if reason:
                cells[(server, client)] = {"status": "incompatible", "reason": reason}
                session.log(f"{server} → {client}: cannot talk ({reason})")
                continue
            config = RunConfig.build(server, client, changes, knobs,
                                     transfer_bytes=transfer_bytes, experiment=experiment)
            # Same run ids as a previous matrix: a rerun replaces its cells.
            results = session.run(config, repeat, first=0, resume=False)
            ok = sorted(r.goodput_mbps for r in results
                        if r.status == "ok" and r.goodput_mbps is not None)
            failed = [r.failure_reason for r in results if r.status != "ok"]
            cells[(server, client)] = {
                "status": "ok" if ok else "failed", "runs": len(results),
                "median_mbps": statistics.median(ok) if ok else None,
                "reason": failed[0] if failed and not ok else None}
    return cells


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample standard deviation / mean); None below two values."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return (var ** 0.5) / mean if mean else None


def noise(session: Session, stacks: Iterable[str], repeat: int = 10,
          transfer_bytes: int | None = None,
          experiment: str = "noise") -> list[dict[str, Any]]:
    """Goodput noise per stack (server = client) at MTU 1500, unpinned and pinned.

    Measured before accuracy is claimed (issue 7): the coefficient of variation
    of goodput over ``repeat`` repetitions, and of each side's CPU seconds.
    """
    rows = []
    for name in stacks:
        row: dict[str, Any] = {"stack": name}
        for pin in (False, True):
            config = RunConfig.build(name, name, {"pin": pin}, transfer_bytes=transfer_bytes,
                                     experiment=experiment)
            results = session.run(config, repeat, first=0, resume=False)
            ok = [r for r in results if r.status == "ok" and r.goodput_mbps is not None]
            goodput = [float(r.goodput_mbps or 0) for r in ok]
            key = "pinned" if pin else "unpinned"
            row[f"{key}_runs_ok"] = len(ok)
            row[f"{key}_median_mbps"] = statistics.median(goodput) if goodput else None
            row[f"{key}_cv"] = cv(goodput)
            row[f"{key}_server_cpu_cv"] = cv([r.server.exit.cpu_s for r in ok if r.server.exit])
        rows.append(row)
    return rows
