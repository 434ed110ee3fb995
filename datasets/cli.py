"""``quiclab data …``: build and query the DuckDB catalog."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

from quiclab.errors import DataError, excerpt


def add_parser(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="build and query the catalog of measurements",
                          description="The DuckDB catalog: every published, dataset and fresh "
                                      "measurement and every prediction, queryable with SQL.")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    p = dsub.add_parser("ingest", help="parse the shared datasets and published points into "
                                       "the catalog (idempotent)")
    p.add_argument("--source", action="append", metavar="PATH",
                   help="a QIR-10G or UCLouvain picoquic-dpdk-experiments tarball, extracted "
                        "folder or clone, or a folder of published-point CSVs (repeatable; "
                        "default: the two shared tarballs and the packaged published points; "
                        "a missing default UCLouvain tarball is skipped with one line)")
    p.add_argument("--strict", action="store_true",
                   help="make a malformed or missing file an error instead of a skipped line")
    p.add_argument("--no-perf", action="store_true",
                   help="skip folding the six perf traces (faster)")
    p.set_defaults(func=run_ingest)

    p = dsub.add_parser("list", help="list the catalog's tables with row counts")
    p.set_defaults(func=run_list, writes=False)

    p = dsub.add_parser("info", help="columns and row count of one table")
    p.add_argument("table")
    p.set_defaults(func=run_info, writes=False)

    p = dsub.add_parser("sql", help="run a read-only SQL query")
    p.add_argument("query", help='e.g. "SELECT server_impl, median(goodput_mbps) FROM runs '
                                 'GROUP BY 1"')
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--max-rows", type=_row_cap, default=MAX_ROWS, metavar="N",
                   help=f"print at most N rows (default {MAX_ROWS}; 0 = all); a note on "
                        "stderr says when rows were left out (`data export` writes them all)")
    p.set_defaults(func=run_sql, writes=False)

    p = dsub.add_parser("export", help="write a table (or query) to Parquet or CSV")
    p.add_argument("table", help="table name, or a SELECT query")
    p.add_argument("--to", required=True, metavar="FILE", help="file.parquet or file.csv")
    p.set_defaults(func=run_export)

    p = dsub.add_parser("summary", help="runs per experiment and pair with median goodput, "
                                        "CPU and packet figures")
    p.set_defaults(func=run_summary, writes=False)


#: Rows `data sql` prints unless told otherwise (a terminal's worth; `export` writes all).
MAX_ROWS = 200


def _row_cap(text: str) -> int:
    """``--max-rows``: a whole number ≥ 0 (argparse turns the error into one line)."""
    from quiclab.errors import ScenarioError
    from quiclab.sim.scenario import whole_number

    try:
        value = whole_number("--max-rows", text)
    except ScenarioError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 0, got {excerpt(text)}")
    return value


def _progress() -> Any:
    """A rich progress callback on stderr (quiet when not a terminal)."""
    from rich.console import Console

    console = Console(stderr=True)
    state: dict[str, Any] = {"what": None}

    def report(what: str, done: int, total: int | None) -> None:
        if not console.is_terminal:
            if what != state["what"]:
                print(f"  {what} …", file=sys.stderr)
                state["what"] = what
            return
        suffix = f"{done}/{total}" if total else f"{done}"
        console.print(f"  {what}: {suffix}", end="\r")

    return report


def _kind(path: Path) -> str:
    if path.is_dir() and any(path.glob("*.csv")) and not (path / "results").exists():
        return "published"
    if _is_uclouvain(path):
        return "uclouvain"
    return "qir10g"


#: The UCLouvain dataset's own top folder (``EverythingTesting/data/`` holds its outputs).
UCL_MARKER = "EverythingTesting"


def _is_uclouvain(path: Path) -> bool:
    """Whether ``path`` is the picoquic-dpdk-experiments dataset: a folder with
    ``EverythingTesting/`` at its top or one level down, or an archive whose first
    members lie under it (only the archive's head is read)."""
    import tarfile

    if path.is_dir():
        return (path / UCL_MARKER).is_dir() or any(
            (child / UCL_MARKER).is_dir() for child in path.iterdir() if child.is_dir())
    if not path.is_file():
        return "picoquic-dpdk" in path.name
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for i, member in enumerate(tar):
                if f"{UCL_MARKER}/" in member.name + "/":
                    return True
                if i >= 20:
                    break
    except (tarfile.TarError, OSError, EOFError):
        return "picoquic-dpdk" in path.name  # the ingest reports the unreadable archive
    return False


def _has_results(folder: Path) -> bool:
    """Whether a QIR-10G ``results/`` folder lies anywhere under ``folder`` (a clone
    or an extracted tarball may wrap it in one or more folders)."""
    for _, dirnames, _ in os.walk(folder):
        if "results" in dirnames:
            return True
        if ".git" in dirnames:
            dirnames.remove(".git")
    return False


def _host_facts() -> Any:
    """This host's facts for its ``fresh-<hostname>`` testbed (CPU as the testbed's
    recorder reads it, logical CPUs, kernel release)."""
    import os
    import platform
    import socket

    from quiclab.datasets.testbeds import HostFacts
    from quiclab.models.cpus import CpuCatalog, read_host_cpu

    try:
        cpu = read_host_cpu(CpuCatalog.packaged())
        name, ghz = cpu.name, cpu.max_ghz
    except (OSError, ValueError):
        name, ghz = "unknown", None
    return HostFacts(socket.gethostname(), name, ghz, os.cpu_count(), platform.release())


def run_ingest(args: argparse.Namespace) -> int:
    from quiclab.datasets import testbeds
    from quiclab.datasets.catalog import Catalog
    from quiclab.datasets.sources import published, qir10g
    from quiclab.models.cpus import CpuCatalog

    sources = [Path(s) for s in args.source] if args.source else [
        args.paths.qir_dataset, published.packaged_dir()]
    if not args.source:
        if args.paths.uclouvain_dataset.exists():
            sources.append(args.paths.uclouvain_dataset)
        else:
            print(f"UCLouvain raw data: {args.paths.uclouvain_dataset} not found, skipped "
                  "(the other sources are ingested)")
    for src in sources:
        if not src.exists():
            raise DataError(src, "dataset source not found (give --source PATH, or set "
                                 "QUICLAB_SHARED / --shared to the folder holding datasets/)")
        # Checked for every source before any is ingested: a wrong folder must not
        # replace the runs already in the catalog with none.
        if src.is_dir() and _kind(src) == "qir10g" and not _has_results(src):
            raise DataError(src, "no QIR-10G results/ or published-point CSVs found")
    # Published points are read (and a folder that yields none refused) before the
    # catalog is opened for writing.
    parsed = {src: published.read(src, strict=args.strict) for src in sources
              if _kind(src) == "published"}
    with Catalog(args.catalog) as catalog:
        for src in sources:
            if src in parsed:
                n = published.write(catalog, parsed[src])
                issues = catalog.con.execute(
                    "SELECT path, coalesce('[' || field || '] ', '') || reason "
                    "FROM ingest_issues WHERE source = ?", [published.SOURCE]).fetchall()
                print(f"published points: {n} rows from {src}, skipped {len(issues)}")
                for path, reason in issues:
                    print(f"    {path}: {reason}")
                continue
            if _kind(src) == "uclouvain":
                _ingest_uclouvain(catalog, src, args.strict)
                continue
            print(f"ingesting {src} …", file=sys.stderr)
            s = qir10g.load(catalog, src, strict=args.strict, with_perf=not args.no_perf,
                            progress=_progress())
            print(f"QIR-10G raw data: {s.runs} runs "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(s.runs_by_experiment.items()))}), "
                  f"{s.cpu_samples} CPU samples, {s.perf_stacks} folded perf stacks, "
                  f"{s.files} files in {s.seconds:.1f} s")
            print(f"  skipped {len(s.skipped)} file(s):")
            for path, reason in s.skipped:
                print(f"    {path}: {reason}")
            print(f"  raw vs processed.csv: {s.processed_rows} rows compared; largest relative "
                  "difference per column:")
            for col, diff in sorted(s.processed_max_diff.items()):
                print(f"    {col:40s} {diff:.2e}")
            if s.processed_mismatches:
                print(f"  {len(s.processed_mismatches)} run/column disagreements — see "
                      "`quiclab data sql \"SELECT * FROM processed_check WHERE rel_diff > 1e-6\"`"
                      " and docs/explanation/catalog.md for the reasons")
        n = testbeds.load(catalog, _host_facts())
        print(f"testbeds: {n} ({', '.join(sorted(testbeds.by_id(catalog)))})")
        # The CPU catalog last: a source refused above leaves the file untouched.
        catalog.upsert("cpus", [c.to_row() for c in CpuCatalog.packaged().cpus])
        print(f"catalog: {args.catalog}")
    return 0


def _ingest_uclouvain(catalog: Any, src: Path, strict: bool) -> None:
    from quiclab.datasets.sources import uclouvain

    print(f"ingesting {src} …", file=sys.stderr)
    s = uclouvain.load(catalog, src, strict=strict, progress=_progress())
    print(f"UCLouvain raw data: {s.runs} runs "
          f"({', '.join(f'{k} {v}' for k, v in sorted(s.runs_by_experiment.items()))}) "
          f"from {s.files} files in {s.seconds:.1f} s")
    print(f"  by stack: {', '.join(f'{k} {v}' for k, v in sorted(s.runs_by_stack.items()))}")
    counts: dict[str, int] = {}
    for _, _, severity in s.issues:
        counts[severity] = counts.get(severity, 0) + 1
    print(f"  {len(s.issues)} file(s) not ingested whole "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items())) or 'none'}); "
          "see `quiclab data sql \"SELECT * FROM ingest_issues WHERE source = "
          "'uclouvain'\"`")
    for path, reason, severity in s.issues:
        if severity != "not-measured":
            print(f"    {path}: {reason}")


def run_list(args: argparse.Namespace) -> int:
    from quiclab.datasets.catalog import Catalog

    with Catalog(args.catalog, read_only=True) as catalog:
        for table in catalog.tables():
            print(f"{table:20s} {catalog.count(table):>10,d}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from quiclab.datasets.catalog import Catalog

    with Catalog(args.catalog, read_only=True) as catalog:
        rows = catalog.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = ? ORDER BY ordinal_position", [args.table]).fetchall()
        if not rows:
            raise DataError(args.catalog, f"no table {args.table!r} "
                                          f"(tables: {', '.join(catalog.tables())})")
        print(f"{args.table}: {catalog.count(args.table):,d} rows")
        for name, kind in rows:
            print(f"  {name:34s} {kind}")
    return 0


#: ``PRAGMA name`` / ``CALL name(…)`` that only read metadata (``CALL`` also takes any
#: ``pragma_*`` or ``duckdb_*`` table function); others (``PRAGMA force_checkpoint``,
#: ``CHECKPOINT``, settings) change the database or the session.
READ_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases",
    "database_list", "database_size", "storage_info", "metadata_info", "version",
    "platform", "user_agent", "functions", "collations"})
READ_ONLY_HELP = ("`data sql` runs read-only queries only (SELECT/WITH, EXPLAIN, DESCRIBE, "
                  "SHOW, SUMMARIZE, PRAGMA table_info and other metadata reads)")


def _statement_name(text: str) -> str:
    """The statement's leading keyword, for messages: ``COPY``, ``DROP``."""
    word = re.match(r"\s*([A-Za-z_]+)", text)
    return word.group(1).upper() if word else "this"


def read_only_statement(sql: str) -> str:
    """The one read-only statement in ``sql`` (its text alone), or DataError ("sql: …",
    one line).

    DuckDB classifies the statements (``extract_statements``); only queries and
    metadata reads pass. The catalog is also opened read-only, which stops writes
    to it, but not ``COPY … TO``, ``EXPORT DATABASE``, ``SET`` or ``INSTALL``.
    """
    import duckdb

    con = duckdb.connect()
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as err:
        raise DataError("sql", str(err).splitlines()[0]) from None
    finally:
        con.close()
    if not statements:
        raise DataError("sql", "empty query (no statement to run)")
    if len(statements) > 1:
        raise DataError("sql", f"{len(statements)} statements given: run one query at a "
                               "time (no ';' between statements)")
    (statement,) = statements
    text = statement.query.strip()
    try:
        kind = statement.type
    except ValueError:  # a type this duckdb's Python API cannot name (UPDATE EXTENSIONS)
        kind = None
    allowed = kind == duckdb.StatementType.SELECT
    if kind == duckdb.StatementType.EXPLAIN:
        # EXPLAIN ANALYZE runs its statement: judge that one.
        inner = re.match(r"(?is)explain\s+(?:analy[sz]e\s+|\([^)]*\)\s*)?(.*)", text)
        if inner and inner.group(1).strip():
            read_only_statement(inner.group(1))
            return text
    elif kind in (duckdb.StatementType.PRAGMA, duckdb.StatementType.CALL):
        # "COPY FROM DATABASE" parses as a PRAGMA and "CHECKPOINT" as a CALL: go by name.
        named = re.match(r"(?is)(pragma|call)\s+([a-z_][a-z0-9_]*)", text)
        if named:
            verb, name = named.group(1).lower(), named.group(2).lower()
            allowed = name in READ_PRAGMAS or (
                verb == "call" and name.startswith(("pragma_", "duckdb_")))
    if not allowed:
        hint = "; write files with `quiclab data export`" if kind in (
            duckdb.StatementType.COPY, duckdb.StatementType.EXPORT) else ""
        # The statement's first word, except that "WITH … DELETE" is named by its kind
        # (DuckDB's kinds are coarser elsewhere: RESET and USE are SET, BEGIN TRANSACTION).
        name = _statement_name(text)
        if name in ("WITH", "THIS") and kind is not None and kind.name != "INVALID":
            name = kind.name
        raise DataError("sql", f"{name} is not allowed: {READ_ONLY_HELP}{hint}")
    return text  # the statement alone: no trailing ';' or comment for the relation API


def run_sql(args: argparse.Namespace) -> int:
    import duckdb

    from quiclab.datasets.catalog import Catalog

    query = read_only_statement(args.query)
    cap = getattr(args, "max_rows", MAX_ROWS)
    with Catalog(args.catalog, read_only=True) as catalog:
        try:
            result = catalog.con.execute(query)
            names = [d[0] for d in result.description or []]
            # Only cap + 1 rows leave DuckDB: a query of 10⁸ rows prints at once.
            rows = result.fetchmany(cap + 1) if cap else result.fetchall()
        except duckdb.Error as err:
            raise _query_error(catalog, "sql", err) from None
    df = rows_df(rows, names)
    more = bool(cap) and len(df) > cap
    if more:
        df = df.iloc[:cap]
    if args.format == "csv":
        df.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        print(df.to_json(orient="records", date_format="iso"))
    else:
        print(format_table(df))
    if more:
        print(f"quiclab: showed the first {cap} rows; more exist (--max-rows 0 prints all, "
              "`quiclab data export` writes them to a file)", file=sys.stderr)
    return 0


def _query_error(catalog: Any, what: str, err: Exception) -> DataError:
    """A query's DuckDB error as one line: the catalog's file when the file is bad
    (a damaged block), else the query's own problem."""
    from quiclab.datasets.catalog import says_damaged

    if says_damaged(err):
        return catalog.damaged(err)
    return DataError(what, (str(err).strip().splitlines() or [type(err).__name__])[0])


def rows_df(rows: list[tuple[Any, ...]], names: list[str]) -> Any:
    """Rows as DuckDB returns them to Python, as a DataFrame: whole numbers stay whole
    (``sum()`` of BIGINT is a HUGEINT, which a DataFrame from DuckDB holds as float64
    and prints as 5.06e+05), DECIMALs become floats."""
    from decimal import Decimal

    import pandas as pd

    df = pd.DataFrame.from_records(rows, columns=names) if rows else pd.DataFrame(
        columns=names)
    for i in range(df.shape[1]):
        column = df.iloc[:, i]
        if column.dtype == object and any(isinstance(v, Decimal) for v in column):
            df.isetitem(i, column.map(lambda v: float(v) if isinstance(v, Decimal) else v))
    return df


def format_table(df: Any, max_rows: int | None = None) -> str:
    """``df`` as text: whole numbers as such, other floats to 4 significant digits; at
    most ``max_rows`` rows, with a last line saying how many more there are."""
    import pandas as pd

    def number(value: float) -> str:
        if value == value and abs(value) < 1e15 and float(value).is_integer():
            return f"{value:,.0f}"
        return f"{value:,.4g}"

    more = len(df) - max_rows if max_rows is not None and len(df) > max_rows else 0
    shown = df.iloc[:max_rows] if more else df
    with pd.option_context("display.max_columns", 50, "display.width", 200,
                           "display.float_format", number):
        text = str(shown.to_string(index=False))
    return text + (f"\n… and {more:,d} more rows" if more else "")


def run_export(args: argparse.Namespace) -> int:
    import duckdb

    from quiclab.datasets.catalog import Catalog, says_damaged

    target = Path(args.to)
    if target.suffix not in (".parquet", ".csv"):
        raise DataError(target, "choose a .parquet or .csv file name", field="--to")
    with Catalog(args.catalog, read_only=True) as catalog:
        tables = catalog.tables()
        if args.table in tables:
            # The relation API takes the name and the path as values: nothing is pasted
            # into SQL, so a quote in either is just a character.
            relation = catalog.con.table(args.table)
        elif re.match(r"(?is)\s*(select|with|from|values|table|\()", args.table):
            # One read-only statement (no ";", no COPY), as `data sql` runs it.
            try:
                relation = catalog.con.sql(read_only_statement(args.table))
            except duckdb.Error as err:
                raise _query_error(catalog, "export", err) from None
        else:
            raise DataError(args.catalog, f"no table {excerpt(args.table)} "
                                          f"(tables: {', '.join(tables)})")
        writable_parent(target, "--to")
        try:
            if target.suffix == ".parquet":
                relation.write_parquet(str(target))
            else:
                relation.write_csv(str(target), header=True)
            n = relation.aggregate("count(*)").fetchall()[0]
        except duckdb.Error as err:
            if says_damaged(err):
                raise catalog.damaged(err) from None
            raise DataError(target, str(err).splitlines()[0], field="--to") from None
    print(f"wrote {n[0] if n else 0:,d} rows to {target}")
    return 0


def writable_parent(target: Path, flag: str) -> None:
    """``target``'s folder exists and is writable, and ``target`` is no folder; else
    DataError naming ``flag`` (:func:`quiclab.paths.writable_folder`)."""
    from quiclab.paths import writable_folder

    writable_folder(target.parent, flag)
    if target.is_dir():
        raise DataError(target, "is a folder: give a file name", field=flag)


SUMMARY_SQL = """
SELECT experiment, server_impl || coalesce('@' || nullif(server_build, ''), '') AS server,
       client_impl || coalesce('@' || nullif(client_build, ''), '') AS client,
       count(*) AS runs,
       round(median(coalesce(goodput_mbps, goodput_reported_mbps)), 0) AS goodput_mbps,
       round(median(server_cpu_pct), 1) AS srv_cpu_pct,
       round(median(client_cpu_pct), 1) AS cli_cpu_pct,
       round(median(server_cpu_s / nullif(data_packets, 0)) * 1e6, 2) AS srv_us_per_pkt,
       round(median(data_packets) / 1e6, 2) AS data_mpkts,
       round(median(ack_packets) / 1e3, 1) AS acks_k,
       round(median(client_udp_rcvbuf_errors) / 1e3, 1) AS rcvbuf_drops_k
FROM runs WHERE status = 'ok' AND source <> 'uclouvain'
GROUP BY ALL ORDER BY experiment, server, client
"""

#: The UCLouvain runs by the conditions they vary (their CPU is unknown: no CPU
#: figures). Bulk runs: median goodput; request and handshake runs: requests per
#: second where the run counted them, else the time of one run.
UCLOUVAIN_SUMMARY_SQL = """
SELECT experiment, server_impl || coalesce('@' || nullif(server_build, ''), '') AS server,
       client_impl || coalesce('@' || nullif(client_build, ''), '') AS client,
       coalesce(io, '?') AS io, workload, coalesce(cpu_list, 'any') AS cpus,
       coalesce(CASE WHEN connections > 1 THEN connections END, 1) AS conns,
       concat_ws('+', CASE WHEN gro = false THEN 'gro' END, CASE WHEN lro = false THEN 'lro' END,
                 CASE WHEN tso = false THEN 'tso' END, CASE WHEN gso = false THEN 'gso' END,
                 CASE WHEN sg = false THEN 'sg' END) AS offloads_off,
       count(*) AS runs,
       round(median(goodput_mbps) FILTER (WHERE workload = 'bulk'), 0) AS goodput_mbps,
       round(median(requests_per_s), 1) AS requests_per_s,
       round(median(runtime_s * 1e3) FILTER (WHERE workload <> 'bulk'), 2) AS runtime_ms
FROM runs WHERE status = 'ok' AND source = 'uclouvain'
GROUP BY ALL ORDER BY experiment, server, client, io, workload, cpus, conns, offloads_off
"""


def run_summary(args: argparse.Namespace) -> int:
    from quiclab.datasets.catalog import Catalog

    with Catalog(args.catalog, read_only=True) as catalog:
        df = catalog.df(SUMMARY_SQL)
        tables = set(catalog.tables())
        ucl = catalog.df(UCLOUVAIN_SUMMARY_SQL) if "testbeds" in tables else None
        counts = {t: catalog.count(t) for t in ("runs", "cpu_samples", "perf_stacks",
                                                 "published_points", "ingest_issues",
                                                 "testbeds") if t in tables}
    print(format_table(df))
    if ucl is not None and not ucl.empty:
        print("\nUCLouvain picoquic-DPDK experiments (testbed uclouvain, CPU unknown):")
        print(format_table(ucl, max_rows=400))
    print("  ".join(f"{k}: {v:,d}" for k, v in counts.items()))
    print(f"catalog: {args.catalog}")
    return 0
