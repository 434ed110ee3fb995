"""The Data page: the catalog's tables, read-only SQL, a quick chart of the result.

The user's SQL runs on a read-only connection with DuckDB's external access
off (:func:`quiclab.app.resources.run_user_sql`); a bad query shows DuckDB's
own message, never a stack trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pandas as pd
import streamlit as st

from quiclab.app.charts import SCHEMA, Spec, records
from quiclab.app.config import AppConfig
from quiclab.app.labels import place
from quiclab.app.resources import (
    SQL_MAX_ROWS,
    catalog_query,
    catalog_stamp,
    catalog_tables,
    run_user_sql,
)
from quiclab.errors import QuiclabError

EXAMPLE_SQL = """-- Median goodput per implementation pair of the default-buffer baseline
SELECT server_impl, client_impl, count(*) AS runs, median(goodput_mbps) AS goodput_mbps
FROM runs WHERE experiment = 'baseline' AND status = 'ok'
GROUP BY ALL ORDER BY goodput_mbps DESC"""
CHART_KINDS = ("points", "line", "bar")
SQL_KEY = "app.sql"


@dataclass(frozen=True)
class ChartParams:
    kind: str
    x: str
    y: str
    colour: str | None


def browse_ui(tables: list[str]) -> tuple[str, int]:
    """Which table to look at and how many of its rows."""
    cols = st.columns([3, 1])
    table = cols[0].selectbox("Table", tables, key="w.data.table",
                              index=tables.index("runs") if "runs" in tables else 0)
    limit = int(cols[1].number_input("rows", min_value=10, max_value=10_000, value=200,
                                     step=100, key="w.data.limit"))
    return str(table), limit


def sql_ui() -> str | None:
    """The SQL box; returns the query to show (the last one run; at first the example)."""
    st.session_state.setdefault(SQL_KEY, EXAMPLE_SQL)
    sql = st.text_area("Read-only SQL (DuckDB)", value=EXAMPLE_SQL, height=140,
                       key="w.data.sql")
    if st.button("Run query", key="w.data.run", type="primary"):
        st.session_state[SQL_KEY] = sql
    return st.session_state.get(SQL_KEY)


def chart_ui(frame: pd.DataFrame) -> ChartParams | None:
    """Columns and kind of the quick chart (None when the result has < 2 columns)."""
    columns = list(frame.columns)
    numeric = [c for c in columns if pd.api.types.is_numeric_dtype(frame[c])]
    if len(columns) < 2 or not numeric:
        return None
    cols = st.columns(4)
    kind = cols[0].selectbox("Chart", CHART_KINDS, key="w.data.kind")
    x = cols[1].selectbox("x", columns, key="w.data.x")
    y_options = [c for c in numeric if c != x] or numeric
    y = cols[2].selectbox("y", y_options, index=len(y_options) - 1, key="w.data.y")
    colour = cols[3].selectbox("colour", ["(none)", *columns], key="w.data.colour")
    return ChartParams(str(kind), str(x), str(y), None if colour == "(none)" else str(colour))


def quick_chart(frame: pd.DataFrame, params: ChartParams) -> Spec:
    """Points, a line or bars of ``y`` against ``x`` (coloured by a column if chosen)."""
    mark = {"points": "circle", "line": "line", "bar": "bar"}[params.kind]
    numeric_x = pd.api.types.is_numeric_dtype(frame[params.x]) and params.kind != "bar"
    encoding: Spec = {
        "x": {"field": params.x, "type": "quantitative" if numeric_x else "nominal"},
        "y": {"field": params.y, "type": "quantitative"},
        "tooltip": [{"field": c} for c in frame.columns[:8]],
    }
    if params.colour:
        encoding["color"] = {"field": params.colour, "type": "nominal"}
    columns = list(dict.fromkeys([params.x, params.y, *([params.colour] if params.colour
                                                        else []), *frame.columns[:8]]))
    return {"$schema": SCHEMA, "data": {"values": records(frame.head(5000), columns)},
            "mark": mark, "encoding": encoding, "height": 360}


def show(config: AppConfig) -> None:
    st.header("Data")
    stamp = catalog_stamp(config.catalog)
    try:
        tables = catalog_tables(config.catalog, stamp)
    except (QuiclabError, duckdb.Error) as err:
        st.warning(f"{err}")
        return
    st.caption(f"Catalog {place(config.catalog, config.data_dir)} — tables and columns: "
               "docs/reference/catalog.md")
    left, right = st.columns([1, 3])
    with left:
        st.subheader("Tables")
        st.dataframe(tables, hide_index=True, height=460)
    with right:
        st.subheader("Browse a table")
        table, limit = browse_ui(list(tables["table"]))
        try:
            rows = catalog_query(config.catalog, stamp, f'SELECT * FROM "{table}" LIMIT ?',
                                 (limit,))
            st.dataframe(rows, hide_index=True, width="stretch", height=360)
        except (QuiclabError, duckdb.Error) as err:
            st.error(f"{err}")

    st.subheader("Query")
    sql = sql_ui()
    if not sql:
        return
    try:
        frame, more = run_user_sql(config.catalog, sql)
    except duckdb.Error as err:
        st.error(f"DuckDB: {err}")
        return
    except QuiclabError as err:
        st.error(str(err))
        return
    if frame.empty and not len(frame.columns):
        st.info("The statement ran; it returns no rows.")
        return
    st.dataframe(frame, hide_index=True, width="stretch")
    st.caption(f"{len(frame):,} row(s)" + (f" — the first {SQL_MAX_ROWS:,}; the query has more"
                                           if more else ""))
    params = chart_ui(frame)
    if params is not None:
        st.vega_lite_chart(spec=quick_chart(frame, params), width="stretch")
