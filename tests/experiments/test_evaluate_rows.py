"""Reproduction rows worked out by hand: derived metrics, ranges, series shapes, gaps.

Every expectation below is computed in the comment beside it from the synthetic
predicted rows and published points of this file, not read back from the evaluator.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from quiclab.experiments.evaluate import (
    FAIL,
    NOT_COVERED,
    PASS,
    Context,
    evaluate_check,
    evaluate_shape,
    verdict,
)
from quiclab.experiments.findings import Check, Finding, ReproSpec, Shape

ENGINE = "analytic"
FINDING = Finding(id="f", claim="synthetic", engine=ENGINE, checks=(), shapes=(),
                  published=())


def _spec(series: dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]]
          | None = None) -> ReproSpec:
    return ReproSpec(name="synthetic", path="", title="", description="", source={},
                     status="covered", reason="", engine=ENGINE, engine_options={}, base={},
                     named={}, series=series or {}, findings=(), plots=())


def _ctx(rows: dict[str, dict[str, Any]], points: dict[str, dict[str, Any]] | None = None,
         series: dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]], list[str]]]
         | None = None, failures: dict[tuple[str, str], str] | None = None) -> Context:
    return Context(_spec(series), {(n, ENGINE): r for n, r in rows.items()}, points or {},
                   set(), failures=failures)


def _point(value: float, quantity: str = "goodput", unit: str = "Mbit/s",
           conditions: str = "") -> dict[str, Any]:
    return {"value": value, "quantity": quantity, "unit": unit, "conditions": conditions}


# --- metrics derived from a predicted row --------------------------------------------

def test_idle_and_busy_percentages_come_from_the_cpu_utilisation() -> None:
    ctx = _ctx({"s": {"server_cpu_util": 0.3, "client_cpu_util": 1.25}})
    assert ctx.metric("s", ENGINE, "server_idle_pct") == pytest.approx(70.0)  # 100·(1 − 0.3)
    assert ctx.metric("s", ENGINE, "server_cpu_pct") == pytest.approx(30.0)
    assert ctx.metric("s", ENGINE, "client_cpu_pct") == pytest.approx(125.0)
    # More than one core busy is no negative idle time: 100·max(0, 1 − 1.25) = 0.
    assert ctx.metric("s", ENGINE, "client_idle_pct") == 0.0


def test_loss_rate_is_losses_per_packet_sent() -> None:
    ctx = _ctx({"s": {"losses": 3, "server_packets_sent": 200},
                "one": {"losses": 1, "server_packets_sent": 1},
                "none": {"losses": 0, "server_packets_sent": 0}})
    assert ctx.metric("s", ENGINE, "loss_rate_pct") == pytest.approx(1.5)   # 100·3/200
    assert ctx.metric("one", ENGINE, "loss_rate_pct") == pytest.approx(100.0)  # every packet
    assert ctx.metric("none", ENGINE, "loss_rate_pct") == 0.0  # nothing sent: no division by 0


def test_a_metric_the_row_lacks_is_a_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match="acks"):
        _ctx({"s": {"goodput_mbps": 1.0}}).metric("s", ENGINE, "acks")
    with pytest.raises(KeyError, match="no prediction for t"):
        _ctx({}).metric("t", ENGINE, "goodput_mbps")


# --- checks --------------------------------------------------------------------------

def test_a_stated_range_ignores_a_bound_on_its_first_point() -> None:
    # Published range 35–50 Mbit/s; the first point also says "at least": a range
    # is two-sided, so 60 (10 above 50, slack 5) fails; as "≥ 35" it would pass.
    ctx = _ctx({"s": {"goodput_mbps": 60.0}},
               {"lo": _point(35.0, conditions="bound=lower_limit"), "hi": _point(50.0)})
    r = evaluate_check(ctx, FINDING, Check(points=("lo", "hi"), scenario="s",
                                           tolerance={"abs": 5.0}))
    assert r.status == FAIL
    assert r.published_text == "35–50"
    assert r.published == pytest.approx(42.5)  # the range's middle
    assert r.abs_error == pytest.approx(10.0)


def test_a_range_error_is_relative_to_its_nearest_edge_below() -> None:
    # 30 under the range 35–50: 5 below its low edge, −5/35 = −14.3 %.
    ctx = _ctx({"s": {"goodput_mbps": 30.0}}, {"lo": _point(35.0), "hi": _point(50.0)})
    r = evaluate_check(ctx, FINDING, Check(points=("lo", "hi"), scenario="s",
                                           tolerance={"rel": 0.2}))
    assert r.abs_error == pytest.approx(-5.0)
    assert r.rel_error == pytest.approx(-5.0 / 35.0)
    assert r.status == PASS  # slack 0.2·35 = 7 ≥ 5


def test_a_single_bounded_point_reads_with_its_sign() -> None:
    ctx = _ctx({"s": {"goodput_mbps": 900.0}}, {"p": _point(1000.0,
                                                             conditions="bound=upper_limit")})
    r = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="s", tolerance={"rel": 0.1}))
    assert r.published_text == "≤ 1000"
    assert r.status == PASS and r.abs_error == 0.0


def test_a_missing_prediction_is_not_covered_with_its_reason_and_tolerance() -> None:
    ctx = _ctx({}, {"p": _point(10.0)}, failures={("s", ENGINE): "engine error: boom"})
    r = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="s",
                                           tolerance={"factor": 3.0}))
    assert r.status == NOT_COVERED
    assert r.reason == "engine error: boom"
    assert r.tolerance == "×/÷ 3"
    assert r.scenario == "s"


def test_over_a_series_compares_each_point_with_its_baseline_point() -> None:
    # Changes in % point by point: a 100 → 120 (+20 %), b 100 → 90 (−10 %).
    series = {"new": (("x",), [(1,), (2,)], ["a", "b"]),
              "old": (("x",), [(1,), (2,)], ["a0", "b0"])}
    rows = {"a": {"goodput_mbps": 120.0}, "b": {"goodput_mbps": 90.0},
            "a0": {"goodput_mbps": 100.0}, "b0": {"goodput_mbps": 100.0}}
    ctx = _ctx(rows, {"p": _point(20.0, quantity="change_pct", unit="%")}, series)
    hi = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="new", baseline="old",
                                            over="max", tolerance={"abs": 1.0}))
    assert hi.predicted == pytest.approx(20.0)
    assert hi.scenario == "max over new: a"
    lo = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="new", baseline="old",
                                            over="min", tolerance={"abs": 1.0}))
    assert lo.predicted == pytest.approx(-10.0)
    assert lo.status == FAIL


def test_over_a_series_without_a_baseline_takes_the_extreme_value() -> None:
    series = {"grid": (("x",), [(1,), (2,), (3,)], ["a", "b", "c"])}
    rows = {"a": {"goodput_mbps": 5.0}, "b": {"goodput_mbps": 9.0}, "c": {"goodput_mbps": 7.0}}
    ctx = _ctx(rows, {"p": _point(9.0)}, series)
    r = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="grid", over="max",
                                           tolerance={"rel": 0.01}))
    assert (r.predicted, r.status) == (9.0, PASS)
    mean = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="grid", over="mean",
                                              tolerance={"rel": 0.01}))
    assert mean.predicted == pytest.approx(7.0)  # (5 + 9 + 7) / 3


# --- a factor tolerance on ranges and bounds -----------------------------------------

@pytest.mark.parametrize(("predicted", "ok"), [
    (290.0, True),    # 2.9× the high edge 100
    (310.0, False),   # 3.1×
    (4.0, True),      # the low edge 10 / 2.5
    (3.0, False),     # 10 / 3.33
])
def test_a_factor_tolerance_on_a_range_is_times_or_divided_by_at_its_edges(predicted, ok):
    # Range 10–100 within ×/÷ 3: [10/3, 3·100] = [3.33, 300] — the same ratio on each
    # side as for a single published value (test_verdict_factor.py).
    assert verdict(predicted, 10.0, 100.0, None, {"factor": 3.0})[0] is ok


@pytest.mark.parametrize(("predicted", "ok"), [(190.0, True), (210.0, False)])
def test_a_factor_tolerance_on_an_upper_limit_allows_the_factor_above(predicted, ok):
    # "at most 100" within ×/÷ 2: anything up to 200.
    assert verdict(predicted, 100.0, 100.0, "upper_limit", {"factor": 2.0})[0] is ok


@pytest.mark.parametrize(("predicted", "ok"), [(51.0, True), (49.0, False), (1e6, True)])
def test_a_factor_tolerance_on_a_lower_limit_allows_the_factor_below(predicted, ok):
    # "at least 100" within ×/÷ 2: anything from 50.
    assert verdict(predicted, 100.0, 100.0, "lower_limit", {"factor": 2.0})[0] is ok


# --- shapes --------------------------------------------------------------------------

def _monotone(ys: list[float], direction: str, slack: float = 0.0):
    names = [f"p{i}" for i in range(len(ys))]
    series = {"s": (("x",), [(i,) for i in range(len(ys))], names)}
    ctx = _ctx({n: {"goodput_mbps": y} for n, y in zip(names, ys, strict=True)}, series=series)
    shape = Shape("monotone", {"series": "s", "direction": direction, "slack": slack}, "", "")
    return evaluate_shape(ctx, FINDING, shape)


def test_monotone_fails_a_series_that_grows_when_it_should_fall() -> None:
    r = _monotone([100.0, 150.0, 140.0], "decreasing", slack=0.05)
    assert r.status == FAIL
    assert r.predicted == pytest.approx(1.5)  # the largest step, 150/100
    assert r.published_text == "monotone: non-increasing (slack 0.05)"


def test_monotone_passes_within_its_slack_and_names_the_direction() -> None:
    r = _monotone([100.0, 104.0, 90.0], "decreasing", slack=0.05)  # steps 1.04, 0.865
    assert r.status == PASS
    up = _monotone([100.0, 97.0, 120.0], "increasing", slack=0.05)  # steps 0.97, 1.237
    assert up.status == PASS and up.predicted == pytest.approx(0.97)
    assert up.published_text == "monotone: non-decreasing (slack 0.05)"
    assert _monotone([100.0, 90.0], "increasing", slack=0.05).status == FAIL


def test_series_ratio_divides_point_by_point() -> None:
    # new/old: 120/100 = 1.2, 99/90 = 1.1; "all in ≥ 1.15" fails, "any" passes.
    series = {"new": (("x",), [(1,), (2,)], ["a", "b"]),
              "old": (("x",), [(1,), (2,)], ["a0", "b0"])}
    rows = {"a": {"goodput_mbps": 120.0}, "b": {"goodput_mbps": 99.0},
            "a0": {"goodput_mbps": 100.0}, "b0": {"goodput_mbps": 90.0}}
    ctx = _ctx(rows, series=series)
    every = evaluate_shape(ctx, FINDING, Shape(
        "series_ratio", {"series": "new", "baseline": "old", "min": 1.15}, "", ""))
    assert every.status == FAIL
    assert every.predicted == pytest.approx(1.1)
    assert every.predicted_text == "1.1…1.2"
    some = evaluate_shape(ctx, FINDING, Shape(
        "series_ratio", {"series": "new", "baseline": "old", "min": 1.15, "mode": "any"},
        "", ""))
    assert some.status == PASS


def test_a_shape_without_a_prediction_is_not_covered_with_the_reason() -> None:
    ctx = _ctx({"b": {"goodput_mbps": 1.0}}, failures={("a", ENGINE): "ns-3 crashed"})
    r = evaluate_shape(ctx, FINDING, Shape("ratio", {"scenario": "a", "baseline": "b"}, "", ""))
    assert r.status == NOT_COVERED
    assert r.reason == "ns-3 crashed"
    zero = _ctx({"a": {"goodput_mbps": 1.0}, "b": {"goodput_mbps": 0.0}})
    r = evaluate_shape(zero, FINDING, Shape("ratio", {"scenario": "a", "baseline": "b"}, "", ""))
    assert r.status == NOT_COVERED  # a ratio to zero: float division by zero
    assert "division" in r.reason
    assert math.isnan(r.predicted)


# --- edges the tolerances and shapes must keep exactly ---------------------------

@pytest.mark.parametrize(("predicted", "low", "bound", "tol", "ok"), [
    (110.5, 100.0, None, {"rel": 0.1}, False),    # 0.5 beyond a slack of 10
    (0.21, 0.15, None, {"abs": 0.05}, False),     # 0.01 beyond a slack of 0.05
    (5.0, 0.0, "lower_limit", {"abs": 1.0}, True),   # "at least 0": any positive value
    (-5.0, 0.0, "lower_limit", {"abs": 1.0}, False),
    (-5.0, 0.0, "upper_limit", {"abs": 1.0}, True),  # "at most 0"
    (5.0, 0.0, "upper_limit", {"abs": 1.0}, False),
])
def test_verdict_edges(predicted, low, bound, tol, ok):
    assert verdict(predicted, low, low, bound, tol)[0] is ok


def test_monotone_without_a_stated_slack_allows_none() -> None:
    names = ["a", "b"]
    series = {"s": (("x",), [(1,), (2,)], names)}
    ctx = _ctx({"a": {"goodput_mbps": 100.0}, "b": {"goodput_mbps": 101.0}}, series=series)
    r = evaluate_shape(ctx, FINDING, Shape("monotone", {"series": "s"}, "", ""))
    assert r.status == FAIL  # decreasing by default; 101/100 > 1 + 0


def test_flat_beyond_starts_at_its_from_point() -> None:
    # x = 1…4, goodput 50, 80, 100, 101; flat from x = 2: the tail 80, 100, 101 is off
    # the last value by up to 1 − 80/101 = 20.8 %, more than a 5 % slack.
    names = ["a", "b", "c", "d"]
    series = {"s": (("x",), [(1,), (2,), (3,), (4,)], names)}
    ys = [50.0, 80.0, 100.0, 101.0]
    ctx = _ctx({n: {"goodput_mbps": y} for n, y in zip(names, ys, strict=True)}, series=series)
    r = evaluate_shape(ctx, FINDING, Shape("flat_beyond", {"series": "s", "from": 2,
                                                           "slack": 0.05}, "", ""))
    assert r.status == FAIL
    assert r.predicted == pytest.approx(1.0 - 80.0 / 101.0)
    later = evaluate_shape(ctx, FINDING, Shape("flat_beyond", {"series": "s", "from": 3,
                                                               "slack": 0.05}, "", ""))
    assert later.status == PASS  # 100, 101: within 1 %


def test_argmax_names_the_extreme_and_its_slack_only_for_near_ties() -> None:
    names = ["a", "b", "c"]
    series = {"s": (("x",), [(1,), (2,), (3,)], names)}
    ctx = _ctx({"a": {"goodput_mbps": 10.0}, "b": {"goodput_mbps": 30.0},
                "c": {"goodput_mbps": 29.0}}, series=series)
    hit = evaluate_shape(ctx, FINDING, Shape("argmax", {"among": "s", "expect": "b",
                                                        "slack": 0.05}, "", ""))
    assert (hit.status, hit.predicted_text) == (PASS, "b")
    near = evaluate_shape(ctx, FINDING, Shape("argmax", {"among": "s", "expect": "c",
                                                         "slack": 0.05}, "", ""))
    assert near.status == PASS  # 29 trails 30 by 3.3 %
    assert near.predicted_text == "b (c within 3.3 %)"
    strict = evaluate_shape(ctx, FINDING, Shape("argmax", {"among": "s", "expect": "c"},
                                                "", ""))
    assert strict.status == FAIL


def test_dominant_axis_at_exactly_its_minimum_ratio_passes() -> None:
    # A 2 × 2 grid: goodput 10, 12, 14, 16 for (a, b) = (0,0), (0,1), (1,0), (1,1).
    # Means along a: 11 → 15 (range 4); along b: 12 → 14 (range 2); ratio 4/2 = 2.
    names = ["p00", "p01", "p10", "p11"]
    series = {"g": (("a", "b"), [(0, 0), (0, 1), (1, 0), (1, 1)], names)}
    ctx = _ctx({n: {"goodput_mbps": y} for n, y in zip(names, [10.0, 12.0, 14.0, 16.0],
                                                        strict=True)}, series=series)
    r = evaluate_shape(ctx, FINDING, Shape("dominant_axis", {"series": "g", "expect": "a",
                                                             "min": 2.0}, "", ""))
    assert r.status == PASS and r.predicted == 2.0
    other = evaluate_shape(ctx, FINDING, Shape("dominant_axis", {"series": "g", "expect": "b"},
                                               "", ""))
    assert other.status == FAIL and other.predicted == 0.5


@pytest.mark.parametrize(("quantity", "conditions", "metric"), [
    ("cpu_util", "side=client", "client_cpu_pct"),
    ("cpu_util", "side=receiver; note", "client_cpu_pct"),
    ("cpu_util", "", "server_cpu_pct"),           # a CPU figure without a side: the server's
    ("cpu_idle", "side=client", "client_idle_pct"),
    ("cpu_idle", "", "server_idle_pct"),          # … and an idle one the sender's
    ("ack_packets", "", "acks"),
])
def test_the_metric_a_published_quantity_reads(quantity, conditions, metric) -> None:
    from quiclab.experiments.evaluate import _metric_for

    point = _point(1.0, quantity=quantity, unit="%", conditions=conditions)
    assert _metric_for(Check(points=("p",), scenario="s"), point) == metric
    assert _metric_for(Check(points=("p",), scenario="s", metric="acks"), point) == "acks"


def test_a_shape_row_names_the_scenario_or_series_it_read() -> None:
    assert _monotone([100.0, 90.0], "decreasing").scenario == "s"
    ctx = _ctx({"a": {"goodput_mbps": 2.0}, "b": {"goodput_mbps": 1.0}})
    r = evaluate_shape(ctx, FINDING, Shape("ratio", {"scenario": "a", "baseline": "b",
                                                     "min": 1.5}, "", ""))
    assert (r.status, r.scenario, r.predicted) == (PASS, "a", 2.0)


@pytest.mark.parametrize(("published", "band"), [(900.0, "consistent"), (1100.0, "consistent"),
                                                 (899.0, "outside"), (1101.0, "outside")])
def test_a_published_value_on_the_bands_edge_meets_it(published, band) -> None:
    # The 90 % band 900–1100 Mbit/s includes its edges.
    row = {"goodput_mbps": 1000.0, "goodput_lo_mbps": 900.0, "goodput_hi_mbps": 1100.0,
           "interval_level": 0.9}
    ctx = _ctx({"s": row}, {"p": _point(published)})
    r = evaluate_check(ctx, FINDING, Check(points=("p",), scenario="s", tolerance={"rel": 0.5}))
    assert r.band == band
    assert r.band_text == "900–1100 (90 %)"


def test_shape_bounds_and_slacks_include_their_edges() -> None:
    ctx = _ctx({"a": {"goodput_mbps": 3.0}, "b": {"goodput_mbps": 2.0}})
    r = evaluate_shape(ctx, FINDING, Shape("ratio", {"scenario": "a", "baseline": "b",
                                                     "min": 1.0, "max": 1.5}, "", ""))
    assert (r.status, r.predicted) == (PASS, 1.5)  # 3/2 = 1.5, exactly the maximum
    # argmax: 75 trails 100 by exactly 25 % (0.75 − 1 is exact in binary).
    series = {"s": (("x",), [(1,), (2,)], ["p", "q"])}
    ctx = _ctx({"p": {"goodput_mbps": 100.0}, "q": {"goodput_mbps": 75.0}}, series=series)
    near = evaluate_shape(ctx, FINDING, Shape("argmax", {"among": "s", "expect": "q",
                                                         "slack": 0.25}, "", ""))
    assert near.status == PASS
    assert near.scenario == "s"  # an argmax row names the series it chose among


def test_a_shape_row_is_in_the_fit_only_when_it_was_evaluated() -> None:
    fitted = Finding(id="f", claim="", engine=ENGINE, checks=(), shapes=(), published=("p1",))
    rows = {"a": {"goodput_mbps": 2.0}, "b": {"goodput_mbps": 1.0}}
    ctx = Context(_spec(), {(n, ENGINE): r for n, r in rows.items()}, {}, {"p1"})
    ok = evaluate_shape(ctx, fitted, Shape("ratio", {"scenario": "a", "baseline": "b",
                                                     "min": 1.0}, "", ""))
    assert ok.in_fit is True  # its finding's published point p1 was fitted
    gap = evaluate_shape(ctx, fitted, Shape("ratio", {"scenario": "z", "min": 1.0}, "", ""))
    assert gap.status == NOT_COVERED and gap.in_fit is False
