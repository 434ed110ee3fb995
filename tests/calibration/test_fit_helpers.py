"""The fit's small helpers: provenance labels, fit-space transforms, the soft minimum.

Each expectation is worked out by hand in its comment.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from quiclab.calibration.evidence import Evidence
from quiclab.calibration.fit import (
    _expit,
    _logit,
    _pair,
    _shares_irq_core,
    _softmin,
    _testbeds_of,
    provenance,
    soft_goodput,
)
from quiclab.sim.scenario import Scenario


@pytest.mark.parametrize(("source", "expected"), [
    ("fit: rows 1-3", "fit: rows 1-3"),          # already labelled: kept
    ("prior: 0.3", "prior: 0.3"),
    ("derived: x", "derived: x"),
    ("seed 000 Fig. 9a", "published: seed 000 Fig. 9a"),
    ("dataset qir10g", "fit: dataset qir10g"),
    ("a guess", "assumed: a guess"),
])
def test_provenance_labels_a_source_by_its_kind(source: str, expected: str) -> None:
    assert provenance(source) == expected


def test_logit_and_expit_invert_each_other() -> None:
    assert _logit(0.5) == 0.0
    assert _logit(0.75) == pytest.approx(math.log(3.0))   # 0.75 / 0.25
    assert _expit(math.log(3.0)) == pytest.approx(0.75)
    assert _expit(0.0) == 0.5
    assert _expit(_logit(0.2)) == pytest.approx(0.2)


def test_the_soft_minimum_by_hand() -> None:
    one = np.array([1.0])
    # Two equal rates at k = 1: (1 + 1)^−1 = 0.5; at k = 10: 2^−0.1 = 0.933.
    assert _softmin([one, one], 1.0)[0] == pytest.approx(0.5)
    assert _softmin([one, one], 10.0)[0] == pytest.approx(2.0 ** -0.1)
    # 2 and 6 at k = 2: 2·(1 + (6/2)^−2)^−1/2 = 2·(10/9)^−1/2 = 1.897.
    assert _softmin([np.array([2.0]), np.array([6.0])], 2.0)[0] == pytest.approx(
        2.0 * (10.0 / 9.0) ** -0.5)
    # Far apart, it is the smaller one.
    assert _softmin([np.array([1.0]), np.array([1e6])], 10.0)[0] == pytest.approx(1.0)


def test_soft_goodput_scales_the_engines_goodput_by_soft_over_exact_minimum() -> None:
    # Rates (sender, receiver, pair, link, window, fc); the pair's rate is recomputed
    # as busy × the soft minimum of the two CPUs. Sender 100, the rest 1e12: the CPU
    # minimum is 100 and, busy 1, the pair's 100 ties with it: soft = 100·2^−1/k, and
    # the engine's goodput 90 (its startup included) is scaled by soft / 100.
    far = 1e12
    rates = np.array([[100.0, far, far, far, far, far]])
    assert soft_goodput(np.array([90.0]), rates, np.array([1.0]), 10.0)[0] == pytest.approx(
        90.0 * 2.0 ** -0.1)
    # Busy 0.01: the pair (1) is far below the sender, which no longer counts: the
    # soft minimum is the pair's 1·(1 + 100^−10 …) ≈ 1, exact minimum 100 → 0.9.
    assert soft_goodput(np.array([90.0]), rates, np.array([0.01]), 10.0)[0] == pytest.approx(
        0.9)
    # Sender = receiver = 100, busy 1, k = 1: cpu = (1/100 + 1/100)^−1 = 50, the pair
    # 50, soft = (1/100 + 1/100 + 1/50)^−1 = 25; the goodput 100 becomes 25.
    tied = np.array([[100.0, 100.0, 100.0, far, far, far]])
    assert soft_goodput(np.array([100.0]), tied, np.array([1.0]), 1.0)[0] == pytest.approx(25.0)
    # Half busy: pair = 0.5·50 = 25 → soft = (1/100 + 1/100 + 1/25)^−1 = 1/0.06.
    assert soft_goodput(np.array([100.0]), tied, np.array([0.5]), 1.0)[0] == pytest.approx(
        100.0 / 6.0)


def _evidence(**fields) -> Evidence:
    return Evidence(Scenario(**fields), 1000.0, "exp", "dataset", "cell")


def test_a_pair_drops_build_variants() -> None:
    assert _pair(_evidence(server="quicly@noopt", client="lsquic")) == "quicly|lsquic"
    assert _pair(_evidence(server="lsquic", client="quiche@march")) == "lsquic|quiche"


def test_sharing_the_interrupt_core() -> None:
    assert not _shares_irq_core(Scenario())                      # nothing pinned
    assert _shares_irq_core(Scenario(irq_core=0, server_core=0))
    assert _shares_irq_core(Scenario(irq_core=3, server_core=1, client_core=3))
    assert not _shares_irq_core(Scenario(irq_core=2, server_core=0, client_core=1))
    # An unpinned stack (core −1) never shares an unset interrupt core (−1).
    assert not _shares_irq_core(Scenario(irq_core=-1, server_core=-1))


def test_rows_without_a_testbed_are_the_qir10g_hosts() -> None:
    old = pd.DataFrame({"goodput": [1.0, 2.0]}, index=[5, 7])
    assert list(_testbeds_of(old)) == ["qir10g", "qir10g"]
    assert list(_testbeds_of(old).index) == [5, 7]
    new = pd.DataFrame({"testbed": ["uclouvain", None]})
    assert list(_testbeds_of(new)) == ["uclouvain", "qir10g"]


def test_a_fold_holds_out_a_document_by_its_group_or_its_testbed() -> None:
    from quiclab.calibration.fit import Calibrator

    # Seed 000 is König et al. 2025 on the koenig25 testbed (models/testbeds.py).
    assert Calibrator(exclude=("seed000",))._document_excluded(0)
    assert Calibrator(exclude=("seed000",))._document_excluded("000")
    assert not Calibrator(exclude=("seed001",))._document_excluded("000")
    assert Calibrator(exclude=("testbed:koenig25",))._document_excluded("0")
    # A document no testbed is known for is held out only by its own group.
    assert not Calibrator(exclude=("testbed:koenig25",))._document_excluded("999")
    assert Calibrator(exclude=("seed999",))._document_excluded(999)


def test_softness_keeps_every_positive_sharpness_in_order() -> None:
    from quiclab.calibration.fit import SOFTNESS, Calibrator

    assert Calibrator().softness == SOFTNESS == (10.0, 30.0, 100.0)
    assert Calibrator(softness=0.5).softness == (0.5,)  # a gentle k is still a pass
    assert Calibrator(softness=0).softness == ()        # 0: the exact pass only
    assert Calibrator(softness=(10, 0, 1, 30)).softness == (10, 1, 30)
