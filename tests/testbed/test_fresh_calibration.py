"""``quiclab calibrate --source fresh`` on synthetic calibration runs: the bulk fit and
the request terms (issue 10) the fresh models carry (no root, no runs)."""

from __future__ import annotations

import json

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
                         for s, g in (("quic-go", 2000.0), ("xnet-quic", 900.0))])
    points = pd.DataFrame(read_csv(packaged_dir() / "mukherjee25.csv"))
    host = host_cpu_from_cpuinfo(CPUINFO, CpuCatalog.packaged())
    return fit_fresh(runs, points, host)


def test_every_stack_with_calibration_runs_gets_a_model(fit):
    assert sorted(fit.models) == ["quic-go", "xnet-quic"]
    assert fit.base_rtt_us == pytest.approx(50.0)
    model = fit.models["quic-go"]
    assert model.reference_cpu == fit.host.name
    assert model.sender.ns_per_packet.value > 0


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
