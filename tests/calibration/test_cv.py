"""Cross-validation end to end on evidence whose right held-out error is known by hand.

Three experiments measured the same transfer (lsquic ↔ lsquic, same path, same
CPU, no CPU samples): 1000, 1000 and 2000 Mbit/s. At identical conditions the
model's goodput depends on its parameters through one level, and the joint fit
minimises squared log errors, so a fit to a set of these items predicts their
geometric mean. Hence, by hand:

- in sample (all three): (1000 · 1000 · 2000)^(1/3) = 1259.9 Mbit/s, so APEs of
  26.0 % (1000s) and 37.0 % (2000);
- leaving ``alpha`` (or ``beta``) out: the other two give √(1000 · 2000) =
  1414.2 Mbit/s, an APE of 41.4 %;
- leaving ``gamma`` out: the two 1000s give 1000, an APE of 50.0 %.

A fold that leaks its held-out items into the fit predicts the in-sample
1259.9 instead (26.0 % / 37.0 %), and one that holds nothing out reports no
items: both fail here.

Tolerance: the fit is a MAP fit, so the level's prior (log sd 3, against
items of log sd σ = 0.2) pulls the fitted log level by at most
(0.2/3)² / 2 ≈ 0.2 % per log unit of distance from the prior mean (here
< 1 log unit), plus the optimiser's tolerance (ftol 1e-5); 1 % relative on
the prediction covers both, and is 15 × smaller than a leak's effect.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.cv import leave_one_experiment_out, summarise
from quiclab.calibration.fit import Calibrator, Frames

OBSERVED = {"alpha": 1000.0, "beta": 1000.0, "gamma": 2000.0}
REL = 0.01  # see the module docstring


def _runs(goodputs: dict[str, float], repetitions: int = 3) -> pd.DataFrame:
    """QIR-10G-like run rows: one cell per experiment, identical conditions, no CPU samples."""
    rows = []
    for exp, goodput in goodputs.items():
        for rep in range(repetitions):
            rows.append({
                "run_id": f"{exp}-{rep}", "status": "ok", "experiment": exp,
                "setting": f"{exp}/run{rep}", "server_impl": "lsquic", "server_build": None,
                "client_impl": "lsquic", "client_build": None, "cipher": "aes-ni",
                "rcvbuf_bytes": 6_815_744, "cpu": "AMD EPYC 7543", "app": "perf",
                "filesize_bytes": 8 * 2**30, "goodput_mbps": goodput,
                "goodput_reported_mbps": goodput, "server_cpu_s": np.nan,
                "client_cpu_s": np.nan, "data_packets": np.nan, "client_udp_received": np.nan,
                "ack_packets": np.nan, "client_udp_rcvbuf_errors": np.nan,
                "server_cpu_pct": np.nan, "client_cpu_pct": np.nan})
    return pd.DataFrame(rows)


POINT_COLUMNS = ["point_id", "document", "locator", "quantity", "conditions", "value", "unit",
                 "server", "client", "app", "cpu", "link_gbps", "mtu_bytes", "rtt_ms",
                 "loss_pct", "cipher", "rcvbuf_bytes", "transfer_bytes", "gso", "gro", "chunks"]


def _table3() -> pd.DataFrame:
    """A synthetic Table 3 (seed 001's crypto latencies, which every fit needs): n units of
    S bytes cost n · (a + b · S) ns with round a, b (no published goodput among them)."""
    rows = []
    for op, (a, b) in (("encrypt_total", (500.0, 0.2)), ("decrypt_total", (330.0, 0.24))):
        for unit in (1500, 3000, 4500, 9000):
            n = 9000 // unit
            rows.append({"point_id": f"t3-{op}-{unit}", "document": "001",
                         "locator": "Table 3", "quantity": "latency",
                         "conditions": f"op={op}; unit={unit} B x {n}",
                         "value": n * (a + b * unit), "unit": "ns"})
    return pd.DataFrame(rows).reindex(columns=POINT_COLUMNS)


@pytest.fixture(scope="module")
def fitted() -> tuple[Calibrator, pd.DataFrame]:
    """The full fit and its leave-one-experiment-out result (one run for every test)."""
    frames = Frames(_runs(OBSERVED), _table3(),
                    pd.DataFrame(columns=["server_impl", "client_impl", "experiment", "side",
                                          "category", "share"]))
    cal = Calibrator(requests=False).fit(frames)
    said: list[str] = []
    held = leave_one_experiment_out(frames, cal, progress=said.append)
    assert said == [f"cross-validation: leaving out {e} (1 items)" for e in sorted(OBSERVED)]
    return cal, held


def _geomean(values) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _by_experiment(df: pd.DataFrame) -> dict[str, pd.Series]:
    return {str(row["ident"]).split("|")[0]: row for _, row in df.iterrows()}


def test_in_sample_the_fit_predicts_the_geometric_mean(fitted):
    cal, _ = fitted
    ev = _by_experiment(cal.report_.evidence)
    assert set(ev) == set(OBSERVED)
    level = _geomean(OBSERVED.values())  # 1259.9
    for exp, observed in OBSERVED.items():
        assert bool(ev[exp]["in_fit"])
        assert ev[exp]["predicted_mbps"] == pytest.approx(level, rel=REL)
        assert ev[exp]["ape_pct"] == pytest.approx(abs(level / observed - 1) * 100,
                                                   abs=REL * 100 * level / observed)


def test_each_fold_predicts_its_experiment_from_the_others_only(fitted):
    _, held = fitted
    # Every item is held out exactly once, by the fold named after its experiment,
    # one row each (a fresh 0…n−1 index, not one per fold).
    assert sorted(held["fold"]) == sorted(OBSERVED)
    assert list(held.index) == list(range(len(OBSERVED)))
    rows = _by_experiment(held)
    for exp, observed in OBSERVED.items():
        row = rows[exp]
        assert row["fold"] == exp and not bool(row["in_fit"])
        others = _geomean([v for k, v in OBSERVED.items() if k != exp])
        assert row["observed_mbps"] == pytest.approx(observed)
        assert row["predicted_mbps"] == pytest.approx(others, rel=REL), exp
        assert row["ape_pct"] == pytest.approx(abs(others / observed - 1) * 100,
                                               abs=REL * 100 * others / observed), exp


def test_the_summary_is_the_held_out_error_per_fold_and_overall(fitted):
    _, held = fitted
    summary = summarise(held).set_index("fold")
    assert list(summary.index) == ["alpha", "beta", "gamma", "ALL"]
    assert list(summary["items"]) == [1, 1, 1, 3]
    ape = {"alpha": 41.42, "beta": 41.42, "gamma": 50.0}  # √2 − 1 and 1 − 1/2, by hand
    for fold, expected in ape.items():
        assert summary.loc[fold, "median_ape_pct"] == pytest.approx(expected, abs=1.0)
        assert summary.loc[fold, "p95_ape_pct"] == pytest.approx(expected, abs=1.0)
    assert summary.loc["ALL", "median_ape_pct"] == pytest.approx(41.42, abs=1.0)
    # p95 of (41.4, 41.4, 50.0) by linear interpolation: 41.4 + 0.9 × (50.0 − 41.4).
    assert summary.loc["ALL", "p95_ape_pct"] == pytest.approx(41.42 + 0.9 * 8.58, abs=1.0)


def _pair_frames(quiche_mbps: float) -> Frames:
    """Two pairs measured in one experiment: lsquic ↔ lsquic and quiche ↔ quiche."""
    lsquic = _runs({"alpha": 1000.0})
    quiche = _runs({"alpha": quiche_mbps}).assign(server_impl="quiche", client_impl="quiche")
    quiche["run_id"] = "q-" + quiche["run_id"]
    return Frames(pd.concat([lsquic, quiche], ignore_index=True), _table3(),
                  pd.DataFrame(columns=["server_impl", "client_impl", "experiment", "side",
                                        "category", "share"]))


def test_a_held_out_pair_is_predicted_without_its_own_measurement():
    """Leave one pair out: the pair's prediction must not move when only its own
    measurement changes (quiche ↔ quiche 1500 → 3000 Mbit/s), while the in-sample
    fit follows it. The two stacks share no parameter here, so nothing else
    moves either. Equal to the optimiser's tolerance (ftol 1e-5 on the cost)."""
    from quiclab.calibration.cv import leave_one_pair_out

    held, stopped = {}, {}
    for quiche_mbps in (1500.0, 3000.0):
        frames = _pair_frames(quiche_mbps)
        cal = Calibrator(requests=False).fit(frames)
        ev = _by_pair(cal.report_.evidence)
        assert ev["quiche|quiche"]["predicted_mbps"] == pytest.approx(quiche_mbps, rel=0.02)
        # Stopped after one evaluation, a fold shows where it starts: a held-out pair's
        # own parameters at their priors, never at the full fit's values (which saw it).
        stopped[quiche_mbps] = _by_pair(leave_one_pair_out(frames, cal, max_nfev=1))
        said: list[str] = []
        out = leave_one_pair_out(frames, cal, progress=said.append)
        assert said == ["cross-validation: leaving out pair lsquic|lsquic (1/2)",
                        "cross-validation: leaving out pair quiche|quiche (2/2)"]
        assert sorted(out["fold"]) == ["lsquic|lsquic", "quiche|quiche"]
        assert list(out.index) == [0, 1]
        assert not out["in_fit"].any()
        held[quiche_mbps] = _by_pair(out)
    for pair in ("lsquic|lsquic", "quiche|quiche"):
        assert held[1500.0][pair]["predicted_mbps"] == pytest.approx(
            held[3000.0][pair]["predicted_mbps"], rel=1e-3), pair
    assert stopped[1500.0]["quiche|quiche"]["predicted_mbps"] == pytest.approx(
        stopped[3000.0]["quiche|quiche"]["predicted_mbps"], rel=1e-3)
    assert held[3000.0]["quiche|quiche"]["observed_mbps"] == 3000.0


def _by_pair(df: pd.DataFrame) -> dict[str, pd.Series]:
    return {f"{row['server']}|{row['client']}": row for _, row in df.iterrows()}


def test_never_fitted_evidence_is_held_out_only_by_its_own_fold(monkeypatch):
    """Evidence no fit uses (a check of a model fitted elsewhere) is out of every fit,
    but a fold's held-out items are what that fold's exclusion removed: each item is
    scored once, by the fold named after its group."""
    from quiclab.calibration import fit as fit_module

    monkeypatch.setattr(fit_module, "REFERENCE_GROUPS", ("gamma",))
    frames = Frames(_runs(OBSERVED), _table3(),
                    pd.DataFrame(columns=["server_impl", "client_impl", "experiment", "side",
                                          "category", "share"]))
    cal = Calibrator(requests=False).fit(frames)
    ev = cal.report_.evidence.set_index("group")
    assert not ev.loc["gamma", "in_fit"] and not ev.loc["gamma", "held_out"]
    assert ev.loc["alpha", "in_fit"] and ev.loc["beta", "in_fit"]
    held = leave_one_experiment_out(frames, cal)
    assert sorted(held["fold"]) == sorted(OBSERVED)
    assert (held.groupby("fold")["group"].agg(list).to_dict()
            == {exp: [exp] for exp in OBSERVED})
