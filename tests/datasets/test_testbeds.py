"""Testbeds as first-class records: the stated facts and their sources, the catalog's
``testbeds`` table, the testbed of every run and published point, and the migration
of a version-2 catalog."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import duckdb
import pytest

from quiclab.datasets import testbeds
from quiclab.datasets.catalog import SCHEMA_VERSION, Catalog
from quiclab.datasets.sources import published, qir10g, uclouvain
from quiclab.testbed import record
from quiclab.testbed.config import RunConfig, parse_set, resolve
from quiclab.testbed.runner import RunResult, Side
from quiclab.testbed.stacks import STACKS

from . import fixtures as fx
from . import ucl_fixtures as ucl_fx

STATED_IDS = {"qir10g", "koenig25", "mukherjee25", "tquic", "litespeed", "uclouvain"}


def test_the_stated_testbeds_and_the_source_of_each_fact():
    beds = testbeds.by_id()
    assert set(beds) == STATED_IDS
    for tb in beds.values():
        stated = {name for name in ("cpu", "cpu_ghz", "cores", "threads", "nic", "offloads",
                                    "kernel", "os", "link_gbps", "link_note", "path",
                                    "mtu_bytes")
                  if getattr(tb, name) not in (None, testbeds.UNKNOWN_CPU)}
        missing = stated - set(tb.sources)
        assert not missing, f"{tb.testbed}: facts without a source: {missing}"
    # Documents say their CPU; the UCLouvain and LiteSpeed testbeds do not.
    assert beds["qir10g"].cpu == "AMD EPYC 7543" and beds["qir10g"].kernel == "5.10.0-8-amd64"
    assert beds["koenig25"].nic == "Intel X550-T2"
    assert not beds["uclouvain"].cpu_known and beds["uclouvain"].link_gbps is None
    assert "ConnectX-5" in (beds["uclouvain"].nic or "")
    assert not beds["litespeed"].cpu_known and beds["litespeed"].link_gbps == 10.0
    # Seed 002's other CPUs are hosts of the same testbed.
    cpus = {h.cpu for h in beds["qir10g"].hosts}
    assert {"AMD EPYC 7551P", "Intel Xeon Gold 6312U"} <= cpus
    assert set(testbeds.DOCUMENT_TESTBEDS.values()) <= set(beds)


def test_catalog_cpus_join(catalog: Catalog):
    """A known testbed CPU is a catalog name (joins ``cpus``), never a guess."""
    from quiclab.models.cpus import CpuCatalog

    names = {c.name for c in CpuCatalog.packaged().cpus}
    for tb in testbeds.records():
        for cpu in {tb.cpu, *(h.cpu for h in tb.hosts)} - {testbeds.UNKNOWN_CPU}:
            assert cpu in names, (tb.testbed, cpu)


def test_the_table_holds_every_testbed_and_round_trips(catalog: Catalog):
    catalog.con.execute("INSERT INTO runs (run_id, source, experiment, server_impl, "
                        "client_impl, status, testbed, cpu) VALUES ('f1', 'fresh', 'x', "
                        "'quic-go', 'quic-go', 'ok', 'fresh-otherhost', 'Intel Xeon W-2145')")
    host = testbeds.HostFacts("thishost", "AMD EPYC 7543", 3.7, 8, "6.1.0")
    assert testbeds.load(catalog, host) == 8
    beds = testbeds.by_id(catalog)
    assert set(beds) == STATED_IDS | {"fresh-thishost", "fresh-otherhost"}
    assert beds["fresh-thishost"].kernel == "6.1.0" and beds["fresh-thishost"].threads == 8
    assert beds["fresh-otherhost"].cpu == "Intel Xeon W-2145"
    assert beds["qir10g"] == testbeds.by_id()["qir10g"]  # facts, hosts and sources survive
    testbeds.load(catalog, host)  # replaces, does not add
    assert catalog.count("testbeds") == 8


def _fresh_row() -> dict:
    changes, knobs = parse_set([])
    c = RunConfig.build("quic-go", "quic-go", changes, knobs, transfer_bytes=1000,
                        experiment="t")
    r = resolve(c, STACKS["quic-go"], STACKS["quic-go"])
    report = {"role": "client", "bytes": 1000, "transfer_s": 0.01, "goodput_mbps": 0.8}
    result = RunResult("fresh-t-r0", c, 0, "ok", None, Side("quic-go", report={}),
                       Side("quic-go", report=report), effective=r.effective)
    return record.run_row(result, "host: test", True)


def test_every_source_names_its_testbed(qir_tree: fx.QirTree, catalog: Catalog,
                                        tmp_path: Path):
    qir10g.load(catalog, qir_tree.root)
    published.load(catalog, published.packaged_dir())
    uclouvain.load(catalog, ucl_fx.build_ucl_tree(tmp_path / "ucl"))
    catalog.upsert("runs", [_fresh_row()])
    by_source = dict(catalog.con.execute(
        "SELECT source, list(DISTINCT testbed) FROM runs GROUP BY 1").fetchall())
    assert by_source == {"qir10g": ["qir10g"], "uclouvain": ["uclouvain"],
                         "fresh": [f"fresh-{socket.gethostname()}"]}
    by_document = dict(catalog.con.execute(
        "SELECT document, list(DISTINCT testbed) FROM published_points GROUP BY 1").fetchall())
    assert by_document == {"000": ["koenig25"], "001": ["mukherjee25"], "002": ["qir10g"],
                           "003": ["tquic"], "004": ["litespeed"]}


def test_a_published_point_of_an_unknown_document_is_refused(tmp_path: Path, catalog: Catalog):
    fx.write_published(tmp_path / "pub", [
        "t-001,002,4.6,Fig. 6,goodput,3250,Mbit/s,lsquic,lsquic,h3,text,",
        "t-002,007,1,text,goodput,100,Mbit/s,lsquic,lsquic,h3,text,"])
    assert published.load(catalog, tmp_path / "pub", strict=False) == 1
    ((path, field, reason),) = catalog.con.execute(
        "SELECT path, field, reason FROM ingest_issues").fetchall()
    assert path.endswith("tiny.csv:3") and field == "document"
    assert "document '007' has no testbed" in reason


def _version_2_file(path: Path) -> None:
    """A catalog as schema version 2 left it: no testbed columns, no testbeds table."""
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    con.execute("CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, "
                "experiment VARCHAR NOT NULL, server_impl VARCHAR NOT NULL, client_impl "
                "VARCHAR NOT NULL, status VARCHAR NOT NULL, goodput_mbps DOUBLE, "
                "workload VARCHAR, extra JSON)")
    con.execute("INSERT INTO runs VALUES ('q1', 'qir10g', 'baseline', 'lsquic', 'lsquic', "
                "'ok', 3000, NULL, NULL), ('f1', 'fresh', 'x', 'quic-go', 'quic-go', 'ok', "
                "900, 'bulk', '{}')")
    con.execute("CREATE TABLE published_points (point_id VARCHAR PRIMARY KEY, document "
                "VARCHAR NOT NULL, quantity VARCHAR NOT NULL, value DOUBLE NOT NULL, unit "
                "VARCHAR NOT NULL)")
    con.execute("INSERT INTO published_points VALUES ('k-1', '000', 'goodput', 3.9, "
                "'Gbit/s'), ('m-1', '1', 'goodput', 7.2, 'Gbit/s')")
    con.close()


def test_a_version_2_catalog_is_migrated_when_opened_for_writing(tmp_path: Path):
    path = tmp_path / "v2.duckdb"
    _version_2_file(path)
    with pytest.raises(duckdb.Error), Catalog(path, read_only=True) as cat:
        cat.con.execute("SELECT testbed FROM runs").fetchall()  # read-only: nothing changes
    with Catalog(path) as cat:
        assert {"testbed", "io", "cores", "cpu_list", "batch_tx", "lro"} <= set(
            cat.columns("runs"))
        rows = dict(cat.con.execute("SELECT run_id, testbed FROM runs").fetchall())
        assert rows == {"q1": "qir10g", "f1": None}  # a fresh row cannot say its host
        assert cat.con.execute("SELECT io FROM runs WHERE run_id = 'q1'").fetchone() == (
            "kernel",)
        points = dict(cat.con.execute(
            "SELECT point_id, testbed FROM published_points").fetchall())
        assert points == {"k-1": "koenig25", "m-1": "mukherjee25"}
        assert cat.con.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                               ).fetchone() == (str(SCHEMA_VERSION),)
        assert "testbeds" in cat.tables()
        # The values it had are kept.
        assert cat.con.execute("SELECT goodput_mbps FROM runs WHERE run_id = 'q1'"
                               ).fetchone() == (3000.0,)
    with Catalog(path) as cat:  # opening again changes nothing
        assert cat.con.execute("SELECT count(*) FROM runs WHERE testbed IS NOT NULL"
                               ).fetchone() == (1,)


def test_testbed_hosts_are_json(catalog: Catalog):
    testbeds.load(catalog)
    hosts = json.loads(catalog.con.execute(
        "SELECT hosts FROM testbeds WHERE testbed = 'uclouvain'").fetchone()[0])
    assert {h["name"] for h in hosts} == {"dormeur", "grincheux"}
    assert all(h["cpu"] == "unknown" for h in hosts)
