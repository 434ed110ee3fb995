"""Reproductions: tolerance and bound semantics, checks and shapes on synthetic models,
not-covered findings, the written table/plot/summary, and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from quiclab.cli import main
from quiclab.experiments.evaluate import FAIL, NOT_COVERED, PASS, Result, finding_verdicts, verdict
from quiclab.experiments.executors import LocalExecutor
from quiclab.experiments.findings import load_repro
from quiclab.experiments.reproduce import fitted_ids, run_one, update_summary, write_one
from quiclab.models.registry import Registry
from quiclab.sim.engine import get_engine
from quiclab.sim.scenario import Scenario

from .conftest import write


def test_a_finding_with_an_unevaluated_row_does_not_pass() -> None:
    """Rows that passed say nothing about one the engine could not evaluate (before,
    Fig. 7's quiche CPU range passed on its one-stream row while the DES hung at
    100 streams)."""
    def row(finding: str, status: str) -> Result:
        return Result("r", finding, "c", "q", "", 1.0, "", 1.0, "", 0.0, 0.0, "", "des",
                      status, False, "")

    verdicts = finding_verdicts([row("a", PASS), row("a", NOT_COVERED), row("b", PASS),
                                 row("b", PASS), row("c", NOT_COVERED), row("c", FAIL),
                                 row("d", NOT_COVERED), row("d", PASS)])
    assert verdicts == {"a": NOT_COVERED, "b": PASS, "c": FAIL, "d": NOT_COVERED}


@pytest.mark.parametrize(("predicted", "low", "high", "bound", "tol", "ok"), [
    (105, 100, 100, None, {"rel": 0.1}, True),
    (115, 100, 100, None, {"rel": 0.1}, False),
    (95, 100, 100, "approx", {"abs": 5}, True),
    (95, 100, 100, "lower_limit", {"rel": 0.1}, True),     # within slack below the bound
    (85, 100, 100, "lower_limit", {"rel": 0.1}, False),
    (300, 100, 100, "lower_limit", {"rel": 0.1}, True),    # any value above passes
    (10, 100, 100, "upper_limit", {"rel": 0.1}, True),
    (120, 100, 100, "upper_limit", {"rel": 0.1}, False),
    (-60, -50, -50, "lower_limit", {"abs": 5}, True),      # "reduces by over 50 %"
    (-47, -50, -50, "lower_limit", {"abs": 5}, True),
    (-40, -50, -50, "lower_limit", {"abs": 5}, False),
    (-20, -27, -27, "upper_limit", {"abs": 5}, True),      # "as much as 27 %"
    (-35, -27, -27, "upper_limit", {"abs": 5}, False),
    (40, 35, 50, None, {"abs": 5}, True),                  # a stated range
    (54, 35, 50, None, {"abs": 5}, True),
    (57, 35, 50, None, {"abs": 5}, False),
    (0.3, 0.15, 0.15, None, {"factor": 3}, True),
    (0.6, 0.15, 0.15, None, {"factor": 3}, False),
    (math.nan, 1, 1, None, {"rel": 0.5}, False),
])
def test_verdict(predicted: float, low: float, high: float, bound: str | None,
                 tol: dict[str, float], ok: bool) -> None:
    assert verdict(predicted, low, high, bound, tol)[0] is ok


SPEC = """\
kind: reproduction
title: synthetic reproduction
source: {document: "999", figure: Fig. 1}
engine: analytic
base: {transfer_bytes: 100000000}
scenarios:
  fast: {implementation: fast}
  slow: {implementation: slow}
  multi: {implementation: fast, connections: 4}
series:
  rtt:
    set: {implementation: fast}
    axes: [{field: rtt_ms, values: [0, 10, 50]}]
  pairs:
    axes: [{field: implementation, values: [fast, slow]}]
findings:
  - id: close
    claim: fast is matched within 10 %
    checks:
      - {point: p-close, scenario: fast, tolerance: {rel: 0.1}, reason: synthetic}
      - {point: p-ratio, scenario: fast, baseline: slow, tolerance: {rel: 0.1}, reason: synthetic}
    shapes:
      - {type: argmax, among: pairs, expect: "pairs[fast]", reason: synthetic}
      - {type: monotone, series: rtt, direction: decreasing, slack: 0.01, reason: synthetic}
      - {type: limit, scenario: fast, expect: sender_cpu, reason: synthetic}
  - id: far
    claim: fast is off by a factor two
    checks:
      - {point: p-far, scenario: fast, tolerance: {rel: 0.1}, reason: synthetic}
      - {point: p-close, scenario: fast, tolerance: {rel: 0.1}, reason: synthetic}
  - id: bound
    claim: a lower bound on the change fast vs slow
    checks:
      - {point: p-bound, scenario: fast, baseline: slow, tolerance: {abs: 5},
         reason: synthetic}
    shapes:
      - {type: ratio, scenario: slow, baseline: fast, max: 0.5, reason: synthetic}
  - id: multi
    claim: a bulk transfer split over connections, which no engine models
    checks:
      - {point: p-close, scenario: multi, tolerance: {rel: 0.2},
         reason: synthetic}
plot: {kind: lines, series: [rtt], x: rtt_ms}
"""


def _points(fast_mbps: float, slow_mbps: float) -> pd.DataFrame:
    rows = [
        ("p-close", "goodput", fast_mbps * 1.05 / 1000, "Gbit/s", ""),
        ("p-far", "goodput", fast_mbps * 2, "Mbit/s", ""),
        ("p-ratio", "ratio", fast_mbps / slow_mbps, "x", "metric=goodput; baseline=slow"),
        ("p-bound", "change_pct", 50.0, "%", "metric=goodput; bound=lower_limit"),
    ]
    return pd.DataFrame(rows, columns=["point_id", "quantity", "value", "unit", "conditions"])


def test_checks_shapes_and_verdicts(tmp_path: Path, registry: Registry) -> None:
    spec = load_repro(write(tmp_path / "repro-synthetic.yaml", SPEC))
    engine = get_engine("analytic", registry)
    base = Scenario(transfer_bytes=100_000_000)
    fast = engine.predict(base.with_(server="fast", client="fast")).goodput_mbps
    slow = engine.predict(base.with_(server="slow", client="slow")).goodput_mbps
    rep = run_one(spec, registry, _points(fast, slow), LocalExecutor(1), tmp_path / "data",
                  {}, progress=False, fitted={"p-close"})
    by = {(r.finding, r.check): r for r in rep.results}
    close = by[("close", "p-close")]
    assert close.status == PASS and close.unit == "Gbit/s" and close.in_fit
    assert close.predicted == pytest.approx(fast / 1000)
    assert close.rel_error == pytest.approx(1 / 1.05 - 1)
    assert by[("close", "p-ratio")].status == PASS
    assert by[("close", "shape:argmax")].predicted_text == "pairs[fast]"
    assert by[("close", "shape:monotone")].status == PASS
    assert by[("close", "shape:limit")].predicted_text == "sender_cpu"
    assert by[("far", "p-far")].status == FAIL
    assert by[("bound", "p-bound")].status == PASS  # fast is ~4× slow: far above +50 %
    assert by[("bound", "shape:ratio")].status == PASS
    multi = by[("multi", "p-close")]
    assert multi.status == NOT_COVERED and "several connections" in multi.reason
    verdicts = rep.verdicts()
    assert verdicts == {("close", "analytic"): PASS, ("far", "analytic"): FAIL,
                        ("bound", "analytic"): PASS, ("multi", "analytic"): NOT_COVERED}
    # The series the plot draws are predicted too (rtt: 3 points).
    assert {n for n, _ in rep.rows} >= {"rtt[0]", "rtt[10]", "rtt[50]"}

    folder = write_one(rep, tmp_path / "reports")
    table = pd.read_csv(folder / "repro-synthetic.csv")
    assert {"published", "predicted", "abs_error", "rel_error", "tolerance", "pass"} \
        <= set(table.columns)
    assert (folder / "repro-synthetic.png").stat().st_size > 1000
    assert "| far | analytic | fail |" in (folder / "repro-synthetic.md").read_text()
    findings = update_summary(tmp_path / "reports", [rep])
    assert list(findings["verdict"]) == ["pass", "pass", "fail", "not covered"]
    assert (tmp_path / "reports" / "summary.md").is_file()
    # A second run of the same reproduction reuses the cached predictions.
    again = run_one(spec, registry, _points(fast, slow), LocalExecutor(1), tmp_path / "data",
                    {}, progress=False)
    assert again.computed == 0 and again.verdicts() == verdicts


def test_reproduction_spec_errors(tmp_path: Path) -> None:
    from quiclab.errors import SpecError

    bad = SPEC.replace("scenario: fast, tolerance: {rel: 0.1}, reason: synthetic}",
                       "scenario: fastt, tolerance: {rel: 0.1}, reason: synthetic}", 1)
    with pytest.raises(SpecError, match=r"checks\[0\]\.scenario: 'fastt' is not a named"):
        load_repro(write(tmp_path / "a.yaml", bad))
    bad = SPEC.replace("tolerance: {rel: 0.1}, reason: synthetic}", "tolerance: {rell: 0.1}, "
                       "reason: synthetic}", 1)
    with pytest.raises(SpecError, match=r"tolerance\.rell: unknown key; allowed: rel, abs, factor"):
        load_repro(write(tmp_path / "b.yaml", bad))
    with pytest.raises(SpecError, match="findings\\[0\\]: missing required key 'claim'"):
        no_claim = SPEC.replace("    claim: fast is matched within 10 %\n", "")
        load_repro(write(tmp_path / "c.yaml", no_claim))


def test_cli_crypto_table3_and_list(tmp_path: Path, models_dir: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Table 3 needs no engine: the crypto fit runs on the packaged published points."""
    out = tmp_path / "repro"
    assert main(["--models", str(models_dir), "--catalog", str(tmp_path / "c.duckdb"),
                 "reproduce", "repro-mukherjee25-table3-crypto", "--out", str(out),
                 "--quiet"]) == 0
    assert "3 pass   0 fail   1 n/c" in capsys.readouterr().out
    table = pd.read_csv(out / "repro-mukherjee25-table3-crypto" /
                        "repro-mukherjee25-table3-crypto.csv")
    latency = table[table["quantity"] == "latency"]
    assert set(latency["status"]) == {"pass", "not covered"}  # totals pass, init not modelled
    assert (latency[latency["status"] == "pass"]["rel_error"].abs() < 0.05).all()
    # The model versions the findings were computed with, for quiclab validate.
    recorded = json.loads((out / "models.json").read_text())["versions"]
    assert recorded == Registry.load(models_dir).versions()
    assert main(["--models", str(models_dir), "reproduce", "--list"]) == 0
    assert "repro-kempf24-fig3-buffers" in capsys.readouterr().out


def test_several_engines_per_finding(tmp_path: Path) -> None:
    from quiclab.experiments.reproduce import with_engine

    text = SPEC.replace("    claim: fast is off by a factor two\n",
                        "    claim: fast is off by a factor two\n    engine: [des, analytic]\n")
    spec = load_repro(write(tmp_path / "repro-multi.yaml", text))
    far = [f for f in spec.findings if f.id == "far"]
    assert [f.engine for f in far] == ["des", "analytic"]
    assert spec.engines() == ["analytic", "des"]
    assert spec.finding_ids() == ["close", "far", "bound", "multi"]
    only = with_engine(spec, "des")
    assert [(f.id, f.engine) for f in only.findings] == [
        ("close", "des"), ("far", "des"), ("bound", "des"), ("multi", "des")]


def test_fitted_ids_include_single_term_fits(tmp_path: Path) -> None:
    """Points a request or pipeline term was fitted to (named in a model file's
    ``fit:``/``published:`` source) count as in-sample; ``assumed:`` ones do not."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "x.json").write_text(json.dumps({
        "sender": {"ns_per_request": {"value": 1.0, "source": "fit: seed 004 litespeed-029"}},
        "provenance": {"sources": {"a": "published: seed 003 tquic-006 — 100 % CPU",
                                   "b": "assumed: like litespeed-040"}},
        "pipeline": [{"source": "fit: §5 gains (mukherjee25-079, mukherjee25-088)"},
                     {"source": "fit: seed 000 koenig25-019/020 — client and server CPU"}],
        # A derived value names its fitted inputs after the clause, not before it.
        "receiver": {"ns_per_syscall": {"value": 2.0, "source": (
            "derived: 0.32 × T (not kempf24-001); share fit: seed 002 Fig. 9 "
            "(kempf24-051, kempf24-052)")}}}))
    empty = pd.DataFrame(columns=["point_id", "quantity", "value", "unit", "conditions"])
    base = fitted_ids(empty)
    got = fitted_ids(empty, models) - base
    assert got == {"litespeed-029", "tquic-006", "mukherjee25-079", "mukherjee25-088",
                   "koenig25-019", "koenig25-020", "kempf24-051", "kempf24-052"}


def test_readme_table_replaces_only_its_block(tmp_path: Path) -> None:
    """`reproduce --readme`: the table goes between its markers; the rest stays."""
    import pandas as pd

    from quiclab.experiments.reproduce import README_BEGIN, README_END, write_readme_table

    findings = pd.DataFrame([{"reproduction": "repro-x", "finding": "a", "engine": "analytic",
                              "tolerance": "±10 %", "published": "3", "predicted": "3.1",
                              "in_fit": "all", "verdict": "pass"},
                             {"reproduction": "repro-x", "finding": "b", "engine": "des",
                              "tolerance": "±10 %", "published": "5", "predicted": "5.2",
                              "in_fit": "none", "verdict": "pass"}])
    readme = tmp_path / "README.md"
    readme.write_text("# title\n\ntext before\n")
    write_readme_table(readme, findings, 12.0)
    first = readme.read_text()
    assert first.startswith("# title\n\ntext before\n") and README_BEGIN in first
    assert "| repro-x | a | analytic | ±10 % | 3 | 3.1 | all | pass |" in first
    # A pass of a finding the calibration was fitted to is counted apart.
    assert ("2 verdicts (2 findings, each by the engines its spec names): 2 pass, 0 fail, "
            "0 not covered (12 s on this machine). Of the passes, 1 compare "
            "only with numbers the calibration never used, 0 partly with fitted ones and 1 "
            "only with fitted ones") in first
    readme.write_text(first + "\ntext after\n")
    findings.loc[0, "verdict"] = "fail"
    write_readme_table(readme, findings, 12.0)
    second = readme.read_text()
    assert second.count(README_BEGIN) == 1 and second.count(README_END) == 1
    assert "| 3.1 | all | fail |" in second and "| 3.1 | all | pass |" not in second
    assert second.endswith("\ntext after\n") and "text before" in second


def test_argmin_slack_accepts_near_ties_only(tmp_path: Path, registry: Registry) -> None:
    """``slack`` lets the expected point trail the extreme by that fraction, no more."""
    spec_text = SPEC.split("findings:")[0] + """findings:
  - id: tie
    claim: fast is ~4x slow, not the slowest
    shapes:
      - {type: argmin, among: pairs, expect: "pairs[fast]", slack: 0.1, reason: synthetic}
  - id: wide
    claim: a slack wider than the gap
    shapes:
      - {type: argmin, among: pairs, expect: "pairs[fast]", slack: 10, reason: synthetic}
"""
    spec = load_repro(write(tmp_path / "repro-slack.yaml", spec_text))
    rep = run_one(spec, registry, _points(1.0, 1.0), LocalExecutor(1), tmp_path / "data",
                  {}, progress=False, fitted=set())
    by = {r.finding: r for r in rep.results}
    assert by["tie"].status == FAIL
    assert by["wide"].status == PASS and "within" in by["wide"].predicted_text


REPEATED = """\
kind: reproduction
title: repeated runs of a stochastic engine
source: {document: "999", figure: Fig. 2}
engine: [des, analytic]
engine_options:
  des: {granularity: batch, max_units: 2000}
repetitions: 3
base: {transfer_bytes: 20000000, rtt_ms: 2, loss_pct: 1}
scenarios:
  lossy: {implementation: fast}
findings:
  - id: lossy
    claim: some goodput under random loss
    shapes:
      - {type: limit, scenario: lossy, expect: cwnd, reason: synthetic}
"""


def test_repetitions_average_the_runs_of_stochastic_engines(tmp_path: Path,
                                                           registry: Registry) -> None:
    """The DES predicts each point ``repetitions`` times (run 0, 1, 2) and the findings
    see the mean; the deterministic analytic engine runs once."""
    from quiclab.sim.des import DesEngine

    spec = load_repro(write(tmp_path / "repro-repeated.yaml", REPEATED))
    assert spec.repetitions == 3 and spec.resolved()["repetitions"] == 3
    rep = run_one(spec, registry, _points(1.0, 1.0), LocalExecutor(1), tmp_path / "data",
                  {}, progress=False, fitted=set())
    engine = DesEngine(registry, granularity="batch", max_units=2000)
    runs = [engine.predict(spec.named["lossy"].with_(run=r)).goodput_mbps for r in range(3)]
    assert len(set(runs)) == 3  # the runs differ: random loss drawn per run
    des = rep.rows[("lossy", "des")]
    assert des["runs"] == 3
    assert des["goodput_mbps"] == pytest.approx(sum(runs) / 3)
    assert des["goodput_min_mbps"] == min(runs) and des["goodput_max_mbps"] == max(runs)
    assert des["goodput_sd_mbps"] > 0
    assert "runs" not in rep.rows[("lossy", "analytic")]
    # --repetitions overrides the spec; the first run's cached prediction is reused.
    once = run_one(spec, registry, _points(1.0, 1.0), LocalExecutor(1), tmp_path / "data",
                   {}, progress=False, fitted=set(), repetitions=1)
    assert once.computed == 0
    assert once.rows[("lossy", "des")]["goodput_mbps"] == pytest.approx(runs[0])


@pytest.mark.parametrize("value", ["0", "2.5", "many"])
def test_repetitions_must_be_a_whole_number(tmp_path: Path, value: str) -> None:
    from quiclab.errors import SpecError

    text = REPEATED.replace("repetitions: 3", f"repetitions: {value}")
    with pytest.raises(SpecError, match=r"repro-bad\.yaml: repetitions: "):
        load_repro(write(tmp_path / "repro-bad.yaml", text))
