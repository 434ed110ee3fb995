"""A ``factor`` tolerance is ×/÷: it admits the same ratio below a published value as above.

``tolerance: {factor: 3}`` on a published value v passes any prediction in
[v / 3, 3 · v] (experiments/README.md: `factor: f`, "×/÷ f"). The cases straddle both
edges, by hand: 100 / 3 = 33.3 and 3 × 100 = 300.
"""

from __future__ import annotations

import pytest

from quiclab.experiments.evaluate import tolerance_text, verdict


@pytest.mark.parametrize(("predicted", "ok"), [
    (100.0, True),
    (34.0, True),     # under-predicted by 2.94×
    (33.0, False),    # under-predicted by 3.03×
    (299.0, True),    # over-predicted by 2.99×
    (301.0, False),   # over-predicted by 3.01×
    (0.0, False),     # no ratio to a zero prediction
    (-100.0, False),
])
@pytest.mark.parametrize("bound", [None, "approx"])
def test_a_factor_tolerance_is_symmetric_in_ratio(predicted, ok, bound):
    passed, err = verdict(predicted, 100.0, 100.0, bound, {"factor": 3.0})
    assert passed is ok
    assert err == pytest.approx(predicted - 100.0)


@pytest.mark.parametrize(("predicted", "ok"), [(0.051, True), (0.049, False),
                                               (0.45, True), (0.46, False)])
def test_a_factor_tolerance_on_a_small_value(predicted, ok):
    # A published 0.15 (e.g. a loss rate in %) within ×/÷ 3: 0.05 … 0.45.
    assert verdict(predicted, 0.15, 0.15, None, {"factor": 3.0})[0] is ok


def test_a_factor_tolerance_reads_as_times_or_divided_by():
    assert tolerance_text({"factor": 3.0}, "Mbit/s") == "×/÷ 3"
    assert tolerance_text({"rel": 0.1}, "Mbit/s") == "±10 %"
    assert tolerance_text({"abs": 5.0}, "%") == "±5 pp"
