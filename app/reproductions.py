"""The Reproductions page: the seed findings, predicted vs published, plots, pass/fail.

Reads what ``quiclab reproduce`` writes under ``<data dir>/reports/reproductions``
(see ``experiments/reproduce.py``)::

    findings.csv              one row per finding and engine (a verdict): claim, tolerance,
                              published, predicted, verdict (pass | fail | not covered)
    results.csv               one row per check (point or shape)
    summary.md
    <name>/<name>.csv         the checks of one reproduction: predicted vs published,
                              errors, tolerance, status
    <name>/<name>.png         the figure, shaped like the paper's, published points overlaid
    <name>/<name>.md, predictions.csv

The page computes nothing: it shows these files. Without ``findings.csv`` it
falls back to listing any folder's tables (CSV, Parquet, JSON records) and
PNGs, judging a table by its ``pass``/``passed``/``ok`` column; with nothing
there it says so and how to make them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import streamlit as st

from quiclab.app.config import AppConfig
from quiclab.app.labels import place

TABLE_SUFFIXES = (".csv", ".parquet", ".json")
VERDICT_COLUMNS = ("pass", "passed", "ok")
VERDICTS = ("pass", "fail", "not covered")
#: Columns of findings.csv shown, in this order (others follow).
FINDING_COLUMNS = ("reproduction", "finding", "engine", "verdict", "published", "predicted",
                   "tolerance", "claim", "figure", "document", "checks", "passed", "failed",
                   "reason")
CHECK_COLUMNS = ("finding", "check", "quantity", "unit", "published", "predicted",
                 "abs_error", "rel_error", "tolerance", "status", "engine", "scenario",
                 "in_fit", "reason")


@dataclass
class Reproduction:
    """The result files of one reproduction (one folder)."""

    name: str
    folder: Path
    tables: list[Path] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)

    @property
    def checks(self) -> Path | None:
        """``<name>.csv``, the table of checks, if it is there."""
        path = self.folder / f"{self.folder.name}.csv"
        return path if path.is_file() else None


def find_reproductions(root: Path) -> list[Reproduction]:
    """Every folder under ``root`` (itself included) that holds tables or PNGs."""
    if not root.is_dir():
        return []
    found = []
    for folder in sorted({root, *(p for p in root.rglob("*") if p.is_dir())}):
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        tables = [p for p in files if p.suffix in TABLE_SUFFIXES and p.name != "provenance.json"]
        images = [p for p in files if p.suffix == ".png"]
        if tables or images:
            name = "(all)" if folder == root else str(folder.relative_to(root))
            found.append(Reproduction(name, folder, tables, images))
    return found


def read_table(path: Path) -> pd.DataFrame:
    """A result table; JSON may be a list of records or ``{"rows": [...]}``/``{"findings": …}``.

    Raises ValueError (with the file name) for a file that is not a table.
    """
    if path.suffix == ".csv":
        return pd.read_csv(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        for key in ("rows", "findings", "results"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError(f"{path}: not a table (a list of records)")
    return pd.json_normalize(data)


def verdicts(frame: pd.DataFrame) -> tuple[int, int] | None:
    """(passed, failed) from a table's verdict column, None if it has none."""
    for column in VERDICT_COLUMNS:
        if column in frame.columns:
            values = frame[column].map(_truth).dropna()
            return int(values.sum()), int((~values.astype(bool)).sum())
    return None


def _truth(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "pass", "passed", "yes", "ok"):
        return True
    if text in ("false", "0", "fail", "failed", "no"):
        return False
    return None


def finding_count(findings: pd.DataFrame) -> int:
    """How many findings ``findings.csv`` judges: its rows are finding × engine verdicts,
    a finding named within its reproduction."""
    keys = [c for c in ("reproduction", "finding") if c in findings.columns]
    return len(findings.drop_duplicates(subset=keys)) if keys else len(findings)


def _ordered(frame: pd.DataFrame, first: tuple[str, ...]) -> pd.DataFrame:
    columns = [c for c in first if c in frame.columns]
    return frame[list(dict.fromkeys([*columns, *frame.columns]))]


# -- the page ------------------------------------------------------------------------
def findings_ui(findings: pd.DataFrame) -> tuple[list[str], str]:
    """Which verdicts to list, and which reproduction to open."""
    cols = st.columns([2, 3])
    shown = cols[0].multiselect("Verdicts", VERDICTS, default=["pass", "fail"],
                                key="w.repro.verdicts")
    counts = findings.groupby("reproduction")["verdict"].value_counts().unstack(fill_value=0)
    names = list(counts.index)

    def label(name: str) -> str:
        row = counts.loc[name]
        return (f"{name} — {int(row.get('pass', 0))} pass, {int(row.get('fail', 0))} fail, "
                f"{int(row.get('not covered', 0))} not covered")

    judged = [n for n in names if counts.loc[n].get("pass", 0) + counts.loc[n].get("fail", 0)]
    first = names.index(judged[0]) if judged else 0
    chosen = cols[1].selectbox("Reproduction", names, index=first, format_func=label,
                               key="w.repro.name")
    return list(shown), str(chosen)


def show(config: AppConfig) -> None:
    st.header("Reproductions")
    root = Path(config.reports_dir) / "reproductions"
    summary = root / "findings.csv"
    if summary.is_file():
        _show_findings(root, pd.read_csv(summary), config.data_dir)
        return
    found = find_reproductions(root)
    if not found:
        st.info(f"No reproduction results under {place(root, config.data_dir)} yet. Run "
                "`quiclab reproduce --all` "
                "(with the same --data-dir) to make them; this page shows them when they "
                "exist.")
        return
    _show_folders(root, found, config.data_dir)


def _show_findings(root: Path, findings: pd.DataFrame, data_dir: str) -> None:
    counts = findings["verdict"].value_counts()
    cols = st.columns(5)
    cols[0].metric("Findings", finding_count(findings))
    cols[1].metric("Verdicts (finding × engine)", len(findings))
    cols[2].metric("Pass", int(counts.get("pass", 0)))
    cols[3].metric("Fail", int(counts.get("fail", 0)))
    cols[4].metric("Not covered", int(counts.get("not covered", 0)))
    st.caption(f"From {place(root, data_dir)} (`quiclab reproduce`): one verdict per finding "
               "and engine its spec names; predicted and published as the findings state "
               "them, the verdict against each finding's tolerance.")
    shown, chosen = findings_ui(findings)
    listed = _ordered(findings[findings["verdict"].isin(shown)], FINDING_COLUMNS)
    st.dataframe(listed.style.map(_verdict_colour, subset=["verdict"]), hide_index=True,
                 width="stretch", height=320)

    st.subheader(chosen)
    folder = root / chosen
    checks = folder / f"{chosen}.csv"
    figure = folder / f"{chosen}.png"
    if checks.is_file():
        st.caption("Every check: predicted vs published, error and tolerance")
        frame = _ordered(pd.read_csv(checks), CHECK_COLUMNS)
        styled = frame.style.map(_verdict_colour, subset=["status"]) \
            if "status" in frame.columns else frame
        st.dataframe(styled, hide_index=True, width="stretch")
    else:
        st.info(f"No {checks.name} in {folder.name}.")
    mine = findings[findings["reproduction"] == chosen]
    for _, row in mine[mine["verdict"] == "not covered"].iterrows():
        st.caption(f"{row['finding']}: not covered — {row.get('reason', '')}")
    if figure.is_file():
        left, _ = st.columns([2, 1])
        left.image(str(figure), caption=figure.name)
    else:
        st.caption("No figure for this reproduction.")


def _verdict_colour(verdict: object) -> str:
    colour = {"pass": "#d4edda", "fail": "#f8d7da"}.get(str(verdict))
    return f"background-color: {colour}" if colour else ""


def _show_folders(root: Path, found: list[Reproduction], data_dir: str) -> None:
    loaded: list[tuple[Reproduction, list[tuple[Path, pd.DataFrame]]]] = []
    passed = failed = 0
    for rep in found:
        frames = []
        for path in rep.tables:
            try:
                frames.append((path, read_table(path)))
            except (ValueError, OSError) as err:
                st.warning(f"{path.parent.name}/{path.name}: unreadable ({err})")
                continue
            verdict = verdicts(frames[-1][1])
            if verdict:
                passed += verdict[0]
                failed += verdict[1]
        loaded.append((rep, frames))
    cols = st.columns(3)
    cols[0].metric("Reproductions", len(found))
    cols[1].metric("Findings passed", passed)
    cols[2].metric("Findings failed", failed)
    st.caption(f"From {place(root, data_dir)}")
    for rep, frames in loaded:
        verdict_texts = [f"{v[0]} pass / {v[1]} fail" for _, f in frames
                         if (v := verdicts(f)) is not None]
        title = rep.name + (f" — {', '.join(verdict_texts)}" if verdict_texts else "")
        with st.expander(title, expanded=len(found) <= 3):
            for path, frame in frames:
                st.caption(path.name)
                st.dataframe(_ordered(frame, ("finding", "name", "predicted", "published",
                                              *VERDICT_COLUMNS)),
                             hide_index=True, width="stretch")
            for path in rep.images:
                st.image(str(path), caption=path.name)
