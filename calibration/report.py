"""The calibration report: parameter table, fit errors, CV errors, residual plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from quiclab.calibration.cv import summarise
from quiclab.calibration.fit import Calibrator


def parameter_table(cal: Calibrator) -> pd.DataFrame:
    """Every parameter of every written model with interval and provenance."""
    rows = []
    for name, model in sorted(cal.models_.items()):
        for pname, p in model.params():
            rows.append({"implementation": name, "parameter": pname, "value": p.value,
                         "lo": p.lo, "hi": p.hi, "unit": p.unit, "source": p.source})
        for v, spec in sorted(model.variants.items()):
            rows.append({"implementation": name, "parameter": f"variant.{v}.cost_factor",
                         "value": spec.get("cost_factor", 1.0), "lo": np.nan, "hi": np.nan,
                         "unit": "×", "source": spec.get("cost_factor_source",
                                                          spec.get("source", ""))})
    return pd.DataFrame(rows)


def per_packet_costs(cal: Calibrator) -> pd.DataFrame:
    """Server (sender) CPU per data packet on the reference CPU for the profiled stacks."""
    rows = []
    for (impl, role), costs in sorted(cal.cpu_.costs_.items()):
        est = costs.get("ns_per_packet.aes-ni")
        ack = costs.get("ns_per_ack")
        if est:
            rows.append({"implementation": impl, "role": role, "ns_per_packet": est.value,
                         "lo": est.lo, "hi": est.hi, "ns_per_ack": ack.value if ack else np.nan,
                         "runs": est.n})
    return pd.DataFrame(rows)


def error_summary(evidence: pd.DataFrame) -> pd.DataFrame:
    ev = evidence[evidence["in_fit"]]
    out = []
    for name, g in [("dataset cells", ev[ev["source"] == "dataset"]),
                    ("published points", ev[ev["source"] == "published"]),
                    ("all", ev)]:
        if len(g):
            out.append({"evidence": name, "items": len(g), "median_ape_pct": g["ape_pct"].median(),
                        "p95_ape_pct": g["ape_pct"].quantile(0.95)})
    return pd.DataFrame(out)


def plots(cal: Calibrator, directory: Path, held: pd.DataFrame | None = None) -> list[str]:
    """Residual plots as PNG: predicted vs observed, and relative error by group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = cal.report_.evidence
    files = []
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for group, g in ev.groupby("group"):
        ax.scatter(g["observed_mbps"], g["predicted_mbps"], s=18, label=group, alpha=0.8)
    lo, hi = ev[["observed_mbps", "predicted_mbps"]].min().min(), ev[
        ["observed_mbps", "predicted_mbps"]].max().max()
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.6)
    ax.plot([lo, hi], [lo / 1.1, hi / 1.1], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("observed goodput (Mbit/s)")
    ax.set_ylabel("analytic prediction (Mbit/s)")
    ax.set_title("Calibration fit (in-sample); dotted: ±10 %")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(directory / "fit_predicted_vs_observed.png", dpi=110)
    plt.close(fig)
    files.append("fit_predicted_vs_observed.png")

    fig, ax = plt.subplots(figsize=(7.5, 4))
    data = ev.assign(rel=(ev["predicted_mbps"] / ev["observed_mbps"] - 1) * 100)
    groups = sorted(data["group"].unique())
    ax.boxplot([data[data["group"] == g]["rel"] for g in groups], tick_labels=groups)
    if held is not None and len(held):
        hrel = (held["predicted_mbps"] / held["observed_mbps"] - 1) * 100
        xs = [groups.index(g) + 1.25 for g in held["group"] if g in groups]
        ax.scatter(xs, hrel[held["group"].isin(groups)], s=8, c="tab:red",
                   label="held out (CV)")
        ax.legend(fontsize=7)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("prediction error (%)")
    ax.set_ylim(-100, 150)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    ax.set_title("Relative error by evidence group")
    fig.tight_layout()
    fig.savefig(directory / "fit_residuals_by_group.png", dpi=110)
    plt.close(fig)
    files.append("fit_residuals_by_group.png")
    return files


def write_report(cal: Calibrator, directory: Path, cv: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """Write CSVs, PNGs and a Markdown summary; returns the headline figures."""
    directory.mkdir(parents=True, exist_ok=True)
    params = parameter_table(cal)
    params.to_csv(directory / "parameters.csv", index=False)
    cal.report_.evidence.to_csv(directory / "evidence.csv", index=False)
    cal.report_.params.to_csv(directory / "fit_parameters.csv", index=False)
    costs = per_packet_costs(cal)
    costs.to_csv(directory / "per_packet_costs.csv", index=False)
    errors = error_summary(cal.report_.evidence)
    crypto_rows = []
    for op, fit in cal.crypto_fit_.items():
        t = fit.table.assign(op=op)
        crypto_rows.append(t)
    crypto = pd.concat(crypto_rows, ignore_index=True) if crypto_rows else pd.DataFrame()
    crypto.to_csv(directory / "crypto_table3.csv", index=False)
    held_all = pd.concat(list(cv.values()), ignore_index=True) if cv else None
    figures = plots(cal, directory, held_all)
    headline: dict[str, Any] = {
        "in_sample_dataset_median_ape_pct": float(errors.loc[
            errors["evidence"] == "dataset cells", "median_ape_pct"].iloc[0]),
        "in_sample_dataset_p95_ape_pct": float(errors.loc[
            errors["evidence"] == "dataset cells", "p95_ape_pct"].iloc[0]),
    }
    lines = ["# Calibration report", "",
             f"Fit: {len(cal.free_)} free parameters, {len(cal.evidence_)} evidence items, "
             f"{cal.report_.nfev} evaluations in {len(cal.softness) + 1} passes, "
             f"{cal.report_.seconds:.0f} s.", "",
             "## In-sample error (analytic engine vs evidence)", "",
             errors.to_markdown(index=False, floatfmt=".1f"), ""]
    for name, held in cv.items():
        summ = summarise(held)
        summ.to_csv(directory / f"cv_{name}.csv", index=False)
        held.to_csv(directory / f"cv_{name}_items.csv", index=False)
        ds = held[held["source"] == "dataset"]
        if len(ds):
            headline[f"cv_{name}_dataset_median_ape_pct"] = float(ds["ape_pct"].median())
            headline[f"cv_{name}_dataset_p95_ape_pct"] = float(ds["ape_pct"].quantile(0.95))
        headline[f"cv_{name}_all_median_ape_pct"] = float(held["ape_pct"].median())
        headline[f"cv_{name}_all_p95_ape_pct"] = float(held["ape_pct"].quantile(0.95))
        lines += [f"## Cross-validation: leave one {name[:-1]} out", "",
                  summ.to_markdown(index=False, floatfmt=".1f"), ""]
    lines += ["## Per-packet CPU cost on the AMD EPYC 7543 (stage A, RLM)", "",
              costs.to_markdown(index=False, floatfmt=".0f"), "",
              "## Crypto (seed 001 Table 3)", "", crypto.to_markdown(index=False, floatfmt=".1f"),
              "", "## Published points not used", ""]
    lines += [f"- {pid}: {reason}" for pid, reason in cal.skipped_points_]
    lines += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    (directory / "calibration.md").write_text("\n".join(lines) + "\n")
    return headline
