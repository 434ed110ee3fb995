"""Request and handshake workloads on the testbed and the core each side ran on:
configuration, refusals, parsing the client's report, the core sampler, and
real runs of quic-go in request and new-connection mode (marked ``testbed``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from quiclab.datasets.catalog import Catalog
from quiclab.testbed import collect, record
from quiclab.testbed.config import (
    RunConfig,
    expected_seconds,
    parse_set,
    request_count,
    resolve,
)
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.runner import RunResult, Side, _verdict
from quiclab.testbed.session import Session
from quiclab.testbed.stacks import STACKS

REQUESTS = ["workload=requests", "request_bytes=2000", "requests=300", "connections=2",
            "streams=4"]
HANDSHAKES = ["workload=handshakes", "request_bytes=1000", "requests=40", "connections=2"]


def config(server: str, client: str, *items: str, nbytes: int | None = None,
           experiment: str = "adhoc") -> RunConfig:
    changes, knobs = parse_set(list(items))
    return RunConfig.build(server, client, changes, knobs, transfer_bytes=nbytes,
                           experiment=experiment)


# -- configuration (no root) -----------------------------------------------------
def test_request_mode_flags_reach_both_peers():
    c = config("quic-go", "xnet-quic", *REQUESTS)
    assert c.scenario.transfer_bytes == 300 * 2000  # what the client receives in all
    r = resolve(c, STACKS["quic-go"], STACKS["xnet-quic"])
    for args in (r.server_args, r.client_args):
        assert {"--requests=300", "--connections=2", "--streams=4"} <= set(args)
    assert not any(a.startswith("--new-connection") for a in r.client_args)
    assert r.effective["workload"] == "requests" and r.effective["requests"] == 300


def test_handshakes_open_a_connection_per_request():
    c = config("quic-go", "quic-go", *HANDSHAKES)
    r = resolve(c, STACKS["quic-go"], STACKS["quic-go"])
    assert "--new-connection=true" in r.client_args
    assert "--new-connection=true" not in r.server_args
    assert "--streams=1" in r.server_args and r.effective["streams"] == 1
    # Without requests=, one request per connection (the Scenario's rule).
    c = config("quic-go", "quic-go", "workload=handshakes", "request_bytes=100",
               "connections=5")
    assert request_count(c.scenario) == 5 and c.scenario.transfer_bytes == 500


def test_request_runs_get_time_for_their_requests():
    bulk = config("quic-go", "quic-go", nbytes=600_000)
    reqs = config("quic-go", "quic-go", *REQUESTS)
    shakes = config("quic-go", "quic-go", "workload=handshakes", "request_bytes=100",
                    "requests=1000")
    go = STACKS["quic-go"]
    assert expected_seconds(reqs, go, go) == pytest.approx(
        expected_seconds(bulk, go, go) + 300 / go.min_requests_per_s)
    assert expected_seconds(shakes, go, go) > 1000 / go.min_handshakes_per_s


@pytest.mark.parametrize(("server", "client", "items", "nbytes", "message"), [
    ("aioquic", "aioquic", REQUESTS, None,
     r"^workload=requests cannot be honoured by aioquic: its peer runs bulk only$"),
    ("quic-go", "quinn", HANDSHAKES, None,
     r"^workload=handshakes cannot be honoured by quinn: its peer runs bulk only$"),
    ("quic-go", "quic-go", ["streams=4"], None,
     r"^streams=4 needs workload=requests or workload=handshakes: a bulk run"),
    ("quic-go", "quic-go", ["connections=3"], None, r"^connections=3 needs workload="),
    ("quic-go", "quic-go", REQUESTS, 1000,
     r"^transfer_bytes=1000 cannot be set with workload=requests"),
    ("quic-go", "quic-go", [*HANDSHAKES, "streams=2"], None,
     r"^streams=2 cannot be set with workload=handshakes"),
    ("quic-go", "quic-go", [f"server_core={os.cpu_count() or 1}"], None,
     r"^server_core=\d+ cannot be honoured: this host has \d+ core"),
])
def test_what_a_stack_cannot_run_is_refused_in_one_line(server, client, items, nbytes,
                                                         message):
    with pytest.raises(TestbedError, match=message) as err:
        c = config(server, client, *items, nbytes=nbytes)
        resolve(c, STACKS[server], STACKS[client])
    assert "\n" not in str(err.value)


def test_explicit_cores_and_pin_are_the_pinned_cores():
    last = (os.cpu_count() or 1) - 1
    r = resolve(config("quic-go", "quic-go", f"client_core={last}"), STACKS["quic-go"],
                STACKS["quic-go"])
    assert r.effective["client_pinned_core"] == last
    assert r.effective["server_pinned_core"] is None
    r = resolve(config("quic-go", "quic-go", "pin=true"), STACKS["quic-go"], STACKS["quic-go"])
    assert r.effective["server_pinned_core"] == 0
    assert r.effective["client_pinned_core"] == min(1, last)


# -- the client's report into a row (no root) ------------------------------------
REPORT = {"role": "client", "requests": 300, "bytes": 600_000, "transfer_s": 0.25,
          "requests_per_s": 1200.0, "goodput_mbps": 19.2, "latency_p50_ms": 1.5,
          "latency_p90_ms": 2.5, "latency_p99_ms": 4.0, "handshake_ms": 3.0,
          "connections_opened": 2}


def _result(c: RunConfig, client_report: dict, status: str = "ok") -> RunResult:
    r = resolve(c, STACKS[c.scenario.server], STACKS[c.scenario.client])
    server = Side(c.scenario.server, report={"role": "server", "requests": 300},
                  snmp={"Udp": {"OutDatagrams": 900, "InDatagrams": 700}},
                  core=1, core_source="observed", core_shares={0: 0.25, 1: 0.75})
    client = Side(c.scenario.client, report=client_report,
                  snmp={"Udp": {"OutDatagrams": 650, "InDatagrams": 880}})
    return RunResult("fresh-x-r0", c, 0, status, None, server, client, effective=r.effective)


def test_a_request_run_row_has_the_request_fields():
    c = config("xnet-quic", "xnet-quic", *REQUESTS)
    row = record.run_row(_result(c, REPORT), "host: test", True)
    assert row["workload"] == "requests" and row["request_bytes"] == 2000
    assert row["requests"] == 300 and row["connections"] == 2 and row["streams"] == 4
    assert row["requests_per_s"] == 1200.0 and row["runtime_s"] == 0.25
    assert (row["latency_p50_ms"], row["latency_p90_ms"], row["latency_p99_ms"]) == (
        1.5, 2.5, 4.0)
    assert row["filesize_bytes"] == 600_000
    # x/net/quic has no packet statistics and no GSO: its datagrams are its packets.
    assert row["data_packets"] == 900 and row["ack_packets"] == 650
    assert row["server_core"] == 1 and row["client_core"] is None
    extra = json.loads(row["extra"])
    assert extra["packets_from"] == {"data_packets": "udp_datagrams",
                                     "ack_packets": "udp_datagrams"}
    assert extra["cores"]["server"] == {"core": 1, "source": "observed",
                                        "shares": {"0": 0.25, "1": 0.75}}


def test_a_bulk_run_row_leaves_the_request_fields_empty():
    c = config("quic-go", "quic-go", nbytes=1000)
    report = {"role": "client", "bytes": 1000, "transfer_s": 0.01, "goodput_mbps": 0.8,
              "packets_sent": 12}
    row = record.run_row(_result(c, report), "host: test", True)
    assert row["workload"] == "bulk" and row["streams"] == 1
    assert all(row[k] is None for k in ("request_bytes", "requests", "connections",
                                        "requests_per_s", "latency_p50_ms",
                                        "latency_p90_ms", "latency_p99_ms"))
    assert row["ack_packets"] == 12  # the stack's own count wins


def test_a_request_run_that_falls_short_fails():
    c = config("quic-go", "quic-go", *REQUESTS)
    short = {**REPORT, "requests": 299, "bytes": 598_000}
    result = _result(c, short)
    status, reason = _verdict(result, collect.Exit(0), collect.Exit(0), STACKS["quic-go"],
                              STACKS["quic-go"], c)
    assert status == "failed" and reason == "client completed 299 of 300 requests"
    result = _result(c, REPORT)
    assert _verdict(result, collect.Exit(0), collect.Exit(0), STACKS["quic-go"],
                    STACKS["quic-go"], c) == ("ok", None)


# -- the core sampler (no root) -----------------------------------------------------
def test_the_sampler_sees_the_core_a_busy_process_is_pinned_to():
    core = (os.cpu_count() or 1) - 1
    busy = subprocess.Popen([sys.executable, "-c",
                             "import os, time\n"
                             f"os.sched_setaffinity(0, {{{core}}})\n"
                             # 0.8 s of its own CPU, however loaded the host is.
                             "end = time.process_time() + 0.8\n"
                             "while time.process_time() < end: pass\n"])
    try:
        sampler = collect.CpuSampler(busy.pid, interval_s=0.5, core_interval_s=0.05).start()
        busy.wait(timeout=10)
        time.sleep(0.1)
        sampler.stop()
    finally:
        busy.kill()
        busy.wait()
    assert sampler.main_core() == core
    shares = sampler.core_shares()
    assert shares[core] > 0.8 and sum(shares.values()) == pytest.approx(1.0)
    assert sum(sampler.core_seconds.values()) > 0.3  # most of its 0.8 s of CPU
    assert sampler.samples and sampler.samples[0].core == core



def test_an_idle_process_still_has_the_core_it_was_last_seen_on():
    """A side that uses less than a clock tick of CPU is credited no core time (a
    short request run's server); its core is then where it was last seen."""
    idle = subprocess.Popen(["sleep", "0.5"])
    try:
        sampler = collect.CpuSampler(idle.pid, interval_s=0.5, core_interval_s=0.05).start()
        time.sleep(0.3)
        sampler.stop()
    finally:
        idle.kill()
        idle.wait()
    # sleep(1) uses (almost) no CPU, so main_core() may be None; last_core() is not.
    assert sampler.last_core() in range(os.cpu_count() or 1)


def test_a_run_shorter_than_a_second_still_has_a_cpu_sample():
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\n"
                             "end = time.time() + 0.4\n"
                             "while time.time() < end: pass\n"])
    try:
        sampler = collect.CpuSampler(busy.pid).start()
        busy.wait(timeout=10)
        time.sleep(0.3)
        samples = sampler.stop()
    finally:
        busy.kill()
        busy.wait()
    # One partial sample, ending at the last reading of the live process (not at stop()).
    [sample] = samples
    span_s = (sample.end_ns - sample.start_ns) / 1e9
    assert 0.1 <= span_s < 1.0
    assert sample.total_pct > 10


# -- real runs (root, namespaces) ---------------------------------------------------
@pytest.fixture(scope="module")
def session(root, quic_go, paths, builder, tmp_path_factory) -> Session:
    from quiclab.testbed.runner import Testbed

    catalog = tmp_path_factory.mktemp("cat") / "fresh.duckdb"
    return Session(Testbed(paths, builder=builder, startup_s=5.0), catalog,
                   log=lambda line: None)


def _row(session: Session, run_id: str) -> dict:
    assert session.catalog_path is not None
    with Catalog(session.catalog_path, read_only=True) as cat:
        return cat.df("SELECT * FROM runs WHERE run_id = ?", [run_id]).to_dict("records")[0]


@pytest.mark.testbed
def test_quic_go_answers_requests_over_connections_and_streams(session):
    c = config("quic-go", "quic-go", *REQUESTS, experiment="test-requests")
    [result] = session.run(c, 1)
    assert result.status == "ok", result.failure_reason
    report = result.client.report
    assert report["requests"] == 300 and report["bytes"] == 600_000
    assert report["connections_opened"] == 2
    assert result.server.report["requests"] >= 300
    assert result.requests_per_s and result.requests_per_s > 10
    assert 0 < report["latency_p50_ms"] <= report["latency_p90_ms"] <= report["latency_p99_ms"]
    row = _row(session, result.run_id)
    assert row["workload"] == "requests" and row["requests"] == 300
    assert row["connections"] == 2 and row["streams"] == 4
    assert row["requests_per_s"] == pytest.approx(300 / row["runtime_s"], rel=1e-6)
    assert row["data_packets"] > 0 and row["latency_p90_ms"] > 0
    # Unpinned: the core each side's threads used most (or, for a server that used
    # less than a clock tick of CPU in this short run, the one it was last seen on).
    assert row["server_core"] in range(os.cpu_count() or 1)
    assert json.loads(row["extra"])["cores"]["server"]["source"] in ("observed", "last-seen")


@pytest.mark.testbed
def test_quic_go_opens_a_connection_per_request_pinned(session):
    c = config("quic-go", "quic-go", *HANDSHAKES, "pin=true", experiment="test-requests")
    [result] = session.run(c, 1)
    assert result.status == "ok", result.failure_reason
    report = result.client.report
    assert report["requests"] == 40 and report["connections_opened"] == 40
    assert result.server.report["connections"] == 40
    row = _row(session, result.run_id)
    assert row["workload"] == "handshakes" and row["streams"] == 1
    assert row["handshake_ms"] > 0 and row["latency_p50_ms"] >= row["handshake_ms"] * 0.5
    assert (row["server_core"], row["client_core"]) == (0, min(1, (os.cpu_count() or 1) - 1))
    assert json.loads(row["extra"])["cores"]["client"]["source"] == "pinned"
