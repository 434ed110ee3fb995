"""Reproductions: the 'consistent within the 90 % band' verdict beside the tolerance one."""

from __future__ import annotations

from typing import Any

import pytest

from quiclab.experiments.evaluate import (
    CONSISTENT,
    OUTSIDE,
    PASS,
    Context,
    Result,
    _band,
    band_verdicts,
)
from quiclab.experiments.findings import Check, Finding


def _ctx(lo: float, hi: float) -> Context:
    row: dict[str, Any] = {"goodput_mbps": (lo + hi) / 2, "goodput_lo_mbps": lo,
                           "goodput_hi_mbps": hi, "interval_level": 0.9}
    return Context(spec=None, rows={("s", "analytic"): row}, points={},  # type: ignore[arg-type]
                   fitted=set())


FINDING = Finding(id="f", claim="", engine="analytic", checks=(), shapes=(), published=())


@pytest.mark.parametrize(("low", "high", "bound", "unit", "expected"), [
    (1000.0, 1000.0, None, "Mbit/s", CONSISTENT),
    (1300.0, 1300.0, None, "Mbit/s", OUTSIDE),
    (1.1, 1.1, None, "Gbit/s", CONSISTENT),         # the band is converted to the unit
    (1300.0, 1300.0, "upper_limit", "Mbit/s", CONSISTENT),   # at most 1300: band below
    (1300.0, 1300.0, "lower_limit", "Mbit/s", OUTSIDE),      # at least 1300: band below
    (1150.0, 1400.0, None, "Mbit/s", CONSISTENT),   # a stated range meeting the band
])
def test_the_published_value_against_the_band(low: float, high: float, bound: str | None,
                                               unit: str, expected: str) -> None:
    check = Check(points=("p",), scenario="s", tolerance={"rel": 0.1})
    band, text = _band(_ctx(900.0, 1200.0), FINDING, check, "goodput_mbps", "value", unit,
                       low, high, bound)
    assert band == expected and "(90 %)" in text


def test_changes_and_rows_without_a_band_get_no_band_verdict() -> None:
    check = Check(points=("p",), scenario="s", baseline="b", tolerance={"rel": 0.1})
    assert _band(_ctx(900.0, 1200.0), FINDING, check, "goodput_mbps", "change_pct", "%",
                 10.0, 10.0, None) == ("", "")
    assert _band(_ctx(900.0, 1200.0), FINDING, Check(points=("p",), scenario="s"),
                 "acks", "value", "", 1.0, 1.0, None) == ("", "")
    nan = _ctx(float("nan"), float("nan"))
    assert _band(nan, FINDING, Check(points=("p",), scenario="s"), "goodput_mbps", "value",
                 "Mbit/s", 1.0, 1.0, None) == ("", "")


def test_a_finding_is_outside_when_any_check_misses_its_band() -> None:
    def row(finding: str, band: str) -> Result:
        return Result("r", finding, "c", "goodput", "Mbit/s", 1.0, "", 1.0, "", 0.0, 0.0,
                      "", "analytic", PASS, False, "", band=band)

    assert band_verdicts([row("a", CONSISTENT), row("a", OUTSIDE), row("b", CONSISTENT),
                          row("b", ""), row("c", "")]) == \
        {"a": OUTSIDE, "b": CONSISTENT, "c": ""}
