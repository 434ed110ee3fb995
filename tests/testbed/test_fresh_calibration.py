"""``quiclab calibrate --source fresh`` on synthetic calibration runs: the bulk fit and
the request terms the fresh models carry (no root, no runs)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from quiclab.calibration.fresh import fit_fresh, request_terms
from quiclab.datasets.sources.published import packaged_dir, read_csv
from quiclab.models.cpus import CpuCatalog, host_cpu_from_cpuinfo

CPUINFO = ("vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n"
           "model name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: 2300.000\n"
           "flags\t\t: aes avx2\nprocessor\t: 0\nprocessor\t: 1\n")


def _run(i: int, stack: str, goodput: float) -> dict:
    packets = 140_000
    return {"run_id": f"r{stack}{i}", "experiment": "fresh-calibration", "status": "ok",
            "server_impl": stack, "client_impl": stack, "data_packets": packets,
            "ack_packets": packets // 25, "server_udp_sent": packets // 10,
            "client_udp_received": packets, "client_udp_rcvbuf_errors": 0,
            "server_cpu_s": 0.5 + 0.01 * i, "client_cpu_s": 0.5, "goodput_mbps": goodput,
            "rcvbuf_bytes": 212992,
            "extra": json.dumps({"server_report": {"min_rtt_ms": 0.05}})}


@pytest.fixture(scope="module")
def fit():
    runs = pd.DataFrame([_run(i, s, g) for i in range(3)
                         for s, g in (("quic-go", 2000.0), ("xnet-quic", 900.0),
                                        ("quiche", 3000.0))])
    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    return fit_fresh(runs, points, host)


def test_every_stack_with_calibration_runs_gets_a_model(fit):
    assert sorted(fit.models) == ["quic-go", "quiche", "xnet-quic"]
    assert fit.base_rtt_us == pytest.approx(50.0)
    model = fit.models["quic-go"]
    assert model.reference_cpu == fit.host.name
    assert model.sender.ns_per_packet.value > 0


def test_fresh_models_pace_as_the_testbed_peer_does(fit):
    """quiche is sans-I/O and its peer sends each GSO batch at once; the other peers'
    libraries pace. The model follows the peer, with the registry as its source."""
    assert fit.models["quiche"].behaviour.pacing is False
    assert fit.models["quic-go"].behaviour.pacing is True
    assert "SendInfo.at" in fit.models["quiche"].provenance["knowledge"]["pacing"]


def test_fresh_models_take_the_peers_receive_window(fit):
    """A window read from the peer or its library replaces the 16 MiB default, with its
    source; quinn's library default (1.25 MB per stream) bounds it at +10 ms."""
    from quiclab.calibration.fresh import _stack_behaviour
    from quiclab.testbed.stacks import STACKS

    assert fit.models["quiche"].behaviour.fc_window_bytes == 16 << 20
    assert "peers/quiche" in fit.models["quiche"].provenance["knowledge"]["fc_window_bytes"]
    assert fit.models["xnet-quic"].behaviour.fc_window_bytes == 1 << 20
    assert fit.models["quic-go"].behaviour.fc_window_bytes == 512 * 1024
    unread = _stack_behaviour(STACKS["msquic"], 10.0, (1.0, 1.83))
    assert unread.fc_window_bytes == 16 << 20 and "not read" in STACKS["msquic"].fc_window_source
    assert _stack_behaviour(STACKS["quinn"], 10.0, (1.0, 1.83)).fc_window_bytes == 1_250_000


def test_fresh_models_keep_a_fixed_ack_threshold_where_the_library_has_one(fit, tmp_path):
    """x/net/quic ACKs after 10 packets or its 25 ms timer, without the ACK-frequency
    extension: its fresh model says so, with the source; the others keep the default,
    and a model file only carries the key when it is set."""
    import json

    from quiclab.models.costmodel import CostModel

    xnet = fit.models["xnet-quic"]
    assert xnet.behaviour.ack_threshold_fixed
    assert "acks.go" in xnet.provenance["knowledge"]["ack_threshold_fixed"]
    assert not fit.models["quiche"].behaviour.ack_threshold_fixed
    assert "not read" in fit.models["quiche"].provenance["knowledge"]["ack_threshold_fixed"]
    assert xnet.behaviour.to_json()["ack_threshold_fixed"] is True
    assert "ack_threshold_fixed" not in fit.models["quiche"].behaviour.to_json()
    path = tmp_path / "xnet-quic.json"
    path.write_text(xnet.dumps())
    assert CostModel.load(path).behaviour.ack_threshold_fixed
    assert json.loads(path.read_text())["behaviour"]["ack_threshold_fixed"] is True


def test_fresh_models_carry_the_receivers_ack_rules_and_s2n_cubic(fit):
    """s2n-quic ACKs after 10 packets (no ACK-frequency) and drives CUBIC's W_est by
    time (RFC 8312); aioquic ACKs on a 1 ms timer only, without a gap ACK: the stack
    registry carries them into the fresh models with their sources; the others keep
    RFC 9000's defaults and say they were not read."""
    from quiclab.calibration.fresh import _stack_behaviour
    from quiclab.testbed.stacks import STACKS

    s2n = _stack_behaviour(STACKS["s2n-quic"], 46.5, (1.0, 1.83))
    assert (s2n.ack_every_packets, s2n.ack_threshold_floor_packets) == (46.5, 10.0)
    assert s2n.cubic_reno_friendly == "time" and s2n.immediate_ack_on_gap
    assert "ack_manager.rs" in STACKS["s2n-quic"].ack_policy_source
    assert "cubic.rs" in STACKS["s2n-quic"].cubic_source
    aio = _stack_behaviour(STACKS["aioquic"], 27.8, (1.0, 1.83))
    assert aio.ack_timer_ms == 1.0 and not aio.immediate_ack_on_gap and aio.ack_threshold_fixed
    assert "K_GRANULARITY" in STACKS["aioquic"].ack_policy_source
    quiche = fit.models["quiche"]
    assert quiche.behaviour.ack_threshold_floor_packets == 2.0
    assert quiche.behaviour.ack_timer_ms == 0.0
    assert quiche.behaviour.cubic_reno_friendly == "acks"
    assert "not read" in quiche.provenance["knowledge"]["ack_policy"]
    assert "not read" in quiche.provenance["knowledge"]["cubic_reno_friendly"]
    assert "acks.go" in fit.models["xnet-quic"].provenance["knowledge"]["ack_policy"]
    # quic-go runs Reno with β = 0.7 (its sent-packet handler hard-codes it).
    quic_go = fit.models["quic-go"]
    assert quic_go.behaviour.ccs == ("reno",) and quic_go.behaviour.reno_beta == 0.7
    # Its source says so; where quic-go's qlog traces identified β, they say it instead
    # (calibration/traces.py), with the same value.
    source = quic_go.provenance["knowledge"]["reno_beta"]
    assert "use Reno" in source or (source.startswith("trace:") and "0.7" in source), source
    assert quiche.behaviour.reno_beta == 0.5
    quinn = _stack_behaviour(STACKS["quinn"], 20.0, (1.0, 1.83))
    assert quinn.cubic_reno_friendly == "time-srtt" and "cubic.rs" in STACKS["quinn"].cubic_source


def test_a_smaller_transfer_separates_each_process_fixed_cpu():
    """A peer's CPU time is its whole life's: with the calibration setting at two
    sizes the fit takes the per-packet slope, and the fixed part is reported."""
    def sized(i: int, mb: int) -> dict:
        packets = 700 * mb
        row = _run(i + mb, "quic-go", 2000.0)
        row.update(data_packets=packets, client_udp_received=packets,
                   server_udp_sent=packets // 10, ack_packets=packets // 25,
                   filesize_bytes=mb * 1_000_000,
                   server_cpu_s=0.060 + 1.0e-6 * packets * (1 + 0.01 * i),
                   client_cpu_s=0.020 + 1.5e-6 * packets)
        return row

    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    both = pd.DataFrame([sized(i, mb) for i in range(3) for mb in (200, 50)])
    row = fit_fresh(both, points, host).table.iloc[0]
    assert row["sender_ns_per_packet"] == pytest.approx(1010, rel=0.02)
    assert row["receiver_ns_per_packet"] == pytest.approx(1500, rel=0.01)
    assert row["fixed_ms_sender"] == pytest.approx(60, rel=0.1)
    assert row["fixed_ms_receiver"] == pytest.approx(20, rel=0.01)
    assert row["runs"] == 3  # the calibration setting's own runs, the larger size
    # Without the smaller transfer the fixed CPU is counted per packet (as before).
    alone = fit_fresh(both[both["filesize_bytes"] > 60e6], points, host).table.iloc[0]
    assert alone["sender_ns_per_packet"] > 1.4 * row["sender_ns_per_packet"]
    assert alone["fixed_ms_sender"] == 0.0


def test_fresh_models_carry_request_terms_derived_not_fitted(fit):
    for name, model in fit.models.items():
        for role in ("sender", "receiver"):
            rc = model.role(role)
            # Before: 0 ("bulk-only model"), so every request prediction was CPU-free.
            assert rc.ns_per_connection.value > 100_000, (name, role)  # handshake crypto
            assert rc.ns_per_request.value > 0 and rc.ns_per_stream_frame.value > 0
            for term in (rc.ns_per_connection, rc.ns_per_request, rc.ns_per_stream_frame):
                assert term.source.startswith("derived:") and term.lo <= term.value <= term.hi
    # Per-request work scales with the per-packet cost: x/net/quic's packets cost more.
    assert (fit.models["xnet-quic"].sender.ns_per_request.value
            > fit.models["quic-go"].sender.ns_per_request.value)
    assert {"conn_us_sender", "request_us_sender"} <= set(fit.table.columns)


def test_request_terms_leave_the_packet_path_alone(fit):
    cpus = CpuCatalog.packaged().with_cpu(fit.host)
    again = request_terms(fit.models, cpus)
    for name, model in fit.models.items():
        assert again[name].sender.ns_per_packet == model.sender.ns_per_packet
        assert again[name].sender.ns_per_request == model.sender.ns_per_request


def _quiche(i: int, gso: bool, cpu_per_packet_s: float, batch: float) -> dict:
    packets = 140_000
    return {**_run(i, "quiche", 8000.0 if gso else 3000.0), "run_id": f"q{gso}{i}",
            "gso": gso, "gro": True, "server_udp_sent": packets / batch,
            "client_udp_received": packets / batch, "ack_packets": packets // 90,
            "server_cpu_s": cpu_per_packet_s * packets, "client_cpu_s": cpu_per_packet_s * packets}


def _cost(model, role: str, batch: float) -> float:
    """CPU per data packet the model charges at ``batch`` packets per call (ACKs aside)."""
    rc = model.role(role)
    crypto = model.crypto["aes-ni"]
    P = model.behaviour.udp_payload_bytes
    return (rc.ns_per_packet.value + (rc.ns_per_byte.value + crypto.ns_per_byte.value) * P
            + crypto.ns_per_packet.value + rc.ns_per_segment.value
            + rc.ns_per_syscall.value / batch)


def test_gso_off_runs_fix_the_call_share_and_the_models_response():
    """The calibration session's GSO-off rows give each role its system-call share:
    the model then charges the measured ×2.7 per packet at one packet per call, where
    the assumed share (no GSO-off rows) charges far less; the GSO-on rows alone set T."""
    on = [_quiche(i, True, 1.4e-6, 43.0) for i in range(3)]
    off = [_quiche(i, False, 3.8e-6, 1.0) for i in range(3)]
    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    paired = fit_fresh(pd.DataFrame(on + off), points, host)
    alone = fit_fresh(pd.DataFrame(on), points, host)
    row = paired.table.set_index("stack").loc["quiche"]
    assert row["runs"] == 3 and row["gso_off_runs"] == 3
    a = 0.6 / (140_000 / (140_000 // 90))
    ratio = 3.8 / 1.4
    expected = (ratio - 1) * (1 + a) / (ratio * (1 - 1 / 43) - 0)
    assert row["call_share_sender"] == pytest.approx(expected, rel=1e-6)
    model, assumed = paired.models["quiche"], alone.models["quiche"]
    assert model.sender.ns_per_syscall.source.startswith("derived:")
    assert "GSO off" in model.sender.ns_per_syscall.source
    assert "assumed" in assumed.sender.ns_per_syscall.source
    for role in ("sender", "receiver"):
        # The model's GSO-off/on cost ratio follows the measurement (crypto and the
        # protocol floor may shave the share a little) …
        got = _cost(model, role, 1.0) / _cost(model, role, 43.0)
        assert got == pytest.approx(ratio, rel=0.12), role
        # … where the assumed share gives well under half of the measured penalty.
        assert _cost(assumed, role, 1.0) / _cost(assumed, role, 43.0) < 1.5
        # Both reproduce the calibration setting (GSO on) alike.
        assert _cost(model, role, 43.0) == pytest.approx(_cost(assumed, role, 43.0), rel=0.05)
    assert math.isclose(row["goodput_mbps"], 8000.0)  # the GSO-off rows are not the level


def test_a_role_whose_batch_gso_leaves_alone_keeps_the_assumed_share():
    """quic-go's receiver reads one datagram per call with or without GSO: its share is
    not identifiable from the pair and stays the assumed one."""
    rows = []
    for i in range(3):
        for gso, cpu, batch in ((True, 4.0e-6, 11.0), (False, 8.0e-6, 1.0)):
            r = _run(i, "quic-go", 2000.0 if gso else 1000.0)
            r.update(run_id=f"g{gso}{i}", gso=gso, gro=False, server_udp_sent=140_000 / batch,
                     client_udp_received=140_000, server_cpu_s=cpu * 140_000,
                     client_cpu_s=cpu * 140_000)
            rows.append(r)
    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    row = fit_fresh(pd.DataFrame(rows), points, host).table.set_index("stack").loc["quic-go"]
    assert row["call_share_sender"] > 0.4
    assert row["call_share_receiver"] == pytest.approx(0.25)


def test_unsegmented_runs_fix_the_receivers_share_alone():
    """The calibration's fifth row (veth segmentation off) hands the receiver single
    datagrams while the sender keeps its GSO batches: it fixes the receiver's share,
    also for a stack that refuses GSO off (MsQuic, which had only the assumed one),
    leaves the sender's and T's level alone, and is not a calibration setting."""
    def msquic(i: int, segmented: bool) -> dict:
        packets = 140_000
        rx_cpu, rx_batch = (1.0e-6, 42.0) if segmented else (3.4e-6, 1.0)
        r = _run(i, "msquic", 8000.0 if segmented else 3000.0)
        r.update(run_id=f"m{segmented}{i}", gso=True, gro=True, veth_segmentation=segmented,
                 server_udp_sent=packets / 42.0, client_udp_received=packets / rx_batch,
                 ack_packets=packets // 90, server_cpu_s=1.0e-6 * packets,
                 client_cpu_s=rx_cpu * packets)
        return r

    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    with_row = fit_fresh(pd.DataFrame([msquic(i, s) for i in range(3) for s in (True, False)]),
                         points, host)
    without = fit_fresh(pd.DataFrame([msquic(i, True) for i in range(3)]), points, host)
    row = with_row.table.set_index("stack").loc["msquic"]
    assert row["runs"] == 3 and row["rx_single_runs"] == 3 and row["gso_off_runs"] == 0
    a = 0.6 / (140_000 / (140_000 // 90))
    ratio = 3.4 / 1.0
    assert row["call_share_receiver"] == pytest.approx(
        (ratio - 1) * (1 + a) / (ratio * (1 - 1 / 42) - 0), rel=1e-6)
    assert row["call_share_sender"] == pytest.approx(0.25)  # nothing unbatched the sender
    assert math.isclose(row["goodput_mbps"], 8000.0)  # the unsegmented rows are not the level
    model, assumed = with_row.models["msquic"], without.models["msquic"]
    assert "veth segmentation off" in model.receiver.ns_per_syscall.source
    assert "assumed" in assumed.receiver.ns_per_syscall.source
    got = _cost(model, "receiver", 1.0) / _cost(model, "receiver", 42.0)
    assert got == pytest.approx(ratio, rel=0.12)
    assert _cost(assumed, "receiver", 1.0) / _cost(assumed, "receiver", 42.0) < 1.5
    assert _cost(model, "sender", 42.0) == pytest.approx(_cost(assumed, "sender", 42.0))


def test_host_cpu_counts_every_core_but_idle_and_iowait(tmp_path):
    from quiclab.testbed.collect import host_cpu_s

    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 10 50 800 40 0 10 5 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    busy, total = host_cpu_s(str(stat))
    hz = __import__("os").sysconf("SC_CLK_TCK")
    assert busy == pytest.approx(175 / hz) and total == pytest.approx(1015 / hz)
    stat.write_text("intr 1 2 3\n")
    with pytest.raises(ValueError, match="aggregate cpu line"):
        host_cpu_s(str(stat))


def test_a_busy_calibration_session_is_named_with_its_load():
    """Runs that recorded the host's background load: per experiment the median and
    maximum, and a warning in the fit when the calibration competed with other work."""
    from quiclab.calibration.fresh import background_load

    def with_load(row: dict, cores: float) -> dict:
        extra = json.loads(row["extra"]) | {"host": {"background_cores": cores, "cores": 2.0}}
        return {**row, "extra": json.dumps(extra)}

    quiet = [with_load(_run(i, "quic-go", 2000.0), 0.02) for i in range(3)]
    busy = [with_load(_run(i, "xnet-quic", 900.0), 1.9) for i in range(3)]
    old = [_run(i, "quinn", 3000.0) for i in range(2)]  # recorded before the testbed read it
    load = background_load(pd.DataFrame(quiet + old))
    assert list(load["experiment"]) == ["fresh-calibration"]
    assert load.iloc[0]["runs"] == 3 and load.iloc[0]["median_background_cores"] == 0.02
    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    assert not any("warning" in n for n in fit_fresh(pd.DataFrame(quiet), points, host).notes)
    notes = fit_fresh(pd.DataFrame(quiet + busy), points, host).notes
    warning = [n for n in notes if n.startswith("warning")]
    assert len(warning) == 1 and warning[0].startswith("warning: xnet-quic's")
    assert "1.90 busy cores before each of 3 transfers" in warning[0]


def test_relayed_runs_measure_the_relay_and_stay_out_of_the_stack_fits(tmp_path):
    """The calibration spec's fourth row (+10 ms, 4 MiB buffers) measures the delay
    relay: its runs do not move any stack's costs, the fastest stack's median there
    is the relay's capacity, and it is written beside the host entry."""
    from quiclab.calibration.fresh import write_fresh

    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    plain = [_run(i, s, g) for i in range(3) for s, g in (("quic-go", 2000.0), ("quiche", 3000.0))]
    relayed = []
    for i, (stack, goodput) in enumerate([("quic-go", 400.0), ("quiche", 1150.0),
                                          ("quiche", 1120.0), ("quiche", 1160.0)]):
        row = _run(10 + i, stack, goodput)
        # Slow and expensive per packet: were they in the fit, the costs would move.
        row.update(rtt_ms=10.0, rcvbuf_bytes=4194304, server_cpu_s=5.0, client_cpu_s=5.0)
        relayed.append(row)
    without = fit_fresh(pd.DataFrame(plain), points, host)
    both = fit_fresh(pd.DataFrame(plain + relayed), points, host)
    assert without.relay_gbps is None and "no relayed calibration runs" in " ".join(without.notes)
    assert both.relay_gbps == pytest.approx(1.15)
    assert "quiche (3 'fresh-calibration' runs at +10 ms, receive buffer 4194304 B)" \
        in both.relay_source and "quic-go 0.40" in both.relay_source
    for name in ("quic-go", "quiche"):
        assert both.models[name].sender.ns_per_packet.value == \
            without.models[name].sender.ns_per_packet.value
    write_fresh(both, tmp_path)
    meta = json.loads((tmp_path / "cpus.json").read_text())
    assert meta["relay_gbps"] == pytest.approx(1.15) and meta["relay_source"] == both.relay_source


def test_relayed_cells_get_the_relay_as_their_bottleneck_link():
    """A fresh cell through the relay (added delay) gets the relay's capacity as its
    link and the relay's queue bound, less its delay line, as the queue; an
    unrelayed cell and a cell behind a slower tbf keep theirs."""
    from quiclab.calibration.evidence import dataset_cells

    def cell(setting: str, rtt: float, link: float | None = None) -> dict:
        row = _run(0, "quiche", 130.0)
        row.update(run_id=f"r-{setting}", experiment="fresh-validation", setting=setting,
                   rtt_ms=rtt, link_gbps=link, cipher="aes-ni", cpu="AMD EPYC 7543", app="perf",
                   goodput_reported_mbps=None, server_build=None, client_build=None,
                   filesize_bytes=200_000_000, mtu_bytes=1500, loss_pct=0.0,
                   extra=json.dumps({"topology": {"relay": {"queue_bytes": 2_500_000}}}
                                    if rtt else {}))
        return row

    runs = pd.DataFrame([cell("relayed", 10.0), cell("direct", 0.0),
                         cell("slow-tbf", 10.0, 0.5)])
    defaults = {"base_rtt_us": 70.0, "link_gbps": 40.0, "relay_gbps": 1.2}
    got = {e.ident.split("|")[1]: e.scenario
           for e in dataset_cells(runs, source="fresh", known={"quiche"}, defaults=defaults)}
    assert got["relayed"].link_gbps == pytest.approx(1.2)
    # 2.5 MB bound less 5 ms of 1.2 Gbit/s held in the delay line.
    assert got["relayed"].queue_bytes == 2_500_000 - 750_000
    assert got["direct"].link_gbps == pytest.approx(40.0)
    assert got["slow-tbf"].link_gbps == pytest.approx(0.5)
    assert defaults["relay_gbps"] == 1.2  # the caller's defaults are not consumed


def test_fresh_models_send_the_batches_their_runs_measured(fit):
    """T is backed out of the CPU per packet at the measured packets per send call, so
    the engines must amortise each call over that batch, not over the 44 datagrams a
    64 KiB GSO send could hold (s2n-quic sends ~10; with 44 the DES ran its calibration
    setting 31 % faster than measured). A stack without GSO keeps the registry's cap."""
    from quiclab.calibration.fresh import _gso_batch
    from quiclab.testbed.stacks import STACKS

    quiche = fit.models["quiche"]  # synthetic runs: 10 datagrams per send call
    assert quiche.behaviour.gso_max_segments == 10
    assert quiche.provenance["knowledge"]["gso_max_segments"].startswith("fit: median 10.0")
    assert _gso_batch(STACKS["s2n-quic"], 9.76) == 10
    assert _gso_batch(STACKS["s2n-quic"]) == 64  # nothing measured: the cap
    assert _gso_batch(STACKS["s2n-quic"], 300.0) == 64  # never above the cap
    assert _gso_batch(STACKS["xnet-quic"], 10.0) == 64  # no GSO: the batch is unused
    assert "registry" in fit.models["xnet-quic"].provenance["knowledge"]["gso_max_segments"]


def test_the_stall_law_counts_lost_datagrams_when_both_ends_batch():
    """A receive-buffer error is one skb: with GSO and GRO a whole batch, which the
    engines drop whole too, so the fit takes errors × datagrams per receive (quiche:
    10 per receive here); a receiver that gets single datagrams loses one each."""
    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())

    def runs(per_receive: int) -> pd.DataFrame:
        rows = []
        for i in range(3):
            row = _run(i, "quiche", 3000.0)
            row.update(client_udp_rcvbuf_errors=140,
                       client_udp_received=row["data_packets"] // per_receive)
            rows.append(row)
        return pd.DataFrame(rows)

    batched = fit_fresh(runs(10), points, host).models["quiche"]
    single = fit_fresh(runs(1), points, host).models["quiche"]
    assert batched.provenance["knowledge"]["rx_stall"].startswith(
        "fit: median receive-buffer drop fraction 1.00e-02 of the 3 runs (errors × 10.0 "
        "datagrams per GRO receive)")
    assert single.provenance["knowledge"]["rx_stall"].startswith(
        "fit: median receive-buffer drop fraction 1.00e-03 of the 3 runs at ")
    assert batched.behaviour.rx_stall_rate_hz > single.behaviour.rx_stall_rate_hz


def test_relayed_and_lossy_cells_reach_the_receiver_as_single_datagrams():
    """The delay relay re-emits every datagram on its own, and with loss the testbed
    turns veth segmentation off: GRO has nothing to coalesce there, so those cells
    are predicted with gro=False (TRANSPORT.md "Receive buffer")."""
    from quiclab.calibration.evidence import dataset_cells

    def cell(setting: str, rtt: float = 0.0, loss: float = 0.0, seg: bool = True) -> dict:
        row = _run(0, "quiche", 3000.0)
        row.update(run_id=f"r-{setting}", experiment="fresh-validation", setting=setting,
                   rtt_ms=rtt, loss_pct=loss, veth_segmentation=seg, gso=True, gro=True,
                   link_gbps=None, cipher="aes-ni", cpu="AMD EPYC 7543", app="perf",
                   goodput_reported_mbps=None, server_build=None, client_build=None,
                   filesize_bytes=200_000_000, mtu_bytes=1500)
        return row

    runs = pd.DataFrame([cell("direct"), cell("relayed", rtt=10.0),
                         cell("lossy", loss=1.0, seg=False)])
    got = {e.ident.split("|")[1]: e.scenario
           for e in dataset_cells(runs, source="fresh", known={"quiche"},
                                  defaults={"base_rtt_us": 70.0, "link_gbps": 40.0})}
    assert got["direct"].gso and got["direct"].gro
    assert got["relayed"].gso and not got["relayed"].gro
    assert got["lossy"].gso and not got["lossy"].gro


def test_each_model_moves_from_the_state_its_session_was_probed_in(fit, tmp_path):
    """Stacks calibrated in different sessions get their own reference state (the
    median of their sessions' probes), written to cpus.json, and the busy-host warning
    becomes a note that the probes record the state."""
    from quiclab.calibration.fresh import with_states, write_fresh
    from quiclab.models.registry import Registry
    from quiclab.testbed import probe_store
    from quiclab.testbed.probe import Figure, HostProbe, HostState

    state = HostState(wall_s=1.0, cores=2, busy_cores=2.0, other_busy_cores=1.5,
                      steal_cores=0.0, per_core_busy={}, per_core_steal={}, clock_mhz={},
                      clock_source="t", loadavg_1m=9.0)
    cat = tmp_path / "c.duckdb"
    for session, when, scale in (("a", "2026-11-28T09:00:00Z", 1.0),
                                 ("b", "2026-11-28T10:00:00Z", 2.0)):
        probe_store.store(cat, HostProbe(
            taken_at=when, host="h", cpu=fit.host.name, session=session, rounds=1,
            duration_s=1.0, state=state,
            figures={"quic_packet": Figure(1000.0 * scale, 0.01, ()),
                     "udp_send": Figure(9000.0 * scale, 0.01, ())}))
    runs = pd.DataFrame([{**_run(i, s, 1.0), "extra": json.dumps(
        {"provenance": {"session": session}})} for i in range(2)
        for s, session in (("quic-go", "a"), ("quiche", "a"), ("xnet-quic", "b"))])
    states = probe_store.calibration_states(cat, runs, "fresh-calibration")
    assert set(states) == {"quic-go", "quiche", "xnet-quic"}
    assert states["xnet-quic"][1]["udp_send"].ns == 18000.0
    busy = replace_notes(fit, ["warning: xnet-quic's calibration runs shared this host with "
                               "other work (median 2.00 busy cores before each of 3 "
                               "transfers): its CPU costs are fitted slow; rerun …"])
    moved = with_states(busy, states)
    refs = {m.reference_cpu for m in moved.models.values()}
    assert refs == {f"{fit.host.name} @ calibration a", f"{fit.host.name} @ calibration b"}
    assert moved.notes[0].startswith("note: xnet-quic's calibration ran on a busy host")
    write_fresh(moved, tmp_path / "models")
    registry = Registry.load(tmp_path / "models")
    ref_b = registry.cpus.find(registry.models["xnet-quic"].reference_cpu)
    assert ref_b.probe_ns("udp_send") == (18000.0, 0.01)
    # At the state of session a, xnet-quic's system calls cost half what it was fitted at.
    scale = registry.cpus.scaling(ref_b.name, registry.models["quic-go"].reference_cpu)
    assert scale.part("call:sender") == pytest.approx(0.5)


def replace_notes(fit, notes):
    from dataclasses import replace

    return replace(fit, notes=notes)
