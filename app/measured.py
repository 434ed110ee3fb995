"""Measured goodput from the catalog that matches a Scenario's conditions.

Three kinds of measurement live in the catalog (``docs/reference/catalog.md``): runs
of the QIR-10G dataset (``runs.source = 'qir10g'``), fresh testbed runs
(``runs.source = 'fresh'``) and the numbers the seeds state
(``published_points``). :func:`pair_rows` reads all of them for one
(server, client) pair into one table with a ``source`` column, goodput in
Mbit/s; :func:`match` keeps the rows whose conditions fit a Scenario. The
app caches the first per pair and runs the second (a millisecond) on every
change.

Matching rule: a condition a row states must equal the Scenario's; a condition
it leaves NULL (not stated, not recorded) does not exclude it — the row's
conditions are returned so that the app shows them. The testbed is a condition
too: a Scenario on a named testbed matches that testbed's rows; one on
``unseen`` (your own hosts) matches rows of any testbed whose CPU is the
Scenario's — stated by the row or by its testbed (``testbeds.cpu``), so a run of
a testbed that did not record its CPU (UCLouvain's) matches no CPU. Fields named in ``free``
(the axes of a sweep) are not constrained at all. The CPU is compared by its
catalog name. The transfer size is the runs' ``filesize_bytes`` (bulk only: a
request run's is requests × request_bytes, and request workloads compare
``request_bytes``, ``requests`` and ``connections`` instead). Rows record the
packet size and the cores a stack *used*, so the scenario's defaults (0 = the
implementation's packet size, −1 = not pinned) accept any; a set value must
equal them. Settings no row records (:data:`UNRECORDED`: pipeline, clock,
base RTT, queue) are taken as their defaults: a scenario that changes one
matches nothing, and :func:`unrecorded` says which.

An implementation ``name@variant`` matches QIR runs of that build
(``server_build = 'march'`` for ``lsquic@march``), published points of exactly
that name, and — without a variant — fresh runs of any peer build (their build
column is a source hash).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from quiclab.sim.scenario import Scenario

#: Scenario fields a measurement can state, and the runs column of each.
RUN_CONDITIONS = {
    "link_gbps": "link_gbps", "mtu_bytes": "mtu_bytes", "rtt_ms": "rtt_ms",
    "loss_pct": "loss_pct", "reorder_pct": "reorder_pct", "rcvbuf_bytes": "rcvbuf_bytes",
    "sndbuf_bytes": "sndbuf_bytes", "cipher": "cipher", "app": "app", "streams": "streams",
    "chunks": "chunks", "gso": "gso", "gro": "gro", "cc": "cc",
    "transfer_bytes": "filesize_bytes", "udp_payload_bytes": "udp_payload_bytes",
    "server_core": "server_core", "client_core": "client_core",
    "request_bytes": "request_bytes", "requests": "requests", "connections": "connections",
}
#: The same for published_points (no send buffer, congestion control, packet size or cores).
PUBLISHED_CONDITIONS = {
    f: c for f, c in RUN_CONDITIONS.items()
    if f not in ("sndbuf_bytes", "cc", "udp_payload_bytes", "server_core", "client_core")}
PUBLISHED_CONDITIONS["transfer_bytes"] = "transfer_bytes"
#: Conditions compared only for request workloads (bulk rows leave them NULL).
REQUEST_CONDITIONS = ("request_bytes", "requests", "connections")
#: Conditions whose default accepts any stated value: rows record the packet size and
#: the cores a stack used, whether or not the run set them.
ANY_AT_DEFAULT = {"udp_payload_bytes": 0, "server_core": -1, "client_core": -1}
#: Scenario settings no measurement records: the catalog's rows are taken at their
#: defaults, so a scenario that changes one matches no row.
UNRECORDED = ("pipeline", "cpu_ghz", "base_rtt_us", "queue_bytes", "queue_bdp")
#: Columns of the result (conditions named by Scenario field).
COLUMNS = ["source", "id", "server", "client", "goodput_mbps", "bound", "detail", "cpu",
           "workload", "testbed", *RUN_CONDITIONS]
#: The Scenario's testbed of hosts no measurement came from (models/testbeds.py UNSEEN).
UNSEEN = "unseen"
_FLOAT_FIELDS = {"link_gbps", "rtt_ms", "loss_pct", "reorder_pct"}
#: Stored decimals were typed by people: numbers this close are equal.
_TOLERANCE = 1e-6


def _tables(con: Any) -> set[str]:
    rows = con.execute("SELECT table_name FROM information_schema.tables "
                       "WHERE table_schema = 'main'").fetchall()
    return {r[0] for r in rows}


def _columns(con: Any, table: str) -> set[str]:
    rows = con.execute("SELECT column_name FROM information_schema.columns "
                       "WHERE table_name = ?", [table]).fetchall()
    return {r[0] for r in rows}


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    for column in COLUMNS:
        if column not in df.columns:
            df[column] = None
    return df[COLUMNS]


def _testbed_sql(con: Any, table: str, available: set[str]) -> tuple[str, str, str]:
    """(testbed, CPU, join) SQL of a table's rows: the row's testbed, and its CPU or,
    where the row states none, its testbed's (``testbeds.cpu``; ``unknown`` for a
    testbed that did not record it, read as not stated)."""
    if "testbed" not in available:
        return "NULL", f"{table}.cpu", ""
    if "testbeds" not in _tables(con):
        return f"{table}.testbed", f"{table}.cpu", ""
    return (f"{table}.testbed", f"nullif(coalesce({table}.cpu, tb.cpu), 'unknown')",
            f"LEFT JOIN testbeds tb ON tb.testbed = {table}.testbed")


def run_rows(con: Any, server: str | None, client: str | None) -> pd.DataFrame:
    """Successful runs (QIR-10G, UCLouvain, fresh) of one pair, with their conditions;
    with ``server`` and ``client`` None, of every pair of default builds."""
    if "runs" not in _tables(con):
        return pd.DataFrame(columns=COLUMNS)
    available = _columns(con, "runs")
    select = ", ".join(f"runs.{c} AS {f}" if c in available else f"NULL AS {f}"
                       for f, c in RUN_CONDITIONS.items())
    workload = "runs.workload" if "workload" in available else "NULL"
    testbed, cpu, join = _testbed_sql(con, "runs", available)
    if server is None or client is None:
        names = "server_impl AS server, client_impl AS client"
        pair = "TRUE"
        params: list[Any] = []
        server_build = client_build = ""
    else:
        names = "? AS server, ? AS client"
        pair = "server_impl = ? AND client_impl = ?"
        server_impl, _, server_build = server.partition("@")
        client_impl, _, client_build = client.partition("@")
        params = [server, client, server_impl, client_impl]
    sql = f"""
        SELECT source, run_id AS id, {names}, goodput_mbps,
               NULL AS bound,
               experiment || ' ' || coalesce(setting, '') || ' #' || repetition AS detail,
               {cpu} AS cpu, {workload} AS workload, {testbed} AS testbed, {select}
        FROM runs {join}
        WHERE status = 'ok' AND goodput_mbps IS NOT NULL AND {pair}
          AND (coalesce(server_build, '') = ? OR (source = 'fresh' AND ? = ''))
          AND (coalesce(client_build, '') = ? OR (source = 'fresh' AND ? = ''))
        ORDER BY source, goodput_mbps"""
    params += [server_build, server_build, client_build, client_build]
    return _frame(con.execute(sql, params).df())


def published_rows(con: Any, server: str | None, client: str | None) -> pd.DataFrame:
    """Goodput numbers the seeds state for one pair, in Mbit/s (with ``server`` and
    ``client`` None, for every pair of names without a variant).

    Quantities ``goodput`` and ``throughput`` in Mbit/s or Gbit/s; ``bound`` is
    the point's ``bound=`` condition (``upper_limit``, ``lower_limit``,
    ``approx``, …) when it is not an exact value.
    """
    if "published_points" not in _tables(con):
        return pd.DataFrame(columns=COLUMNS)
    available = _columns(con, "published_points")
    select = ", ".join(f"published_points.{PUBLISHED_CONDITIONS[f]} AS {f}"
                       if PUBLISHED_CONDITIONS.get(f) in available else f"NULL AS {f}"
                       for f in RUN_CONDITIONS)
    testbed, cpu, join = _testbed_sql(con, "published_points", available)
    if server is None or client is None:
        pair, params = "server NOT LIKE '%@%' AND client NOT LIKE '%@%'", []
    else:
        pair, params = "server = ? AND client = ?", [server, client]
    sql = f"""
        SELECT 'published' AS source, point_id AS id, server, client,
               CASE unit WHEN 'Gbit/s' THEN value * 1000 ELSE value END AS goodput_mbps,
               nullif(regexp_extract(conditions, 'bound=([a-z_]+)', 1), '') AS bound,
               'seed ' || document || ' ' || coalesce(locator, '') || ' §' ||
                   coalesce(section, '') AS detail,
               {cpu} AS cpu, workload, {testbed} AS testbed, {select}
        FROM published_points {join}
        WHERE quantity IN ('goodput', 'throughput') AND unit IN ('Mbit/s', 'Gbit/s')
          AND {pair}
        ORDER BY goodput_mbps"""
    return _frame(con.execute(sql, params).df())


def all_rows(con: Any) -> pd.DataFrame:
    """Runs and published points of every pair of default builds (columns COLUMNS)."""
    parts = [p for p in (run_rows(con, None, None), published_rows(con, None, None))
             if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def pair_rows(con: Any, server: str, client: str) -> pd.DataFrame:
    """Runs and published points of one pair, every condition (columns :data:`COLUMNS`)."""
    parts = [p for p in (run_rows(con, server, client), published_rows(con, server, client))
             if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)


@dataclass(frozen=True)
class PairRows:
    """The rows of one pair, with each condition column ready for numpy comparison.

    ``stated[field]`` marks rows that state the condition; ``values[field]``
    holds it (floats for numbers, Python objects otherwise). Built once per pair
    by :func:`index_rows`, so that :func:`match` does no pandas work per column.
    """

    frame: pd.DataFrame
    stated: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    #: No row, with the frame's columns (what a match of nothing returns).
    empty: pd.DataFrame


def index_rows(frame: pd.DataFrame) -> PairRows:
    """Prepare :func:`pair_rows`' table for matching."""
    stated: dict[str, np.ndarray] = {}
    values: dict[str, np.ndarray] = {}
    for field in ("cpu", "workload", "testbed", *RUN_CONDITIONS):
        column = frame[field]
        stated[field] = ~column.isna().to_numpy(dtype=bool)
        numeric = field in RUN_CONDITIONS and type(getattr(Scenario(), field)) in (int, float)
        if not numeric:  # names and booleans
            values[field] = column.astype(object).where(stated[field], None).to_numpy()
        else:
            values[field] = pd.to_numeric(column, errors="coerce").to_numpy(
                dtype=float, na_value=np.nan)
    frame = frame.reset_index(drop=True)
    return PairRows(frame, stated, values, frame.iloc[:0])


def _fits(rows: PairRows, field: str, value: Any) -> np.ndarray:
    """Rows that leave ``field`` unstated or state ``value``."""
    stated, values = rows.stated[field], rows.values[field]
    if values.dtype == object:
        if isinstance(value, bool):
            equal = np.array([v is not None and bool(v) == value for v in values], dtype=bool)
        else:
            equal = values == value
        return ~stated | equal
    tolerance = _TOLERANCE if field in _FLOAT_FIELDS else 0.0
    with np.errstate(invalid="ignore"):
        return ~stated | (np.abs(values - float(value)) <= tolerance)


def unrecorded(scenario: Scenario, free: Iterable[str] = ()) -> list[str]:
    """``field=value`` of each :data:`UNRECORDED` setting (not in ``free``) that differs
    from its default: no measured point is known to have run with it."""
    default = Scenario()
    return [f"{f}={getattr(scenario, f)}" for f in UNRECORDED
            if f not in free and getattr(scenario, f) != getattr(default, f)]


def unrecorded_reason(settings: Sequence[str]) -> str:
    """One line saying why :func:`match` found nothing for :func:`unrecorded` settings."""
    default = Scenario()
    defaults = ", ".join(f"{s.split('=')[0]}={getattr(default, s.split('=')[0])}"
                         for s in settings)
    return (f"the catalog does not record {', '.join(settings)}: its measurements are "
            f"taken at the default ({defaults}), so none can match")


def match(rows: PairRows | pd.DataFrame, scenario: Scenario, cpu: str,
          free: Iterable[str] = ()) -> pd.DataFrame:
    """The rows of :func:`pair_rows` whose stated conditions equal the scenario's.

    ``cpu`` is the catalog name of the scenario's CPU; ``free`` names fields
    (sweep axes, or ``cpu``) left unconstrained. None when the scenario changes a
    setting the catalog does not record (:func:`unrecorded`). The result may be
    shared (the empty one is): never change it.
    """
    if isinstance(rows, pd.DataFrame):
        rows = index_rows(rows)
    free = set(free)
    if unrecorded(scenario, free):
        return rows.empty
    keep = np.ones(len(rows.frame), dtype=bool)
    if scenario.testbed != UNSEEN and "testbed" not in free:
        # A named testbed: its own measurements (and rows that name none).
        keep &= _fits(rows, "testbed", scenario.testbed)
    if "cpu" not in free:
        keep &= _fits(rows, "cpu", cpu)
        if scenario.testbed == UNSEEN:
            # Hosts the models never saw, with this CPU: a row of unknown CPU (a
            # testbed that did not record it) cannot be said to have run on it.
            keep &= rows.stated["cpu"]
    bulk = scenario.workload == "bulk"
    if "workload" not in free:
        # A bulk transfer: published request/handshake workloads are other measurements.
        keep &= _fits(rows, "workload", "bulk") if bulk else \
            rows.values["workload"] == scenario.workload
    for field in RUN_CONDITIONS:
        if field in free or (field in REQUEST_CONDITIONS and bulk) \
                or (field == "transfer_bytes" and not bulk):
            continue
        value = getattr(scenario, field)
        if ANY_AT_DEFAULT.get(field) == value:
            continue
        keep &= _fits(rows, field, value)
    if not keep.any():
        return rows.empty
    return rows.frame.iloc[np.flatnonzero(keep)].reset_index(drop=True)


def measured_points(con: Any, scenario: Scenario, cpu: str, free: Iterable[str] = ()
                    ) -> pd.DataFrame:
    """Runs and published points of the scenario's pair that match its conditions."""
    return match(pair_rows(con, scenario.server, scenario.client), scenario, cpu, free)
