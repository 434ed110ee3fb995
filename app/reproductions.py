"""The Reproductions page: the seed findings, predicted vs published, plots, pass/fail.

``quiclab reproduce`` writes its reports under ``<data dir>/reports/reproductions``.
This page only reads them: every folder there with a result table (CSV,
Parquet or JSON records) or a PNG is one reproduction. A table's pass/fail
column (``pass``, ``passed`` or ``ok``) gives the verdicts; columns named
``predicted*`` and ``published*`` are shown first. When nothing is there,
the page says so and how to make it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import streamlit as st
from quiclab.app.config import AppConfig

TABLE_SUFFIXES = (".csv", ".parquet", ".json")
VERDICT_COLUMNS = ("pass", "passed", "ok")


@dataclass
class Reproduction:
    """The result files of one reproduction (one folder)."""

    name: str
    folder: Path
    tables: list[Path] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    notes: list[Path] = field(default_factory=list)


def find_reproductions(root: Path) -> list[Reproduction]:
    """Every folder under ``root`` (itself included) that holds tables or PNGs."""
    if not root.is_dir():
        return []
    found = []
    for folder in sorted({root, *(p for p in root.rglob("*") if p.is_dir())}):
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
        tables = [p for p in files if p.suffix in TABLE_SUFFIXES and p.name != "provenance.json"]
        images = [p for p in files if p.suffix == ".png"]
        notes = [p for p in files if p.suffix == ".md"]
        if tables or images:
            name = "(all)" if folder == root else str(folder.relative_to(root))
            found.append(Reproduction(name, folder, tables, images, notes))
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


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    first = [c for c in frame.columns if c.startswith(("finding", "name", "quantity"))]
    first += [c for c in frame.columns if c.startswith(("predicted", "published"))]
    first += [c for c in frame.columns if c in VERDICT_COLUMNS]
    return frame[list(dict.fromkeys([*first, *frame.columns]))]


def show(config: AppConfig) -> None:
    st.header("Reproductions")
    root = Path(config.reports_dir) / "reproductions"
    found = find_reproductions(root)
    if not found:
        st.info(f"No reproduction results under {root} yet. Run `quiclab reproduce --all` "
                "(with the same --data-dir) to make them; this page shows them when they "
                "exist.")
        return
    loaded: list[tuple[Reproduction, list[tuple[Path, pd.DataFrame]]]] = []
    passed = failed = 0
    for rep in found:
        frames = []
        for path in rep.tables:
            try:
                frames.append((path, read_table(path)))
            except (ValueError, OSError) as err:
                st.warning(f"{path}: unreadable ({err})")
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
    st.caption(f"From {root}")
    for rep, frames in loaded:
        verdict_texts = [f"{v[0]} pass / {v[1]} fail" for _, f in frames
                         if (v := verdicts(f)) is not None]
        title = rep.name + (f" — {', '.join(verdict_texts)}" if verdict_texts else "")
        with st.expander(title, expanded=len(found) <= 3):
            for path in rep.notes:
                st.markdown(path.read_text())
            for path, frame in frames:
                st.caption(path.name)
                st.dataframe(_ordered(frame), hide_index=True, width="stretch")
            for path in rep.images:
                st.image(str(path), caption=path.name)
