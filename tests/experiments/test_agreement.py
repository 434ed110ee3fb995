"""The three engines agree within 25 %, or a Prediction names the mechanism only one of
them models (experiments/agreement.py). The packaged models, small transfers."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab.experiments import agreement
from quiclab.models.registry import Registry
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

MODELS = Path(__file__).resolve().parents[2] / "models" / "fitted"


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.load(MODELS)


def _pred(engine: str, goodput: float, named: tuple[str, ...] = ()) -> Prediction:
    return Prediction(scenario=Scenario(), engine=engine, engine_version="x",
                      goodput_mbps=goodput, limit="cwnd", engine_specific=named)


def test_judge_agrees_explains_or_fails() -> None:
    ok = agreement.judge({"a": _pred("a", 100), "b": _pred("b", 110), "c": _pred("c", 90)})
    assert ok["agree"] and not ok["explained"]
    far = agreement.judge({"a": _pred("a", 50), "b": _pred("b", 110), "c": _pred("c", 100)})
    assert not far["agree"] and not far["explained"]
    named = agreement.judge({"a": _pred("a", 50, ("average-loss-cycle: x",)),
                             "b": _pred("b", 110), "c": _pred("c", 100)})
    assert not named["agree"] and named["explained"]
    assert named["mechanisms"] == ["a: average-loss-cycle: x"]


def _check(rows: list[dict]) -> None:
    bad = [r for r in rows if not r["agree"] and not r["explained"]]
    assert not bad, "engines disagree without a named mechanism:\n" + agreement.table(bad)


def test_small_grid_agrees_or_names_why(registry: Registry) -> None:
    """One cell per disagreement kind found on the full grid, plus agreeing ones; the
    analytic engine and the DES (ns-3 in the slow test below)."""
    cells = [agreement.Cell("lsquic", "quiche", 10.0, 0.0, 212_992),  # average-loss-cycle
             agreement.Cell("quic-go", "quic-go", 0.0, 1.0, 212_992),
             agreement.Cell("quic-go", "quic-go", 10.0, 1.0, 4_194_304)]
    rows = agreement.run(cells, registry, engines=("analytic", "des"),
                         transfer_bytes=100_000_000)
    _check(rows)
    assert not rows[0]["agree"] and any("average-loss-cycle" in m
                                        for m in rows[0]["mechanisms"])
    assert rows[1]["agree"] and rows[2]["agree"]


@pytest.mark.slow
def test_full_grid_three_engines(registry: Registry) -> None:
    rows = agreement.run(agreement.grid(), registry)
    _check(rows)
