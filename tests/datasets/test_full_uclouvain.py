"""The shared UCLouvain tarball, ingested once with the rest of ../shared.

Skipped, with one message, when the tarball is absent. The numbers pinned
here are the dataset's (UCLouvain-ENSG/picoquic-dpdk-experiments, commit
1eb84025) as ``uclouvain-parser-1`` reads them; docs/explanation/catalog.md lists them.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest

from quiclab.calibration.evidence import uclouvain_cells
from quiclab.paths import Paths

from .fixtures import FullIngest

_DATASET = Paths.resolve().uclouvain_dataset
if not _DATASET.is_file():
    pytest.skip(f"shared UCLouvain data absent ({_DATASET}); these tests need ../shared",
                allow_module_level=True)


@pytest.fixture(scope="module")
def con(full_ingest: FullIngest):
    connection = duckdb.connect(str(full_ingest.catalog), read_only=True)
    yield connection
    connection.close()


def test_runs_per_experiment(con):
    by_experiment = dict(con.execute(
        "SELECT experiment, count(*) FROM runs WHERE source = 'uclouvain' GROUP BY 1"
    ).fetchall())
    assert by_experiment == {"batching": 856, "cc": 40, "cmp": 490, "cmp-handshakes": 80,
                             "copy": 60, "handshake": 380, "interop": 20, "old": 185,
                             "proxy": 1545, "request": 30, "rss": 2824,
                             "server-scaling": 225, "throughput": 250}
    assert con.execute("SELECT count(*) FILTER (WHERE status = 'failed'), count(DISTINCT "
                       "testbed), any_value(testbed), count(cpu) FROM runs WHERE source = "
                       "'uclouvain'").fetchone() == (3, 1, "uclouvain", 0)
    by_stack = dict(con.execute(
        "SELECT server_impl || coalesce('@' || nullif(server_build, ''), ''), count(*) FROM "
        "runs WHERE source = 'uclouvain' GROUP BY 1").fetchall())
    assert by_stack == {"picoquic": 525, "picoquic@dpdk": 4405, "msquic": 88, "quiche": 49,
                        "quicly": 45, "tcp+tls": 328, "iperf3": 1187, "udpsender": 358}


def test_the_issues(con, full_ingest: FullIngest):
    issues = dict(con.execute("SELECT path, severity FROM ingest_issues WHERE source = "
                              "'uclouvain'").fetchall())
    d = "EverythingTesting/data/"
    assert {p for p, s in issues.items() if s == "damaged"} == {
        d + "cmp/msquic_ctesting-c-4,6.txt", d + "cmp/picotls_ctesting_no_LRO.txt"}
    assert {p for p, s in issues.items() if s == "skipped"} == {
        d + "proxy/old/noproxyTCP1100.txt", d + "test.txt"}  # both empty
    assert sum(1 for s in issues.values() if s == "not-measured") == 6  # RSS/balance_*
    assert con.execute("SELECT count(*) FROM files WHERE source = 'uclouvain'"
                       ).fetchone() == (497,)
    assert "UCLouvain raw data: 6985 runs" in full_ingest.output


@pytest.mark.parametrize(("server", "cpu_list", "median_mbps", "n"), [
    # The issue's figures: picoquic 4.9 and MsQuic 10.8 Gbit/s without core restriction.
    ("picoquic", None, 4918.3, 30),
    ("msquic", None, 10794.7, 15),
    ("picoquic", "2", 4857.5, 10),
    ("quicly", "4", 9279.5, 15),
    ("tcp+tls", "4", 20243.4, 24),
])
def test_known_kernel_medians(con, server: str, cpu_list: str | None, median_mbps: float,
                              n: int):
    got = con.execute(
        "SELECT median(goodput_mbps), count(*) FROM runs WHERE source = 'uclouvain' AND "
        "experiment = 'cmp' AND io = 'kernel' AND status = 'ok' AND server_impl = ? AND "
        "cpu_list IS NOT DISTINCT FROM ? AND gro AND lro AND tso AND gso AND sg",
        [server, cpu_list]).fetchone()
    assert got[0] == pytest.approx(median_mbps, abs=0.1) and got[1] == n


def test_cells_for_the_calibration(full_ingest: FullIngest):
    with duckdb.connect(str(full_ingest.catalog), read_only=True) as connection:
        runs: pd.DataFrame = connection.execute("SELECT * FROM runs").df()
    cells = uclouvain_cells(runs)
    # The measured cells less the stack variants (Patched/Fair/vanilla/clean) and
    # the "old" experiment, whose builds differ from the stacks the models describe.
    assert len(cells) == 46
    assert {e.testbed for e in cells} == {"uclouvain"} and not any(e.cpu_known for e in cells)
    groups = {e.group for e in cells}
    assert groups == {"uclouvain-cmp", "uclouvain-throughput", "uclouvain-tcp"}
    msquic = [e for e in cells if e.scenario.server == "msquic"
              and dict(e.conditions).get("cpu_list") is None and e.scenario.gro]
    assert len(msquic) == 1 and msquic[0].goodput_mbps == pytest.approx(10794.7, abs=0.1)


def test_testbeds_table(con):
    ids = {r[0] for r in con.execute("SELECT testbed FROM testbeds").fetchall()}
    assert {"qir10g", "koenig25", "mukherjee25", "tquic", "litespeed", "uclouvain"} <= ids
    assert any(i.startswith("fresh-") for i in ids)
    assert con.execute("SELECT cpu, link_gbps FROM testbeds WHERE testbed = 'uclouvain'"
                       ).fetchone() == ("unknown", None)
