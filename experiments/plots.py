"""PNG figures of reproductions, shaped like the papers' figures, published points overlaid.

Panel kinds (``plot:`` in a reproduction spec; default ``bars``):

- ``bars`` — one bar per check (predicted, coloured by result) with the
  published value as a black marker and the tolerance as a whisker; a stated
  range or bound is drawn as a grey band. One panel per unit.
- ``lines`` — predicted metric along a series' last axis, one line per
  series; published points whose scenario lies on a plotted series are
  overlaid as black markers (Fig. 3 buffers, Fig. 10 RTT/loss, CPU sweeps).
- ``heatmap`` — a two-axis series (server × client) as a matrix; with
  ``baseline_series`` the cell is the change in % against it (Fig. 4/5).
  Cells with a published number show it beneath the prediction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from quiclab.experiments.evaluate import FAIL, PASS, Result

COLOURS = {PASS: "#4c9a2a", FAIL: "#c0392b"}
GREY = "#9e9e9e"


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _bars(ax: Any, results: list[Result], unit: str) -> None:
    rows = [r for r in results if r.unit == unit]
    xs = range(len(rows))
    for x, r in zip(xs, rows, strict=True):
        colour = COLOURS.get(r.status, GREY)
        if not math.isnan(r.predicted):
            ax.bar(x, r.predicted, color=colour, alpha=0.85)
        lo, hi = _published_span(r)
        if lo is not None and hi is not None and hi > lo:
            ax.add_patch(plt.Rectangle((x - 0.4, lo), 0.8, hi - lo, color=GREY, alpha=0.25,
                                       lw=0))
        if not math.isnan(r.published):
            err = _tol_halfwidth(r)
            ax.errorbar(x, r.published, yerr=err, fmt="D", color="black", ms=5, capsize=3,
                        lw=1)
    ax.set_xticks(list(xs))
    several = len({r.engine for r in rows}) > 1
    ax.set_xticklabels([_short(f"{r.check}\n{r.scenario}") + (f" ({r.engine})" if several else "")
                        for r in rows], rotation=60, ha="right", fontsize=6)
    ax.set_ylabel(unit or "value")
    ax.axhline(0, color="black", lw=0.5)


def _published_span(r: Result) -> tuple[float | None, float | None]:
    text = r.published_text
    if "–" in text:
        parts = text.replace("≥ ", "").replace("≤ ", "").replace("≈ ", "").split("–")
        try:
            return float(parts[0]), float(parts[1].split()[0])
        except ValueError:
            return None, None
    return None, None


def _tol_halfwidth(r: Result) -> float:
    t = r.tolerance
    try:
        if t.startswith("±") and t.endswith("%"):
            return abs(r.published) * float(t[1:-1].strip()) / 100
        if t.startswith("±"):
            return float(t[1:].split()[0])
    except ValueError:
        return 0.0
    return 0.0


def _metric(rep: Any, name: str, engine: str, metric: str) -> float:
    row = rep.rows.get((name, engine))
    if row is None or row.get(metric) is None:
        return math.nan
    return float(row[metric])


def _scale(metric: str, unit: str) -> float:
    return 1e-3 if metric == "goodput_mbps" and unit == "Gbit/s" else 1.0


def _lines(ax: Any, rep: Any, panel: dict[str, Any]) -> None:
    metric = panel.get("metric", "goodput_mbps")
    unit = panel.get("unit", "Gbit/s" if metric == "goodput_mbps" else "")
    scale = _scale(metric, unit)
    names = panel["series"] if isinstance(panel["series"], list) else [panel["series"]]
    engines = sorted({f.engine for f in rep.spec.findings if f.engine != "crypto-fit"})
    on_series: dict[str, tuple[str, float]] = {}
    for name in names:
        _, values, points = rep.spec.series[name]
        for engine in engines:
            xs = [float(v[-1]) if not isinstance(v[-1], str) else i
                  for i, v in enumerate(values)]
            ys = [_metric(rep, p, engine, metric) * scale for p in points]
            if all(math.isnan(y) for y in ys):
                continue
            label = name if len(engines) == 1 else f"{name} ({engine})"
            ax.plot(xs, ys, marker="o", ms=3, label=label)
            for x, p in zip(xs, points, strict=True):
                on_series[p] = (name, x)
            if values and isinstance(values[0][-1], str):
                ax.set_xticks(xs)
                ax.set_xticklabels([str(v[-1]) for v in values], rotation=30, fontsize=7)
    shown = False
    for r in rep.results:
        base = r.scenario.split(" vs ")[0]
        if base in on_series and r.quantity in ("goodput", "throughput") \
                and not math.isnan(r.published):
            value = r.published * (1e3 if r.unit == "Gbit/s" else 1.0) * scale \
                if metric == "goodput_mbps" else r.published
            ax.plot(on_series[base][1], value, "kD", ms=6,
                    label=None if shown else "published")
            shown = True
    if panel.get("xlog"):
        ax.set_xscale("log", base=2 if panel.get("xlog") == 2 else 10)
    if panel.get("ylog"):
        ax.set_yscale("log")
    ax.set_xlabel(panel.get("xlabel", panel.get("x", "")))
    ax.set_ylabel(panel.get("ylabel", f"{metric} ({unit})" if unit else metric))
    if ax.get_legend_handles_labels()[0]:  # a panel of unlabelled series has no legend
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _heatmap(ax: Any, rep: Any, panel: dict[str, Any]) -> None:
    metric = panel.get("metric", "goodput_mbps")
    name = panel["series"] if isinstance(panel["series"], str) else panel["series"][0]
    _, values, points = rep.spec.series[name]
    base = panel.get("baseline_series")
    engine = next(f.engine for f in rep.spec.findings if f.engine != "crypto-fit")
    rows_ = list(dict.fromkeys(v[0] for v in values))
    cols = list(dict.fromkeys(v[1] for v in values))
    grid = [[math.nan] * len(cols) for _ in rows_]
    for v, p in zip(values, points, strict=True):
        a = _metric(rep, p, engine, metric)
        if base:
            b = _metric(rep, rep.spec.series[base][2][points.index(p)], engine, metric)
            a = 100.0 * (a / b - 1.0) if b else math.nan
        grid[rows_.index(v[0])][cols.index(v[1])] = a
    image = ax.imshow(grid, cmap="RdYlGn" if base else "viridis", aspect="auto")
    plt.colorbar(image, ax=ax, fraction=0.046)
    published = {r.scenario.split(" vs ")[0]: r for r in rep.results
                 if not math.isnan(r.published)}
    for i, rv in enumerate(rows_):
        for j, col_value in enumerate(cols):
            p = points[next(k for k, v in enumerate(values)
                            if v[0] == rv and v[1] == col_value)]
            text = "" if math.isnan(grid[i][j]) else f"{grid[i][j]:.0f}"
            if p in published:
                text += f"\n({published[p].published_text})"
            ax.text(j, i, text, ha="center", va="center", fontsize=6, color="white"
                    if not base else "black")
    ax.set_yticks(range(len(rows_)))
    ax.set_yticklabels([str(r) for r in rows_], fontsize=7)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([str(c) for c in cols], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel(panel.get("ylabel", "server"))
    ax.set_xlabel(panel.get("xlabel", "client"))


def plot_reproduction(rep: Any, path: Path) -> None:
    """Draw the spec's panels (default: bars of every check) into one PNG."""
    panels = list(rep.spec.plots) or [{"kind": "bars"}]
    units: list[str] = []
    expanded: list[dict[str, Any]] = []
    for panel in panels:
        if panel["kind"] == "bars":
            units = list(dict.fromkeys(r.unit for r in rep.results if r.quantity != "shape"))
            expanded += [{**panel, "unit_": u} for u in units] or [{"kind": "empty"}]
        elif panel["kind"] != "table":
            expanded.append(panel)
    if not expanded:
        expanded = [{"kind": "empty"}]
    fig, axes = plt.subplots(1, len(expanded), figsize=(max(7, 5.5 * len(expanded)), 5.0),
                             squeeze=False)
    for ax, panel in zip(axes[0], expanded, strict=True):
        if panel["kind"] == "bars":
            _bars(ax, [r for r in rep.results if r.quantity != "shape"], panel["unit_"])
        elif panel["kind"] == "lines":
            _lines(ax, rep, panel)
        elif panel["kind"] == "heatmap":
            _heatmap(ax, rep, panel)
        else:
            ax.axis("off")
            reason = rep.spec.reason or "nothing to plot"
            ax.text(0.5, 0.5, "\n".join(_wrap(reason, 60)), ha="center", va="center",
                    fontsize=9)
        if panel.get("title"):
            ax.set_title(panel["title"], fontsize=9)
    fig.suptitle("\n".join(_wrap(rep.spec.title, 40 + 45 * len(expanded))), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _wrap(text: str, width: int) -> list[str]:
    words, lines, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return [*lines, line]
