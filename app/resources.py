"""Every cached call from the app into the library.

Rules (docs/explanation/design.md, "The command line and the app"): cached functions take all
they depend on as arguments — locations as strings, plus a *stamp* (the
newest modification time of the models or the catalog) so that a new
calibration or ingest is picked up without restarting — and read no module
global.

The catalog is opened read-only for each cache miss and closed at once rather
than held in ``st.cache_resource``: DuckDB lets a file be opened by one
writer *or* by readers, so a connection held by the app would lock
``quiclab data ingest``, sweeps and testbed runs out of the catalog for as
long as the app runs. Opening costs ~20 ms; results are cached under the
catalog's stamp (a pair's rows as one shared resource, each match in an LRU
cache), so a rerun with the same conditions does not open it at all.
A batch the models refuse is predicted again pair by pair
(:func:`predict_by_pair`), so that one refused pair does not blank the others.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import streamlit as st

from quiclab.app import jobs
from quiclab.app.charts import pair_label
from quiclab.app.config import AppConfig
from quiclab.app.measured import PairRows, all_rows, index_rows, match, pair_rows
from quiclab.errors import DataError, QuiclabError
from quiclab.models.registry import Registry
from quiclab.sim.engine import Engine, code_digest, get_engine
from quiclab.sim.prediction import Prediction
from quiclab.sim.resolve import Resolved, resolve
from quiclab.sim.scenario import Scenario

#: Longest a user's SQL may run on the Data page before it is interrupted.
SQL_TIMEOUT_S = 30.0
#: Rows of a user's query result fetched at most (DuckDB vectors of 2048 rows).
SQL_MAX_ROWS = 10_240


# -- stamps ------------------------------------------------------------------
def models_stamp(models_dir: str) -> float:
    """Newest modification time of the model files (0 when the directory is missing)."""
    files = list(Path(models_dir).glob("*.json"))
    return max((f.stat().st_mtime for f in files), default=0.0)


def catalog_stamp(catalog: str) -> float:
    """Modification time of the catalog and its write-ahead log (0 when missing)."""
    stamp = 0.0
    for path in (Path(catalog), Path(catalog + ".wal")):
        with contextlib.suppress(OSError):
            stamp = max(stamp, path.stat().st_mtime)
    return stamp


# -- models and engines -----------------------------------------------------
@st.cache_resource(show_spinner=False)
def load_registry(models_dir: str, stamp: float) -> Registry:
    """The cost models of ``models_dir`` (DataError if there are none)."""
    del stamp  # part of the cache key only
    return Registry.load(Path(models_dir))


@st.cache_resource(show_spinner=False)
def load_engine(models_dir: str, stamp: float, name: str) -> Engine:
    """One engine over the models of ``models_dir`` (the app's own process runs only the
    analytic one; DES and ns-3 run in :mod:`quiclab.app.worker`)."""
    return get_engine(name, load_registry(models_dir, stamp))


def implementation_names(registry: Registry) -> list[str]:
    """Every implementation and each of its variants (``lsquic``, ``lsquic@march``, …)."""
    names: list[str] = []
    for name in registry.names():
        names.append(name)
        names += [f"{name}@{v}" for v in sorted(registry.models[name].variants)]
    return names


@st.cache_data(show_spinner=False, max_entries=2048)
def analytic_predictions(models_dir: str, stamp: float, scenarios: tuple[Scenario, ...]
                         ) -> list[Prediction]:
    """The analytic engine's predictions, one per scenario (one vectorised call).

    Raises ScenarioError (one line) for a scenario the models cannot resolve.
    """
    engine = load_engine(models_dir, stamp, "analytic")
    return engine.predict_batch(list(scenarios))


def resolved_for(models_dir: str, stamp: float, scenario: Scenario) -> Resolved:
    """The scenario resolved against the models (its per-component costs); raises
    ScenarioError as the engines do."""
    return _resolved(models_dir, stamp, scenario)


@functools.lru_cache(maxsize=256)
def _resolved(models_dir: str, stamp: float, scenario: Scenario) -> Resolved:
    return resolve(scenario, load_registry(models_dir, stamp))


def packet_results(config: AppConfig) -> jobs.Results:
    """The server's DES and ns-3 results for the current models and engine code."""
    return jobs.results(config.results_dir, models_stamp(config.models_dir), code_digest())


def predict_by_pair(predict: Callable[[tuple[Scenario, ...]], list[Prediction]],
                    scenarios: Sequence[Scenario]) -> tuple[list[Prediction], list[str]]:
    """(predictions, error lines): ``predict`` of all ``scenarios`` in one call; if the
    models refuse that batch, pair by pair, so that a pair they refuse (one error line
    each, naming it) does not blank the others."""
    try:
        return predict(tuple(scenarios)), []
    except QuiclabError:
        pass
    pairs: dict[tuple[str, str], list[Scenario]] = {}
    for scenario in scenarios:
        pairs.setdefault((scenario.server, scenario.client), []).append(scenario)
    predictions: list[Prediction] = []
    errors: list[str] = []
    for (server, client), group in pairs.items():
        try:
            predictions += predict(tuple(group))
        except QuiclabError as err:
            errors.append(f"{pair_label(server, client)}: {err}")
    return predictions, errors


def analytic_by_pair(models_dir: str, stamp: float, scenarios: Sequence[Scenario]
                     ) -> tuple[list[Prediction], list[str]]:
    """:func:`predict_by_pair` with the (cached) :func:`analytic_predictions`."""
    return predict_by_pair(lambda group: analytic_predictions(models_dir, stamp, group),
                           scenarios)


# -- the catalog ------------------------------------------------------------
@contextlib.contextmanager
def open_catalog(catalog: str, *, external_access: bool = True
                 ) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-only connection (DataError if missing or locked by a writer)."""
    path = Path(catalog)
    if not path.exists():
        raise DataError(path, "catalog does not exist (run `quiclab data ingest`)")
    config: dict[str, str | bool | int | float | list[str]] = (
        {} if external_access else {"enable_external_access": False})
    try:
        con = duckdb.connect(str(path), read_only=True, config=config)
    except duckdb.IOException as err:
        raise DataError(path, f"cannot open the catalog now, a writer may hold it ({err})"
                        ) from None
    try:
        yield con
    finally:
        con.close()


@st.cache_resource(show_spinner=False, max_entries=256)
def catalog_pair_rows(catalog: str, stamp: float, server: str, client: str) -> PairRows:
    """Every measurement of one pair with its conditions (:func:`measured.pair_rows`).

    A resource (one shared object, never changed: :func:`measured.match` copies
    what it returns), so that a rerun does not unpickle the pair's whole table.
    """
    del stamp
    with open_catalog(catalog) as con:
        return index_rows(pair_rows(con, server, client))


def catalog_measured(catalog: str, stamp: float, scenario: Scenario, cpu: str,
                     free: tuple[str, ...] = ()) -> pd.DataFrame:
    """Measured points matching a scenario (see :mod:`quiclab.app.measured`).

    The pair's rows are read once per catalog version, and each match is kept:
    a rerun that changes nothing the match depends on does not match again. The
    frame is shared between reruns and sessions: never change it.
    """
    return _catalog_measured(catalog, stamp, scenario, cpu, tuple(free))


@functools.lru_cache(maxsize=2048)
def _catalog_measured(catalog: str, stamp: float, scenario: Scenario, cpu: str,
                      free: tuple[str, ...]) -> pd.DataFrame:
    # A plain LRU cache: a Scenario (a frozen dataclass) hashes in microseconds, where
    # st.cache_data's hashing of it costs about a millisecond, more than the match.
    rows = catalog_pair_rows(catalog, stamp, scenario.server, scenario.client)
    return match(rows, scenario, cpu, free)


@st.cache_data(show_spinner=False, max_entries=64)
def catalog_query(catalog: str, stamp: float, sql: str,
                  params: tuple[Any, ...] = ()) -> pd.DataFrame:
    """Run one of the app's own read-only queries."""
    del stamp
    with open_catalog(catalog) as con:
        return con.execute(sql, list(params)).df()


@st.cache_data(show_spinner=False)
def catalog_table_names(catalog: str, stamp: float) -> frozenset[str]:
    """Names of the catalog's tables and views (without counting their rows)."""
    del stamp
    with open_catalog(catalog) as con:
        rows = con.execute("SELECT table_name FROM information_schema.tables "
                           "WHERE table_schema = 'main'").fetchall()
    return frozenset(str(r[0]) for r in rows)


@st.cache_resource(show_spinner=False, max_entries=4)
def catalog_all_rows(catalog: str, stamp: float) -> dict[tuple[str, str], PairRows]:
    """Every pair's measurements (:func:`measured.all_rows`), indexed per pair: the
    Matrix page matches all of them at once without opening the catalog per pair."""
    del stamp
    with open_catalog(catalog) as con:
        frame = all_rows(con)
    return {(str(server), str(client)): index_rows(part.reset_index(drop=True))
            for (server, client), part in frame.groupby(["server", "client"], sort=False)}


@st.cache_data(show_spinner=False)
def catalog_tables(catalog: str, stamp: float) -> pd.DataFrame:
    """Tables and views of the catalog with their row counts."""
    del stamp
    with open_catalog(catalog) as con:
        names = con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'main' ORDER BY table_name").fetchall()
        rows = []
        for name, kind in names:
            count = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()
            rows.append({"table": name, "kind": "view" if kind == "VIEW" else "table",
                         "rows": int(count[0]) if count else 0})
    return pd.DataFrame(rows, columns=["table", "kind", "rows"])


def run_user_sql(catalog: str, sql: str, max_rows: int = SQL_MAX_ROWS,
                 timeout_s: float = SQL_TIMEOUT_S) -> tuple[pd.DataFrame, bool]:
    """Run a user's SQL read-only: (first ``max_rows`` rows, whether more existed).

    The connection is read-only and has DuckDB's external access switched off,
    so a statement can neither change the catalog nor read or write other
    files. Raises ``duckdb.Error`` with DuckDB's own message for a bad query,
    and after ``timeout_s`` interrupts it (``duckdb.InterruptException``).
    """
    with open_catalog(catalog, external_access=False) as con:
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.start()
        try:
            cursor = con.execute(sql)
            if cursor.description is None:  # a statement without a result (SET, …)
                return pd.DataFrame(), False
            vectors = max(1, -(-max_rows // 2048))
            frame = cursor.fetch_df_chunk(vectors)
            more = bool(cursor.fetchone()) if len(frame) >= max_rows else False
        finally:
            timer.cancel()
    return frame.head(max_rows), more


def catalog_cpus(catalog: str, stamp: float, registry: Registry) -> list[str]:
    """CPU names from the catalog's ``cpus`` table that the models can scale to.

    Falls back to the models' own CPU catalog when the catalog is missing.
    """
    known = registry.cpus.names()
    try:
        frame = catalog_query(catalog, stamp, "SELECT name FROM cpus ORDER BY year, name")
    except (DataError, duckdb.Error):
        return known
    names = [n for n in frame["name"] if n in known]
    return names or known


def scenarios_key(scenarios: Sequence[Scenario]) -> str:
    """A short key naming a list of scenarios (for the page's stored results)."""
    return "|".join(s.key() for s in scenarios)
