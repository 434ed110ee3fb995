"""Each output format of the UCLouvain experiments, and the NPF test definitions, on
small synthetic texts: values, failed repetitions, cut and damaged files."""

from __future__ import annotations

import pytest

from quiclab.datasets.sources import npf
from quiclab.datasets.sources import ucl_parsers as up
from quiclab.datasets.sources import ucl_traffic as traffic
from quiclab.errors import DataError

from . import ucl_fixtures as fx


def test_picoquic_client_logs_give_one_record_per_run():
    parsed = up.parse_picoquic(fx.PICOQUIC_C2)
    assert [r.status for r in parsed.records] == ["failed", "ok", "ok"]
    failed, first, second = parsed.records
    assert failed.failure == "connection ended with local error 0x433"
    assert failed.values["retransmissions"] == 7 and failed.values["exit_code"] == -1
    assert (first.bytes, first.seconds) == (1_000_000_025, 2.0)
    assert first.reported_mbps == pytest.approx(4000.0001)
    assert first.values["max_mtu_sent"] == 1440 and first.values["alpn"] == "h3"
    assert first.values["ecn_received"] == {"ect0": 100, "ect1": 0, "ce": 0}
    assert second.seconds == 2.5 and parsed.problems == []


def test_picoquic_dpdk_runs_open_with_the_eal_line():
    block = ("EAL setup finshed\nStarting Picoquic (v1.01) connection to server = 10.0.0.2, "
             "port = 4443\nClient exit with code = 0\nMAX_PKT_BURST_RX : 32\n"
             "MAX_PKT_BURST_TX : 16\nReceived 100 bytes in 1.000000 seconds, 0.000800 Mbps.\n")
    parsed = up.parse_picoquic(block + block)
    assert len(parsed.records) == 2 and parsed.problems == []
    assert parsed.records[1].values["max_pkt_burst_tx"] == 16


def test_picoquic_result_lines_keep_the_rest_of_a_cut_file():
    parsed = up.parse_picoquic(fx.BATCHING_TX4)
    assert len(parsed.records) == 1 and parsed.records[0].seconds == 10.0
    assert len(parsed.problems) == 1 and parsed.problems[0].startswith("line 2: not a picoquic")


def test_a_picoquic_log_that_ends_inside_a_run_is_cut():
    text = fx.picoquic_block(10, 1.0) + "Starting Picoquic (v1.01) connection to x\nWaiting\n"
    parsed = up.parse_picoquic(text)
    assert len(parsed.records) == 1 and "cut" in parsed.problems[0]


def test_msquic_results_failed_and_cut_runs():
    parsed = up.parse_msquic("Started!\n\nApp Main returning status 1\n" + fx.MSQUIC_NO_GRO)
    assert [r.status for r in parsed.records] == ["failed", "ok", "ok"]
    ok = parsed.records[1]
    assert (ok.bytes, ok.seconds, ok.reported_mbps) == (1_000_000_000, 2.0, 4000.0)
    assert len(parsed.problems) == 1 and "cut" in parsed.problems[0]


def test_quicly_time_and_goodput_pairs():
    parsed = up.parse_quicly(fx.QUICLY_C4 + "time : 3.0 s.\n")
    assert [(r.seconds, r.reported_mbps) for r in parsed.records] == [(20.0, 8000.0),
                                                                      (16.0, 10000.0)]
    assert all(r.bytes is None for r in parsed.records)  # quicly prints no byte count
    assert parsed.problems == ["line 5: the file ends after a time line: cut"]


def test_quiche_runs():
    parsed = up.parse_quiche(fx.QUICHE_C46 + fx.QUICHE_C46)
    assert len(parsed.records) == 2 and parsed.problems == []
    assert (parsed.records[0].bytes, parsed.records[0].seconds) == (10_000_000_000, 20.0)
    assert parsed.records[0].reported_mbps == 4000.0


def test_picotls_rate_without_its_stray_digit_and_a_run_that_received_nothing():
    parsed = up.parse_picotls(fx.PICOTLS_NO_LRO_TSO)
    assert [r.status for r in parsed.records] == ["ok", "failed", "ok"]
    assert parsed.records[0].reported_mbps == 20000.0  # "(20000.000000.3Mbps)"
    assert parsed.records[0].values["cipher_suite"] == "AES128-GCM"
    assert parsed.records[1].failure == "the server received no transfer"


def test_counts_served_and_bare():
    served = up.parse_served("noise line\n" + fx.HANDSHAKES_DPDK +
                             "Number of request served : 12\nNumber of handshakes serv")
    assert [r.count for r in served.records] == [7000, 7200, 12]
    assert len(served.problems) == 1  # the cut last line
    counts = up.parse_counts(fx.PICOTLS_HANDSHAKES + "12x\n")
    assert [r.count for r in counts.records] == [10000, 9000, 11000]
    assert counts.problems == ["line 5: not a count ('12x')"]


def test_iperf3_summary_intervals_and_offered_rate():
    summary = traffic.parse_iperf3(fx.IPERF_TCP + fx.IPERF_TCP)
    assert len(summary.records) == 2 and summary.problems == []
    run = summary.records[0]
    assert run.reported_mbps == pytest.approx(8560.0) and run.seconds == 30.0
    assert run.bytes == round(29.9 * 1024**3)  # iperf3's GBytes are GiB
    assert run.values["summary"] == "receiver" and run.values["retransmissions"] == 300
    udp = traffic.parse_iperf3(
        "[  5]   1.00-2.00   sec  80.0 MBytes   671 Mbits/sec  0.000 ms  10/100 (10%)\n"
        "[  5]   2.00-3.00   sec  80.0 MBytes   671 Mbits/sec  0.000 ms  30/100 (30%)\n")
    (run,) = udp.records
    assert run.seconds == 2.0 and run.bytes == 160 * 1024**2
    assert (run.values["lost"], run.values["datagrams"]) == (40, 200)
    offered = traffic.parse_iperf3(
        "300 Mbps[  5]   0.00-8.00   sec   286 MBytes   300 Mbits/sec  0.007 ms  0/249976 "
        "(0%)  receiver\n")
    assert offered.records[0].values["offered_mbps"] == 300.0


def test_udp_generator_formats():
    parsed = traffic.parse_udp_goodput(
        "final goodput : 2936.5\n"
        "goodput : 100.5 number of packets : 2000 elapsed : 2.000001\n"
        "before start\nloop start\ngoodput : 10.0\nnumber of packets : 5\n"
        "goodput : 30.0\nnumber of pkts received : 9\ngoodput : 20.0\ngoodput decreased\n"
        "goodput : 1.0\n")
    rates = [r.reported_mbps for r in parsed.records]
    assert rates == [2936.5, 100.5, 30.0]  # the series' maximum, as the authors read it
    assert parsed.records[1].values["packets"] == 2000
    assert parsed.problems == ["line 11: the file ends inside a goodput series: cut"]


def test_npf_sections_variables_init_and_scripts():
    test = npf.parse_npf(fx.NPF, "x.npf")
    assert test.choices("NB_CORES") == {"2": "1core", "4": "2cores"}
    assert test.config == {"n_runs": "3"}
    assert test.irq_cpu_list("server") == "2" and test.nic_queues("client") == 1
    assert test.irqbalance_stopped("server") is True
    assert test.stacks() == ["msquic", "picoquic"]
    client = test.script("picoquic", "client")
    assert client is not None and client.options == {"sudo": "true", "delay": "3"}
    assert "/1000000000" in client.command and "a comment" not in client.command


@pytest.mark.parametrize(("text", "reason"), [
    ("no section here\n", "no NPF %section"),
    ("%script sudo=true\nls\n", "a script section without @role"),
])
def test_npf_refuses_what_it_cannot_read(text: str, reason: str):
    with pytest.raises(DataError) as err:
        npf.parse_npf(text, "bad.npf")
    assert reason in err.value.reason and "bad.npf" in str(err.value.path)
