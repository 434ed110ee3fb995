"""Fresh models fitted on runs made over SSH take the hosts' CPU and link, not this
machine's."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from quiclab.calibration.fresh import CALIBRATION_EXPERIMENT, recorded_host, recorded_link_gbps


def _host(name: str, model: str, speed: int | None) -> dict[str, object]:
    return {"kind": "ssh", "name": name, "hostname": name, "host_id": f"{name}-1",
            "cpu": {"name": f"host: {model}", "vendor": "Intel", "microarchitecture": "skylake",
                    "year": 0, "max_ghz": 3.7, "base_ghz": 3.7, "cores": 16, "threads": 16,
                    "numa_nodes": 2, "nic_numa_node": 0, "aes_ni": True},
            "nic": {"speed_mbps": speed}}


def _runs(*pairs: tuple[dict[str, object], dict[str, object]] | None) -> pd.DataFrame:
    return pd.DataFrame([{"experiment": CALIBRATION_EXPERIMENT,
                          "extra": json.dumps({"hosts": {"server": s, "client": c}}
                                              if pair else {})}
                         for pair in pairs for s, c in [pair or ({}, {})]])


def test_runs_made_over_ssh_give_their_servers_cpu_and_the_slower_nic():
    a, b = _host("a", "Xeon W-2145", 25000), _host("b", "Xeon W-2145", 10000)
    runs = _runs((a, b), (a, b))
    cpu = recorded_host(runs)
    assert cpu is not None and cpu.name == "host: Xeon W-2145" and cpu.numa_nodes == 2
    assert cpu.sources == ("/proc/cpuinfo of a (a, a-1)",)
    assert recorded_link_gbps(runs) == 10.0


def test_runs_made_here_leave_the_host_to_this_machine():
    assert recorded_host(_runs(None, None)) is None
    assert recorded_link_gbps(_runs(None)) is None


def test_calibration_runs_from_two_cpus_are_refused():
    runs = _runs((_host("a", "X", 1), _host("b", "X", 1)),
                 (_host("c", "Y", 1), _host("d", "Y", 1)))
    with pytest.raises(ValueError, match=r"more than one host CPU \(host: X, host: Y\)"):
        recorded_host(runs)
    with pytest.raises(ValueError, match="and this machine"):
        recorded_host(_runs((_host("a", "X", 1), _host("b", "X", 1)), None))
