"""Pipeline, pinning and threads reproductions: the ``dominant_axis`` shape, pipelined
and pinned scenarios being predicted (never "not covered"), and the shipped
pipeline/placement/threads specs run against the packaged models with their in-sample
checks marked and passing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from quiclab.errors import SpecError
from quiclab.experiments.evaluate import FAIL, PASS, Context, evaluate_check, evaluate_shape
from quiclab.experiments.executors import LocalExecutor
from quiclab.experiments.findings import load_repro
from quiclab.experiments.reproduce import fitted_ids, load_points, run_one, unmodelled
from quiclab.experiments.spec import packaged_dir
from quiclab.models.registry import Registry
from quiclab.sim.scenario import Scenario

from .conftest import write

GRID = """\
kind: reproduction
title: a 2 × 3 heatmap
source: {document: "999", figure: Fig. 1}
engine: analytic
base: {}
series:
  grid:
    set: {implementation: lsquic}
    axes: [{field: server_core, values: [0, 8]}, {field: client_core, values: [0, 8, 16]}]
findings:
  - id: rows
    claim: the server's core decides
    shapes:
      - {type: dominant_axis, series: grid, expect: server_core, min: 2, reason: synthetic}
"""


def _context(tmp_path: Path, goodput: dict[tuple[int, int], float]) -> tuple[Context, object]:
    spec = load_repro(write(tmp_path / "repro-grid.yaml", GRID))
    _fields, values, names = spec.series["grid"]
    rows = {(n, "analytic"): {"goodput_mbps": goodput[v]} for v, n in zip(values, names,
                                                                          strict=True)}
    return Context(spec, rows, {}, set()), spec.findings[0]


@pytest.mark.parametrize(("server_step", "client_step", "status", "ratio"), [
    (600.0, 100.0, PASS, 6.0),     # rows: the server's core moves goodput 6× more
    (150.0, 100.0, FAIL, 1.5),     # a server axis that leads, but not 2×
    (100.0, 600.0, FAIL, 1 / 6),   # columns: the client's core decides
    (0.0, 0.0, FAIL, 0.0),         # a flat grid has no pattern at all
    (300.0, 0.0, PASS, math.inf),  # the client's core does nothing
])
def test_dominant_axis(tmp_path: Path, server_step: float, client_step: float, status: str,
                       ratio: float) -> None:
    # Additive effects: the row means span exactly server_step, the column means
    # exactly client_step.
    goodput = {(s, c): 3000.0 + server_step * (s / 8) + client_step * (c / 16)
               for s in (0, 8) for c in (0, 8, 16)}
    ctx, finding = _context(tmp_path, goodput)
    result = evaluate_shape(ctx, finding, finding.shapes[0])
    assert result.status == status
    assert result.predicted == pytest.approx(ratio)
    assert f"server_core {server_step:.3g}" in result.predicted_text
    assert f"client_core {client_step:.3g}" in result.predicted_text


def test_dominant_axis_spec_errors(tmp_path: Path) -> None:
    bad = GRID.replace("expect: server_core", "expect: cpu")
    with pytest.raises(SpecError, match=r"shapes\[0\]\.expect: dominant_axis expects one of "
                                        r"the series' fields: server_core, client_core"):
        load_repro(write(tmp_path / "a.yaml", bad))
    one_axis = GRID.replace(", {field: client_core, values: [0, 8, 16]}", "")
    with pytest.raises(SpecError, match=r"shapes\[0\]\.series: dominant_axis needs a series "
                                        r"with two or more axes: grid"):
        load_repro(write(tmp_path / "b.yaml", one_axis))


MEAN = GRID.replace("base: {}", "base: {}\nscenarios:\n  free: {implementation: lsquic}").replace(
    """    shapes:
      - {type: dominant_axis, series: grid, expect: server_core, min: 2, reason: synthetic}""",
    """    checks:
      - {point: kempf24-069, scenario: grid, baseline: free, over: mean, tolerance: {abs: 3},
         reason: synthetic}""")


def test_over_mean_compares_a_series_mean_with_one_scenario(tmp_path: Path) -> None:
    """``over: mean`` (seed 002 §4.7: the mean over all pinnings against no pinning)."""
    spec = load_repro(write(tmp_path / "repro-mean.yaml", MEAN))
    _fields, values, names = spec.series["grid"]
    rows = {(n, "analytic"): {"goodput_mbps": 3000.0 + 100.0 * v[0] / 8}
            for v, n in zip(values, names, strict=True)}
    rows[("free", "analytic")] = {"goodput_mbps": 2900.0}
    point = {"point_id": "kempf24-069", "quantity": "change_pct", "value": 0.0, "unit": "%"}
    finding = spec.findings[0]
    result = evaluate_check(Context(spec, rows, {"kempf24-069": point}, set()), finding,
                            finding.checks[0])
    # Mean over the six points 3050 against 2900: +5.17 %, outside ±3 pp of 0.
    assert result.predicted == pytest.approx(100.0 * (3050.0 / 2900.0 - 1.0))
    assert result.status == FAIL
    assert "mean over grid (6 points) vs free" in result.scenario
    assert set(spec.scenarios_for(finding)) == {*names, "free"}
    with pytest.raises(SpecError, match=r"checks\[0\]\.scenario: with over: mean, 'free' must "
                                        r"be a series"):
        load_repro(write(tmp_path / "bad.yaml", MEAN.replace("scenario: grid, baseline: free",
                                                             "scenario: free, baseline: free")))


def test_pipelines_and_pinning_are_predicted() -> None:
    """Every engine predicts them: no 'not covered' reason."""
    for scenario in (Scenario(pipeline="mukherjee-best"), Scenario(pin=True),
                     Scenario(server_core=16, client_core=0)):
        for engine in (None, "analytic", "des", "ns3"):
            assert unmodelled(scenario, engine) is None


ISSUE11 = ("repro-mukherjee25-fig2-mvfst-pipeline", "repro-mukherjee25-fig3-quicly",
           "repro-kempf24-fig11-pinning", "repro-koenig25-fig7-threads")


def test_issue11_specs_ship_and_say_what_is_in_sample() -> None:
    specs = {p.stem: load_repro(p) for p in sorted(packaged_dir().glob("repro-*.yaml"))}
    for name in ISSUE11:
        spec = specs[name]
        assert spec.status == "covered"
        text = spec.description.lower()
        assert "in-sample" in text and "out-of-sample" in text
        for finding in spec.findings:
            for check in finding.checks:
                # The pipeline specs' rule: no tolerance wider than ±10 % or ±10 pp.
                assert check.tolerance.get("rel", 0.0) <= 0.1
                assert check.tolerance.get("abs", 0.0) <= 10
                assert "factor" not in check.tolerance
    kinds = {s.type for f in specs["repro-kempf24-fig11-pinning"].findings for s in f.shapes}
    assert "dominant_axis" in kinds


@pytest.fixture(scope="module")
def packaged() -> tuple[Registry, object, set[str]]:
    models = Path(__file__).resolve().parents[2] / "models" / "fitted"
    if not (models / "pipeline.json").is_file():
        pytest.skip("no fitted pipeline parameters (run quiclab calibrate)")
    points = load_points(None)
    return Registry.load(models), points, fitted_ids(points, models)


@pytest.mark.parametrize(("name", "in_sample"), [
    ("repro-mukherjee25-fig2-mvfst-pipeline", {"mukherjee25-079"}),
    ("repro-mukherjee25-fig3-quicly", {"mukherjee25-088"}),
    ("repro-kempf24-fig11-pinning", {"kempf24-070", "kempf24-072", "kempf24-069"}),
])
def test_in_sample_checks_pass_on_the_packaged_models(
        tmp_path: Path, packaged: tuple[Registry, object, set[str]], name: str,
        in_sample: set[str]) -> None:
    """The points calibration/pipeline.py fitted are marked in-sample and reproduced; the
    pipeline gains and the pinning optimum, which it did not fit, come out of the model."""
    registry, points, fitted = packaged
    spec = load_repro(packaged_dir() / f"{name}.yaml")
    rep = run_one(spec, registry, points, LocalExecutor(1), tmp_path / "data", {},
                  progress=False, fitted=fitted)
    by = {r.check: r for r in rep.results}
    for pid in in_sample:
        assert by[pid].in_fit and by[pid].status == PASS, by[pid]
    out_of_sample = [r for r in rep.results if r.check.startswith("shape:") or not r.in_fit]
    assert out_of_sample, "every check of an issue-11 spec is in-sample"
    if name == "repro-kempf24-fig11-pinning":
        argmax = [r for r in rep.results if r.check == "shape:argmax"]
        assert [r.status for r in argmax] == [PASS, PASS]  # core 16 (10G NIC), core 8 (100G)
    if name == "repro-mukherjee25-fig3-quicly":
        assert rep.verdicts()[("pipelining", "analytic")] == PASS
