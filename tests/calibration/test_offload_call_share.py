"""MsQuic's call share comes from its stated GSO/GRO gain (calibration/fit.py CALL_SHARE_GAIN)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from quiclab.calibration.assemble import RoleSpec, Value, call_share_for_ratio, fixed
from quiclab.calibration.fit import CALL_SHARE_GAIN, DEFAULT_CALL_SHARE, Calibrator
from quiclab.models.costmodel import Behaviour
from quiclab.models.cpus import CpuCatalog

LOW_ID, HIGH_ID = CALL_SHARE_GAIN["msquic"]


def _cpu_per_packet(c: float, batch: float, acks: float) -> float:
    """T·(1 − c + c/b + a) with T = 1: the model's CPU per data packet."""
    return 1.0 - c + c / batch + acks


@pytest.mark.parametrize(("c", "b_on", "b_off", "acks"),
                         [(0.25, 44, 1, 0.06), (0.4, 10, 1, 0.0), (0.1, 64, 4, 0.3)])
def test_the_share_is_recovered_from_the_cpu_ratio_it_causes(c, b_on, b_off, acks):
    ratio = _cpu_per_packet(c, b_off, acks) / _cpu_per_packet(c, b_on, acks)
    assert call_share_for_ratio(ratio, b_on, b_off, acks) == pytest.approx(c, rel=1e-12)


def test_no_share_where_the_batches_do_not_identify_it():
    assert call_share_for_ratio(1.0, 44, 1, 0.06) is None  # no gain
    assert call_share_for_ratio(0.9, 44, 1, 0.06) is None  # a loss
    assert call_share_for_ratio(1.3, 1, 1, 0.06) is None  # the same batch


def _points(low_pct: float, high_pct: float, document: str = "002") -> pd.DataFrame:
    return pd.DataFrame([
        {"point_id": LOW_ID, "document": document, "value": low_pct},
        {"point_id": HIGH_ID, "document": document, "value": high_pct},
    ])


def _role() -> RoleSpec:
    T = Value(4000.0, 500.0, 50000.0, "test")
    return RoleSpec(T=T, call_share=Value(DEFAULT_CALL_SHARE, 0.1, 0.4, "assumed"),
                    segment_share=fixed(0.2, "assumed"),
                    ack_ns=Value(0.6 * T.value, 0.0, T.value, "assumed"),
                    cores=fixed(1.0, "assumed"))


BEHAVIOUR = Behaviour(udp_payload_bytes=1472, ack_every_packets=10.0, supports_gso=True,
                      supports_gro=True)


@pytest.fixture()
def calibrator() -> Calibrator:
    cal = Calibrator(cpus=CpuCatalog.packaged())
    cal.points_ = _points(35.0, 50.0)
    return cal


def test_the_stated_gain_range_gives_the_share_and_its_interval(calibrator):
    share = calibrator._gain_call_share("msquic", _role(), BEHAVIOUR).call_share
    batch, acks = 65535 // 1472, 0.6 / 10.0  # 44 segments per call; ACKs 0.06 × T

    def gain(c: float) -> float:
        return _cpu_per_packet(c, 1, acks) / _cpu_per_packet(c, batch, acks)

    assert gain(share.lo) == pytest.approx(1.35, rel=1e-9)
    assert gain(share.hi) == pytest.approx(1.50, rel=1e-9)
    assert gain(share.value) == pytest.approx(math.sqrt(1.35 * 1.50), rel=1e-9)
    assert share.lo < share.value < share.hi
    assert LOW_ID in share.source and HIGH_ID in share.source
    # A larger stated gain needs a larger share.
    calibrator.points_ = _points(60.0, 80.0)
    assert calibrator._gain_call_share("msquic", _role(), BEHAVIOUR).call_share.lo > share.hi


def test_other_stacks_missing_points_and_held_out_folds_keep_the_default(calibrator):
    assert calibrator._gain_call_share("lsquic", _role(), BEHAVIOUR).call_share.value == \
        DEFAULT_CALL_SHARE
    calibrator.points_ = _points(35.0, 50.0).iloc[:1]
    assert calibrator._gain_call_share("msquic", _role(), BEHAVIOUR).call_share.value == \
        DEFAULT_CALL_SHARE
    # Leave-one-experiment-out holds seed 002's points out: the share made from two
    # of them must go too, or the fold would see the held-out values.
    calibrator.points_ = _points(35.0, 50.0)
    calibrator.exclude = ("seed002",)
    assert calibrator._gain_call_share("msquic", _role(), BEHAVIOUR).call_share.value == \
        DEFAULT_CALL_SHARE
    calibrator.exclude = ("seed001",)
    assert calibrator._gain_call_share("msquic", _role(), BEHAVIOUR).call_share.value != \
        DEFAULT_CALL_SHARE
