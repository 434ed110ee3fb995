"""One short real transfer with quic-go, its collectors, and catalog ingestion."""

from __future__ import annotations

import json

import pytest

from quiclab.datasets.catalog import RUN_COLUMNS, Catalog
from quiclab.testbed import collect
from quiclab.testbed.config import RunConfig
from quiclab.testbed.runner import RunResult
from quiclab.testbed.session import Session

from .conftest import quiclab_namespaces

pytestmark = pytest.mark.testbed

NBYTES = 30_000_000


@pytest.fixture(scope="module")
def transfer(root, quic_go, paths, builder, tmp_path_factory) -> tuple[RunResult, object]:
    from quiclab.testbed.runner import Testbed

    catalog = tmp_path_factory.mktemp("cat") / "fresh.duckdb"
    session = Session(Testbed(paths, builder=builder, startup_s=5.0), catalog,
                      log=lambda line: None)
    config = RunConfig.build("quic-go", "quic-go", {"pin": True}, transfer_bytes=NBYTES,
                             experiment="test-transfer")
    [result] = session.run(config, 1)
    return result, catalog


def test_quic_go_moves_the_bytes(transfer):
    result, _ = transfer
    assert result.status == "ok", result.failure_reason
    assert result.client.report["bytes"] == NBYTES
    assert result.goodput_mbps and result.goodput_mbps > 10
    assert not set(result.topology["namespaces"]) & set(quiclab_namespaces())


def test_collectors_see_the_run(transfer):
    result, _ = transfer
    srv, cli = result.server, result.client
    assert srv.exit and cli.exit and srv.exit.cpu_s > 0 and cli.exit.cpu_s > 0
    # UDP counters of each namespace: GSO makes the server's send calls fewer than packets.
    assert srv.snmp["Udp"]["OutDatagrams"] > 0 and cli.snmp["Udp"]["InDatagrams"] > 0
    assert srv.snmp["Udp"]["OutDatagrams"] <= srv.report["packets_sent"]
    # veth counters carry at least the payload.
    assert srv.link["tx_bytes"] >= NBYTES and cli.link["rx_bytes"] >= NBYTES
    # System calls: every run records them (README), with perf stat and the
    # raw_syscalls tracepoint; a host where perf cannot count them fails here.
    assert collect.perf_available(), "perf stat cannot count raw_syscalls:sys_enter here"
    assert srv.syscalls is not None and srv.syscalls > 0
    assert cli.syscalls is not None and cli.syscalls > 0
    assert srv.core == 0 and cli.core == 1  # pin=true
    # The host's load: before the transfer (other work), and during it (the peers at
    # least: a CPU-bound transfer keeps about a core busy).
    host = result.host
    assert host["cores"] >= 1 and 0 <= host["background_cores"] <= host["cores"]
    assert host["busy_cores"] > 0.3


def test_the_run_lands_in_the_catalog(transfer):
    result, catalog = transfer
    with Catalog(catalog, read_only=True) as cat:
        rows = cat.df("SELECT * FROM runs").to_dict("records")
        samples = cat.df("SELECT * FROM cpu_samples")
    assert len(rows) == 1
    row = rows[0]
    assert set(row) == {name for name, _ in RUN_COLUMNS}
    assert row["run_id"] == result.run_id and row["source"] == "fresh"
    assert row["experiment"] == "test-transfer" and row["status"] == "ok"
    assert row["cpu"].startswith("host: ") and row["server_impl"] == "quic-go"
    assert row["mtu_bytes"] == 1500 and row["gso"] is True and row["udp_payload_bytes"] == 1452
    assert row["server_cpu_s"] > 0 and row["client_cpu_s"] > 0
    assert row["server_udp_sent"] > 0 and row["client_nic_rx_bytes"] >= NBYTES
    assert row["data_packets"] >= NBYTES // 1452
    assert row["server_version"] == "quic-go v0.65.0"
    extra = json.loads(row["extra"])
    assert extra["effective"]["veth_segmentation"] is True
    assert extra["host"] == result.host
    # A sub-second transfer still has a (partial) CPU sample per side, and each side has
    # one in the transfer window (the server's are cut at its edges).
    assert set(samples["side"]) == {"server", "client"}
    assert set(samples[samples["in_window"]]["side"]) == {"server", "client"}
    assert (samples["run_id"] == result.run_id).all()
    # CPU % over the transfer window, on both sides.
    window_s = (result.end_ns - result.start_ns) / 1e9
    for side in ("server", "client"):
        used = sum(extra["window_cpu_s"][side].values())
        assert row[f"{side}_cpu_pct"] == pytest.approx(100 * used / window_s)


def test_ingestion_is_idempotent(transfer, tmp_path):
    result, _ = transfer
    from quiclab.testbed import record

    catalog = tmp_path / "again.duckdb"
    with Catalog(catalog) as cat:
        for _ in range(2):
            cat.upsert("runs", [record.run_row(result, "host: test", True)])
            cat.upsert("cpu_samples", record.sample_rows(result))
        assert cat.count("runs") == 1
