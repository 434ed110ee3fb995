"""Measured goodput from the catalog that matches a Scenario's conditions.

Three kinds of measurement live in the catalog (``datasets/SCHEMA.md``): runs
of the QIR-10G dataset (``runs.source = 'qir10g'``), fresh testbed runs
(``runs.source = 'fresh'``) and the numbers the seeds state
(``published_points``). :func:`measured_points` returns all of them for one
(server, client) pair as one table with a ``source`` column, in Mbit/s.

Matching rule: a condition a row states must equal the Scenario's; a condition
it leaves NULL (not stated, not recorded) does not exclude it — the row's
conditions are returned so that the app shows them. Fields named in ``free``
(the axes of a sweep) are not constrained at all.

An implementation ``name@variant`` matches QIR runs of that build
(``server_build = 'march'`` for ``lsquic@march``), published points of exactly
that name, and — without a variant — fresh runs of any peer build (their build
column is a source hash).

Functions take an open DuckDB connection; they only read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from quiclab.sim.scenario import Scenario

#: Scenario field → runs column, for the conditions the dataset records.
RUN_CONDITIONS = {
    "link_gbps": "link_gbps", "mtu_bytes": "mtu_bytes", "rtt_ms": "rtt_ms",
    "loss_pct": "loss_pct", "reorder_pct": "reorder_pct", "rcvbuf_bytes": "rcvbuf_bytes",
    "sndbuf_bytes": "sndbuf_bytes", "cipher": "cipher", "app": "app", "streams": "streams",
    "chunks": "chunks", "gso": "gso", "gro": "gro", "cc": "cc",
}
#: Scenario field → published_points column.
PUBLISHED_CONDITIONS = {
    "link_gbps": "link_gbps", "mtu_bytes": "mtu_bytes", "rtt_ms": "rtt_ms",
    "loss_pct": "loss_pct", "reorder_pct": "reorder_pct", "rcvbuf_bytes": "rcvbuf_bytes",
    "cipher": "cipher", "app": "app", "streams": "streams", "chunks": "chunks",
    "gso": "gso", "gro": "gro",
}
#: Columns of the result (conditions named by Scenario field).
COLUMNS = ["source", "id", "server", "client", "goodput_mbps", "bound", "detail", "cpu",
           *RUN_CONDITIONS]
_FLOAT_FIELDS = {"link_gbps", "rtt_ms", "loss_pct", "reorder_pct"}


def _condition(column: str, field: str, value: Any) -> tuple[str, list[Any]]:
    if field in _FLOAT_FIELDS:
        # Stored values are decimal numbers typed by people: compare to 1e-6.
        return f"({column} IS NULL OR abs({column} - ?) <= 1e-6)", [float(value)]
    return f"({column} IS NULL OR {column} = ?)", [value]


def _where(conditions: dict[str, str], scenario: Scenario, free: set[str],
           prefix: str = "") -> tuple[list[str], list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for field, column in conditions.items():
        if field in free:
            continue
        clause, values = _condition(prefix + column, field, getattr(scenario, field))
        clauses.append(clause)
        params += values
    return clauses, params


def _columns(con: Any, table: str) -> set[str]:
    rows = con.execute("SELECT column_name FROM information_schema.columns "
                       "WHERE table_name = ?", [table]).fetchall()
    return {r[0] for r in rows}


def measured_runs(con: Any, scenario: Scenario, cpu: str, free: Iterable[str] = ()
                  ) -> pd.DataFrame:
    """Successful runs (QIR-10G and fresh) of the scenario's pair under its conditions."""
    if "runs" not in _tables(con):
        return pd.DataFrame(columns=COLUMNS)
    free = set(free)
    available = _columns(con, "runs")
    conditions = {f: c for f, c in RUN_CONDITIONS.items() if c in available}
    server, _, server_build = scenario.server.partition("@")
    client, _, client_build = scenario.client.partition("@")
    clauses = ["status = 'ok'", "goodput_mbps IS NOT NULL",
               "server_impl = ?", "client_impl = ?",
               "(coalesce(server_build, '') = ? OR (source = 'fresh' AND ? = ''))",
               "(coalesce(client_build, '') = ? OR (source = 'fresh' AND ? = ''))"]
    params: list[Any] = [server, client, server_build, server_build, client_build,
                         client_build]
    if "cpu" not in free:
        clauses.append("(cpu IS NULL OR cpu = ?)")
        params.append(cpu)
    more, values = _where(conditions, scenario, free)
    clauses += more
    params += values
    select = ", ".join(f"{c} AS {f}" for f, c in conditions.items())
    sql = f"""
        SELECT source, run_id AS id,
               server_impl || CASE WHEN coalesce(server_build, '') = '' OR source = 'fresh'
                                   THEN '' ELSE '@' || server_build END AS server,
               client_impl || CASE WHEN coalesce(client_build, '') = '' OR source = 'fresh'
                                   THEN '' ELSE '@' || client_build END AS client,
               goodput_mbps, NULL AS bound,
               experiment || ' ' || coalesce(setting, '') || ' #' || repetition AS detail,
               cpu, {select}
        FROM runs WHERE {' AND '.join(clauses)}
        ORDER BY source, goodput_mbps"""
    return _frame(con.execute(sql, params).df())


def measured_published(con: Any, scenario: Scenario, cpu: str, free: Iterable[str] = ()
                       ) -> pd.DataFrame:
    """Goodput numbers stated by the seeds for the scenario's pair and conditions.

    Quantities ``goodput`` and ``throughput`` in Mbit/s or Gbit/s (converted to
    Mbit/s); ``bound`` is the point's ``bound=`` condition (``upper_limit``,
    ``lower_limit``, ``approx``, …) when it is not an exact value.
    """
    if "published_points" not in _tables(con):
        return pd.DataFrame(columns=COLUMNS)
    free = set(free)
    clauses = ["quantity IN ('goodput', 'throughput')", "unit IN ('Mbit/s', 'Gbit/s')",
               "server = ?", "client = ?"]
    params: list[Any] = [scenario.server, scenario.client]
    if scenario.workload == "bulk":
        clauses.append("workload IS NULL")
    else:
        clauses.append("workload = ?")
        params.append(scenario.workload)
    if "cpu" not in free:
        clauses.append("(cpu IS NULL OR cpu = ?)")
        params.append(cpu)
    more, values = _where(PUBLISHED_CONDITIONS, scenario, free)
    clauses += more
    params += values
    select = ", ".join(f"{PUBLISHED_CONDITIONS[f]} AS {f}" if f in PUBLISHED_CONDITIONS
                       else f"NULL AS {f}" for f in RUN_CONDITIONS)
    sql = f"""
        SELECT 'published' AS source, point_id AS id, server, client,
               CASE unit WHEN 'Gbit/s' THEN value * 1000 ELSE value END AS goodput_mbps,
               nullif(regexp_extract(conditions, 'bound=([a-z_]+)', 1), '') AS bound,
               'seed ' || document || ' ' || coalesce(locator, '') || ' §' ||
                   coalesce(section, '') AS detail,
               cpu, {select}
        FROM published_points WHERE {' AND '.join(clauses)}
        ORDER BY goodput_mbps"""
    return _frame(con.execute(sql, params).df())


def measured_points(con: Any, scenario: Scenario, cpu: str, free: Iterable[str] = ()
                    ) -> pd.DataFrame:
    """Runs and published points together (columns :data:`COLUMNS`)."""
    free = tuple(free)
    parts = [measured_runs(con, scenario, cpu, free),
             measured_published(con, scenario, cpu, free)]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(parts, ignore_index=True)


def _tables(con: Any) -> set[str]:
    rows = con.execute("SELECT table_name FROM information_schema.tables "
                       "WHERE table_schema = 'main'").fetchall()
    return {r[0] for r in rows}


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    for column in COLUMNS:
        if column not in df.columns:
            df[column] = None
    return df[COLUMNS]
