"""``quiclab reproduce``: run reproduction specs and write their tables, plots and verdicts.

For each spec: the scenarios its findings need are predicted by each
finding's engine through the sweep runner (so results are cached as Parquet
parts and an interrupted ``--all`` resumes), every check and shape is
evaluated (:mod:`quiclab.experiments.evaluate`), and the folder
``<out>/<name>/`` receives ``<name>.csv`` (predicted vs published, absolute
and relative error, tolerance, pass/fail), ``<name>.md``, ``<name>.png``
(shaped like the paper's figure, published points overlaid) and
``predictions.csv``. ``<out>/results.csv`` and ``<out>/summary.md`` collect
every reproduction run so far (one row per check / per finding).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from quiclab.experiments import runner
from quiclab.experiments.evaluate import (
    FAIL,
    NOT_COVERED,
    PASS,
    Context,
    Result,
    band_verdicts,
    evaluate,
    finding_verdicts,
)
from quiclab.experiments.findings import ReproSpec, load_repro
from quiclab.experiments.schema import read_text
from quiclab.experiments.spec import find_spec, packaged_dir
from quiclab.models.registry import Registry
from quiclab.paths import writable_folder
from quiclab.sim.engine import STOCHASTIC_ENGINES, goodput_spread

#: Request and handshake workloads run in the analytic engine and the DES;
#: the ns-3 engine simulates one bulk connection.
REQUEST_REASON = ("request and handshake workloads are modelled by the analytic engine and "
                  "the DES only; the ns-3 engine simulates one bulk connection")
#: Several connections of a bulk transfer: no engine splits one transfer over connections.
CONNECTIONS_REASON = ("a bulk transfer over several connections is not modelled (use "
                      "workload=requests for many connections)")


def unmodelled(scenario: Any, engine: str | None = None) -> str | None:
    """Why ``engine`` (any engine when None) cannot predict this scenario today, or None."""
    if scenario.workload != "bulk" and engine == "ns3":
        return REQUEST_REASON
    if scenario.workload == "bulk" and scenario.connections != 1:
        return CONNECTIONS_REASON
    return None


@dataclass
class Reproduced:
    spec: ReproSpec
    results: list[Result]
    rows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    computed: int = 0

    def verdicts(self) -> dict[tuple[str, str], str]:
        out: dict[tuple[str, str], str] = {}
        for engine in sorted({r.engine for r in self.results}):
            sub = [r for r in self.results if r.engine == engine]
            for fid, v in finding_verdicts(sub).items():
                out[(fid, engine)] = v
        return out

    def band_verdicts(self) -> dict[tuple[str, str], str]:
        """Per finding and engine: consistent with / outside the predictive band, or ''."""
        out: dict[tuple[str, str], str] = {}
        for engine in sorted({r.engine for r in self.results}):
            sub = [r for r in self.results if r.engine == engine]
            for fid, v in band_verdicts(sub).items():
                out[(fid, engine)] = v
        return out


def shipped() -> list[Path]:
    return sorted(packaged_dir().glob("repro-*.yaml"))


def load_points(catalog: Path | None) -> pd.DataFrame:
    """Published points: the catalog's table if it has one, else the packaged CSVs."""
    if catalog is not None and Path(catalog).is_file():
        from quiclab.datasets.catalog import Catalog
        from quiclab.errors import DataError

        try:
            with Catalog(catalog, read_only=True) as cat:
                if "published_points" in cat.tables() and cat.count("published_points"):
                    return cat.df("SELECT * FROM published_points ORDER BY point_id")
        except DataError:
            pass
    from quiclab.datasets.sources.published import packaged_dir as csv_dir
    from quiclab.datasets.sources.published import read_csv

    rows = [r for path in sorted(csv_dir().glob("*.csv")) for r in read_csv(path)]
    return pd.DataFrame(rows)


def known_point_ids(points: pd.DataFrame) -> set[str]:
    """Point ids a spec may name: the packaged CSVs' and those of ``points``."""
    from quiclab.datasets.sources.published import packaged_dir as csv_dir
    from quiclab.datasets.sources.published import read_csv

    ids = {str(r["point_id"]) for path in sorted(csv_dir().glob("*.csv"))
           for r in read_csv(path)}
    if "point_id" in points:
        ids |= set(points["point_id"].astype(str))
    return ids


#: Written next to findings.csv: the model versions the findings were computed with.
MODELS_FILE = "models.json"

#: A published point's id inside a provenance string (datasets/published/*.csv).
POINT_ID = re.compile(r"\b(kempf24|koenig25|mukherjee25|litespeed|tquic)-(\d{3}(?:/\d{3})*)\b")


#: Where a provenance string starts naming the evidence a value was fitted to or set from.
FIT_CLAUSE = re.compile(r"\b(?:fit|published):")


def fitted_ids(points: pd.DataFrame, models_dir: Path | None = None) -> set[str]:
    """Point ids the calibration used (so their checks are in-sample): the joint
    fit's evidence, plus every id named by a ``fit:`` or ``published:`` source in
    the model files of ``models_dir`` (the request and pipeline stages fit or set
    single terms from single points)."""
    from quiclab.calibration.evidence import published_points

    evidence, _ = published_points(points)
    ids = {e.ident for e in evidence}
    for path in sorted(models_dir.glob("*.json")) if models_dir else ():
        for source in _sources(json.loads(path.read_text())):
            # A derived value names what it was made of after "fit:"/"published:"
            # ("derived: 0.322 × T; share fit: seed 002 … (kempf24-051, …)").
            used = FIT_CLAUSE.search(source)
            if used:
                # "koenig25-019/020" names two points.
                ids.update(f"{doc}-{num}" for doc, nums in POINT_ID.findall(source[used.start():])
                           for num in nums.split("/"))
    return ids


def _sources(data: Any) -> Iterator[str]:
    """Every ``source`` string (and provenance value) anywhere in a model file."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, str) and (key == "source" or ":" in value[:12]):
                yield value
            else:
                yield from _sources(value)
    elif isinstance(data, list):
        for item in data:
            yield from _sources(item)


def with_engine(spec: ReproSpec, engine: str) -> ReproSpec:
    """Every finding by ``engine`` (the crypto fit stays); one Finding per id."""
    findings: dict[tuple[str, str], Any] = {}
    for f in spec.findings:
        g = f if f.engine == "crypto-fit" else replace(f, engine=engine)
        findings.setdefault((g.id, g.engine), g)
    return replace(spec, findings=tuple(findings.values()))


def mean_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for the runs of a point: numbers averaged (NaN where every run has none),
    everything else from the first run; ``runs`` and the goodput's spread added."""
    out = dict(rows[0])
    for key, first in rows[0].items():
        if isinstance(first, bool) or not isinstance(first, int | float):
            continue
        values = [float(r[key]) for r in rows
                  if isinstance(r.get(key), int | float) and not math.isnan(float(r[key]))]
        out[key] = sum(values) / len(values) if values else math.nan
    spread = goodput_spread([float(r["goodput_mbps"]) for r in rows])
    del spread["goodput_mean_mbps"]  # the averaged goodput_mbps above
    return {**out, **spread}


def run_one(spec: ReproSpec, registry: Registry | None, points: pd.DataFrame,
            executor: Any, data_dir: Path, runtime: dict[str, dict[str, Any]],
            progress: bool = True, fitted: set[str] | None = None,
            repetitions: int | None = None) -> Reproduced:
    """Predict what ``spec`` needs and evaluate every finding (see the module docstring).

    A stochastic engine predicts each point ``repetitions`` times (default the
    spec's), with ``run`` = base run … base run + N − 1, and the findings see the
    mean (:func:`mean_row`).
    """
    from quiclab.experiments.derived import make_derived

    started = time.perf_counter()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    failures: dict[tuple[str, str], str] = {}
    computed = 0
    if spec.status == "not-covered":
        for f in spec.findings:
            for name in spec.scenarios_for(f):
                failures[(name, f.engine)] = spec.reason or "not covered"
    elif registry is not None:
        for engine in spec.engines():
            if engine == "crypto-fit":
                continue
            names = [n for f in spec.findings if f.engine == engine
                     for n in spec.scenarios_for(f)]
            names += spec.plotted()
            names = list(dict.fromkeys(names))
            runnable = []
            for n in names:
                reason = unmodelled(spec.named[n], engine)
                if reason:
                    failures[(n, engine)] = reason
                else:
                    runnable.append(n)
            if not runnable:
                continue
            resolved = spec.resolved()
            options = {engine: {**runtime.get(engine, {}),
                                **spec.engine_options.get(engine, {})}}
            # One cache per engine, options and model set, shared by every reproduction:
            # Figs. 3 and 4 of seed 002 predict the same scenarios once.
            key = {"engine": engine, "options": spec.engine_options.get(engine, {})}
            chash = runner.content_hash(key, registry.versions())
            out = runner.default_out(data_dir, "reproduction", f"cache-{engine}", chash)
            runs = (repetitions or spec.repetitions) if engine in STOCHASTIC_ENGINES else 1
            scenarios = {n: [replace(spec.named[n], run=spec.named[n].run + r)
                             for r in range(runs)] for n in runnable}
            report = runner.run_points(
                name=spec.name, kind="reproduction", spec=resolved,
                scenarios=[s for n in runnable for s in scenarios[n]], engines=[engine],
                engine_options=options, registry=registry, out=out, executor=executor,
                progress=progress, chash=chash)
            computed += report.computed
            by_key = {r["scenario_key"]: r for r in (report.table.to_pylist()
                                                      if report.table is not None else [])}
            errors = {label: reason for _, label, reason in report.failed}
            for n in runnable:
                got = [by_key.get(runner.scenario_key(s)) for s in scenarios[n]]
                missing = [s for s, row in zip(scenarios[n], got, strict=True) if row is None]
                if missing:
                    failures[(n, engine)] = errors.get(missing[0].describe(),
                                                       "engine gave no prediction")
                else:
                    found = [row for row in got if row is not None]
                    rows[(n, engine)] = found[0] if runs == 1 else mean_row(found)
    ctx = Context(spec, rows, {str(r["point_id"]): r for r in points.to_dict("records")},
                  fitted if fitted is not None else set(),
                  make_derived(spec, registry, points), failures)
    results = evaluate(ctx)
    if spec.status == "not-covered":
        for r in results:
            r.status, r.reason = NOT_COVERED, spec.reason or r.reason
    return Reproduced(spec, results, rows, time.perf_counter() - started, computed)


# ----------------------------------------------------------------- writing
def results_frame(results: list[Result]) -> pd.DataFrame:
    return pd.DataFrame([r.to_dict() for r in results])


def _fmt(x: Any, digits: int = 4) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.{digits}g}"
    return str(x)


def markdown_table(frame: pd.DataFrame, columns: list[str], headers: list[str]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]).replace("|", "\\|") for c in columns)
                     + " |")
    return "\n".join(lines)


def write_one(rep: Reproduced, out: Path) -> Path:
    from quiclab.experiments.plots import plot_reproduction

    folder = out / rep.spec.name
    folder.mkdir(parents=True, exist_ok=True)
    frame = results_frame(rep.results)
    frame.to_csv(folder / f"{rep.spec.name}.csv", index=False)
    pd.DataFrame([{"scenario": n, "engine": e, **row} for (n, e), row in rep.rows.items()]) \
        .to_csv(folder / "predictions.csv", index=False)
    frame["abs_err"] = frame["abs_error"]
    frame["rel_err_pct"] = frame["rel_error"] * 100
    md = [f"# {rep.spec.title}", "", f"`{rep.spec.name}` — {rep.spec.path}", ""]
    if rep.spec.description:
        md += [rep.spec.description.strip(), ""]
    if rep.spec.status == "not-covered":
        md += [f"**Not covered:** {rep.spec.reason}", ""]
    verdicts = rep.verdicts()
    md += ["| finding | engine | verdict | claim |", "|---|---|---|---|"]
    for fid in rep.spec.finding_ids():
        for (vid, engine), v in verdicts.items():
            if vid == fid:
                md.append(f"| {fid} | {engine} | {v} | {rep.spec.claim(fid)} |")
    md += ["", markdown_table(frame, ["finding", "check", "scenario", "unit", "published_text",
                                      "predicted_text", "abs_err", "rel_err_pct", "tolerance",
                                      "engine", "status", "band_text", "band", "in_fit"],
                              ["finding", "point / shape", "scenario", "unit", "published",
                               "predicted", "abs. error", "rel. error %", "tolerance",
                               "engine", "result", "predictive band", "within band",
                               "in fit"]), ""]
    md += ["Reasons for the tolerances:", ""]
    md += [f"- {r.finding} {r.check}: {r.reason}" for r in rep.results]
    png = folder / f"{rep.spec.name}.png"
    try:
        plot_reproduction(rep, png)
        md += ["", f"![{rep.spec.name}]({png.name})"]
    except Exception as err:
        md += ["", f"(plot failed: {type(err).__name__}: {err})"]
    (folder / f"{rep.spec.name}.md").write_text("\n".join(md) + "\n")
    return folder


def _in_fit(rows: list[Result]) -> str:
    """"all", "some" or "none" of a finding's checks compare with points the fit used."""
    used = sum(bool(r.in_fit) for r in rows)
    return "none" if used == 0 else ("all" if used == len(rows) else "some")


def finding_rows(rep: Reproduced) -> list[dict[str, Any]]:
    """One row per finding and engine: tolerances, predicted/published texts, verdict."""
    out = []
    verdicts = rep.verdicts()
    bands = rep.band_verdicts()
    for fid in rep.spec.finding_ids():
        for (vid, engine), verdict in verdicts.items():
            if vid != fid:
                continue
            rows = [r for r in rep.results if r.finding == fid and r.engine == engine]
            out.append({
                "reproduction": rep.spec.name, "figure": rep.spec.source.get("figure", ""),
                "document": rep.spec.source.get("document", ""), "finding": fid,
                "claim": rep.spec.claim(fid), "engine": engine,
                "tolerance": "; ".join(dict.fromkeys(r.tolerance for r in rows if r.tolerance)),
                "published": "; ".join(r.published_text for r in rows if r.published_text),
                "predicted": "; ".join(r.predicted_text for r in rows if r.predicted_text),
                "checks": len(rows), "passed": sum(r.status == PASS for r in rows),
                # Whether the calibration used the finding's published numbers: a
                # pass of a finding fitted to ("all") is in-sample, not a prediction.
                "in_fit": _in_fit(rows),
                "failed": sum(r.status == FAIL for r in rows),
                "verdict": verdict,
                # Beside the tolerance verdict: the published value against the
                # prediction's predictive band (experiments/evaluate.py _band).
                "band_90": bands.get((fid, engine), ""),
                "band": "; ".join(r.band_text for r in rows if r.band_text),
                "reason": rows[0].reason if rows and verdict == NOT_COVERED else "",
            })
    return out


def update_summary(out: Path, reps: list[Reproduced]) -> pd.DataFrame:
    """Merge these reproductions into ``results.csv`` / ``findings.csv`` / ``summary.md``."""
    out.mkdir(parents=True, exist_ok=True)
    names = {r.spec.name for r in reps}
    new_results = pd.concat([results_frame(r.results) for r in reps], ignore_index=True)
    new_findings = pd.DataFrame([row for r in reps for row in finding_rows(r)])
    tables = {"results.csv": new_results, "findings.csv": new_findings}
    merged: dict[str, pd.DataFrame] = {}
    for file, new in tables.items():
        path = out / file
        if path.is_file():
            old = pd.read_csv(path)
            old = old[~old["reproduction"].isin(names)]
            new = pd.concat([old, new], ignore_index=True)
        new = new.sort_values(["reproduction", "finding"], kind="stable")
        new.to_csv(path, index=False)
        merged[file] = new
    findings = merged["findings.csv"]
    counts = findings["verdict"].value_counts().to_dict()
    md = ["# Reproductions: summary", "",
          f"{len(findings)} findings: {counts.get(PASS, 0)} pass, {counts.get(FAIL, 0)} fail, "
          f"{counts.get(NOT_COVERED, 0)} not covered.", "",
          _band_count(findings), "",
          markdown_table(findings, ["reproduction", "finding", "engine", "tolerance",
                                    "predicted", "published", "verdict", "band_90"],
                         ["reproduction", "finding", "engine", "tolerance", "predicted",
                          "published", "result", "within the 90 % band"])]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    return findings


def _band_count(findings: pd.DataFrame) -> str:
    """One sentence: how many findings' published values meet their predictive bands."""
    if "band_90" not in findings:
        return "No band verdicts (findings written before predictive bands)."
    band = findings["band_90"].fillna("")
    judged = band[band != ""]
    return (f"Beside the tolerance verdicts: {int((judged == 'consistent').sum())} of "
            f"{len(judged)} findings with a predicted goodput value are consistent within "
            f"its predictive band (default 90 %), {int((judged == 'outside').sum())} outside; "
            f"{int((band == '').sum())} compare changes or shapes, which have no band.")


#: Markers of the reproduction table in a README (``quiclab reproduce --all --readme FILE``).
README_BEGIN = "<!-- REPRODUCTIONS:BEGIN (quiclab reproduce --all --readme README.md) -->"
README_END = "<!-- REPRODUCTIONS:END -->"


def _distinct(findings: pd.DataFrame) -> int:
    """Findings, not finding × engine rows (a finding checked by two engines is one)."""
    keys = [c for c in ("reproduction", "finding") if c in findings]
    return len(findings.drop_duplicates(keys)) if keys else len(findings)


def write_readme_table(readme: Path, findings: pd.DataFrame, seconds: float) -> None:
    """Put the findings table between README_BEGIN and README_END in ``readme`` (the
    markers are appended if absent); the rest of the file is left as it is."""
    counts = findings["verdict"].value_counts().to_dict()
    if "in_fit" not in findings:  # a findings.csv written before the column existed
        findings = findings.assign(in_fit="")
    in_fit, passed = findings["in_fit"], findings["verdict"] == PASS
    body = [README_BEGIN, "",
            f"{len(findings)} verdicts ({_distinct(findings)} findings, each by the engines its "
            f"spec names): {counts.get(PASS, 0)} pass, {counts.get(FAIL, 0)} fail, "
            f"{counts.get(NOT_COVERED, 0)} not covered ({seconds:.0f} s on this machine). "
            f"Of the passes, {int((passed & (in_fit == 'none')).sum())} compare only with "
            f"numbers the calibration never used, {int((passed & (in_fit == 'some')).sum())} "
            f"partly with fitted ones and {int((passed & (in_fit == 'all')).sum())} only with "
            "fitted ones (in sample: column \"in fit\"). "
            "Every check of a finding and its reason: `<data dir>/reports/reproductions/`.",
            "",
            markdown_table(findings, ["reproduction", "finding", "engine", "tolerance",
                                      "published", "predicted", "in_fit", "verdict"],
                           ["reproduction", "finding", "engine", "tolerance", "published",
                            "predicted", "in fit", "result"]),
            "", README_END]
    text = read_text(readme) if readme.is_file() else ""
    if README_BEGIN in text and README_END in text:
        head, rest = text.split(README_BEGIN, 1)
        tail = rest.split(README_END, 1)[1]
        text = head + "\n".join(body) + tail
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(body) + "\n"
    readme.write_text(text)


# ----------------------------------------------------------------- CLI
def main_reproduce(args: argparse.Namespace) -> int:
    from quiclab.experiments.cli import _executor, runtime_options

    if args.list:
        for path in shipped():
            spec = load_repro(path)
            print(f"{spec.name:48s} {spec.title}")
        return 0
    paths = [find_spec(args.name, "repro-")] if args.name else shipped()
    registry = Registry.load(args.paths.models)
    points = load_points(args.catalog)
    # Every spec is checked before any runs: unknown implementations, CPUs and published
    # point ids are one-line SpecErrors naming the file and key path. An id is known if
    # the packaged CSVs or the catalog have it (a catalog ingested from another folder
    # may lack some; its checks then say so in the report, as before).
    ids = known_point_ids(points)
    specs = [load_repro(p, registry, ids) for p in paths]
    fitted = fitted_ids(points, Path(args.paths.models))
    executor = _executor(args)
    out = Path(args.out) if args.out else args.paths.reports / "reproductions"
    writable_folder(out, "--out")  # before the first spec runs, not after it
    engines = list(dict.fromkeys(args.engine)) if args.engine else [None]
    started = time.perf_counter()
    reps = []
    for spec in specs:
        for engine in engines:
            run_spec = with_engine(spec, engine) if engine else spec
            rep = run_one(run_spec, registry, points, executor, args.paths.data_dir,
                          runtime_options(args), progress=not args.quiet, fitted=fitted,
                          repetitions=getattr(args, "repetitions", None))
            write_one(rep, out)
            if not args.no_catalog:
                _to_catalog(args.catalog, rep)
            reps.append(rep)
            v = rep.verdicts()
            print(f"{spec.name:46s} {sum(x == PASS for x in v.values()):3d} pass "
                  f"{sum(x == FAIL for x in v.values()):3d} fail "
                  f"{sum(x == NOT_COVERED for x in v.values()):3d} n/c  ({rep.seconds:.0f} s)",
                  flush=True)
    # Several engines for one spec are written to one folder: rewrite with all rows.
    if len(engines) > 1:
        for spec in specs:
            group = [r for r in reps if r.spec.name == spec.name]
            merged = Reproduced(group[0].spec, [x for r in group for x in r.results],
                                {k: v for r in group for k, v in r.rows.items()})
            write_one(merged, out)
    findings = update_summary(out, reps)
    from quiclab.stamp import write_stamp

    write_stamp(out)
    # What the findings were computed with (quiclab validate compares it to its models).
    (out / MODELS_FILE).write_text(json.dumps(
        {"models": str(registry.source), "versions": registry.versions()}, indent=1) + "\n")
    counts = findings["verdict"].value_counts().to_dict()
    if getattr(args, "readme", None):
        write_readme_table(Path(args.readme), findings, time.perf_counter() - started)
    print(f"\n{len(findings)} findings in {out}/summary.md: {counts.get(PASS, 0)} pass, "
          f"{counts.get(FAIL, 0)} fail, {counts.get(NOT_COVERED, 0)} not covered "
          f"({time.perf_counter() - started:.0f} s)")
    return 0


def _to_catalog(catalog: Path, rep: Reproduced) -> None:
    import pyarrow as pa

    if not rep.rows:
        return
    rows = [dict(r) for r in rep.rows.values()]
    table = pa.Table.from_pylist(rows)
    meta = {"spec": rep.spec.resolved(), "content_hash": None}
    try:
        runner.to_catalog(catalog, table, name=rep.spec.name, kind="reproduction",
                          provenance=meta)
    except Exception as err:
        print(f"  catalog not updated: {err}", file=sys.stderr)
