"""Runs into the catalog: repetitions, sweeps, the interop matrix and noise.

A :class:`Session` runs configurations on a :class:`~quiclab.testbed.runner.Testbed`
and writes every run (``ok`` or ``failed``) into the catalog as it finishes,
so an interrupted sweep, matrix or noise measurement keeps what it finished and
a rerun skips runs whose ``run_id`` is already there with status ``ok`` (and
runs the rest: missing repetitions and failed ones). A sweep spec is checked
whole before the first run (:func:`plan`): a bad one refuses in one line naming
the file, the key path and the value.
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from quiclab import yamlio
from quiclab.errors import DataError, QuiclabError, ScenarioError, SpecError, excerpt
from quiclab.experiments.axes import MAX_AXIS_VALUES
from quiclab.sim.scenario import coerce
from quiclab.testbed import record
from quiclab.testbed.config import NOT_TESTBED, RunConfig, coerce_knob
from quiclab.testbed.runner import PACKAGE_DIR, RunResult, Testbed
from quiclab.testbed.stacks import STACKS, TESTBED_KNOBS
from quiclab.testbed.stacks import select as select_stacks


@dataclass
class Session:
    """A testbed plus where its runs go. ``catalog_path=None`` records nothing."""

    testbed: Testbed
    catalog_path: Path | None
    log: Callable[[str], None] = print
    cpu_name: str = ""
    aes_ni: bool = True
    results: list[RunResult] = field(default_factory=list)
    #: Runs not made because the catalog already had them ``ok`` (``resume=True``).
    skipped: int = 0
    #: Take host probes (testbed/probe.py) at the session's start, middle and end
    #: (:meth:`probe`); the command line turns it on unless ``--no-probe``.
    probing: bool = False
    #: Also a short probe (one round, one 50 MB transfer: ~3 s) before each point of a
    #: sweep, so that each cell has a state of its own minutes (``--probe-points``).
    probe_points: bool = False
    #: This session's id, carried by its runs (``extra.provenance.session``) and probes.
    session_id: str = ""
    #: The ids of the probes this session took.
    probes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.cpu_name:
            self.cpu_name, self.aes_ni = record.host_cpu()
        if not self.session_id:
            self.session_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"

    def run_id(self, config: RunConfig, repetition: int) -> str:
        """The id of one repetition of ``config`` on this session's hosts."""
        return record.run_id(config.experiment, config.key(), repetition,
                             self.testbed.inventory.hostpair)

    def provenance(self) -> dict[str, Any]:
        records = self.testbed.builder.records()
        return {
            "git": record.git_revision(PACKAGE_DIR),
            "builds": {k: v.get("source_hash") for k, v in records.items()},
            "versions": {k: s.version for k, s in self.testbed.stacks.items()},
            "kernel": platform.release(), "python": platform.python_version(),
            "session": self.session_id,
        }

    def probe(self, phase: str, light: bool = False) -> str | None:
        """Take a host probe (when :attr:`probing`) and store it with this session's id;
        ``light``: one round and one 50 MB transfer (a point's probe).

        The caller holds the testbed lock. A probe that fails is logged and the
        session goes on (its runs are worth more than the reference beside them).
        Returns the probe's id, or None.
        """
        if not self.probing:
            return None
        if self.testbed.inventory.ssh:
            # The probe measures the machine it runs on (its micro-benchmarks and UDP
            # pairs are local): not the inventory's hosts, whose runs it would describe.
            if phase == "start":
                self.log("host probes skipped: they measure this machine, not the "
                         "inventory's hosts")
            return None
        from quiclab.testbed import probe as probe_mod
        from quiclab.testbed import probe_store

        try:
            if light:
                found = probe_mod.run_probe(testbed=self.testbed, session=self.session_id,
                                            phase=phase, state_dir=self.testbed.paths.state_dir,
                                            rounds=1, quic_transfers=1, quic_bytes=50_000_000)
            else:
                found = probe_mod.run_probe(testbed=self.testbed, session=self.session_id,
                                            phase=phase, state_dir=self.testbed.paths.state_dir)
        except (QuiclabError, OSError) as err:
            self.log(f"host probe ({phase}) failed: {err}")
            return None
        if self.catalog_path is not None:
            probe_store.store(self.catalog_path, found)
        self.probes.append(found.probe_id)
        quic = found.figures.get("quic_packet")
        self.log(f"host probe {found.probe_id} ({phase}, session {self.session_id}): "
                 f"{found.duration_s:.1f} s, AES-GCM {found.ns('aes_gcm_packet'):.0f} ns/packet, "
                 f"UDP send {found.ns('udp_send'):.0f} ns"
                 + (f", {found.quic.get('stack')} {quic.ns:.0f} ns/packet" if quic else "")
                 + f", other busy cores {found.state.other_busy_cores:.2f}, "
                 f"steal {found.state.steal_cores:.3f}")
        return found.probe_id

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

        prefix = self.run_id(config, 0)[:-1]
        with Catalog(self.catalog_path) as cat:
            row = cat.con.execute("SELECT max(repetition) FROM runs WHERE starts_with(run_id, ?)",
                                  [prefix]).fetchone()
        return 0 if row is None or row[0] is None else int(row[0]) + 1

    def outcomes(self, config: RunConfig, repeat: int) -> list[dict[str, Any]]:
        """Repetitions 0 … repeat−1 of ``config`` that have a result: this session's,
        else the catalog's (status, goodput_mbps, failure_reason, server_cpu_s)."""
        ids = [self.run_id(config, r) for r in range(repeat)]
        mine = {r.run_id: r for r in self.results}
        stored: dict[str, dict[str, Any]] = {}
        missing = [rid for rid in ids if rid not in mine]
        if missing and self.catalog_path is not None and Path(self.catalog_path).exists():
            from quiclab.datasets.catalog import Catalog

            with Catalog(self.catalog_path) as cat:
                rows = cat.con.execute(
                    "SELECT run_id, status, goodput_mbps, failure_reason, server_cpu_s "
                    "FROM runs WHERE run_id IN (SELECT unnest(?))", [missing]).fetchall()
            stored = {r[0]: {"status": r[1], "goodput_mbps": r[2], "failure_reason": r[3],
                             "server_cpu_s": r[4]} for r in rows}
        out = []
        for rid in ids:
            if rid in mine:
                r = mine[rid]
                out.append({"status": r.status, "goodput_mbps": r.goodput_mbps,
                            "failure_reason": r.failure_reason,
                            "server_cpu_s": r.server.exit.cpu_s if r.server.exit else None})
            elif rid in stored:
                out.append(stored[rid])
        return out

    def store(self, result: RunResult) -> None:
        if self.catalog_path is None:
            return
        from quiclab.datasets.catalog import Catalog

        row = record.run_row(result, self.cpu_name, self.aes_ni, self.provenance())
        with Catalog(self.catalog_path) as cat, cat.transaction():
            cat.con.execute("DELETE FROM cpu_samples WHERE run_id = ?", [result.run_id])
            cat.upsert("runs", [row])
            cat.upsert("cpu_samples", record.sample_rows(result))
            hosts = record.host_rows(result)
            for host in hosts:
                first = cat.con.execute("SELECT min(first_run_ns) FROM hosts WHERE host_id = ?",
                                        [host["host_id"]]).fetchone()
                if first and first[0] is not None:
                    host["first_run_ns"] = min(int(first[0]), host["first_run_ns"])
            cat.upsert("hosts", hosts)
        if result.logdir and result.config.knob("qlog"):
            self.store_qlog(result)

    def store_qlog(self, result: RunResult) -> None:
        """The run's qlog traces into ``qlog_*`` (``datasets/qlog.py``), after the run
        row is stored: a damaged trace is one ``ingest_issues`` line, the run stays."""
        from quiclab.datasets import qlog
        from quiclab.datasets.catalog import Catalog

        assert self.catalog_path is not None
        s = result.config.scenario
        parquet_root = Path(self.catalog_path).parent / "qlog"
        try:
            with Catalog(self.catalog_path) as cat, cat.transaction():
                rows = qlog.ingest_run(cat, result.run_id, Path(result.logdir),
                                       server=s.server, client=s.client,
                                       parquet_root=parquet_root, log=self.log)
            self.log(f"{result.run_id}: {len(rows)} qlog trace(s), "
                     f"{sum(r['events'] for r in rows)} events")
        except Exception as err:
            self.log(f"{result.run_id}: qlog not ingested: {type(err).__name__}: {err}")

    def run(self, config: RunConfig, repeat: int = 1, first: int | None = None,
            resume: bool = False) -> list[RunResult]:
        """Run ``repeat`` repetitions; with ``resume``, skip ones already ``ok`` in the catalog."""
        start = self.next_repetition(config) if first is None else first
        reps = list(range(start, start + repeat))
        ids = [self.run_id(config, r) for r in reps]
        done = self._existing(ids) if resume else {}
        out = []
        for rep, rid in zip(reps, ids, strict=True):
            if done.get(rid) == "ok":
                self.log(f"{rid}: already in the catalog, skipped")
                self.skipped += 1
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
TESTBED_SPEC_KEYS = {"repeat", "knobs", "servers", "clients", "bytes"}
#: Keys of a point besides Scenario fields and testbed knobs.
PAIR_KEYS = ("implementation", "server", "client")
#: Largest number of values one range axis may give (a typo should not plan forever).
#: Largest number of repetitions per point.
MAX_REPEAT = 10_000


def _fail(where: str, path: str, value: Any, reason: str) -> SpecError:
    """The one line of a refused spec: file, key path, value and what is allowed."""
    return SpecError(f"{where}: {path}={excerpt(value)}: {reason}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _mapping(where: str, path: str, raw: Any) -> dict[Any, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(where, path, raw, "allowed a mapping")
    return raw


def _count(where: str, path: str, raw: Any, hi: float) -> int:
    """A whole number 1 … hi (repetitions, bytes)."""
    if not _is_number(raw) or not math.isfinite(raw) or raw != int(raw) or not 1 <= raw <= hi:
        raise _fail(where, path, raw, f"allowed a whole number 1 … {hi:g}")
    return int(raw)


def _scalar(where: str, path: str, raw: Any) -> Any:
    if raw is None or isinstance(raw, str | bool | int | float):
        return raw
    raise _fail(where, path, raw, "allowed one value (a number, a word, true/false or null)")


def _check_field(where: str, path: str, key: Any, value: Any) -> None:
    from quiclab.sim.scenario import field_names

    if isinstance(key, str) and (key in TESTBED_KNOBS or key in PAIR_KEYS
                                 or key in field_names()):
        return
    raise _fail(where, path, value, "unknown field: allowed a Scenario field ("
                + ", ".join(n for n in field_names() if n not in ("server", "client"))
                + "), a testbed knob (" + ", ".join(TESTBED_KNOBS)
                + ") or " + ", ".join(PAIR_KEYS))


def _settable(where: str, path: str, key: Any, value: Any) -> None:
    """Refuse a field the testbed cannot set, in one line, as ``testbed run --set`` does
    (RunConfig.build): dropping it would run one point per value, all the same."""
    if key in NOT_TESTBED:
        raise _fail(where, path, value, f"cannot be set on the testbed: {NOT_TESTBED[key]} "
                                        "(remove it from the testbed spec)")


def _range_numbers(where: str, path: str, raw: Any) -> tuple[float, float, float]:
    if (not isinstance(raw, list) or len(raw) != 3
            or not all(_is_number(v) and math.isfinite(v) for v in raw)):
        raise _fail(where, path, raw, "allowed three finite numbers")
    return raw[0], raw[1], raw[2]


def _values(spec: str, key: str, raw: Any) -> list[Any]:
    """An axis: a list, or {range: [lo, hi, step]} or {logrange: [lo, hi, n]}."""
    path = f"axes.{key}"
    if isinstance(raw, list):
        if not raw:
            raise _fail(spec, path, raw, "allowed a list of at least one value")
        return [_scalar(spec, f"{path}[{i}]", v) for i, v in enumerate(raw)]
    if isinstance(raw, dict) and len(raw) == 1 and "range" in raw:
        lo, hi, step = _range_numbers(spec, f"{path}.range", raw["range"])
        if step == 0 or (hi - lo) / step < 0:
            raise _fail(spec, f"{path}.range", raw["range"],
                        "allowed [lo, hi, step] with a step ≠ 0 that goes from lo towards hi")
        n = round((hi - lo) / step) + 1
        if n > MAX_AXIS_VALUES:
            raise _fail(spec, f"{path}.range", raw["range"],
                        f"{n} values; allowed at most {MAX_AXIS_VALUES}")
        return [lo + i * step for i in range(n)]
    if isinstance(raw, dict) and len(raw) == 1 and "logrange" in raw:
        lo, hi, count = _range_numbers(spec, f"{path}.logrange", raw["logrange"])
        if lo <= 0 or hi <= 0 or count != int(count) or not 1 <= count <= MAX_AXIS_VALUES:
            raise _fail(spec, f"{path}.logrange", raw["logrange"],
                        f"allowed [lo, hi, n] with lo, hi > 0 and n a whole number "
                        f"1 … {MAX_AXIS_VALUES}")
        return ([lo * (hi / lo) ** (i / (count - 1)) for i in range(int(count))]
                if count > 1 else [lo])
    raise SpecError(f"{spec}: axes.{key}={excerpt(raw)}: allowed a list, {{range: [lo, hi, step]}} "
                    "or {logrange: [lo, hi, n]}")


def check_spec(spec: Any, where: str = "spec") -> None:
    """Check a sweep spec's shape (keys, types, lists, ranges, counts) before anything
    is expanded. Raises SpecError naming the file, key path and value."""
    if not isinstance(spec, dict):
        raise SpecError(f"{where}: not a mapping")
    unknown = sorted(set(spec) - SPEC_KEYS, key=str)
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r} (allowed: "
                        f"{', '.join(sorted(SPEC_KEYS))})")
    if "name" in spec and (not isinstance(spec["name"], str) or not spec["name"].strip()):
        raise _fail(where, "name", spec["name"], "allowed a non-empty name")
    if spec.get("repetitions") is not None:
        _count(where, "repetitions", spec["repetitions"], MAX_REPEAT)
    for key, value in _mapping(where, "base", spec.get("base")).items():
        _check_field(where, f"base.{key}", key, value)
        _scalar(where, f"base.{key}", value)
        _settable(where, f"base.{key}", key, value)
    for key, value in _mapping(where, "axes", spec.get("axes")).items():
        _check_field(where, f"axes.{key}", key, value)
        _values(where, key, value)
        _settable(where, f"axes.{key}", key, value)
    zipped = _mapping(where, "zip", spec.get("zip"))
    first: tuple[str, int] | None = None
    for key, value in zipped.items():
        _check_field(where, f"zip.{key}", key, value)
        if not isinstance(value, list) or not value:
            raise _fail(where, f"zip.{key}", value, "allowed a list of at least one value")
        for i, v in enumerate(value):
            _scalar(where, f"zip.{key}[{i}]", v)
        if any(v is not None for v in value):  # null rows leave the field alone
            _settable(where, f"zip.{key}", key, value)
        if first is None:
            first = (str(key), len(value))
        elif len(value) != first[1]:
            raise _fail(where, f"zip.{key}", value,
                        f"{len(value)} values where zip.{first[0]} has {first[1]}: "
                        "allowed lists of one length")
    tb = _mapping(where, "testbed", spec.get("testbed"))
    bad = sorted(set(tb) - TESTBED_SPEC_KEYS, key=str)
    if bad:
        raise SpecError(f"{where}: unknown key testbed.{bad[0]!r} (allowed: "
                        f"{', '.join(sorted(TESTBED_SPEC_KEYS))})")
    if tb.get("repeat") is not None:
        _count(where, "testbed.repeat", tb["repeat"], MAX_REPEAT)
    if tb.get("bytes") is not None:
        _count(where, "testbed.bytes", tb["bytes"], 2**50)
    for key, value in _mapping(where, "testbed.knobs", tb.get("knobs")).items():
        if key not in TESTBED_KNOBS:
            raise _fail(where, f"testbed.knobs.{key}", value,
                        f"unknown knob: allowed {', '.join(TESTBED_KNOBS)}")
        _scalar(where, f"testbed.knobs.{key}", value)
    for role in ("servers", "clients"):
        names = tb.get(role)
        if names is not None and (not isinstance(names, list)
                                  or not all(isinstance(n, str) for n in names)):
            raise _fail(where, f"testbed.{role}", names, "allowed a list of stack names")


@dataclass(frozen=True)
class SweepPoint:
    server: str
    client: str
    changes: dict[str, Any]
    knobs: dict[str, Any]
    #: Where each value of the point comes from in the spec ("base.mtu_bytes",
    #: "zip.gso[1]", "testbed.knobs.timeout_s", …), for the one-line errors.
    paths: dict[str, str] = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        values = " ".join(f"{k}={v}" for k, v in {**self.changes, **self.knobs}.items())
        return f"{self.server} → {self.client}" + (f" {values}" if values else "")


def load_spec(path: Path) -> dict[str, Any]:
    try:
        spec = yamlio.load(yamlio.read(path, "spec"))
    except DataError as err:  # not a file, too large, not UTF-8
        raise SpecError(str(err)) from None
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {yamlio.where(err)}") from None
    check_spec(spec, str(path))
    return dict(spec)


def expand(spec: dict[str, Any], where: str = "spec") -> Iterator[SweepPoint]:
    """The points of a sweep spec (the same YAML as simulated sweeps).

    ``base`` and ``axes`` hold Scenario fields (grid product); ``zip`` holds
    lists walked together. An ``implementation`` axis sets server = client.
    Testbed knobs (``veth_segmentation``, …) may appear in base, axes or
    ``testbed.knobs``. A field the testbed cannot set (``cpu``, ``chunks``: see
    ``NOT_TESTBED``) is refused by :func:`check_spec`, which checks the spec's
    shape first.
    """
    check_spec(spec, where)
    base = dict(spec.get("base") or {})
    axes = {k: _values(where, k, v) for k, v in (spec.get("axes") or {}).items()}
    zipped = spec.get("zip") or {}
    tb = spec.get("testbed") or {}
    zip_keys = list(zipped)
    zip_rows = list(zip(*[zipped[k] for k in zip_keys], strict=True)) if zip_keys else [()]
    grid_keys = list(axes)
    tb_knobs = dict(tb.get("knobs") or {})
    for combo in itertools.product(*[axes[k] for k in grid_keys]):
        for row, zrow in enumerate(zip_rows):
            values = {**base, **dict(zip(grid_keys, combo, strict=True)),
                      **dict(zip(zip_keys, zrow, strict=True))}
            paths = {**{k: f"base.{k}" for k in base}, **{k: f"axes.{k}" for k in grid_keys},
                     **{k: f"zip.{k}[{row}]" for k in zip_keys}}
            # A null in a zipped list leaves that field at the base/default for the row.
            values = {k: v for k, v in values.items() if v is not None}
            impl = values.pop("implementation", None)
            servers = ([(values.pop("server", impl), paths.get("server", paths.get(
                "implementation", "")))] if "server" in values or impl else
                [(n, f"testbed.servers[{i}]") for i, n in enumerate(tb.get("servers") or [])])
            clients = ([(values.pop("client", impl), paths.get("client", paths.get(
                "implementation", "")))] if "client" in values or impl else
                [(n, f"testbed.clients[{i}]") for i, n in enumerate(tb.get("clients") or [])])
            knobs = dict(tb_knobs)
            point_paths = {k: f"testbed.knobs.{k}" for k in tb_knobs}
            changes: dict[str, Any] = {}
            for key, value in values.items():
                if key in TESTBED_KNOBS:
                    knobs[key] = value
                    point_paths[key] = paths[key]
                else:  # check_spec refused the fields the testbed cannot set
                    changes[key] = value
                    point_paths[key] = paths[key]
            if not servers or not clients:
                raise SpecError(f"{where}: no server/client: give an implementation axis, "
                                "base server/client, or testbed.servers/clients")
            for (server, s_path), (client, c_path) in itertools.product(servers, clients):
                if server is None or client is None:
                    continue
                yield SweepPoint(str(server), str(client), changes, knobs,
                                 {**point_paths, "server": s_path, "client": c_path})


def point_config(point: SweepPoint, experiment: str, transfer_bytes: int | None) -> RunConfig:
    """The point's RunConfig: its values coerced as ``--set`` would (the same run ids)."""
    changes = {k: coerce(k, v, source=experiment) for k, v in point.changes.items()}
    knobs = {k: coerce_knob(k, v, experiment) for k, v in point.knobs.items()}
    return RunConfig.build(point.server, point.client, changes, knobs,
                           transfer_bytes=transfer_bytes, experiment=experiment)


def _error_field(err: Exception) -> str | None:
    """The field an error is about: ScenarioError's, or the ``name=`` a TestbedError
    message starts with."""
    if isinstance(err, ScenarioError):
        return err.field
    match = re.match(r"(\w+)=", str(err))
    return match.group(1) if match else None


def plan(spec: dict[str, Any], where: str, stacks: dict[str, Any] | None = None,
         transfer_bytes: int | None = None, bytes_path: str = "--bytes"
         ) -> list[tuple[SweepPoint, RunConfig]]:
    """Every point of a spec with its RunConfig, all built before anything runs.

    Raises SpecError (one line: the file, the key path and the value) for the
    first point whose stack is unknown or whose values a RunConfig refuses.
    """
    table = STACKS if stacks is None else stacks
    name = str(spec.get("name") or Path(where).stem)
    out = []
    for i, point in enumerate(expand(spec, where)):
        for role in ("server", "client"):
            stack = getattr(point, role)
            if stack not in table:
                raise _fail(where, point.paths.get(role) or role, stack,
                            f"unknown stack: allowed {', '.join(sorted(table))}")
        try:
            config = point_config(point, name, transfer_bytes)
        except QuiclabError as err:
            key = _error_field(err)
            paths = {**point.paths, **({"transfer_bytes": bytes_path}
                                       if transfer_bytes is not None else {})}
            path = paths.get(key) if key else None
            values = {**point.changes, **point.knobs, "transfer_bytes": transfer_bytes}
            reason = (f"allowed {err.allowed}" if isinstance(err, ScenarioError)
                      else str(err))
            if path is not None and key is not None:
                raise _fail(where, path, values.get(key), reason) from None
            raise SpecError(f"{where}: point {i + 1} ({point.describe()}): {err}") from None
        out.append((point, config))
    return out


@dataclass
class SweepSummary:
    """What a sweep did: the runs it made now, and those skipped as already recorded."""

    results: list[RunResult]
    points: int
    skipped: int

    @property
    def failed(self) -> int:
        return sum(r.status != "ok" for r in self.results)


def sweep(session: Session, spec_path: Path, repeat: int | None = None,
          transfer_bytes: int | None = None) -> list[RunResult]:
    """Run every point of a sweep spec; resumable (finished runs are skipped).

    The whole spec is checked first: every point is expanded and its RunConfig built
    before the first run, so a bad spec refuses in one line and runs nothing.
    """
    return sweep_summary(session, spec_path, repeat, transfer_bytes).results


def sweep_plan(spec_path: Path, repeat: int | None = None, transfer_bytes: int | None = None,
               stacks: dict[str, Any] | None = None, experiment: str | None = None
               ) -> tuple[int, list[tuple[SweepPoint, RunConfig]]]:
    """(repetitions per point, every point with its RunConfig) of a sweep spec, all
    checked; raises SpecError in one line. Nothing is created or run. ``experiment``
    replaces the spec's name (the runs' experiment)."""
    where = str(spec_path)
    spec = load_spec(spec_path)
    if experiment is not None:
        if not experiment.strip():
            raise SpecError(f"--experiment={experiment!r}: allowed a non-empty name")
        spec["name"] = experiment
    tb = spec.get("testbed") or {}
    if repeat is not None and not 1 <= repeat <= MAX_REPEAT:
        raise SpecError(f"--repeat={repeat}: allowed 1 … {MAX_REPEAT}")
    if transfer_bytes is not None and transfer_bytes < 1:
        raise SpecError(f"--bytes={transfer_bytes}: allowed ≥ 1")
    reps = repeat or int(tb.get("repeat") or spec.get("repetitions") or 1)
    nbytes = transfer_bytes or tb.get("bytes")
    return reps, plan(spec, where, stacks, int(nbytes) if nbytes else None,
                      "--bytes" if transfer_bytes else "testbed.bytes")


def sweep_summary(session: Session, spec_path: Path, repeat: int | None = None,
                  transfer_bytes: int | None = None,
                  plan: tuple[int, list[Any]] | None = None) -> SweepSummary:
    """:func:`sweep`, also saying how many runs were skipped as already recorded.
    ``plan``: the spec's :func:`sweep_plan`, when the caller already made it."""
    reps, points = plan or sweep_plan(spec_path, repeat, transfer_bytes,
                                      session.testbed.stacks)
    out: list[RunResult] = []
    before = session.skipped
    session.probe("start")
    for i, (point, config) in enumerate(points, 1):
        if i == len(points) // 2 + 1 and len(points) > 1:
            session.probe("middle")
        elif i > 1 and session.probe_points:
            session.probe("point", light=True)
        session.log(f"[{i}/{len(points)}] {point.server} → {point.client} "
                    f"{point.changes or ''} {point.knobs or ''}".rstrip())
        out += session.run(config, reps, first=0, resume=True)
    session.probe("end")
    return SweepSummary(out, len(points), session.skipped - before)


def matrix(session: Session, stacks: Iterable[str], repeat: int = 3,
           changes: dict[str, Any] | None = None, knobs: dict[str, Any] | None = None,
           transfer_bytes: int | None = None,
           experiment: str = "interop-matrix") -> dict[tuple[str, str], dict[str, Any]]:
    """Every client × every server; cells carry the median goodput or why they cannot talk.

    Resumable like a sweep: repetitions already ``ok`` in the catalog are not run
    again, and the cells count them. Every name and every cell's RunConfig is checked
    before the first run.
    """
    names = list(stacks)
    select_stacks(names, session.testbed.stacks)  # every name known, before anything runs
    table = session.testbed.stacks
    planned: dict[tuple[str, str], RunConfig | str] = {}
    for server in names:
        for client in names:
            reason = table[client].can_talk_to(table[server])
            planned[(server, client)] = reason if reason else RunConfig.build(
                server, client, changes, knobs, transfer_bytes=transfer_bytes,
                experiment=experiment)
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    session.probe("start")
    for i, ((server, client), config) in enumerate(planned.items(), 1):
        if i == len(planned) // 2 + 1 and len(planned) > 1:
            session.probe("middle")
        if isinstance(config, str):
            cells[(server, client)] = {"status": "incompatible", "reason": config}
            session.log(f"{server} → {client}: cannot talk ({config})")
            continue
        new = session.run(config, repeat, first=0, resume=True)
        runs = session.outcomes(config, repeat)
        ok = sorted(r["goodput_mbps"] for r in runs
                    if r["status"] == "ok" and r["goodput_mbps"] is not None)
        failed = [r["failure_reason"] for r in runs if r["status"] != "ok"]
        cells[(server, client)] = {
            "status": "ok" if ok else "failed", "runs": len(runs), "new_runs": len(new),
            "median_mbps": statistics.median(ok) if ok else None,
            "reason": failed[0] if failed and not ok else None}
    session.probe("end")
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

    Measured before accuracy is claimed: the coefficient of variation
    of goodput over ``repeat`` repetitions, and of each side's CPU seconds.
    Resumable like a sweep (recorded ``ok`` repetitions are counted, not run again);
    every name and configuration is checked before the first run.
    """
    names = list(stacks)
    select_stacks(names, session.testbed.stacks)  # every name known, before anything runs
    planned = {(name, pin): RunConfig.build(name, name, {"pin": pin},
                                            transfer_bytes=transfer_bytes,
                                            experiment=experiment)
               for name in names for pin in (False, True)}
    rows = []
    session.probe("start")
    for i, name in enumerate(names, 1):
        if i == len(names) // 2 + 1 and len(names) > 1:
            session.probe("middle")
        row: dict[str, Any] = {"stack": name}
        for pin in (False, True):
            config = planned[(name, pin)]
            session.run(config, repeat, first=0, resume=True)
            ok = [r for r in session.outcomes(config, repeat)
                  if r["status"] == "ok" and r["goodput_mbps"] is not None]
            goodput = [float(r["goodput_mbps"]) for r in ok]
            key = "pinned" if pin else "unpinned"
            row[f"{key}_runs_ok"] = len(ok)
            row[f"{key}_median_mbps"] = statistics.median(goodput) if goodput else None
            row[f"{key}_cv"] = cv(goodput)
            row[f"{key}_server_cpu_cv"] = cv([float(r["server_cpu_s"]) for r in ok
                                              if r["server_cpu_s"] is not None])
        rows.append(row)
    session.probe("end")
    return rows
