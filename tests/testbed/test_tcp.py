"""The TCP peers: knobs resolved or refused in one line, and one real short transfer."""

from __future__ import annotations

import json

import pytest

from quiclab.testbed import tcp
from quiclab.testbed.config import RunConfig, parse_set, resolve
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.stacks import STACKS


def _resolve(server: str, client: str, *items: str):
    changes, knobs = parse_set(list(items))
    config = RunConfig.build(server, client, changes, knobs)
    return resolve(config, STACKS[server], STACKS[client])


def test_defaults_are_the_kernels_offloads_and_cubic():
    r = _resolve("tcp+tls", "tcp+tls")
    eff = r.effective
    assert eff["transport"] == "tcp" and eff["tls"] is True
    assert (eff["tso"], eff["gso"], eff["gro"], eff["csum_offload"]) == (True, True, True, True)
    assert eff["cc"] == "cubic" and "--cc=cubic" in r.server_args
    assert eff["mss_bytes"] == 1448 and eff["udp_payload_bytes"] == 1448
    assert "--record-bytes=16384" in r.server_args and "--cipher=aes-ni" in r.client_args


def test_offload_and_buffer_fields_reach_the_link():
    eff = _resolve("tcp+tls", "tcp+tls", "tso=false gso=false gro=false mtu_bytes=9000",
                   "tcp_rmem_bytes=262144 cipher=chacha20 tls_record_bytes=4096").effective
    assert (eff["tso"], eff["gso"], eff["gro"]) == (False, False, False)
    assert eff["mss_bytes"] == 8948 and eff["tcp_rmem_bytes"] == 262144
    assert eff["cipher"] == "chacha20" and eff["tls_record_bytes"] == 4096


def test_checksum_offload_off_takes_tso_with_it():
    assert _resolve("tcp+tls", "tcp+tls", "csum_offload=false").effective["tso"] is False
    with pytest.raises(TestbedError, match=r"^tso=true cannot be honoured by tcp\+tls: TSO needs"):
        _resolve("tcp+tls", "tcp+tls", "csum_offload=false tso=true")


@pytest.mark.parametrize("items, message", [
    (("lro=true",), r"lro=true cannot be honoured by tcp\+tls: the veth pair has no large"),
    (("rtt_ms=10",), r"rtt_ms=10.0 cannot be honoured by tcp\+tls: the delay relay carries UDP"),
    (("rcvbuf_bytes=65536",), r"rcvbuf_bytes=65536 cannot be honoured .*tcp_rmem_bytes"),
    (("udp_payload_bytes=1300",), r"udp_payload_bytes=1300 cannot be honoured .*MSS"),
    (("loss_pct=1 tso=true",), r"tso=true cannot be honoured .*loss_pct > 0"),
    (("cc=bbr2",), r"cc='bbr2' is impossible"),
])
def test_what_the_kernel_or_veth_cannot_do_is_refused_in_one_line(items, message):
    with pytest.raises(Exception, match=message) as err:
        _resolve("tcp+tls", "tcp+tls", *items)
    assert "\n" not in str(err.value)


def test_plain_tcp_refuses_tls_settings_and_pairs_only_with_itself():
    with pytest.raises(TestbedError, match=r"^cipher=chacha20 cannot be honoured by tcp: plain"):
        _resolve("tcp", "tcp", "cipher=chacha20")
    with pytest.raises(TestbedError, match="no common application protocol"):
        _resolve("tcp", "tcp+tls")
    with pytest.raises(TestbedError, match="no common application protocol"):
        _resolve("tcp+tls", "quic-go")
    assert _resolve("tcp", "tcp").effective["tls"] is False


def test_loss_makes_the_sender_segment_and_the_receiver_not_aggregate():
    eff = _resolve("tcp+tls", "tcp+tls", "loss_pct=1").effective
    assert eff["tso"] is False and eff["gro"] is False and eff["gso"] is True


def test_kernel_tls_is_refused_where_the_kernel_has_no_tls_ulp(tmp_path, monkeypatch):
    ulp = tmp_path / "tcp_available_ulp"
    ulp.write_text("mptcp\n")
    monkeypatch.setattr(tcp, "ULP_FILE", ulp)
    monkeypatch.setattr(tcp.kernel_ulps, "__defaults__", (ulp,))
    with pytest.raises(TestbedError, match=r"^tcp\+ktls cannot run on this kernel: .*= mptcp;"):
        _resolve("tcp+ktls", "tcp+ktls")
    ulp.write_text("mptcp tls\n")
    assert _resolve("tcp+ktls", "tcp+ktls").effective["ktls"] is True


def test_summary_derives_super_segments_acks_and_records():
    server = {"records_out": 100, "record_payload_bytes_out": 100 * (16384 + 17),
              "app_calls": 100, "tcp_info": {"data_segs_out": 1200, "total_retrans": 3}}
    client = {"records_in": 100, "app_calls": 101,
              "tcp_info": {"segs_out": 62, "data_segs_out": 2}}
    out = tcp.summary(server, client, {"server": {"Tcp": {"OutSegs": 1201}, "TcpExt": {}}},
                      {"server": {"tx_packets": 120, "tx_bytes": 1_800_000},
                       "client": {"rx_packets": 120, "rx_bytes": 1_800_000}}, 1_638_400)
    assert out["data_segments"] == 1200 and out["acks"] == 60
    assert out["tx_skbs"] == 120 and out["segments_per_tx_skb"] == 10
    assert out["record_bytes"] == 16384 and out["segments_per_ack"] == 20
    assert out["server_mib"]["OutSegs"] == 1201 and out["retransmitted_segments"] == 3


def test_earlier_run_ids_do_not_move_with_the_tcp_fields():
    # A QUIC configuration keys as before the TCP fields and knobs existed
    # (tests/testbed/test_config.py pins a recorded id); setting one changes it.
    a = RunConfig.build("quic-go", "quic-go", {})
    b = RunConfig.build("quic-go", "quic-go", {"tso": False})
    c = RunConfig.build("quic-go", "quic-go", {}, {"app_write_bytes": 4096})
    assert len({a.key(), b.key(), c.key()}) == 3


@pytest.mark.testbed
def test_a_real_tcp_tls_transfer_records_segments_records_and_cpu_split(
        root, paths, builder, tmp_path):
    from quiclab.datasets.catalog import Catalog
    from quiclab.testbed.runner import Testbed
    from quiclab.testbed.session import Session

    builder.harness()
    builder.certs()
    for name in ("tcp+tls", "tcp"):
        assert builder.build(STACKS[name]).ok
    catalog = tmp_path / "fresh.duckdb"
    session = Session(Testbed(paths, builder=builder, startup_s=5.0), catalog,
                      log=lambda line: None)
    nbytes = 60_000_000
    for server, items in (("tcp+tls", {"pin": True, "gro": False}), ("tcp", {"pin": True})):
        config = RunConfig.build(server, server, items, transfer_bytes=nbytes,
                                 experiment="test-tcp")
        [result] = session.run(config, 1)
        assert result.status == "ok", result.failure_reason
        assert result.client.report["bytes"] == nbytes
    with Catalog(catalog) as cat:
        rows = cat.df("SELECT server_impl, data_packets, ack_packets, server_cpu_user_pct, "
                      "server_cpu_sys_pct, extra FROM runs ORDER BY server_impl")
    for row in rows.to_dict("records"):
        extra = json.loads(row["extra"])["tcp"]
        assert row["data_packets"] >= nbytes // 1448 and row["ack_packets"] > 0
        assert extra["tx_skbs"] and extra["tx_skb_bytes"] > 1448  # TSO: super-segments
        # rusage splits user and system time by 4 ms ticks (HZ=250): over ~0.1 s a
        # side's split is coarse, its sum exact.
        assert row["server_cpu_user_pct"] + row["server_cpu_sys_pct"] > 0
        if row["server_impl"] == "tcp+tls":
            assert extra["records_out"] >= nbytes // 16384
            assert 16000 < extra["record_bytes"] <= 16384
        else:
            assert not extra["records_out"]
