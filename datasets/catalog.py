"""The DuckDB catalog: one schema for every measured and predicted number.

Tables (described column by column in ``datasets/columns.yaml``, from which
docs/reference/catalog.md is generated):

- ``runs`` — one row per transfer (published raw data or fresh testbed run);
- ``cpu_samples`` — per-second CPU of each side's process;
- ``perf_stacks`` — folded perf call stacks with their category;
  ``perf_categories`` is a view of per-category shares;
- ``published_points`` — every number the seeds state, with its conditions;
- ``sources`` / ``files`` — provenance of each ingest (hashes, parser version);
- ``ingest_issues`` — every file that was skipped, and why;
- ``processed_check`` — raw-vs-processed.csv agreement per run and column;
- ``predictions`` — engine outputs written by sweeps (``quiclab.experiments``);
- ``cpus`` — the CPU catalog, for joins;
- ``testbeds`` — where every run and published point was measured (hosts, NIC,
  kernel, link, path; each fact with its source), ``datasets/testbeds.py``;
- ``hosts`` — the hosts fresh runs were made on (CPU, kernel, NIC), one row per state;
- ``host_probes`` — the host probe's figures (``quiclab host probe``, every testbed
  session);
- ``registered_predictions`` / ``prediction_outcomes`` — prospective validation's
  append-only, hash-chained ledger.

Loaders take the connection (``load(catalog)``), as SimPy components take ``env``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from quiclab.errors import DataError

#: 2: ``runs`` gained the request-workload columns (``workload``, ``request_bytes``,
#: ``connections``, ``latency_p90_ms``); a version-1 file gets them (NULL) when
#: opened for writing.
#: 3: testbeds: the ``testbeds`` table, ``runs.testbed`` and ``published_points.testbed``,
#: and the columns of a second lab's conditions (``io``, ``cores``, ``cpu_list``,
#: ``irq_cpu_list``, ``lro``, ``sg``, ``batch_tx``, ``batch_rx``). An older file gets
#: them when opened for writing, with the testbed of its QIR-10G runs and
#: published points filled in (:func:`migrate_testbeds`).
SCHEMA_VERSION = 3

RUN_COLUMNS: list[tuple[str, str]] = [
    ("run_id", "VARCHAR PRIMARY KEY"),
    ("source", "VARCHAR NOT NULL"),
    ("experiment", "VARCHAR NOT NULL"),
    ("setting", "VARCHAR"),
    ("logdir", "VARCHAR"),
    ("hostpair", "VARCHAR"),
    ("server_host", "VARCHAR"),
    ("client_host", "VARCHAR"),
    ("cpu", "VARCHAR"),
    ("server_impl", "VARCHAR NOT NULL"),
    ("client_impl", "VARCHAR NOT NULL"),
    ("server_build", "VARCHAR"),
    ("client_build", "VARCHAR"),
    ("server_version", "VARCHAR"),
    ("client_version", "VARCHAR"),
    ("repetition", "INTEGER"),
    ("status", "VARCHAR NOT NULL"),
    ("failure_reason", "VARCHAR"),
    ("filesize_bytes", "BIGINT"),
    ("start_ns", "BIGINT"),
    ("end_ns", "BIGINT"),
    ("runtime_s", "DOUBLE"),
    ("goodput_mbps", "DOUBLE"),
    ("goodput_reported_mbps", "DOUBLE"),
    ("app", "VARCHAR"),
    ("cipher", "VARCHAR"),
    ("aes_ni", "BOOLEAN"),
    ("rcvbuf_bytes", "BIGINT"),
    ("sndbuf_bytes", "BIGINT"),
    ("gso", "BOOLEAN"),
    ("gro", "BOOLEAN"),
    ("tso", "BOOLEAN"),
    ("veth_segmentation", "BOOLEAN"),
    ("mtu_bytes", "INTEGER"),
    ("udp_payload_bytes", "INTEGER"),
    ("link_gbps", "DOUBLE"),
    ("rtt_ms", "DOUBLE"),
    ("loss_pct", "DOUBLE"),
    ("reorder_pct", "DOUBLE"),
    ("streams", "INTEGER"),
    ("chunks", "INTEGER"),
    ("cc", "VARCHAR"),
    ("server_core", "INTEGER"),
    ("client_core", "INTEGER"),
    ("server_cpu_pct", "DOUBLE"),
    ("client_cpu_pct", "DOUBLE"),
    ("server_cpu_user_pct", "DOUBLE"),
    ("server_cpu_sys_pct", "DOUBLE"),
    ("client_cpu_user_pct", "DOUBLE"),
    ("client_cpu_sys_pct", "DOUBLE"),
    ("server_cpu_s", "DOUBLE"),
    ("client_cpu_s", "DOUBLE"),
    ("server_udp_sent", "BIGINT"),
    ("server_udp_received", "BIGINT"),
    ("server_udp_rcvbuf_errors", "BIGINT"),
    ("server_udp_sndbuf_errors", "BIGINT"),
    ("server_udp_rx_errors", "BIGINT"),
    ("client_udp_sent", "BIGINT"),
    ("client_udp_received", "BIGINT"),
    ("client_udp_rcvbuf_errors", "BIGINT"),
    ("client_udp_sndbuf_errors", "BIGINT"),
    ("client_udp_rx_errors", "BIGINT"),
    ("server_nic_tx_frames", "BIGINT"),
    ("server_nic_rx_frames", "BIGINT"),
    ("server_nic_tx_bytes", "BIGINT"),
    ("server_nic_rx_bytes", "BIGINT"),
    ("server_nic_rx_discards", "BIGINT"),
    ("server_nic_tx_discards", "BIGINT"),
    ("client_nic_tx_frames", "BIGINT"),
    ("client_nic_rx_frames", "BIGINT"),
    ("client_nic_tx_bytes", "BIGINT"),
    ("client_nic_rx_bytes", "BIGINT"),
    ("client_nic_rx_discards", "BIGINT"),
    ("client_nic_tx_discards", "BIGINT"),
    ("data_packets", "BIGINT"),
    ("ack_packets", "BIGINT"),
    ("server_syscalls", "BIGINT"),
    ("client_syscalls", "BIGINT"),
    ("handshake_ms", "DOUBLE"),
    ("requests", "BIGINT"),
    ("requests_per_s", "DOUBLE"),
    ("latency_p50_ms", "DOUBLE"),
    ("latency_p99_ms", "DOUBLE"),
    ("extra", "JSON"),
    # Schema version 2 (request workloads, seeds 003/004); NULL for bulk transfers.
    ("workload", "VARCHAR"),
    ("request_bytes", "BIGINT"),
    ("connections", "INTEGER"),
    ("latency_p90_ms", "DOUBLE"),
    # Schema version 3 (testbeds; the UCLouvain dataset's conditions).
    ("testbed", "VARCHAR"),
    ("io", "VARCHAR"),
    ("cores", "INTEGER"),
    ("cpu_list", "VARCHAR"),
    ("irq_cpu_list", "VARCHAR"),
    ("lro", "BOOLEAN"),
    ("sg", "BOOLEAN"),
    ("batch_tx", "INTEGER"),
    ("batch_rx", "INTEGER"),
]

#: Columns appended to other tables after their first version: table → columns.
ADDED_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "published_points": [("testbed", "VARCHAR")],
    # Predictive intervals and the domain of validity (models/intervals.py, domain.py).
    "predictions": [("interval_level", "DOUBLE"), ("param_lo_mbps", "DOUBLE"),
                    ("param_hi_mbps", "DOUBLE"), ("extrapolated", "VARCHAR"),
                    ("interval_source", "VARCHAR")],
}

TESTBED_COLUMNS: list[tuple[str, str]] = [
    ("testbed", "VARCHAR PRIMARY KEY"),
    ("description", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("documents", "VARCHAR"),
    ("cpu", "VARCHAR NOT NULL"),
    ("cpu_ghz", "DOUBLE"),
    ("cores", "INTEGER"),
    ("threads", "INTEGER"),
    ("nic", "VARCHAR"),
    ("offloads", "VARCHAR"),
    ("kernel", "VARCHAR"),
    ("os", "VARCHAR"),
    ("link_gbps", "DOUBLE"),
    ("link_note", "VARCHAR"),
    ("path", "VARCHAR"),
    ("mtu_bytes", "INTEGER"),
    ("hosts", "JSON"),
    ("sources", "JSON"),
]

DDL = [
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE IF NOT EXISTS runs (" + ", ".join(f"{n} {t}" for n, t in RUN_COLUMNS) + ")",
    """CREATE TABLE IF NOT EXISTS cpu_samples (
        run_id VARCHAR NOT NULL, side VARCHAR NOT NULL, t_s INTEGER NOT NULL,
        user_pct DOUBLE, system_pct DOUBLE, total_pct DOUBLE, core INTEGER,
        in_window BOOLEAN, PRIMARY KEY (run_id, side, t_s))""",
    """CREATE TABLE IF NOT EXISTS perf_stacks (
        run_id VARCHAR NOT NULL, side VARCHAR NOT NULL, comm VARCHAR, stack VARCHAR,
        samples BIGINT, period BIGINT, category VARCHAR, subcategory VARCHAR,
        in_process BOOLEAN)""",
    """CREATE TABLE IF NOT EXISTS published_points (
        point_id VARCHAR PRIMARY KEY, document VARCHAR NOT NULL, section VARCHAR,
        locator VARCHAR, quantity VARCHAR NOT NULL, value DOUBLE NOT NULL, unit VARCHAR NOT NULL,
        server VARCHAR, client VARCHAR, app VARCHAR, cpu VARCHAR, link_gbps DOUBLE,
        mtu_bytes INTEGER, gso BOOLEAN, gro BOOLEAN, rtt_ms DOUBLE, loss_pct DOUBLE,
        reorder_pct DOUBLE, cipher VARCHAR, rcvbuf_bytes BIGINT, streams INTEGER,
        chunks INTEGER, transfer_bytes BIGINT, workload VARCHAR, request_bytes BIGINT,
        requests BIGINT, connections INTEGER, conditions VARCHAR, stated VARCHAR,
        note VARCHAR, source_file VARCHAR, testbed VARCHAR)""",
    "CREATE TABLE IF NOT EXISTS testbeds (" + ", ".join(f"{n} {t}" for n, t in TESTBED_COLUMNS)
    + ")",
    """CREATE TABLE IF NOT EXISTS sources (
        source VARCHAR PRIMARY KEY, kind VARCHAR, location VARCHAR, sha256 VARCHAR,
        parser_version VARCHAR, ingested_at DOUBLE, runs BIGINT, skipped BIGINT)""",
    """CREATE TABLE IF NOT EXISTS files (
        source VARCHAR, path VARCHAR, sha256 VARCHAR, bytes BIGINT,
        PRIMARY KEY (source, path))""",
    """CREATE TABLE IF NOT EXISTS ingest_issues (
        source VARCHAR, path VARCHAR, field VARCHAR, reason VARCHAR, severity VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS processed_check (
        run_id VARCHAR, column_name VARCHAR, raw DOUBLE, processed DOUBLE,
        abs_diff DOUBLE, rel_diff DOUBLE, PRIMARY KEY (run_id, column_name))""",
    """CREATE TABLE IF NOT EXISTS cpus (
        name VARCHAR PRIMARY KEY, vendor VARCHAR, microarchitecture VARCHAR, year INTEGER,
        max_ghz DOUBLE, base_ghz DOUBLE, cores INTEGER, threads INTEGER, numa_nodes INTEGER,
        nic_numa_node INTEGER, aes_ni BOOLEAN, sources VARCHAR)""",
    # The hosts fresh runs were made on (testbed/record.py host_rows): one row per
    # host and state (host_id: hostname + hash of CPU, kernel and NIC).
    """CREATE TABLE IF NOT EXISTS hosts (
        host_id VARCHAR PRIMARY KEY, name VARCHAR, kind VARCHAR, ssh VARCHAR,
        hostname VARCHAR, cpu VARCHAR, vendor VARCHAR, microarchitecture VARCHAR,
        cores INTEGER, max_ghz DOUBLE, aes_ni BOOLEAN, numa_nodes INTEGER, kernel VARCHAR,
        machine VARCHAR, interface VARCHAR, nic_driver VARCHAR, nic_firmware VARCHAR,
        nic_speed_mbps BIGINT, nic_numa_node INTEGER, first_run_ns BIGINT,
        last_run_ns BIGINT, facts JSON)""",
    # Engine outputs written by `quiclab sweep` / `quiclab reproduce`;
    # one row per sweep, scenario and engine. Columns in datasets/columns.yaml.
    """CREATE TABLE IF NOT EXISTS predictions (
        sweep VARCHAR NOT NULL, kind VARCHAR, scenario_key VARCHAR NOT NULL,
        engine VARCHAR NOT NULL, engine_version VARCHAR,
        server VARCHAR, client VARCHAR, link_gbps DOUBLE, mtu_bytes INTEGER, rtt_ms DOUBLE,
        base_rtt_us DOUBLE, loss_pct DOUBLE, reorder_pct DOUBLE, queue_bytes BIGINT,
        queue_bdp DOUBLE, gso BOOLEAN, gro BOOLEAN, rcvbuf_bytes BIGINT, sndbuf_bytes BIGINT,
        cipher VARCHAR, cpu VARCHAR, cpu_ghz DOUBLE, pin BOOLEAN, pipeline VARCHAR,
        transfer_bytes BIGINT, streams INTEGER, chunks INTEGER, app VARCHAR, cc VARCHAR,
        udp_payload_bytes INTEGER, workload VARCHAR, request_bytes BIGINT, requests BIGINT,
        connections INTEGER, seed BIGINT, run INTEGER,
        goodput_mbps DOUBLE, goodput_lo_mbps DOUBLE, goodput_hi_mbps DOUBLE,
        interval_level DOUBLE, param_lo_mbps DOUBLE, param_hi_mbps DOUBLE,
        extrapolated VARCHAR, interval_source VARCHAR, limit_resource VARCHAR,
        duration_s DOUBLE, rates_mbps JSON,
        server_cpu_util DOUBLE, client_cpu_util DOUBLE, server_cpu_s DOUBLE,
        client_cpu_s DOUBLE, server_packets_sent DOUBLE, server_packets_received DOUBLE,
        client_packets_sent DOUBLE, client_packets_received DOUBLE, acks DOUBLE,
        losses DOUBLE, retransmissions DOUBLE, rcvbuf_drops DOUBLE, server_syscalls DOUBLE,
        client_syscalls DOUBLE, requests_per_s DOUBLE, completion_s DOUBLE,
        latency_p50_ms DOUBLE, latency_p99_ms DOUBLE, model_versions JSON, cpu_rule VARCHAR,
        notes JSON, content_hash VARCHAR, spec_json JSON, git_revision VARCHAR,
        git_dirty BOOLEAN, packages_json JSON, models_source VARCHAR, out_dir VARCHAR,
        extra JSON, PRIMARY KEY (sweep, scenario_key, engine))""",
    # Host probes (testbed/probe.py): one row per probe, its figures flattened and
    # whole (``content``, with its SHA-256). Columns in datasets/SCHEMA.md.
    """CREATE TABLE IF NOT EXISTS host_probes (
        probe_id VARCHAR PRIMARY KEY, sha256 VARCHAR NOT NULL, name VARCHAR,
        taken_at TIMESTAMP NOT NULL, host VARCHAR, cpu VARCHAR, session VARCHAR,
        phase VARCHAR, rounds INTEGER, duration_s DOUBLE, figures JSON,
        other_busy_cores DOUBLE, steal_cores DOUBLE, busy_cores DOUBLE, clock_mhz DOUBLE,
        quic_stack VARCHAR, quic_goodput_mbps DOUBLE, content JSON NOT NULL)""",
    # Prospective validation (experiments/prospective.py): predictions registered
    # before their runs, and their outcomes; both append-only, each row hashed and
    # chained to the one before.
    """CREATE TABLE IF NOT EXISTS registered_predictions (
        seq BIGINT PRIMARY KEY, registration VARCHAR NOT NULL, registered_at TIMESTAMP NOT NULL,
        experiment VARCHAR NOT NULL, cell VARCHAR NOT NULL, engine VARCHAR NOT NULL,
        predicted_mbps DOUBLE, predicted_lo_mbps DOUBLE, predicted_hi_mbps DOUBLE,
        limit_resource VARCHAR, probe_id VARCHAR, content JSON NOT NULL,
        row_sha256 VARCHAR NOT NULL, prev_sha256 VARCHAR NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS prediction_outcomes (
        seq BIGINT PRIMARY KEY, prediction_seq BIGINT NOT NULL,
        prediction_sha256 VARCHAR NOT NULL, compared_at TIMESTAMP NOT NULL,
        runs INTEGER, observed_mbps DOUBLE, ape_pct DOUBLE, signed_error_pct DOUBLE,
        within_interval BOOLEAN, content JSON NOT NULL, row_sha256 VARCHAR NOT NULL,
        prev_sha256 VARCHAR NOT NULL)""",
    """CREATE OR REPLACE VIEW perf_categories AS
        SELECT run_id, side, category,
               sum(samples) AS samples,
               sum(samples) / sum(sum(samples)) OVER (PARTITION BY run_id, side) AS share
        FROM perf_stacks WHERE in_process
        GROUP BY run_id, side, category""",
]

#: Tables a user may export or query (datasets/columns.yaml has their columns' meanings).
TABLES = ("runs", "cpu_samples", "perf_stacks", "perf_categories", "published_points",
          "sources", "files", "ingest_issues", "processed_check", "cpus", "predictions",
          "testbeds", "host_probes", "registered_predictions", "prediction_outcomes",
          "hosts")


def migrate_testbeds(con: duckdb.DuckDBPyConnection) -> None:
    """Version 2 → 3: the testbed of rows whose source names it — the QIR-10G runs
    (``qir10g``, kernel UDP sockets) and the published points (their document's
    testbed, :data:`quiclab.datasets.testbeds.DOCUMENT_TESTBEDS`). Fresh runs
    recorded before version 3 keep a NULL testbed: the host that made them is not
    in the row (re-record them, or set it with SQL)."""
    from quiclab.datasets.testbeds import DOCUMENT_TESTBEDS, QIR10G

    con.execute("UPDATE runs SET testbed = ?, io = coalesce(io, 'kernel') "
                "WHERE source = 'qir10g' AND testbed IS NULL", [QIR10G])
    for document, testbed in DOCUMENT_TESTBEDS.items():
        con.execute("UPDATE published_points SET testbed = ? WHERE testbed IS NULL AND "
                    "lpad(document, 3, '0') = ?", [testbed, document])


#: A DuckDB file starts with three 4 KiB headers (one file header, two database
#: headers) before its blocks (duckdb/src/storage/single_file_block_manager.cpp).
FILE_HEADERS_BYTES = 3 * 4096
_DAMAGED_HINT = ("; the file was left as it is: move it aside and run `quiclab data ingest` "
                 "to build a new one")


def _first_line(err: BaseException, limit: int = 160) -> str:
    """DuckDB's message, first line, at most ``limit`` characters (its lock message
    goes on with a PID and a link)."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def says_damaged(err: BaseException) -> bool:
    """Whether a DuckDB error says the file itself is bad (not a lock or a query)."""
    text = str(err).lower()
    return any(word in text for word in ("not a valid duckdb", "could not read enough",
                                         "corrupt", "checksum", "serializ", "invalid"))


class Catalog:
    """A DuckDB catalog file. Use as a context manager or call :meth:`close`.

    ``read_only=True`` opens without a write lock (for the app and ``data sql``).
    """

    def __init__(self, path: Path | str, read_only: bool = False):
        self.path = Path(path)
        if read_only and not self.path.exists():
            raise DataError(self.path, "catalog does not exist (run `quiclab data ingest`)")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con = self._connect(read_only)
        except duckdb.Error as err:
            raise DataError(self.path, f"cannot open catalog ({_first_line(err)})"
                                       + _DAMAGED_HINT * says_damaged(err)) from None
        self.read_only = read_only
        try:
            self._check_complete()
            if not read_only:
                self.ensure_schema()
        except duckdb.Error as err:  # a damaged block met while reading the schema
            self.con.close()
            raise self.damaged(err) from None
        except BaseException:
            self.con.close()
            raise

    def _check_complete(self) -> None:
        """Refuse a catalog file shorter than the blocks it uses (cut by a full disk or a
        copy): DuckDB opens it and fails only at the first read of a missing block, in
        the middle of a command. Nothing is written to such a file. (A cut that this
        misses fails at that read, which :meth:`damaged` turns into one line.)"""
        try:
            # used_blocks, not total_blocks: free blocks at the end of a healthy file
            # are truncated away, but every used block lies within the file.
            rows = self.con.execute("SELECT block_size, used_blocks "
                                    "FROM pragma_database_size()").fetchall()
            row = rows[0] if rows else None
        except duckdb.Error as err:
            raise self.damaged(err) from None
        if row is None or not self.path.is_file():
            return
        block_size, blocks = int(row[0] or 0), int(row[1] or 0)
        need = FILE_HEADERS_BYTES + blocks * block_size
        have = self.path.stat().st_size
        if blocks and have < need:
            raise DataError(self.path, f"damaged catalog: {have:,d} bytes where its {blocks} "
                                       f"blocks in use need {need:,d}; a cut copy?"
                                       f"{_DAMAGED_HINT}")

    def damaged(self, err: BaseException) -> DataError:
        """The one-line DataError for a DuckDB error met while reading this file."""
        hint = _DAMAGED_HINT if says_damaged(err) else ""
        return DataError(self.path, f"catalog cannot be read ({_first_line(err)}){hint}")

    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        # Another process (a sweep, the app) may hold the write lock for a moment.
        for attempt in range(50):
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as err:
                if "lock" not in str(err).lower() or attempt == 49:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def ensure_schema(self) -> None:
        """Create what is missing; on a current catalog, write nothing at all (so that a
        command refused after opening for writing leaves the file byte for byte)."""
        for stmt in DDL:
            view = re.match(r"\s*CREATE OR REPLACE VIEW (\w+)", stmt)
            if view is None:
                self.con.execute(stmt)  # CREATE … IF NOT EXISTS: no write when present
                continue
            # A view is replaced only when its definition changed (its hash in meta).
            key, digest = f"view:{view.group(1)}", hashlib.sha256(stmt.encode()).hexdigest()
            exists = self.con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?",
                                      [view.group(1)]).fetchall()[0][0]
            stored = self.con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()
            if not exists or stored != [(digest,)]:
                self.con.execute(stmt)
                self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, digest])
        rows = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        found = int(rows[0][0]) if rows and str(rows[0][0]).isdigit() else SCHEMA_VERSION
        # Columns added after a file was created (nullable; older rows read NULL).
        for table, columns in (("runs", RUN_COLUMNS), *ADDED_COLUMNS.items()):
            have = set(self.columns(table))
            for name, kind in columns:
                if name not in have:
                    self.con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        if found < 3:
            migrate_testbeds(self.con)
        # Written only when it changes: opening a current catalog for writing writes
        # nothing, so a command refused afterwards leaves the file as it was.
        if rows != [(str(SCHEMA_VERSION),)]:
            self.con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                             [str(SCHEMA_VERSION)])

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
            self.con.execute("COMMIT")
        except BaseException as err:
            with contextlib.suppress(duckdb.Error):  # a damaged file may refuse even this
                self.con.execute("ROLLBACK")
            if isinstance(err, duckdb.Error) and says_damaged(err):
                raise self.damaged(err) from None  # one line naming the file
            raise

    @contextlib.contextmanager
    def replacing(self, source: str, location: object, rows: int,
                  why: str = "") -> Iterator[duckdb.DuckDBPyConnection]:
        """The transaction in which a loader replaces the rows of ``source``.

        Every loader deletes its source's old rows and writes the new ones inside
        it. A source that yielded no rows (a wrong folder, a file of another format,
        every file skipped) is refused before anything is deleted: DataError naming
        ``location`` and ``why`` (the first problem met), and the rows already in the
        catalog stay as they were.
        """
        if rows <= 0:
            because = f" ({why})" if why else ""
            raise DataError(location, f"no {source} rows could be read{because}; "
                                      "nothing was replaced: the catalog is unchanged")
        with self.transaction() as con:
            yield con

    def upsert(self, table: str, rows: Sequence[dict[str, Any]],
               key: Sequence[str] | None = None) -> int:
        """Insert rows, replacing rows with the same primary key. Returns rows written.

        Missing columns are NULL; unknown columns are an error naming them.
        """
        if not rows:
            return 0
        cols = self.columns(table)
        unknown = sorted({k for r in rows for k in r} - set(cols))
        if unknown:
            raise DataError(f"catalog table {table}", f"unknown column(s) {', '.join(unknown)}")
        used = [c for c in cols if any(c in r for r in rows)]
        try:
            self._upsert(table, rows, used, key)
        except duckdb.Error as err:
            if says_damaged(err):
                raise self.damaged(err) from None
            raise
        return len(rows)

    def _upsert(self, table: str, rows: Sequence[dict[str, Any]], used: list[str],
                key: Sequence[str] | None) -> None:
        verb = "INSERT OR REPLACE" if key is None else "INSERT"
        if key is not None:
            # Tables without a primary key: delete matching keys first (idempotent ingest).
            keys = {tuple(r.get(k) for k in key) for r in rows}
            where = " AND ".join(f"{k} = ?" for k in key)
            for values in keys:
                self.con.execute(f"DELETE FROM {table} WHERE {where}", list(values))
        self._insert_arrow(table, used, rows, verb)

    def delete_other_versions(self, sweep: str, content_hash: str) -> int:
        """Delete the ``predictions`` of ``sweep`` made from another content hash (an
        earlier spec or model set; a rerun writes the current ones). Returns how many."""
        rows = self.con.execute("DELETE FROM predictions WHERE sweep = ? AND kind = 'sweep' "
                                "AND content_hash IS DISTINCT FROM ?",
                                [sweep, content_hash]).fetchall()
        return int(rows[0][0]) if rows else 0

    def _insert_arrow(self, table: str, columns: Sequence[str], rows: Sequence[dict[str, Any]],
                      verb: str = "INSERT") -> None:
        """Insert many rows at once through an Arrow table (executemany is ~100× slower)."""
        import pyarrow as pa

        types = dict(self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
            [table]).fetchall())
        arrays = {}
        for c in columns:
            values = [r.get(c) for r in rows]
            kind = types.get(c, "")
            if kind in ("DOUBLE", "FLOAT"):
                values = [None if v is None else float(v) for v in values]
            arrays[c] = values
        batch = pa.table(arrays)  # noqa: F841 — referenced by name in the SQL below
        names = ", ".join(f'"{c}"' for c in columns)
        self.con.execute(f"{verb} INTO {table} ({names}) SELECT {names} FROM batch")

    def record_issue(self, source: str, path: str, reason: str, field: str | None = None,
                     severity: str = "skipped") -> None:
        self.con.execute("INSERT INTO ingest_issues VALUES (?, ?, ?, ?, ?)",
                         [source, path, field, reason, severity])

    # -- reading ------------------------------------------------------------
    def tables(self) -> list[str]:
        try:
            rows = self.con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "ORDER BY table_name").fetchall()
        except duckdb.Error as err:
            raise self.damaged(err) from None
        return [r[0] for r in rows]

    def columns(self, table: str) -> list[str]:
        try:
            rows = self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position", [table]).fetchall()
        except duckdb.Error as err:
            raise self.damaged(err) from None
        if not rows:
            raise DataError(self.path, f"no table {table!r} (tables: {', '.join(self.tables())})")
        return [r[0] for r in rows]

    def count(self, table: str) -> int:
        self.columns(table)
        try:
            rows = self.con.execute(f'SELECT count(*) FROM "{table}"').fetchall()
        except duckdb.Error as err:
            raise self.damaged(err) from None
        return int(rows[0][0]) if rows else 0

    def query(self, sql: str, params: Iterable[Any] | None = None) -> duckdb.DuckDBPyRelation:
        return self.con.sql(sql, params=list(params) if params is not None else None)

    def df(self, sql: str, params: Iterable[Any] | None = None) -> Any:
        """Run SQL and return a pandas DataFrame."""
        return self.con.execute(sql, list(params) if params is not None else []).df()
