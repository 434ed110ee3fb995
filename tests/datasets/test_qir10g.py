"""Ingest of the QIR-10G raw files: values, NULLs, broken input, provenance, idempotence."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import published, qir10g
from quiclab.datasets.sources import qir_parsers as qp
from quiclab.errors import DataError

from . import fixtures as fx
from .fixtures import QirTree, pack_tarball

TABLES = ("runs", "cpu_samples", "perf_stacks", "processed_check", "files", "ingest_issues",
          "sources", "published_points")


def _counts(catalog: Catalog) -> dict[str, int]:
    return {t: catalog.count(t) for t in TABLES}


def _run(catalog: Catalog, logdir: str, rep: int) -> dict:
    df = catalog.df("SELECT * FROM runs WHERE logdir = ? AND repetition = ?", [logdir, rep])
    assert len(df) == 1
    return df.iloc[0].to_dict()


def _q(catalog: Catalog, sql: str, params: list | None = None) -> list[tuple]:
    return catalog.con.execute(sql, params or []).fetchall()


def _null(value: object) -> bool:
    return value is None or value != value  # NaN from pandas


# -- naming and classification ----------------------------------------------
@pytest.mark.parametrize(("name", "expected"), [
    ("lsquic", ("lsquic", "", {})),
    ("lsquic-goracle", ("lsquic", "march", {})),
    ("quiche-goracle", ("quiche", "march", {})),
    ("lsquic-aes", ("lsquic", "", {"cipher": "aes-sw"})),
    ("quiche-aes", ("quiche", "", {"cipher": "aes-sw"})),
    ("tls1.3", ("tcp+tls", "", {})),
    ("tcp", ("tcp+tls", "", {})),
    ("picoquic", ("picoquic", "", {})),
])
def test_normalise_impl(name: str, expected: tuple):
    assert qir10g.normalise_impl(name) == expected


@pytest.mark.parametrize(("logdir", "experiment", "setting", "conditions"), [
    ("results/baseline/client-timestamps/goracle/run1", "baseline", "run1",
     {"rcvbuf_bytes": 212992, "cipher": "aes-ni"}),
    ("results/baseline/client-timestamps/goracle-optimized/picoquic2", "baseline-optimized",
     "picoquic2", {"rcvbuf_bytes": 6815744}),
    ("results/buffer/udp/run3/udp-buffer-106496", "buffer", "run3/udp-buffer-106496",
     {"rcvbuf_bytes": 106496}),
    ("results/crypto/aes-ni/run2", "crypto", "aes-ni/run2",
     {"cipher": "aes-ni", "aes_ni": True, "rcvbuf_bytes": 6815744}),
    ("results/crypto/aes-noni/tcp1", "crypto", "aes-noni/tcp1",
     {"cipher": "aes-sw", "aes_ni": False}),
    ("results/crypto/chacha20/run3", "crypto", "chacha20/run3",
     {"cipher": "chacha20", "aes_ni": False}),
    ("results/perf/goracle/optimized/run1", "perf", "goracle/optimized/run1",
     {"rcvbuf_bytes": 6815744}),
    ("results/hardware/amd-1", "other", "hardware/amd-1", {}),
])
def test_classify(logdir: str, experiment: str, setting: str, conditions: dict):
    exp = qir10g.classify(logdir)
    assert (exp.experiment, exp.setting) == (experiment, setting)
    for key, value in conditions.items():
        assert exp.conditions[key] == value
    # Conditions the experiments did not vary: the testbed's defaults.
    assert exp.conditions["link_gbps"] == 10.0 and exp.conditions["mtu_bytes"] == 1500
    assert exp.conditions["rtt_ms"] == 0.0 and exp.conditions["loss_pct"] == 0.0


@pytest.mark.parametrize(("logdir", "field"), [
    ("results/buffer/udp/run3/udp-buffer-big", "rcvbuf_bytes"),
    ("results/crypto/rot13/run1", "cipher"),
])
def test_classify_refuses_unknown_folders(logdir: str, field: str):
    with pytest.raises(DataError) as err:
        qir10g.classify(logdir)
    assert err.value.field == field and err.value.path == logdir


def test_reported_goodput_skips_failed_repetitions():
    # result.json lists only successful repetitions: rep 2 failed, so rep 3 is details[1].
    details = [1194.5788710799518, 1118.0253039426668]
    log3 = qp.RunnerLog(goodput_mbps=1118.025, succeeded=True)
    assert qir10g._reported_goodput(details, log3, 3, 3) == details[1]
    failed = qp.RunnerLog(succeeded=False)
    assert qir10g._reported_goodput(details, failed, 2, 3) is None
    # Without a log, by position only when no repetition is missing.
    assert qir10g._reported_goodput(details, None, 2, 2) == details[1]
    assert qir10g._reported_goodput(details, None, 2, 3) is None


# -- the fixture, ingested ----------------------------------------------------
def test_ingest_values(qir_tree: QirTree, catalog: Catalog):
    summary = qir10g.load(catalog, qir_tree.root)
    assert summary.runs == 4
    assert summary.runs_by_experiment == {"baseline": 1, "buffer": 2, "perf": 1}
    assert summary.skipped == []
    assert summary.files == len(qir_tree.files())

    for rep, spec in fx.BUFFER_RUNS.items():
        row = _run(catalog, fx.BUFFER_LOGDIR, rep)
        assert row["run_id"] == qir10g._run_id(fx.BUFFER_LOGDIR, "lsquic_lsquic", rep)
        assert (row["source"], row["experiment"], row["setting"]) == (
            "qir10g", "buffer", "run3/udp-buffer-212992")
        assert (row["server_impl"], row["client_impl"], row["status"]) == ("lsquic", "lsquic", "ok")
        assert (row["server_host"], row["client_host"], row["hostpair"]) == (
            "goracle", "gard", "goracle-gard")
        assert row["cpu"] == "AMD EPYC 7543"
        assert row["filesize_bytes"] == fx.FILESIZE
        assert row["runtime_s"] == pytest.approx(spec["runtime_s"], rel=1e-12)
        assert row["goodput_mbps"] == pytest.approx(fx.goodput_mbps(spec["runtime_s"]))
        assert row["goodput_reported_mbps"] == pytest.approx(row["goodput_mbps"])
        assert row["rcvbuf_bytes"] == 212992 and row["cipher"] == "aes-ni"
        assert row["server_cpu_pct"] == pytest.approx(fx.steady_mean(spec["server_cpu"]))
        assert row["client_cpu_pct"] == pytest.approx(fx.steady_mean(spec["client_cpu"]))
        assert row["server_cpu_user_pct"] + row["server_cpu_sys_pct"] == pytest.approx(
            row["server_cpu_pct"])
        assert row["server_cpu_s"] == pytest.approx(
            row["server_cpu_pct"] / 100 * spec["runtime_s"])
        assert (row["server_core"], row["client_core"]) == (25, 44)
        assert row["server_udp_sent"] == fx.SERVER_UDP_SENT
        assert row["server_udp_received"] == fx.SERVER_UDP_RECEIVED
        assert row["client_udp_received"] == fx.CLIENT_UDP_RECEIVED
        assert row["client_udp_rcvbuf_errors"] == fx.CLIENT_RCVBUF_ERRORS
        assert row["server_nic_tx_frames"] == fx.SERVER_NIC_TX_FRAMES
        assert row["server_nic_tx_bytes"] == fx.SERVER_NIC_TX_BYTES
        assert row["client_nic_rx_frames"] == fx.CLIENT_NIC_RX_FRAMES
        assert row["client_nic_rx_bytes"] == fx.CLIENT_NIC_RX_BYTES
        assert row["data_packets"] == fx.SERVER_NIC_TX_FRAMES
        assert row["ack_packets"] == fx.CLIENT_UDP_SENT
        extra = json.loads(row["extra"])
        assert extra["pair"] == "lsquic_lsquic" and extra["rmem_values"] == [212992, 212992]


def test_baseline_without_pidstat_netstat_ethtool_is_null_not_an_error(
        qir_tree: QirTree, catalog: Catalog):
    summary = qir10g.load(catalog, qir_tree.root)
    assert summary.skipped == []
    row = _run(catalog, fx.BASELINE_LOGDIR, 1)
    assert (row["experiment"], row["server_impl"], row["client_impl"]) == (
        "baseline", "quiche", "lsquic")
    assert row["goodput_mbps"] == pytest.approx(fx.goodput_mbps(fx.BASELINE_RUNTIME_S))
    for col in ("server_cpu_pct", "client_cpu_pct", "server_udp_sent", "client_udp_sent",
                "server_nic_tx_frames", "client_nic_rx_frames", "data_packets", "ack_packets"):
        assert _null(row[col]), col
    assert catalog.con.execute("SELECT count(*) FROM cpu_samples WHERE run_id = ?",
                         [row["run_id"]]).fetchone() == (0,)


def test_tcp_tls_run_counts_acks_on_the_client_nic(qir_tree: QirTree, catalog: Catalog):
    fx.add_tcp_run(qir_tree)
    qir10g.load(catalog, qir_tree.root)
    row = _run(catalog, fx.TCP_LOGDIR, 1)
    assert (row["experiment"], row["setting"]) == ("crypto", "aes-noni/tcp1")
    assert (row["server_impl"], row["client_impl"], row["app"]) == ("tcp+tls", "tcp+tls", "tcp")
    assert (row["cipher"], row["aes_ni"], row["rcvbuf_bytes"]) == ("aes-sw", False, 6815744)
    assert row["client_udp_sent"] == 1  # TCP's ACKs are not UDP datagrams …
    assert row["ack_packets"] == fx.TCP_CLIENT_NIC_TX_FRAMES  # … but client NIC frames
    assert row["data_packets"] == fx.SERVER_NIC_TX_FRAMES


def test_cpu_samples_and_the_steady_window(qir_tree: QirTree, catalog: Catalog):
    qir10g.load(catalog, qir_tree.root)
    run_id = qir10g._run_id(fx.BUFFER_LOGDIR, "lsquic_lsquic", 1)
    rows = catalog.con.execute("SELECT t_s, total_pct, in_window FROM cpu_samples "
                         "WHERE run_id = ? AND side = 'server' ORDER BY t_s", [run_id]).fetchall()
    totals = fx.BUFFER_RUNS[1]["server_cpu"]
    assert [r[1] for r in rows] == totals
    assert [r[0] for r in rows] == list(range(len(totals)))
    assert [r[2] for r in rows] == [False, False] + [True] * (len(totals) - 4) + [False, False]
    expected = sum(len(s["server_cpu"]) + len(s["client_cpu"]) for s in fx.BUFFER_RUNS.values())
    assert catalog.count("cpu_samples") == expected


def test_perf_categories(qir_tree: QirTree, catalog: Catalog):
    summary = qir10g.load(catalog, qir_tree.root)
    assert summary.perf_stacks == 5
    shares = dict(catalog.con.execute(
        "SELECT category, share FROM perf_categories WHERE side = 'server'").fetchall())
    assert shares == pytest.approx({"PACKET_IO": 4 / 7, "CRYPTO": 1 / 7, "CONN_MGMT": 1 / 7,
                                    "GENERAL": 1 / 7})
    other = catalog.con.execute("SELECT comm, samples, category, in_process FROM perf_stacks "
                          "WHERE NOT in_process").fetchall()
    assert other == [("perf_5.10", 1, "OTHER_PROCESS", False)]
    sendmsg = catalog.con.execute("SELECT samples, period, subcategory FROM perf_stacks "
                                  "WHERE stack = ?", [fx.PERF_FOLDED_SENDMSG]).fetchall()
    assert sendmsg == [(4, 1000, "PACKET_IO (sendmsg)")]


def test_raw_and_processed_agree_on_the_fixture(qir_tree: QirTree, catalog: Catalog):
    summary = qir10g.load(catalog, qir_tree.root)
    assert summary.processed_rows == 2
    assert summary.processed_mismatches == []
    assert set(summary.processed_max_diff) == set(qir10g.PROCESSED_COLUMNS)
    assert catalog.count("processed_check") == 2 * len(qir10g.PROCESSED_COLUMNS)
    assert catalog.con.execute("SELECT max(rel_diff) FROM processed_check").fetchone()[0] < 1e-9


def test_a_processed_value_that_disagrees_is_listed(qir_tree: QirTree, catalog: Catalog):
    row = fx.processed_row(2)
    row["server_netstat_packets_sent"] = fx.SERVER_UDP_SENT + 58_000  # 1 % more
    qir_tree.processed_csv.write_text(fx.processed_csv_text([fx.processed_row(1), row]))
    summary = qir10g.load(catalog, qir_tree.root)
    run_id = qir10g._run_id(fx.BUFFER_LOGDIR, "lsquic_lsquic", 2)
    assert [(m[0], m[1]) for m in summary.processed_mismatches] == [
        (run_id, "server_netstat_packets_sent")]
    assert summary.processed_max_diff["server_netstat_packets_sent"] == pytest.approx(0.01 / 1.01)
    check = catalog.con.execute("SELECT raw, processed FROM processed_check WHERE run_id = ? AND "
                          "column_name = 'server_netstat_packets_sent'", [run_id]).fetchone()
    assert check == (fx.SERVER_UDP_SENT, fx.SERVER_UDP_SENT + 58_000)


def test_failed_repetition_has_no_goodput_and_later_ones_keep_theirs(
        qir_tree: QirTree, catalog: Catalog):
    # Rep 1 failed: the runner's result.json then lists rep 2's goodput first.
    (qir_tree.buffer_rep(1) / "output.txt").write_text(fx.output_text(212992, None))
    g2 = fx.goodput_mbps(fx.BUFFER_RUNS[2]["runtime_s"])
    (qir_tree.root / fx.BUFFER_LOGDIR / "result.json").write_text(
        fx.result_json({("lsquic", "lsquic"): [g2]}))
    summary = qir10g.load(catalog, qir_tree.root)
    rep1, rep2 = _run(catalog, fx.BUFFER_LOGDIR, 1), _run(catalog, fx.BUFFER_LOGDIR, 2)
    assert rep1["status"] == "failed" and rep1["failure_reason"]
    assert _null(rep1["goodput_mbps"]) and _null(rep1["goodput_reported_mbps"])
    assert rep1["runtime_s"] == pytest.approx(fx.BUFFER_RUNS[1]["runtime_s"])
    assert rep2["status"] == "ok" and rep2["goodput_reported_mbps"] == pytest.approx(g2)
    # processed.csv still has a goodput for rep 1: listed, not hidden.
    assert (rep1["run_id"], "goodput", "processed has a value, the raw files do not") in \
        summary.processed_mismatches


# -- broken input: one line naming the file, counted; strict raises ----------------
def _rewrite(path: Callable[[QirTree], Path], content: str | bytes | None):
    def mutate(tree: QirTree) -> Path:
        target = path(tree)
        if content is None:
            target.unlink()
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        return target
    return mutate


def _append(path: Callable[[QirTree], Path], extra: str):
    def mutate(tree: QirTree) -> Path:
        target = path(tree)
        target.write_text(target.read_text() + extra)
        return target
    return mutate


BROKEN = {
    "pidstat with garbage": (
        _append(lambda t: t.buffer_rep(1) / "server" / "pidstat.txt", "@@ garbage @@\n"),
        "not a pidstat line", {"server_cpu_pct": None, "client_cpu_pct": "kept"}),
    "empty netstat": (
        _rewrite(lambda t: t.buffer_rep(1) / "server" / "netstat-stop.txt", ""),
        "no Udp: section", {"server_udp_sent": None, "client_udp_sent": "kept"}),
    "truncated netstat": (
        _rewrite(lambda t: t.buffer_rep(1) / "client" / "netstat-stop.txt",
                 "IcmpMsg:\n    InType3: 171\nUdp:\n    5790000 packets rec"),
        "no Udp: section", {"client_udp_sent": None, "ack_packets": None}),
    "netstat stop missing": (
        _rewrite(lambda t: t.buffer_rep(1) / "server" / "netstat-stop.txt", None),
        "missing", {"server_udp_sent": None}),
    "ethtool without totals": (
        _rewrite(lambda t: t.buffer_rep(1) / "server" / "ethtool-stop.txt",
                 "NIC statistics:\n     rx_64b_frames: 64926\n     tpa_packets: 0\n"),
        "none of the NIC totals",
        # data_packets falls back to the UDP counter.
        {"server_nic_tx_frames": None, "data_packets": fx.SERVER_UDP_SENT}),
    "time.json missing": (
        _rewrite(lambda t: t.buffer_rep(1) / "client" / "time.json", None),
        "missing", {"runtime_s": None, "goodput_mbps": None, "goodput_reported_mbps": "kept"}),
    "time.json malformed": (
        _rewrite(lambda t: t.buffer_rep(1) / "client" / "time.json", '{"start": 16744'),
        "expected", {"runtime_s": None, "goodput_mbps": None, "server_cpu_pct": "kept"}),
    "empty processed.csv": (
        _rewrite(lambda t: t.processed_csv, ""), "empty file", {}),
    "malformed result.json": (
        _rewrite(lambda t: t.root / fx.BUFFER_LOGDIR / "result.json", "{not json"),
        "not valid JSON", {"goodput_reported_mbps": None, "goodput_mbps": "kept"}),
    "result.json missing": (
        _rewrite(lambda t: t.root / fx.BUFFER_LOGDIR / "result.json", None),
        "missing", {"goodput_reported_mbps": None, "server_host": None}),
    # Counters and result.json fields that parse but cannot be true: one line too.
    "netstat counter going backwards": (
        _rewrite(lambda t: t.buffer_rep(1) / "client" / "netstat-stop.txt",
                 fx.netstat_text(3_000_000 + fx.CLIENT_UDP_RECEIVED,
                                 4_000_000 + fx.CLIENT_UDP_SENT, 2)),
        "2 is below its start value 5", {"client_udp_rcvbuf_errors": None,
                                         "client_udp_sent": fx.CLIENT_UDP_SENT}),
    "ethtool total that is not a number": (
        _rewrite(lambda t: t.buffer_rep(1) / "server" / "ethtool-stop.txt",
                 fx.ethtool_text(110, 20 + fx.SERVER_NIC_TX_FRAMES, 1030, 40)
                 .replace(f"tx_total_frames: {20 + fx.SERVER_NIC_TX_FRAMES}",
                          "tx_total_frames: 2387x2902")),
        "'2387x2902' is not a counter", {"server_nic_tx_frames": None}),
    "result.json filesize in words": (
        _rewrite(lambda t: t.root / fx.BUFFER_LOGDIR / "result.json",
                 fx.result_json({("lsquic", "lsquic"): [2.5]}).replace(
                     f'"filesize": {fx.FILESIZE}', '"filesize": "8GB"')),
        "'8GB' is not a number", {"goodput_reported_mbps": None}),
    "time.json faster than the link": (
        _rewrite(lambda t: t.buffer_rep(1) / "client" / "time.json",
                 json.dumps({"start": fx.START_NS, "end": fx.START_NS + 1000})),
        "above the 10000 Mbit/s link", {"goodput_mbps": None, "runtime_s": "kept"}),
    "corrupt perf trace": (
        _rewrite(lambda t: t.perf_rep / "server" / "out.perf.zst", b"not zstd at all"),
        "not a valid zstd stream", {}),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_file_is_skipped_with_one_line(case: str, qir_tree: QirTree, catalog: Catalog):
    mutate, reason, columns = BROKEN[case]
    target = qir_tree.rel(mutate(qir_tree))
    summary = qir10g.load(catalog, qir_tree.root)
    assert len(summary.skipped) == 1, summary.skipped
    path, why = summary.skipped[0]
    assert path == target and reason in why
    assert "\n" not in why
    # Counted and recorded, and the run itself is kept with NULLs where the file was.
    assert _q(catalog, "SELECT path, reason FROM ingest_issues") == [(path, why)]
    assert _q(catalog, "SELECT skipped FROM sources WHERE source = 'qir10g'") == [(1,)]
    assert summary.runs == 4
    row = _run(catalog, fx.BUFFER_LOGDIR, 1)
    for col, expected in columns.items():
        if expected is None:
            assert _null(row[col]), col
        elif expected == "kept":
            assert not _null(row[col]), col
        else:
            assert row[col] == expected, col


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_file_is_an_error_when_strict(case: str, qir_tree: QirTree, catalog: Catalog):
    mutate = BROKEN[case][0]
    target = qir_tree.rel(mutate(qir_tree))
    with pytest.raises(DataError) as err:
        qir10g.load(catalog, qir_tree.root, strict=True)
    assert err.value.path == target
    assert catalog.count("runs") == 0  # nothing half-written


def test_broken_mapping_names_the_mapping_and_the_trace(qir_tree: QirTree, catalog: Catalog):
    (qir_tree.root / fx.MAPPING_DIR / "lsquic.json").write_text("{")
    summary = qir10g.load(catalog, qir_tree.root)
    paths = [p for p, _ in summary.skipped]
    assert paths == [f"{fx.MAPPING_DIR}/lsquic.json",
                     f"{fx.PERF_LOGDIR}/lsquic_lsquic/goodput/1/server/out.perf.zst"]
    assert "not valid JSON" in summary.skipped[0][1]
    assert "no category mapping for lsquic" in summary.skipped[1][1]
    assert catalog.con.execute("SELECT DISTINCT category FROM perf_stacks WHERE in_process"
                         ).fetchall() == [("UNMAPPED",)]


def test_rmem_value_that_contradicts_the_folder_is_reported(qir_tree: QirTree, catalog: Catalog):
    (qir_tree.buffer_rep(2) / "output.txt").write_text(fx.output_text(425984, 25.0))
    summary = qir10g.load(catalog, qir_tree.root)
    assert len(summary.skipped) == 1
    assert "rmem_value 425984 differs from the folder's 212992" in summary.skipped[0][1]


# -- the tarball path ---------------------------------------------------------
def test_tarball_and_folder_give_the_same_catalog(qir_tree: QirTree, tmp_path: Path):
    tarball = pack_tarball(qir_tree, tmp_path / "qir.tar.xz")
    query = "SELECT * EXCLUDE (extra) FROM runs ORDER BY run_id"
    with Catalog(tmp_path / "a.duckdb") as a, Catalog(tmp_path / "b.duckdb") as b:
        qir10g.load(a, qir_tree.root)
        qir10g.load(b, tarball)
        assert a.df(query).equals(b.df(query))
        assert _counts(a) == _counts(b)
        sha = _q(b, "SELECT sha256, location FROM sources WHERE source = 'qir10g'")
        assert sha == [(hashlib.sha256(tarball.read_bytes()).hexdigest(), str(tarball))]


def test_corrupt_tarball_is_refused_and_keeps_the_catalog(qir_tree: QirTree, tmp_path: Path,
                                                          catalog: Catalog):
    qir10g.load(catalog, qir_tree.root)
    before = _counts(catalog)
    tarball = pack_tarball(qir_tree, tmp_path / "qir.tar.xz")
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(tarball.read_bytes()[: tarball.stat().st_size // 2])
    for strict in (False, True):
        with pytest.raises(DataError) as err:
            qir10g.load(catalog, cut, strict=strict)
        assert err.value.path == str(cut) and "corrupt" in err.value.reason
    assert _counts(catalog) == before


# -- provenance, idempotence, increments ----------------------------------------
def test_provenance(qir_tree: QirTree, catalog: Catalog):
    qir10g.load(catalog, qir_tree.root)
    source = catalog.df("SELECT * FROM sources WHERE source = 'qir10g'").iloc[0]
    assert source["parser_version"] == qir10g.PARSER_VERSION
    assert source["location"] == str(qir_tree.root)
    assert (source["runs"], source["skipped"]) == (4, 0)
    files = dict(catalog.con.execute("SELECT path, sha256 FROM files WHERE source = 'qir10g'")
                 .fetchall())
    assert files == {qir_tree.rel(p): hashlib.sha256(p.read_bytes()).hexdigest()
                     for p in qir_tree.files()}


def test_ingest_is_idempotent(qir_tree: QirTree, catalog: Catalog, tmp_path: Path):
    (qir_tree.buffer_rep(1) / "client" / "time.json").unlink()  # one issue, too
    points = tmp_path / "published"
    fx.write_published(points)
    fx.write_published(points, ["t-009,002,4.6,text,goodput,fast,Mbit/s,,,h3,text,"], "bad.csv")
    qir10g.load(catalog, qir_tree.root)
    published.load(catalog, points, strict=False)
    first = _counts(catalog)
    runs = catalog.df("SELECT * FROM runs ORDER BY run_id")
    qir10g.load(catalog, qir_tree.root)
    published.load(catalog, points, strict=False)
    assert _counts(catalog) == first
    assert catalog.df("SELECT * FROM runs ORDER BY run_id").equals(runs)
    assert first["ingest_issues"] == 2  # the missing time.json and the bad published row
    assert first["published_points"] == len(fx.PUBLISHED_ROWS)


def test_ingest_is_incremental(qir_tree: QirTree, catalog: Catalog, tmp_path: Path):
    fx.write_published(tmp_path / "published")
    published.load(catalog, tmp_path / "published")
    points = catalog.count("published_points")
    assert points == len(fx.PUBLISHED_ROWS)
    qir10g.load(catalog, qir_tree.root)
    counts = _counts(catalog)
    assert counts["runs"] == 4 and counts["published_points"] == points
    assert sorted(r[0] for r in catalog.con.execute("SELECT source FROM sources").fetchall()) == [
        "published", "qir10g"]
    # A run written by another source (a fresh testbed run) survives a re-ingest.
    catalog.upsert("runs", [{"run_id": "tb-1", "source": "testbed", "experiment": "fresh",
                             "server_impl": "quic-go", "client_impl": "quic-go",
                             "status": "ok"}])
    qir10g.load(catalog, qir_tree.root)
    assert catalog.count("runs") == 5
    assert catalog.count("published_points") == points
