"""Evidence from the UCLouvain dataset (kernel-I/O bulk cells, testbed ``uclouvain``,
CPU unknown) and the testbed every Evidence item names, on synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from quiclab.calibration.evidence import dataset_cells, published_points, uclouvain_cells
from quiclab.calibration.uclouvain import LINK_GBPS
from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import published, uclouvain

from ..datasets import fixtures as qir_fx
from ..datasets import ucl_fixtures as fx


@pytest.fixture
def runs(tmp_path: Path) -> pd.DataFrame:
    with Catalog(tmp_path / "c.duckdb") as catalog:
        uclouvain.load(catalog, fx.build_ucl_tree(tmp_path / "ucl"))
        return catalog.df("SELECT * FROM runs")


def test_one_cell_per_kernel_bulk_condition(runs: pd.DataFrame):
    cells = {(e.scenario.server, dict(e.conditions).get("cpu_list")): e
             for e in uclouvain_cells(runs)}
    # DPDK, handshake and proxy runs stay out; failed runs do not count.
    assert set(cells) == {("picoquic", "2"), ("msquic", None), ("quicly", "4"),
                          ("quiche", "4,6"), ("tcp+tls", None)}
    pico = cells[("picoquic", "2")]
    assert pico.n == 2 and pico.goodput_mbps == pytest.approx((4000.0001 + 3200.0001) / 2)
    assert pico.variation == pytest.approx(pd.Series([4000.0001, 3200.0001]).std() / 3600.0001)
    assert pico.scenario.app == "h3" and pico.scenario.udp_payload_bytes == 1440
    assert dict(pico.conditions)["cc"] == "bbr" and dict(pico.conditions)["irq_cpu_list"] == "2"
    msquic = cells[("msquic", None)]
    assert (msquic.goodput_mbps, msquic.n) == (4500.0, 2)
    assert msquic.scenario.gro is False and msquic.scenario.gso is True
    assert msquic.scenario.app == "perf" and msquic.scenario.transfer_bytes == 1_000_000_000
    assert cells[("quicly", "4")].scenario.app == "perf"
    tls = cells[("tcp+tls", None)]
    assert tls.goodput_mbps == 18000.0 and tls.n == 2
    assert dict(tls.conditions)["tso"] is False and dict(tls.conditions)["lro"] is False
    # Kernel TCP's offloads are Scenario fields: TSO and LRO off as the run had them.
    assert (tls.scenario.tso, tls.scenario.lro) == (False, False)
    assert tls.scenario.gro and tls.scenario.gso
    for e in cells.values():
        # TCP+TLS cells check kernel TCP's host-measured model: a group never fitted.
        group = "uclouvain-tcp" if e.scenario.server == "tcp+tls" else "uclouvain-cmp"
        assert (e.testbed, e.cpu_known, e.source, e.group) == (
            "uclouvain", False, "dataset", group)
        assert e.scenario.link_gbps == LINK_GBPS and e.scenario.client == e.scenario.server
    assert len({e.ident for e in cells.values()}) == len(cells)


def test_cells_of_the_same_conditions_from_two_files_merge(tmp_path: Path):
    tree = fx.build_ucl_tree(tmp_path / "ucl", extra={
        "EverythingTesting/data/cmp/picotls/picotls_ctesting_nolro_notso.txt":
            "server started on port 8443\nwaiting for connections\n"
            "received 45000000000 bytes in 30.000 seconds (12000.000000.3Mbps); AES128-GCM\n"
            "waiting for connections\n"})
    with Catalog(tmp_path / "c.duckdb") as catalog:
        uclouvain.load(catalog, tree)
        runs = catalog.df("SELECT * FROM runs")
    (tls,) = [e for e in uclouvain_cells(runs) if e.scenario.server == "tcp+tls"]
    assert tls.n == 3 and tls.goodput_mbps == 16000.0
    assert len(dict(tls.conditions)["settings"]) == 2


def test_no_uclouvain_runs_no_cells(runs: pd.DataFrame):
    assert uclouvain_cells(runs[runs["source"] != "uclouvain"]) == []
    unencrypted = runs.copy()
    unencrypted["extra"] = [json.dumps({**json.loads(t), "encryption": False})
                            for t in unencrypted["extra"]]
    assert uclouvain_cells(unencrypted) == []


def test_every_evidence_item_names_its_testbed(tmp_path: Path):
    from quiclab.datasets.sources import qir10g

    with Catalog(tmp_path / "q.duckdb") as catalog:
        qir10g.load(catalog, qir_fx.build_qir_tree(tmp_path / "qir").root)
        published.load(catalog, published.packaged_dir())
        runs = catalog.df("SELECT * FROM runs")
        points = catalog.df("SELECT * FROM published_points")
    assert {e.testbed for e in dataset_cells(runs)} == {"qir10g"}
    evidence, _ = published_points(points)
    by_group = {(e.group, e.testbed) for e in evidence}
    assert by_group <= {("seed000", "koenig25"), ("seed001", "mukherjee25"),
                        ("seed002", "qir10g"), ("seed003", "tquic"), ("seed004", "litespeed")}
    assert {g for g, _ in by_group} >= {"seed000", "seed001", "seed002"}
    fresh = runs.assign(source="fresh", testbed="fresh-somehost")
    assert {e.testbed for e in dataset_cells(fresh, source="fresh")} == {"fresh-somehost"}
    old = runs.assign(source="fresh", testbed=None)
    assert {e.testbed for e in dataset_cells(old, source="fresh")} == {"fresh-unknown"}
