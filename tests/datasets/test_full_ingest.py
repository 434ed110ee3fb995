"""The full ingest of the shared data (../shared), done once per session.

Skipped, with one message, when the shared QIR-10G tarball is absent. The
numbers pinned here are the dataset's (tumi8/quic-10g-paper, commit 93648444)
and the issue's example queries; see docs/explanation/catalog.md for the reasons
behind every raw-vs-processed difference.
"""

from __future__ import annotations

import contextlib
import io
import json

import duckdb
import pytest

from quiclab.cli import main
from quiclab.paths import Paths

from .fixtures import FullIngest

_DATASET = Paths.resolve().qir_dataset
if not _DATASET.is_file():
    pytest.skip(f"shared QIR-10G data absent ({_DATASET}); the full-ingest tests need "
                "../shared", allow_module_level=True)


@pytest.fixture(scope="module")
def con(full_ingest: FullIngest):
    connection = duckdb.connect(str(full_ingest.catalog), read_only=True)
    yield connection
    connection.close()


def _sql(full_ingest: FullIngest, query: str) -> list[dict]:
    """Run a query through `quiclab data sql --format json`, as a user would."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--catalog", str(full_ingest.catalog), "data", "sql", query,
                     "--format", "json"])
    assert code == 0
    return json.loads(out.getvalue())


def test_all_runs_of_the_calibration_subset(con):
    assert con.execute("SELECT count(*) FROM runs WHERE source = 'qir10g'").fetchone() == (3680,)
    by_experiment = dict(con.execute(
        "SELECT experiment, count(*) FROM runs WHERE source = 'qir10g' GROUP BY 1").fetchall())
    assert by_experiment == {"baseline": 1740, "baseline-optimized": 720, "buffer": 700,
                             "crypto": 480, "perf": 40}
    assert con.execute("SELECT count(*) FROM runs WHERE source = 'qir10g' AND status = 'ok'"
                       ).fetchone() == (3639,)
    # Every QIR-10G run is on its testbed, over kernel sockets.
    assert con.execute("SELECT DISTINCT testbed, io FROM runs WHERE source = 'qir10g'"
                       ).fetchall() == [("qir10g", "kernel")]


def test_unreadable_files_are_named(full_ingest: FullIngest, con):
    issues = con.execute("SELECT path, reason FROM ingest_issues WHERE source = 'qir10g' "
                         "ORDER BY path").fetchall()
    missing_time = [p for p, r in issues if p.endswith("client/time.json")]
    assert len(missing_time) == 16
    assert all("/goracle/picoquic1/picoquic_mvfst/" in p or
               "/goracle/picoquic1/picoquic_quiche/" in p for p in missing_time)
    empty = [p for p, r in issues if p.endswith("processed.csv")]
    assert empty == ["results/perf/goracle/optimized/lsquic-quiche-with-pidstat/processed.csv"]
    assert len(issues) == 17
    assert "skipped 17 file(s)" in full_ingest.output


def test_cpu_samples_per_second(con):
    # buffer, crypto and perf collected pidstat on both sides: 2440 files.
    # 1220 runs have pidstat files; in 1 of them neither process appears (a failed
    # buffer run), so 1219 runs have samples.
    n, runs = con.execute("SELECT count(*), count(DISTINCT run_id) FROM cpu_samples").fetchone()
    assert n > 60_000 and runs == 1219
    assert con.execute("SELECT count(*) FROM cpu_samples WHERE total_pct > 110 AND run_id IN "
                       "(SELECT run_id FROM runs WHERE server_impl <> 'tcp+tls')"
                       ).fetchone() == (0,)  # one single-threaded process: never two cores


def test_perf_categories_of_the_six_traces(con):
    traces = con.execute("SELECT DISTINCT run_id, side FROM perf_categories").fetchall()
    assert len(traces) == 6
    lsquic_server = dict(con.execute("""
        SELECT category, share FROM perf_categories JOIN runs USING (run_id)
        WHERE setting = 'goracle/optimized/run1' AND server_impl = 'lsquic'
          AND client_impl = 'lsquic' AND side = 'server'""").fetchall())
    assert max(lsquic_server, key=lsquic_server.get) == "PACKET_IO"
    assert sum(lsquic_server.values()) == pytest.approx(1.0)


def test_published_points(con):
    assert con.execute("SELECT count(*) FROM published_points").fetchone()[0] > 100


def test_raw_agrees_with_processed_where_the_authors_rules_allow(con):
    rows = {r[0]: r[1:] for r in con.execute("""
        SELECT column_name, count(*), count(*) FILTER (WHERE rel_diff > 1e-5), max(rel_diff)
        FROM processed_check GROUP BY 1""").fetchall()}
    exact = [c for c in rows if c.startswith(("server_netstat", "client_netstat",
                                              "server_ethtool", "client_ethtool"))]
    assert len(exact) == 9
    for column in [*exact, "client_runtime"]:
        assert rows[column][1:] == (0, 0.0), column
    # goodput: only the rows the authors shifted after a failed repetition.
    assert rows["goodput"][1] == 108
    # CPU means: the authors' code drops one more trailing client sample, and one
    # fewer for NGINX (docs/explanation/catalog.md, "Raw vs processed"); the differences
    # stay below 2 %.
    assert rows["client_cpu_avg"][2] < 0.02 and rows["server_cpu_avg"][2] < 0.01


def test_authors_cpu_rule_explains_every_processed_cpu_mean(con):
    """mean(samples[2:-3]) for clients and NGINX-less servers' samples[2:-2]: exact."""
    def agreeing(side: str, lo: int, hi: int, where: str) -> tuple[int, int]:
        return con.execute(f"""
            WITH s AS (SELECT run_id, list(total_pct ORDER BY t_s) AS xs FROM cpu_samples
                       WHERE side = '{side}' GROUP BY run_id)
            SELECT count(*), count(*) FILTER (WHERE abs(list_avg(xs[{lo}:-{hi}]) - c.processed)
                                              <= 1e-9 * c.processed)
            FROM processed_check c JOIN s USING (run_id) JOIN runs r USING (run_id)
            WHERE c.column_name = '{side}_cpu_avg' AND {where}""").fetchone()
    # DuckDB list slices are 1-based and inclusive: xs[3:-4] is Python's xs[2:-3].
    assert agreeing("client", 3, 4, "true") == (1209, 1209)
    assert agreeing("server", 3, 3, "r.server_impl <> 'tcp+tls'") == (1099, 1099)
    assert agreeing("server", 3, 2, "r.server_impl = 'tcp+tls'") == (120, 120)


def test_example_query_median_goodput_per_pair_of_the_baseline(full_ingest: FullIngest):
    rows = _sql(full_ingest, """
        SELECT server_impl, client_impl, count(*) AS runs, median(goodput_mbps) AS goodput
        FROM runs WHERE experiment = 'baseline' AND status = 'ok'
        GROUP BY ALL ORDER BY goodput DESC""")
    assert len(rows) == 36  # 6 × 6 implementations
    pairs = {(r["server_impl"], r["client_impl"]): r["goodput"] for r in rows}
    # Kempf et al. 2024, abstract: "from around 50 Mbit/s" (the default-buffer matrix
    # stays below the >6000 Mbit/s of MsQuic, which is not in this subset).
    assert 40 < min(pairs.values()) < 70 and max(pairs.values()) < 4000
    # §4.3 (kempf24-035): quiche server + lsquic client more than 1.5 × the reverse.
    assert pairs[("quiche", "lsquic")] > 1.5 * pairs[("lsquic", "quiche")]


def test_example_query_per_packet_server_cpu_time(full_ingest: FullIngest):
    rows = _sql(full_ingest, """
        SELECT server_impl, median(server_cpu_s / data_packets) * 1e6 AS us_per_packet
        FROM runs WHERE experiment IN ('buffer', 'crypto') AND status = 'ok'
          AND server_impl IN ('lsquic', 'quiche')
        GROUP BY 1 ORDER BY 1""")
    per_packet = {r["server_impl"]: r["us_per_packet"] for r in rows}
    assert per_packet["lsquic"] == pytest.approx(3.5, abs=0.2)
    assert per_packet["quiche"] == pytest.approx(4.1, abs=0.2)


def test_example_query_packet_io_share_of_the_lsquic_server(full_ingest: FullIngest):
    rows = _sql(full_ingest, """
        SELECT r.setting, p.share FROM perf_categories p JOIN runs r USING (run_id)
        WHERE r.server_impl = 'lsquic' AND p.side = 'server' AND p.category = 'PACKET_IO'
        ORDER BY 1""")
    assert len(rows) == 2  # lsquic_lsquic and lsquic_quiche
    assert all(0.5 < r["share"] < 0.8 for r in rows)
