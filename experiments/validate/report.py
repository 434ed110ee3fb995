"""Writing the validation report: ``validation.md``, ``validation.html`` (plots
embedded), the CSV tables beside them, and the plot of predicted against
observed goodput."""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path

import numpy as np
import pandas as pd

from quiclab.experiments.validate.summary import (
    controlled_knobs,
    fresh_cells,
    summarise_controlled,
    summarise_fresh,
)

WORST = 8

CONTROLLED_TEXT = (
    "Experiments that also ran each pair at the calibration setting in the same session "
    "(testbed/specs/fresh-validation-controlled.yaml) separate the host's state from the "
    "model: `control_ape_pct` is the control's error (drift between sessions on this shared "
    "machine, out of sample), `normalised_ape_pct` the knob cell's error after scaling a "
    "CPU-bound prediction by the CPU-bound control's observed / predicted goodput (other "
    "limits left as predicted) — the error of the model's response to the knob given the "
    "session's CPU speed. `ape_pct` is the plain error, as above. Cells whose setting the "
    "fresh calibration also runs (`calibrated`: GSO off alone, which fixes each stack's "
    "system-call share) are not held out in kind: the knob columns leave them out and "
    "`median_calibrated_ape_pct` shows them apart.")


def _fmt_table(frame: pd.DataFrame, floats: int = 1) -> str:
    from quiclab.experiments.reproduce import markdown_table

    shown = frame.copy()
    for c in shown.columns:
        if shown[c].dtype.kind == "f":
            shown[c] = shown[c].map(lambda x: "" if pd.isna(x) else f"{x:.{floats}f}")
    return markdown_table(shown, list(shown.columns), list(shown.columns))


def plot_items(items: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(items.groupby(["source", "engine"], sort=False))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for (source, engine), g in groups:
        ok = g.dropna(subset=["predicted_mbps"])
        axes[0].scatter(ok["observed_mbps"], ok["predicted_mbps"], s=12, alpha=0.7,
                        label=f"{source} · {engine}")
        ape = np.sort(ok["ape_pct"].to_numpy())
        if len(ape):
            axes[1].plot(ape, np.arange(1, len(ape) + 1) / len(ape), label=f"{source} · {engine}")
    lim = [max(10.0, float(items["observed_mbps"].min()) * 0.8),
           float(np.nanmax([items["observed_mbps"].max(), items["predicted_mbps"].max()])) * 1.2]
    axes[0].plot(lim, lim, "k--", lw=0.8)
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("observed goodput (Mbit/s)")
    axes[0].set_ylabel("predicted goodput (Mbit/s)")
    axes[0].legend(fontsize=7)
    axes[1].set_xscale("symlog", linthresh=1)
    axes[1].set_xlabel("absolute percentage error (%)")
    axes[1].set_ylabel("fraction of items")
    axes[1].axvline(10, color="grey", lw=0.5)
    axes[1].axvline(25, color="grey", lw=0.5)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'


def _requests_md(summary: pd.DataFrame, items: pd.DataFrame) -> list[str]:
    shown = items[["engine", "ident", "quantity", "observed", "predicted", "signed_error_pct",
                   "noise_cv_pct", "n", "limit"]]
    return ["## Request workloads (fresh)", "",
            "Fresh request and handshake runs per cell (median of its repetitions) against "
            "each engine's prediction; `noise_cv_pct` is the repetitions' coefficient of "
            "variation, `runtime_s` is compared with the predicted completion time.", "",
            _fmt_table(summary), "", _fmt_table(shown, floats=2), ""]


def _coverage_md(tables: dict[str, pd.DataFrame]) -> list[str]:
    from quiclab.calibration.intervals import COVERAGE_TEXT

    if not tables:
        return ["## Predictive intervals: coverage of held-out items", "",
                "No model set here carries held-out residuals (`intervals.json`): run "
                "`quiclab calibrate --cv all` (and `--source fresh` with two sessions).", ""]
    miss = tables["outside"]
    shown = ["source", "regime", "fold", "ident", "observed_mbps", "predicted_mbps",
             "lo_90", "hi_90", "extrapolated_fields"]
    bad = tables["degenerate"]
    return ["## Predictive intervals: coverage of held-out items", "", COVERAGE_TEXT, "",
            _fmt_table(tables["coverage"], floats=2), "",
            "Per engine (each engine's residuals: the held-out items predicted again by it "
            "with their fold's models):", "", _fmt_table(tables["engines"], floats=2), "",
            f"### Items outside their 90 % band ({len(miss)}, judged fold by fold)", "",
            _fmt_table(miss[shown], floats=1) if len(miss) else "None.", "",
            "### Widest and narrowest 90 % bands, with what set them", "",
            _fmt_table(tables["extremes"], floats=3), "",
            f"Degenerate bands (zero width, or beyond ×/÷ 10 of the prediction): {len(bad)}.",
            ""]


def _written(path: Path) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))


def write_report(out: Path, summary: pd.DataFrame, items: pd.DataFrame,
                 findings: pd.DataFrame | None, repro_dir: Path,
                 skipped: dict[str, list[tuple[str, str]]],
                 requests: pd.DataFrame | None = None,
                 requests_summary: pd.DataFrame | None = None,
                 stale: str | None = None,
                 coverage: dict[str, pd.DataFrame] | None = None) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    coverage = coverage or {}
    for name, table in coverage.items():
        table.to_csv(out / f"coverage-{name}.csv", index=False)
    items.to_csv(out / "validation.csv", index=False)
    summary.to_csv(out / "summary.csv", index=False)
    has_requests = requests is not None and requests_summary is not None and len(requests)
    if has_requests:
        assert requests is not None and requests_summary is not None
        requests.to_csv(out / "requests.csv", index=False)
        requests_summary.to_csv(out / "requests-summary.csv", index=False)
    by_stack = summarise_fresh(items)
    cells = fresh_cells(items)
    if len(by_stack):
        by_stack.to_csv(out / "fresh-by-stack.csv", index=False)
    knobs = controlled_knobs(items)
    controlled = summarise_controlled(knobs)
    if len(knobs):
        knobs.to_csv(out / "fresh-controlled.csv", index=False)
    png = out / "validation.png"
    if len(items.dropna(subset=["predicted_mbps"])):
        plot_items(items, png)
    worst = items.dropna(subset=["ape_pct"]).sort_values("ape_pct", ascending=False) \
        .groupby(["source", "engine"], sort=False).head(WORST)
    md = ["# Validation report", "",
          "Absolute percentage error (APE) of predicted goodput against every measurement of "
          "each source, per engine. `items`: the source's evidence; `predicted`: those "
          "with a point value, over which the APE columns are taken (a published bound is "
          "checked as a violation, a CPU figure as utilisation, neither as an APE).", "",
          _fmt_table(summary) if len(summary) else "No goodput measurements.", ""]
    md += ["## Worst cases", "", _fmt_table(worst[["source", "engine", "ident", "scenario",
                                                    "observed_mbps", "predicted_mbps",
                                                    "signed_error_pct", "limit"]]), ""]
    md += _coverage_md(coverage)
    if len(by_stack):
        md += ["## Fresh runs per engine, experiment and stack", "",
               "Goodput cells of this host's testbed runs (median of each cell's "
               "repetitions); `fresh-calibration` is what the fresh models were fitted on, "
               "`fresh-validation` the held-out settings. `median_noise_cv_pct` is the "
               "median of the cells' coefficients of variation over repetitions.", "",
               _fmt_table(by_stack), "",
               "### Every fresh cell", "", _fmt_table(cells), ""]
    if len(knobs):
        md += ["## Fresh knobs against a same-session control", "",
               CONTROLLED_TEXT, "", _fmt_table(controlled), "",
               _fmt_table(knobs[["engine", "server", "setting", "calibrated", "observed_mbps",
                                 "predicted_mbps", "normalised_mbps", "ape_pct",
                                 "normalised_ape_pct", "control_ape_pct"]]), ""]
    for source, reasons in skipped.items():
        if reasons:
            md += [f"{len(reasons)} {source} points are not validated (bounds, duplicates, "
                   "unmodelled conditions); see validation.html.", ""]
    if has_requests:
        assert requests is not None and requests_summary is not None
        md += _requests_md(requests_summary, requests)
    verdict_md = ""
    if findings is not None and not findings.empty:
        counts = findings["verdict"].value_counts().to_dict()
        verdict_md = (f"{len(findings)} findings: {counts.get('pass', 0)} pass, "
                      f"{counts.get('fail', 0)} fail, {counts.get('not covered', 0)} not covered")
        per = findings.groupby(["reproduction", "engine"])["verdict"].value_counts() \
            .unstack(fill_value=0).reset_index()
        if "band_90" in findings:
            # Beside the tolerance verdicts, not replacing them: how many findings'
            # published values lie within the prediction's 90 % band.
            band = findings["band_90"].fillna("")
            per = per.merge(findings.assign(band=band).groupby(["reproduction", "engine"])[
                "band"].agg(within_90_band=lambda b: int((b == "consistent").sum()),
                            outside_90_band=lambda b: int((b == "outside").sum()))
                .reset_index(), on=["reproduction", "engine"])
            verdict_md += (f"; consistent within the 90 % band: "
                           f"{int((band == 'consistent').sum())} of "
                           f"{int((band != '').sum())} with a predicted goodput value")
        md += ["## Seed findings reproduced", "",
               verdict_md + f" (from {repro_dir}, written {_written(repro_dir / 'findings.csv')})."
               + (f" **Stale:** {stale}." if stale else ""), "", _fmt_table(per), ""]
    else:
        md += ["## Seed findings reproduced", "",
               f"No reproduction results in {repro_dir}: run `quiclab reproduce --all` "
               "(or `quiclab validate --reproduce`).", ""]
    if png.is_file():
        md += [f"![validation]({png.name})", ""]
    md_path = out / "validation.md"
    md_path.write_text("\n".join(md) + "\n")
    # HTML: the same content with tables and every plot embedded.
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>quiclab validation"
             "</title><style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
             "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
             "padding:2px 6px}.pass{background:#dff0d8}.fail{background:#f2dede}</style>"
             "</head><body><h1>Validation report</h1>",
             summary.to_html(index=False, float_format=lambda x: f"{x:.1f}")]
    if png.is_file():
        parts.append(_img(png))
    parts += ["<h2>Worst cases</h2>", worst.to_html(index=False,
                                                    float_format=lambda x: f"{x:.1f}")]
    if coverage:
        from quiclab.calibration.intervals import COVERAGE_TEXT

        parts += ["<h2>Predictive intervals: coverage of held-out items</h2>",
                  f"<p>{html.escape(COVERAGE_TEXT)}</p>",
                  coverage["coverage"].to_html(index=False, float_format=lambda x: f"{x:.2f}"),
                  "<h3>Items outside their 90 % band</h3>",
                  coverage["outside"].to_html(index=False, float_format=lambda x: f"{x:.3g}"),
                  "<h3>Widest and narrowest 90 % bands</h3>",
                  coverage["extremes"].to_html(index=False, float_format=lambda x: f"{x:.3g}")]
    if len(by_stack):
        parts += ["<h2>Fresh runs per engine, experiment and stack</h2>",
                  by_stack.to_html(index=False, float_format=lambda x: f"{x:.1f}"),
                  "<h3>Every fresh cell</h3>",
                  cells.to_html(index=False, float_format=lambda x: f"{x:.1f}")]
    if len(knobs):
        parts += ["<h2>Fresh knobs against a same-session control</h2>",
                  f"<p>{html.escape(CONTROLLED_TEXT)}</p>",
                  controlled.to_html(index=False, float_format=lambda x: f"{x:.1f}"),
                  knobs.to_html(index=False, float_format=lambda x: f"{x:.1f}")]
    if has_requests:
        assert requests is not None and requests_summary is not None
        parts += ["<h2>Request workloads (fresh)</h2>",
                  requests_summary.to_html(index=False, float_format=lambda x: f"{x:.1f}"),
                  requests.to_html(index=False, float_format=lambda x: f"{x:.2f}")]
    for source, reasons in skipped.items():
        if reasons:
            parts.append(f"<h3>{html.escape(source)}: points not validated</h3>")
            parts.append(pd.DataFrame(reasons, columns=["point_id", "reason"])
                         .to_html(index=False))
    parts.append("<h2>Seed findings reproduced</h2>")
    if findings is not None and not findings.empty:
        parts.append(f"<p>{html.escape(verdict_md)}</p>")
        if stale:
            parts.append(f"<p><strong>Stale:</strong> {html.escape(stale)}.</p>")
        columns = ["reproduction", "finding", "engine", "tolerance", "predicted",
                   "published", "verdict"] + [c for c in ("band_90", "band") if c in findings]
        table = findings[columns].to_html(index=False)
        table = table.replace("<td>pass</td>", "<td class='pass'>pass</td>") \
            .replace("<td>fail</td>", "<td class='fail'>fail</td>")
        parts.append(table)
        for name in sorted(findings["reproduction"].unique()):
            image = repro_dir / name / f"{name}.png"
            if image.is_file():
                parts += [f"<h3>{html.escape(name)}</h3>", _img(image)]
    else:
        parts.append(f"<p>No reproduction results in {html.escape(str(repro_dir))}.</p>")
    parts.append("</body></html>")
    html_path = out / "validation.html"
    html_path.write_text("\n".join(parts))
    return md_path, html_path
