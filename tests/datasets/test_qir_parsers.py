"""The raw per-run file parsers of the QIR-10G results, on good and broken input."""

from __future__ import annotations

import json

import pytest

from quiclab.datasets.sources import qir_parsers as qp
from quiclab.errors import DataError

from .fixtures import ethtool_text, netstat_text, output_text, pidstat_text, result_json

HEADER = "   UID       PID    %usr %system  %guest   %wait    %CPU   CPU  Command"


def _line(clock: str, pid: int, usr: float, sys_: float, core: int = 25,
          command: str = "nginx-server") -> str:
    return (f"{clock}     0    {pid:>6}   {usr:5.2f}   {sys_:5.2f}    0.00    0.00"
            f"  {usr + sys_:6.2f}    {core:>2}  {command}")


# -- pidstat ----------------------------------------------------------------
def test_pidstat_one_sample_per_interval_from_the_first_with_the_process():
    text = pidstat_text("goracle", "http_server", [30.0, 90.0, 100.0], with_average=True)
    samples = qp.parse_pidstat(text, "server/pidstat.txt")
    assert [s.t_s for s in samples] == [0, 1, 2]  # the two empty intervals do not count
    assert [s.total_pct for s in samples] == [30.0, 90.0, 100.0]
    assert samples[0].user_pct == 12.0 and samples[0].system_pct == 18.0
    assert {s.core for s in samples} == {25}


def test_pidstat_sums_pids_of_one_interval():
    # NGINX master and worker in the same 1-s interval: the process group's CPU.
    text = "\n".join([
        "Linux 5.10.0-8-amd64 (goracle) \t01/26/2023 \t_x86_64_\t(64 CPU)", "",
        f"10:48:18 AM{HEADER}", _line("10:48:19 AM", 19216, 1.0, 2.0, core=10),
        _line("10:48:19 AM", 19217, 16.0, 12.0, core=11), "",
        f"10:48:19 AM{HEADER}", _line("10:48:20 AM", 19217, 30.0, 30.0, core=11), "",
        f"Average: {HEADER}"])
    samples = qp.parse_pidstat(text, "pidstat.txt")
    assert [(s.t_s, s.total_pct, s.user_pct, s.system_pct) for s in samples] == [
        (0, 31.0, 17.0, 14.0), (1, 60.0, 30.0, 30.0)]
    assert samples[0].core == 10  # the first line's core


def test_pidstat_two_intervals_with_the_same_clock_label_stay_two_samples():
    # Seen in the dataset (crypto/aes-noni/run3, lsquic-aes rep 24, client):
    # sampling jitter gives two consecutive intervals the label 11:57:31.
    text = "\n".join([
        f"11:57:30 PM{HEADER}", _line("11:57:31 PM", 48152, 43.0, 47.0, command="http_client"),
        "", f"11:57:31 PM{HEADER}", _line("11:57:31 PM", 48152, 42.0, 48.0,
                                          command="http_client"),
        "", f"11:57:31 PM{HEADER}", _line("11:57:32 PM", 48152, 45.0, 46.0,
                                          command="http_client")])
    assert [s.total_pct for s in qp.parse_pidstat(text)] == [90.0, 90.0, 91.0]


def test_pidstat_without_headers_splits_intervals_by_clock_and_crosses_midnight():
    text = "\n".join([_line("11:59:59 PM", 1, 10.0, 10.0), _line("11:59:59 PM", 2, 5.0, 5.0),
                      _line("12:00:00 AM", 1, 20.0, 20.0), _line("00:00:01", 1, 1.0, 1.0)])
    samples = qp.parse_pidstat(text)
    assert [(s.t_s, s.total_pct) for s in samples] == [(0, 30.0), (1, 40.0), (2, 2.0)]


def test_pidstat_filters_by_command():
    text = "\n".join([f"10:00:00 AM{HEADER}", _line("10:00:01 AM", 1, 10.0, 0.0, command="wget"),
                      _line("10:00:01 AM", 2, 50.0, 0.0, command="perf_5.10")])
    assert [s.total_pct for s in qp.parse_pidstat(text, commands=("wget",))] == [10.0]


def test_pidstat_of_a_process_that_never_ran_is_empty():
    text = pidstat_text("gard", "http_client", [], with_average=False)
    assert qp.parse_pidstat(text) == []


@pytest.mark.parametrize(("bad", "what"), [
    ("@@@ this is not pidstat output", "not a pidstat line"),
    ("\x00\x01garbage", "not a pidstat line"),
    ("05:24:33 AM     0    152907   31.00   6", "unreadable sample"),  # cut short
    ("05:24:33 AM     0    152907   31.00   66.00    0.00    0.00   xx.00    25  http_server",
     "unreadable sample"),
])
def test_pidstat_with_garbage_names_file_and_line(bad: str, what: str):
    good = pidstat_text("goracle", "http_server", [30.0, 90.0], with_average=True).splitlines()
    lines = [*good[:6], bad, *good[6:]]
    with pytest.raises(DataError) as err:
        qp.parse_pidstat("\n".join(lines), "results/x/server/pidstat.txt")
    assert err.value.path == "results/x/server/pidstat.txt"
    assert err.value.field == "pidstat"
    assert f"line 7: {what}" in err.value.reason
    assert "\n" not in str(err.value)


def test_pidstat_refuses_impossible_cpu():
    text = _line("10:00:01 AM", 1, 99999.0, 0.0)
    with pytest.raises(DataError, match="out of range"):
        qp.parse_pidstat(text, "p.txt")


def test_steady_window_drops_two_samples_at_each_end():
    samples = qp.parse_pidstat(pidstat_text("h", "c", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], True))
    assert [s.total_pct for s in qp.steady_window(samples)] == [3.0, 4.0]
    assert qp.steady_window(samples[:4]) == []


# -- netstat ----------------------------------------------------------------
def test_netstat_reads_the_udp_section_only():
    counters = qp.parse_netstat(netstat_text(100, 200, 7), "netstat-stop.txt")
    assert counters == {"received": 100, "unknown_port": 80, "rx_errors": 0, "sent": 200,
                        "rcvbuf_errors": 7, "sndbuf_errors": 4988}


@pytest.mark.parametrize("text", [
    "",
    "IcmpMsg:\n    InType3: 171\n",
    "Udp:\n    100 packets received\n    80 packets to unknown port received\n",  # truncated
    "Udp6:\n    100 packets received\n    200 packets sent\n",  # the wrong section
])
def test_netstat_empty_or_truncated_is_refused(text: str):
    with pytest.raises(DataError) as err:
        qp.parse_netstat(text, "client/netstat-stop.txt")
    assert err.value.path == "client/netstat-stop.txt"
    assert "packets sent/received" in err.value.reason


# -- ethtool ----------------------------------------------------------------
def test_ethtool_broadcom_totals_ignore_per_queue_lines():
    counters = qp.parse_ethtool(ethtool_text(1, 2, 3, 4), "ethtool-start.txt")
    assert counters == {"rx_frames": 1, "tx_frames": 2, "rx_bytes": 3, "tx_bytes": 4,
                        "rx_discards": 0, "tx_discards": 0}


def test_ethtool_other_drivers_use_their_names():
    mlx5 = "NIC statistics:\n     rx_packets_phy: 5\n     tx_packets_phy: 6\n" \
           "     rx_bytes_phy: 7\n     tx_bytes_phy: 8\n     rx_discards_phy: 1\n"
    assert qp.parse_ethtool(mlx5) == {"rx_frames": 5, "tx_frames": 6, "rx_bytes": 7,
                                      "tx_bytes": 8, "rx_discards": 1}
    intel = "NIC statistics:\n     rx_packets: 9\n     tx_packets: 10\n     rx_missed_errors: 2\n"
    assert qp.parse_ethtool(intel) == {"rx_frames": 9, "tx_frames": 10, "rx_discards": 2}


@pytest.mark.parametrize(("text", "reason"), [
    ("", "no NIC statistics"),
    ("NIC statistics:\n     [0]: rx_ucast_packets: 14057358\n", "no NIC statistics"),
    ("NIC statistics:\n     rx_64b_frames: 64926\n     tpa_packets: 0\n", "none of the NIC totals"),
])
def test_ethtool_without_totals_is_refused(text: str, reason: str):
    with pytest.raises(DataError) as err:
        qp.parse_ethtool(text, "server/ethtool-stop.txt")
    assert err.value.path == "server/ethtool-stop.txt"
    assert reason in err.value.reason


# -- time.json --------------------------------------------------------------
def test_time_json():
    assert qp.parse_time_json('{"start": 10, "end": 30}') == (10, 30)


@pytest.mark.parametrize(("text", "reason"), [
    ("", "expected"),
    ("{\"start\": 1", "expected"),
    ('{"start": 1}', "expected"),
    ('{"start": "soon", "end": 5}', "expected"),
    ('{"start": 5, "end": 5}', "is not after start"),
])
def test_time_json_malformed_is_refused(text: str, reason: str):
    with pytest.raises(DataError) as err:
        qp.parse_time_json(text, "client/time.json")
    assert err.value.path == "client/time.json" and reason in err.value.reason


# -- output.txt and result.json ---------------------------------------------
def test_output_success_and_failure():
    ok = qp.parse_output(output_text(212992, 23.0))
    assert ok.rmem_values == [212992, 212992]
    assert ok.succeeded is True
    assert ok.goodput_mbps == pytest.approx(2987.8, abs=0.1)
    assert ok.transferred_mb == 8589.93
    failed = qp.parse_output(output_text(212992, None))
    assert failed.succeeded is False and failed.goodput_mbps is None
    assert qp.parse_output("").succeeded is None


def test_result_json():
    result = qp.parse_result_json(result_json({("lsquic", "quiche"): [1.5, 2.5]}))
    assert result.server_node == "goracle" and result.client_node == "gard"
    assert result.details == {("lsquic", "quiche"): [1.5, 2.5]}
    assert result.filesize == {("lsquic", "quiche"): 8589934592}
    assert result.bandwidth_limit is None  # the runner writes the string "None"
    assert result.commits["server:lsquic"] == "0123abcd"


@pytest.mark.parametrize(("text", "reason"), [
    ("{not json", "not valid JSON"),
    (json.dumps({"args": {}}), "no measurements"),
    (json.dumps({"measurements": "none"}), "not a list of lists"),
    (json.dumps({"measurements": [["goodput"]]}), "a measurement is not an object"),
    (json.dumps({"measurements": [[{"server": "a", "client": "b", "filesize": "8GB"}]]}),
     "'8GB' is not a number"),
    (json.dumps({"measurements": [[{"server": "a", "client": "b", "filesize": 1.5}]]}),
     "1.5 is not a whole number"),
    (json.dumps({"measurements": [[{"server": "a", "client": "b", "details": ["n/a"]}]]}),
     "'n/a' is not a number"),
    (json.dumps({"measurements": [[{"server": "a", "client": "b", "details": "2.5"}]]}),
     "not a list of goodputs"),
])
def test_result_json_malformed_is_refused(text: str, reason: str):
    with pytest.raises(DataError) as err:
        qp.parse_result_json(text, "results/x/result.json")
    assert err.value.path == "results/x/result.json" and reason in err.value.reason
