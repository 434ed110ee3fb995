"""Stage A's CPU regression on synthetic runs whose true costs and noise are known.

Runs are drawn from the model the estimator fits — µs per data packet =
cost[cipher] + ACK cost × ACKs per packet — with Gaussian noise of a known
standard deviation, so the right answers are the drawn parameters and the
right 95 % interval half-width is 1.96 standard errors, by the textbook
formula for least squares, Cov = σ²·(XᵀX)⁻¹ with X the design (one intercept
per cipher, the common ACK slope). None of the expectations is read from the
estimator.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.cpu import CpuCostEstimator

#: True costs (µs per data packet on the dataset's CPU) and noise.
SENDER = {"aes-ni": 3.0, "chacha20": 3.6}
RECEIVER = {"aes-ni": 2.2, "chacha20": 2.9}
SENDER_ACK_US, RECEIVER_ACK_US = 1.2, 0.8
NOISE_US = 0.05  # sd of one run's µs per packet (pidstat over a 10 s transfer)
RUNS_PER_CIPHER = 40
PACKETS = 1_000_000


def _runs(seed: int, impl: str = "lsquic", n: int = RUNS_PER_CIPHER,
          sender_ack_us: float = SENDER_ACK_US) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for cipher in SENDER:
        acks = rng.uniform(0.05, 0.5, n)  # ACKs per data packet
        s_us = SENDER[cipher] + sender_ack_us * acks + rng.normal(0, NOISE_US, n)
        r_us = RECEIVER[cipher] + RECEIVER_ACK_US * acks + rng.normal(0, NOISE_US, n)
        for k in range(n):
            rows.append({"run_id": f"{impl}-{cipher}-{k}", "status": "ok", "server_impl": impl,
                         "client_impl": impl, "server_build": None, "cipher": cipher,
                         "data_packets": PACKETS, "client_udp_received": PACKETS,
                         "ack_packets": acks[k] * PACKETS,
                         "server_cpu_s": s_us[k] * PACKETS * 1e-6,
                         "client_cpu_s": r_us[k] * PACKETS * 1e-6,
                         "filesize_bytes": 8 * 2**30, "goodput_mbps": 3000.0})
    return pd.DataFrame(rows)


def _standard_errors_us(runs: pd.DataFrame) -> dict[str, float]:
    """√diag(σ²·(XᵀX)⁻¹) of least squares with the known σ: per cipher and "ack" (µs)."""
    ciphers = sorted(SENDER)
    acks = (runs["ack_packets"] / PACKETS).to_numpy()
    X = np.column_stack([(runs["cipher"] == c).to_numpy(float) for c in ciphers] + [acks])
    se = NOISE_US * np.sqrt(np.diag(np.linalg.inv(X.T @ X)))
    return dict(zip([*ciphers, "ack"], se, strict=True))


@pytest.fixture(scope="module")
def fitted():
    runs = _runs(seed=1)
    return CpuCostEstimator().fit(runs), runs


def test_the_drawn_costs_are_recovered_within_their_standard_error(fitted):
    est, runs = fitted
    for role, truth, ack in (("sender", SENDER, SENDER_ACK_US),
                             ("receiver", RECEIVER, RECEIVER_ACK_US)):
        costs = est.costs_[("lsquic", role)]
        assert set(costs) == {"ns_per_packet.aes-ni", "ns_per_packet.chacha20", "ns_per_ack"}
        se = {k: v * 1e3 for k, v in _standard_errors_us(runs).items()}  # ns
        for name, true_ns, n in [*((f"ns_per_packet.{c}", us * 1e3, RUNS_PER_CIPHER)
                                   for c, us in truth.items()),
                                 ("ns_per_ack", ack * 1e3, 2 * RUNS_PER_CIPHER)]:
            c, s = costs[name], se[name.split(".")[-1].replace("ns_per_", "")]
            assert abs(c.value - true_ns) < 4 * s, (role, name, c.value, true_ns)
            # The 95 % interval is ±1.96 SE around the estimate: Huber's M-estimator is
            # 95 % efficient under Gaussian noise (SE √(1/0.95) = 1.03 × least squares'),
            # and its noise scale is RLM's MAD of 80 residuals, whose relative sd is
            # 1/√(0.37 · 2 · 80) ≈ 13 % (the MAD is 37 % efficient): ±2.5 sd.
            half = (c.hi - c.lo) / 2
            assert 0.7 * 1.96 * s < half < 1.35 * 1.96 * s, (role, name, half, s)
            assert c.lo < c.value < c.hi
            assert c.n == n
        assert est.residual_sd_[("lsquic", role)] == pytest.approx(NOISE_US, rel=0.25)
        assert f"({2 * RUNS_PER_CIPHER} runs)" in costs["ns_per_ack"].rows


def test_the_intervals_cover_the_truth_about_95_percent_of_the_time():
    """Over 20 independent draws a 95 % interval misses the truth in 1 on average;
    4 or more misses of one parameter has probability 0.016 (binomial)."""
    misses = {"aes-ni": 0, "chacha20": 0, "ack": 0}
    for seed in range(100, 120):
        est = CpuCostEstimator().fit(_runs(seed))
        costs = est.costs_[("lsquic", "sender")]
        for cipher, us in SENDER.items():
            c = costs[f"ns_per_packet.{cipher}"]
            misses[cipher] += not c.lo <= us * 1e3 <= c.hi
        a = costs["ns_per_ack"]
        misses["ack"] += not a.lo <= SENDER_ACK_US * 1e3 <= a.hi
    assert max(misses.values()) <= 3, misses


def test_an_ack_cheaper_than_the_floor_is_raised_to_it():
    """An ACK is a system call and a decryption: never below ack_floor_ns (200 ns)."""
    est = CpuCostEstimator(ack_floor_ns=200.0).fit(_runs(seed=2, sender_ack_us=0.05))
    a = est.costs_[("lsquic", "sender")]["ns_per_ack"]
    assert a.value == 200.0
    assert a.lo >= 100.0 and a.hi >= 200.0


def test_only_clean_same_pair_runs_count_and_too_few_runs_give_nothing():
    runs = _runs(seed=3)
    noise = _runs(seed=4, impl="quiche", n=9)  # 18 runs: below min_runs = 20
    bad = runs.iloc[:6].copy()
    bad["server_cpu_s"] *= 10  # ten times the cost, in runs that must not count:
    bad.loc[bad.index[0], "status"] = "failed"
    bad.loc[bad.index[1], "server_build"] = "march"
    bad.loc[bad.index[2], "client_impl"] = "quiche"
    bad.loc[bad.index[3], ["server_impl", "client_impl"]] = "tcp+tls"
    bad.loc[bad.index[4], "data_packets"] = np.nan
    bad.loc[bad.index[5], "server_cpu_s"] = np.nan
    bad["run_id"] = bad["run_id"] + "-bad"
    est = CpuCostEstimator().fit(pd.concat([runs, noise, bad], ignore_index=True))
    clean = CpuCostEstimator().fit(runs)
    assert set(est.costs_) == {("lsquic", "sender"), ("lsquic", "receiver")}
    for key, costs in clean.costs_.items():
        for name, c in costs.items():
            assert est.costs_[key][name].value == pytest.approx(c.value, rel=1e-9), (key, name)
    assert CpuCostEstimator(min_runs=18).fit(noise).costs_  # 18 runs are enough for 18
    table = clean.table()
    assert len(table) == 6 and set(table["runs"]) == {RUNS_PER_CIPHER, 2 * RUNS_PER_CIPHER}
    assert "Huber" in clean.summary() or "RLM" in clean.summary()

