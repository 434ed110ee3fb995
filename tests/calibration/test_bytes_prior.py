"""quicly's per-byte prior comes from seed 001 Table 1's libc share (calibration/fit.py)."""

from __future__ import annotations

import math
import types

import pandas as pd
import pytest

from quiclab.calibration.assemble import REFERENCE_CPU, CryptoTable
from quiclab.calibration.crypto import TABLE3_CPU
from quiclab.calibration.fit import (
    BYTES_PRIOR,
    BYTES_PRIOR_SD,
    DEFAULT_BYTES_NS,
    Calibrator,
)
from quiclab.models.cpus import CpuCatalog

SHARE_ID, TPUT_ID = BYTES_PRIOR["quicly"]


def _points(share_pct: float, gbps: float, cpu: str = TABLE3_CPU) -> pd.DataFrame:
    return pd.DataFrame([
        {"point_id": SHARE_ID, "document": "001", "value": share_pct, "cpu": cpu},
        {"point_id": TPUT_ID, "document": "001", "value": gbps, "cpu": cpu},
    ])


@pytest.fixture()
def calibrator() -> Calibrator:
    cal = Calibrator(cpus=CpuCatalog.packaged())
    # Table 3's per-byte crypto (ns/B on its CPU), made-up round numbers.
    cal.crypto_ = CryptoTable(500.0, 0.2, 330.0, 0.24, "test")
    # What stage C's parameter list reads besides the points: no measured costs,
    # no specs yet (κ = 1), no evidence.
    cal.cpu_ = types.SimpleNamespace(costs_={})
    cal.specs_ = {}
    cal.evidence_ = []
    return cal


def test_prior_is_libc_share_of_one_busy_core_plus_crypto(calibrator):
    to_ref = calibrator.cpus.scaling(TABLE3_CPU, REFERENCE_CPU).factor
    prior = calibrator._bytes_priors(_points(8.5, 7.2))["quicly"]
    plain = 0.085 * 8.0 / 7.2 * to_ref  # ns per payload byte of memcpy
    assert prior == pytest.approx(plain + 0.22 * to_ref, rel=1e-12)
    # The plain part is proportional to the share and inverse to the throughput.
    doubled = calibrator._bytes_priors(_points(17.0, 7.2))["quicly"]
    assert doubled - prior == pytest.approx(plain, rel=1e-12)
    faster = calibrator._bytes_priors(_points(8.5, 14.4))["quicly"]
    assert prior - faster == pytest.approx(plain / 2, rel=1e-12)


def test_missing_points_keep_the_generic_prior(calibrator):
    assert calibrator._bytes_priors(_points(8.5, 7.2).iloc[:1]) == {}
    calibrator.points_ = _points(8.5, 7.2).iloc[1:]
    b = next(p for p in calibrator._free_params() if p.name == "B|quicly")
    assert b.prior_mean == pytest.approx(math.log(DEFAULT_BYTES_NS))
    assert b.prior_sd == 1.0


def test_free_parameter_uses_the_prior(calibrator):
    calibrator.points_ = _points(8.5, 7.2)
    b = next(p for p in calibrator._free_params() if p.name == "B|quicly")
    expected = calibrator._bytes_priors(calibrator.points_)["quicly"]
    assert b.prior_mean == pytest.approx(math.log(expected))
    assert b.init == b.prior_mean
    assert b.prior_sd == BYTES_PRIOR_SD


def test_a_fold_without_seed_001_does_not_use_its_prior(calibrator):
    # Leave-one-experiment-out holds seed 001's points out (group "seed001"): the
    # prior made from them must go too, or the fold would see the held-out value.
    assert "quicly" in calibrator._bytes_priors(_points(8.5, 7.2))
    calibrator.exclude = ("seed001",)
    assert calibrator._bytes_priors(_points(8.5, 7.2)) == {}
    calibrator.exclude = ("seed002",)
    assert "quicly" in calibrator._bytes_priors(_points(8.5, 7.2))
