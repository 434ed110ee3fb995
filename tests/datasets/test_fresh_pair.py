"""The testbed of fresh runs made on an inventory's two hosts over SSH."""

from __future__ import annotations

import json

from quiclab.datasets import testbeds
from quiclab.datasets.catalog import Catalog


def _host(name: str, speed: int) -> dict[str, object]:
    return {"kind": "ssh", "name": name, "kernel": "6.1.0-18-amd64",
            "cpu": {"name": "host: Intel Xeon W-2145", "max_ghz": 3.7, "cores": 16,
                    "threads": 16},
            "nic": {"driver": "mlx5_core", "interface": "enp65s0f0np0", "firmware": "16.35",
                    "speed_mbps": speed}}


def test_a_host_pairs_testbed_is_described_from_its_hosts(tmp_path):
    with Catalog(tmp_path / "c.duckdb") as cat:
        cat.upsert("runs", [{
            "run_id": "fresh-x-k-cesis-gard-r0", "source": "fresh", "experiment": "x",
            "server_impl": "quic-go", "client_impl": "quic-go", "status": "ok",
            "testbed": "fresh-cesis-gard", "hostpair": "cesis-gard", "start_ns": 1,
            "cpu": "host: Intel Xeon W-2145",
            "extra": json.dumps({"hosts": {"server": _host("cesis", 25000),
                                           "client": _host("gard", 10000)}})}])
        testbeds.load(cat)
        tb = testbeds.by_id(cat)["fresh-cesis-gard"]
    assert tb.kind == "fresh" and tb.description.startswith("fresh runs on two hosts over SSH")
    assert tb.cpu == "host: Intel Xeon W-2145" and tb.cores == 16 and tb.link_gbps == 10.0
    assert tb.kernel == "6.1.0-18-amd64" and "mlx5_core" in (tb.nic or "")
    assert [h.name for h in tb.hosts] == ["cesis", "gard"]
    assert [h.role for h in tb.hosts] == ["server", "client"]
