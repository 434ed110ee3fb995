"""Kernel TCP calibration: per-unit costs recovered from synthetic runs, the kernel's
CPU-scaling power from a seed-002-like point, the published model's pieces."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.tcp import (
    QirCell,
    fit_host,
    fit_kernel_scaling,
    host_costs,
    run_counts,
)
from quiclab.models.cpus import CpuCatalog

#: Costs the synthetic runs are made of (ns, ns/B): what the fit must find again.
TRUE = {"tx_call": 3000.0, "tx_byte": 0.05, "tx_skb": 900.0, "tx_segment": 200.0,
        "csum_byte": 0.2, "ack": 500.0, "rx_frame": 150.0, "gro_frame": 60.0, "rx_skb": 700.0,
        "wake_out": 9000.0, "rx_call": 1200.0, "rx_byte": 0.12, "wake_in": 5000.0,
        "record_out": 1500.0, "record_in": 1800.0}
ENC = {"aes-ni": 0.25, "chacha20": 0.4, "aes-sw": 3.0}
DEC = {"aes-ni": 0.3, "chacha20": 0.5, "aes-sw": 3.2}


def _run(i: int, tls: bool, tso: bool, gso: bool, gro: bool, csum: bool = True,
         mtu: int = 1500, cipher: str = "aes-ni", record: int = 16384,
         wake: float = 0.7) -> dict:
    size = 400_000_000
    wire = size * ((record + 22) / record if tls else 1.0)
    mss = mtu - 52
    segments = wire / mss
    write = record + 22 if tls else 131072
    writes = wire / write
    goal = (65535 - 320) // mss  # TCP's size goal in segments (sim/tcp.py)
    frames = segments / max(1.0, min(goal, 0.8 * write / mss)) if tso else segments
    # TCP always builds GSO skbs (the device's gso flag does not reach it); without TSO
    # they are cut into segments in software, which the peer's GRO gathers again.
    tcp_skbs = frames if tso else segments / max(1.0, min(goal, write / mss))
    rx_skbs = frames if tso else (tcp_skbs if gro else segments)
    acks = segments / 14.0
    reads = size / (11000 if tls else 60000)
    records = size / record if tls else 0.0
    wakes = writes * wake
    s_sys = (TRUE["tx_call"] * writes + TRUE["tx_byte"] * wire + TRUE["tx_skb"] * tcp_skbs
             + TRUE["tx_segment"] * (0 if tso else segments)
             + TRUE["csum_byte"] * (0 if csum else 2 * wire) + TRUE["ack"] * acks
             + TRUE["rx_frame"] * frames + TRUE["gro_frame"] * (frames if gro else 0)
             + TRUE["rx_skb"] * rx_skbs + TRUE["wake_out"] * wakes) / 1e9
    r_sys = (TRUE["rx_call"] * reads + TRUE["rx_byte"] * wire + TRUE["wake_in"] * wakes) / 1e9
    s_user = (TRUE["record_out"] * records + ENC[cipher] * wire * tls) / 1e9
    r_user = (TRUE["record_in"] * records + DEC[cipher] * wire * tls) / 1e9
    extra = {
        "tcp": {"data_segments": segments, "tx_skbs": frames, "acks": acks,
                "records_out": records},
        "effective": {"tls": tls, "tso": tso, "gso": gso, "gro": gro, "csum_offload": csum,
                      "cipher": cipher if tls else "none"},
        "scenario": {"tls_record_bytes": record, "mtu_bytes": mtu},
        "window_cpu_s": {"server": {"user": s_user, "system": s_sys},
                         "client": {"user": r_user, "system": r_sys}},
        "client_exit": {"voluntary_switches": wakes}, "server_exit": {"voluntary_switches": 10},
        "client_report": {"transfer_s": (s_sys + s_user) / 0.95},
        "host": {"background_cores": 0.0}, "cores": {"server": {"source": "pinned"}}}
    return {"run_id": f"fresh-tcp-calibration-{i:04d}", "status": "ok",
            "server_impl": "tcp+tls" if tls else "tcp", "experiment": "tcp-calibration",
            "setting": f"s{i}", "filesize_bytes": size, "mtu_bytes": mtu,
            "server_syscalls": writes, "client_syscalls": reads, "server_core": 0,
            "goodput_mbps": size * 8 / ((s_sys + s_user) / 0.95) / 1e6,
            "extra": json.dumps(extra)}


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    settings = [dict(tso=a, gso=b, gro=c) for a, b, c in
                ((1, 1, 1), (1, 1, 0), (0, 1, 1), (0, 1, 0), (0, 0, 1), (0, 0, 0), (1, 0, 1))]
    rows = []
    i = 0
    for kw in settings:
        for tls, mtu, cipher, record, csum in ((True, 1500, "aes-ni", 16384, True),
                                               (True, 9000, "chacha20", 16384, True),
                                               (True, 1500, "aes-sw", 16384, True),
                                               (True, 1500, "aes-ni", 4096, True),
                                               (False, 1500, "aes-ni", 16384, True),
                                               (False, 9000, "aes-ni", 16384, kw["tso"] == 0)):
            i += 1
            rows.append(_run(i, tls, bool(kw["tso"]), bool(kw["gso"]), bool(kw["gro"]), csum,
                             mtu, cipher, record, wake=float(rng.uniform(0.2, 1.2))))
    return pd.DataFrame(rows)


def test_counts_come_from_the_recorded_runs(runs):
    items = run_counts(runs)
    assert len(items) == len(runs)
    first = items[0]
    assert first.tls and first.tso and first.writes == pytest.approx(400e6 / 16384)
    assert first.rx_skbs == first.frames and first.r_wakeups > 0


def test_the_fit_finds_the_costs_the_runs_are_made_of(runs):
    fit = fit_host(runs, bootstrap=20)
    s, r = fit.terms["s_sys"], fit.terms["r_sys"]
    for name in ("tx_call", "tx_skb", "tx_segment", "csum_byte", "rx_skb", "wake_out"):
        assert s[f"kernel.{name}"][0] == pytest.approx(TRUE[name], rel=0.02), name
    assert r["kernel.rx_byte"][0] == pytest.approx(TRUE["rx_byte"], rel=0.02)
    assert r["kernel.wake_in"][0] == pytest.approx(TRUE["wake_in"], rel=0.02)
    su = fit.terms["s_user"]
    assert su["user.aes-sw"][0] == pytest.approx(ENC["aes-sw"], rel=0.02)
    assert su["user.record"][0] == pytest.approx(TRUE["record_out"], rel=0.05)
    # Exact data: the intervals hold the value and the residuals are nil.
    lo, hi = s["kernel.tx_call"][1:]
    assert lo <= TRUE["tx_call"] * 1.001 and hi >= TRUE["tx_call"] * 0.999
    assert fit.residuals["error_pct"].abs().max() < 1.0
    # Each kind of run has its own wake-up law; each model carries its own.
    for kind in ("tls", "plain"):
        law = fit.facts[f"wake_law_{kind}"]["value"]
        assert law["k"] >= 0 and law["cap"] > 0
    assert host_costs(fit, True).facts["wake_law"] == fit.facts["wake_law_tls"]
    assert host_costs(fit, False).facts["wake_law"] == fit.facts["wake_law_plain"]


def test_host_costs_carry_every_term_with_its_source(runs):
    fit = fit_host(runs, bootstrap=20)
    tls, plain = host_costs(fit, True), host_costs(fit, False)
    assert tls.fact("placement") == "veth" and tls.fact("tls") is True
    assert plain.user["record_out"].value == 0 and not plain.encrypt
    assert set(tls.encrypt) == {"aes-ni", "chacha20", "aes-sw"}
    assert tls.kernel["ack_in"].value == pytest.approx(TRUE["ack"] / 2, rel=0.05)
    assert all(p.source.startswith(("fit:", "derived:", "assumed:")) for _, p in tls.params())


def test_an_experiment_without_runs_is_refused():
    with pytest.raises(ValueError, match="no ok tcp\\+tls/tcp runs of experiment 'nope'"):
        fit_host(pd.DataFrame({"experiment": [], "status": [], "server_impl": []}), "nope")


def test_the_kernel_scaling_power_reproduces_its_point():
    cell = QirCell("aes-ni", 7900.0, 0.35, 0.3, 0.33, 0.67, 20.0, 0.65, 1.0, 40)
    points = pd.DataFrame([{"point_id": "kempf24-065", "value": -3.0}])
    cpus = CpuCatalog.packaged()
    gamma, r = fit_kernel_scaling({"aes-ni": cell}, points, cpus)
    cost = cell.r_user * r + cell.r_sys * r ** gamma.value
    assert (cell.r_user + cell.r_sys) / cost - 1 == pytest.approx(-0.03, abs=1e-9)
    assert gamma.lo < gamma.value < gamma.hi and "kempf24-065" in gamma.source
    # Without the point the rule stands, and says it is assumed.
    g0, _ = fit_kernel_scaling({"aes-ni": cell}, points[:0], cpus)
    assert g0.value == 1.0 and g0.source.startswith("assumed:")
    assert math.isfinite(r) and r < 1.0  # the Intel part is faster by the rule
