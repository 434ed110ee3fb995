"""The UCLouvain source on a synthetic tree: what each file name implies, every run a
row of testbed ``uclouvain``, bad and cut files one issue each, stable run ids,
and ``quiclab data ingest`` with and without the tarball."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from quiclab.cli import main
from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import ucl_files, uclouvain
from quiclab.datasets.sources.npf import parse_npf
from quiclab.errors import DataError

from . import fixtures as qir_fx
from . import ucl_fixtures as fx

D = "EverythingTesting/data/"
NPF = {"quic_tester_compare.npf": parse_npf(fx.NPF)}


@pytest.mark.parametrize(("path", "expected"), [
    ("cmp/picoquic_ctesting-c-2.txt",
     {"experiment": "cmp", "io": "kernel", "cpu_list": "2", "cores": 1, "server_core": 2,
      "irq_cpu_list": "2", "cc": "bbr", "gro": True, "tso": True, "app": "h3"}),
    ("cmp/msquic_ctesting-c-4,6.txt",
     {"cpu_list": "4,6", "cores": 2, "cipher": "aes-ni", "app": "perf"}),
    ("cmp/msquic_ctesting_no_GRO.txt", {"cpu_list": None, "gro": False, "gso": True}),
    ("cmp/picotls_no_gro_no_lro_no_tso_no_gso_no_sg_ctesting-c-4.txt",
     {"server_impl": "tcp+tls", "cpu_list": "4", "gro": False, "lro": False, "tso": False,
      "gso": False, "sg": False, "app": "tcp"}),
    ("cmp/picotls/picotls_ctesting_nogro_nolro.txt",
     {"gro": False, "lro": False, "tso": True, "gso": True}),
    ("cmp/handshakes/picotls_64_clients_with_irqbalance_no_core_restriction.txt",
     {"experiment": "cmp-handshakes", "workload": "handshakes", "connections": 64,
      "cpu_list": None}),
    ("cmp/clientDPDKInteropNoPatch.txt",
     {"experiment": "interop", "io": "mixed", "server_build": "", "client_build": "dpdk"}),
    ("TP_12core_dpdk.txt",
     {"experiment": "rss", "io": "dpdk", "server_build": "dpdk", "cores": 12,
      "connections": 15, "clients": 15}),
    ("TP_3core_dpdk_8_client_X.txt", {"connections": 8, "clients": 8}),
    ("batching/throughput_8_fixed_20GB_TX64_dpdk.txt", {"batch_tx": 64, "batch_rx": 8}),
    ("throughput_16_fixed_10GB_RX128_dpdk.txt",
     {"batch_tx": 16, "batch_rx": 128, "cc": "cubic"}),
    ("throughput_noCC_noPacing_32_dpdk.txt", {"batch_tx": 32, "batch_rx": 32, "cc": "none"}),
    ("throughputRXBatching_4_dpdk.txt", {"batch_rx": 4}),
    ("CC_big_reno_dpdk.txt", {"experiment": "cc", "cc": "reno", "batch_tx": 32}),
    ("throughputBBR20_nodpdk.txt",
     {"experiment": "throughput", "io": "kernel", "cipher": "chacha20", "cc": "bbr"}),
    ("handshake_nodpdk.txt", {"experiment": "handshake", "format": "served", "io": "kernel"}),
    ("request_75_dpdk.txt", {"workload": "requests", "requests": 75, "request_bytes": 30000}),
    ("proxy/wireguardTCP700.txt", {"experiment": "proxy", "format": "iperf3", "io": "kernel"}),
    ("proxy/oldtopo/proxyUDP2_300.txt", {"format": "iperf3", "udp_payload_bytes": 300}),
    ("proxy/old/proxyUDP300.txt", {"format": "udp-goodput", "server_impl": "udpsender"}),
])
def test_what_a_file_name_implies(path: str, expected: dict):
    spec = ucl_files.classify(D + path, NPF)
    assert isinstance(spec, ucl_files.FileSpec)
    got = {**spec.conditions, "experiment": spec.experiment, "io": spec.io,
           "format": spec.format, "server_impl": spec.server_impl, "clients": spec.clients,
           "server_build": spec.server_build, "client_build": spec.client_build}
    for key, value in expected.items():
        assert got.get(key) == value, key
    # Never a CPU, kernel, MTU or link rate: the files do not record them.
    assert not {"cpu", "mtu_bytes", "link_gbps"} & set(spec.conditions)


@pytest.mark.parametrize(("path", "severity"), [
    (D + "RSS/balance_7core_dpdk_8_client_X.txt", "not-measured"),
    (D + "something_else.txt", "skipped"),
    ("EverythingTesting/scripts/plot.py", "skipped"),
])
def test_files_that_hold_no_measurement(path: str, severity: str):
    result = ucl_files.classify(path, NPF)
    assert isinstance(result, ucl_files.NotMeasured) and result.severity == severity


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return fx.build_ucl_tree(tmp_path / "ucl")


def _runs(catalog: Catalog) -> list[dict]:
    return catalog.df("SELECT * FROM runs WHERE source = 'uclouvain' ORDER BY logdir, "
                      "run_id").to_dict("records")


def test_every_run_is_a_row_of_its_testbed(tree: Path, catalog: Catalog):
    summary = uclouvain.load(catalog, tree)
    rows = _runs(catalog)
    per_file: dict[str, int] = {}
    for row in rows:
        per_file[row["logdir"][len(D):]] = per_file.get(row["logdir"][len(D):], 0) + 1
    assert per_file == fx.RUNS_PER_FILE and summary.runs == len(rows) == 34
    assert {r["testbed"] for r in rows} == {"uclouvain"}
    # What the files do not record stays NULL.
    for column in ("cpu", "mtu_bytes", "link_gbps", "rtt_ms"):
        assert all(r[column] is None or r[column] != r[column] for r in rows), column


def test_values_of_each_format(tree: Path, catalog: Catalog):
    uclouvain.load(catalog, tree)
    by_file: dict[str, list[dict]] = {}
    for row in _runs(catalog):
        by_file.setdefault(row["logdir"][len(D):], []).append(row)

    def ok(name: str) -> list[dict]:
        return sorted((r for r in by_file[name] if r["status"] == "ok"),
                      key=lambda r: json.loads(r["extra"])["line"])

    pico = ok("cmp/picoquic_ctesting-c-2.txt")
    assert [round(r["goodput_mbps"], 4) for r in pico] == [4000.0001, 3200.0001]
    assert pico[0]["udp_payload_bytes"] == 1440 and pico[0]["server_core"] == 2
    failed = [r for r in by_file["cmp/picoquic_ctesting-c-2.txt"] if r["status"] == "failed"]
    assert failed[0]["failure_reason"] == "connection ended with local error 0x433"
    assert failed[0]["goodput_mbps"] is None or failed[0]["goodput_mbps"] != failed[0][
        "goodput_mbps"]
    msquic = ok("cmp/msquic_ctesting_no_GRO.txt")
    assert [r["goodput_mbps"] for r in msquic] == [4000.0, 5000.0]
    assert {r["gro"] for r in msquic} == {False}
    quicly = ok("cmp/quicly_ctesting-c-4.txt")
    assert [r["filesize_bytes"] for r in quicly] == [20_000_000_000] * 2  # the size asked for
    assert [r["goodput_mbps"] for r in quicly] == [8000.0, 10000.0]
    (quiche,) = ok("cmp/quiche_ctesting-c-4,6.txt")
    assert quiche["goodput_mbps"] == 4000.0 and quiche["cores"] == 2
    tls = ok("cmp/picotls_ctesting_no_LRO_no_TSO.txt")
    assert [r["goodput_mbps"] for r in tls] == [20000.0, 16000.0]
    assert (tls[0]["server_impl"], tls[0]["lro"], tls[0]["tso"], tls[0]["gro"]) == (
        "tcp+tls", False, False, True)
    hs = ok("cmp/handshakes/picotls_16_clients_with_irqbalance.txt")
    assert [r["requests_per_s"] for r in hs] == [1000.0, 900.0, 1100.0]
    assert {r["connections"] for r in hs} == {16}
    dpdk = ok("TP_2core_dpdk_8_client.txt")
    assert {(r["io"], r["server_build"], r["connections"], r["cores"]) for r in dpdk} == {
        ("dpdk", "dpdk", 8, 2)}
    assert sorted({r["repetition"] for r in dpdk}) == [1, 2]
    assert sorted(json.loads(r["extra"])["client"] for r in dpdk) == [
        c for c in range(1, 9) for _ in range(2)]
    (batch,) = ok("batching/throughput_4_fixed_20GB_RX64_dpdk.txt")
    assert (batch["batch_tx"], batch["batch_rx"]) == (4, 64)
    assert [r["requests_per_s"] for r in ok("handshake_dpdk.txt")] == [350.0, 360.0]
    (iperf,) = ok("proxy/proxyTCP1200.txt")
    assert iperf["server_impl"] == "iperf3" and json.loads(iperf["extra"])["tunnel"] == \
        "picoquic-dpdk"


def test_bad_and_cut_files_are_one_line_each(tree: Path, catalog: Catalog):
    (tree / D / "cmp" / "quiche_ctesting.txt").write_bytes(b"\xff\xfe binary")
    summary = uclouvain.load(catalog, tree)
    issues = dict(catalog.con.execute(
        "SELECT path, severity FROM ingest_issues WHERE source = 'uclouvain'").fetchall())
    assert issues == {
        D + "cmp/msquic_ctesting_no_GRO.txt": "damaged",  # cut: its 2 runs are kept
        D + "batching/throughput_4_fixed_20GB_RX64_dpdk.txt": "damaged",
        D + "RSS/balance_5core_dpdk_8_client.txt": "not-measured",
        D + "test.txt": "skipped",  # empty
        D + "cmp/quiche_ctesting.txt": "skipped",  # not UTF-8
    }
    reason = catalog.con.execute(
        "SELECT reason FROM ingest_issues WHERE path LIKE '%msquic%'").fetchone()[0]
    assert "cut" in reason and "the other 2 record(s) kept" in reason and "\n" not in reason
    assert len(summary.issues) == 5
    assert catalog.con.execute("SELECT skipped FROM sources WHERE source = 'uclouvain'"
                               ).fetchone() == (5,)


def test_strict_stops_at_the_first_bad_file_and_writes_nothing(tree: Path, catalog: Catalog):
    with pytest.raises(DataError) as err:
        uclouvain.load(catalog, tree, strict=True)
    assert "EverythingTesting/data/" in str(err.value.path)
    assert catalog.count("runs") == 0
    # A file that holds no measurement is no error, even strict.
    for bad in ("cmp/msquic_ctesting_no_GRO.txt", "batching/throughput_4_fixed_20GB_RX64_dpdk.txt",
                "test.txt"):
        (tree / D / bad).unlink()
    summary = uclouvain.load(catalog, tree, strict=True)
    assert summary.runs == 31 and [s for _, _, s in summary.issues] == ["not-measured"]


def test_without_the_npf_the_interrupt_core_is_unknown(tree: Path, catalog: Catalog):
    (tree / "quic_tester_compare.npf").unlink()
    uclouvain.load(catalog, tree)
    irq = catalog.con.execute("SELECT DISTINCT irq_cpu_list FROM runs WHERE experiment = "
                              "'cmp' AND server_impl = 'picoquic'").fetchall()
    assert irq == [(None,)]
    assert catalog.con.execute("SELECT count(*) FROM ingest_issues WHERE path = "
                               "'quic_tester_compare.npf'").fetchone() == (1,)


def test_run_ids_are_stable_and_reingest_replaces(tree: Path, tmp_path: Path, catalog: Catalog):
    uclouvain.load(catalog, tree)
    ids = {r["run_id"] for r in _runs(catalog)}
    tarball = fx.pack(tree, tmp_path / "ucl.tar.xz")
    uclouvain.load(catalog, tarball)  # the same files, wrapped in a download's folder
    assert {r["run_id"] for r in _runs(catalog)} == ids
    assert catalog.count("runs") == len(ids) == 34
    assert uclouvain.run_id(D + "handshake_dpdk.txt", 2) in ids


@pytest.mark.parametrize("content", ["nothing", "tarball"])
def test_not_the_dataset_is_one_line(tmp_path: Path, catalog: Catalog, content: str):
    folder = tmp_path / "other"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "x.txt").write_text("1\n")
    source = folder if content == "nothing" else fx.pack(folder, tmp_path / "x.tar.xz")
    with pytest.raises(DataError) as err:
        uclouvain.load(catalog, source)
    assert "EverythingTesting/data/ found" in err.value.reason


# -- quiclab data ingest / summary --------------------------------------------------
def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A shared folder with the synthetic QIR-10G tarball where the default expects it."""
    root = tmp_path / "shared"
    folder = root / "datasets" / "tumi8-quic-10g-paper"
    folder.mkdir(parents=True)
    qir_fx.pack_tarball(qir_fx.build_qir_tree(tmp_path / "qir"),
                        folder / "tumi8-quic-10g-calibration.tar.xz")
    return root


def test_ingest_without_the_tarball_is_one_line(shared: Path, tmp_path: Path):
    cat = tmp_path / "c.duckdb"
    code, out = _cli("--shared", str(shared), "--catalog", str(cat), "data", "ingest",
                     "--no-perf")
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("UCLouvain")]
    assert len(lines) == 1 and "not found, skipped" in lines[0]
    with Catalog(cat, read_only=True) as catalog:
        assert catalog.con.execute("SELECT DISTINCT source FROM runs").fetchall() == [
            ("qir10g",)]


def test_ingest_reads_the_tarball_by_default_and_summary_shows_it(shared: Path, tmp_path: Path):
    folder = shared / "datasets" / "picoquic-dpdk-experiments"
    folder.mkdir(parents=True)
    fx.pack(fx.build_ucl_tree(tmp_path / "ucl"), folder / "picoquic-dpdk-experiments.tar.xz")
    cat = tmp_path / "c.duckdb"
    code, out = _cli("--shared", str(shared), "--catalog", str(cat), "data", "ingest",
                     "--no-perf")
    assert code == 0 and "UCLouvain raw data: 34 runs" in out
    assert "not ingested whole (damaged 2, not-measured 1, skipped 1)" in out
    code, out = _cli("--catalog", str(cat), "data", "summary")
    assert code == 0 and "UCLouvain picoquic-DPDK experiments" in out
    assert "testbeds: 7" in out


def test_an_explicit_ucl_folder_is_recognised(tmp_path: Path):
    tree = fx.build_ucl_tree(tmp_path / "ucl")
    cat = tmp_path / "c.duckdb"
    code, out = _cli("--catalog", str(cat), "data", "ingest", "--source", str(tree))
    assert code == 0 and "UCLouvain raw data: 34 runs" in out
