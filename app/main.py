"""The app's ``main()``: configuration, page choice, the shared sidebar, the URL.

Each Streamlit run (every widget change) calls :func:`main` once, from top to
bottom, like ``demo-self-driving``: read where things are, let the sidebar
choose the page and the scenario, write the scenario into the URL, draw the
page.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import streamlit as st

from quiclab.app import explore, reproductions, sweep, whatif
from quiclab.app.config import AppConfig, parse_config
from quiclab.app.resources import (
    catalog_cpus,
    catalog_stamp,
    implementation_names,
    load_registry,
    models_stamp,
)
from quiclab.app.urlstate import PAGES, Selection, decode, encode
from quiclab.app.widgets import scenario_ui, seed_widgets
from quiclab.errors import QuiclabError, ScenarioError
from quiclab.models.registry import Registry

SELECTION_KEY = "app.selection"


def main(argv: Sequence[str] = ()) -> None:
    """Draw the app once (called by ``streamlit_app.py`` on every run)."""
    started = time.perf_counter()
    st.set_page_config(page_title="quiclab what-if explorer", layout="wide")
    config = parse_config(argv)
    registry, registry_problem = _registry(config)
    impls = implementation_names(registry) if registry else []
    problems: list[str] = []
    first_run = SELECTION_KEY not in st.session_state
    if first_run:
        # A session's first run: the URL says what to show.
        url = st.query_params.to_dict()
        first, page, problems = decode(url, impls or None)
        problems += sweep.seed_from_url(url)
        st.session_state[SELECTION_KEY] = first
        st.session_state["w.page"] = page
    page = page_ui()
    for problem in problems:
        st.warning(problem)
    selection: Selection = st.session_state[SELECTION_KEY]
    scenario_problem = None
    if page in ("whatif", "sweep") and registry is not None:
        cpus = catalog_cpus(config.catalog, catalog_stamp(config.catalog), registry)
        cpu_name = _cpu_name(registry, selection.base.cpu, cpus)
        seed_widgets(selection, cpu_name, impls, cpus)
        chosen, scenario_problem = scenario_ui(selection, impls, cpus, cpu_name,
                                               with_engines=page == "whatif")
        if chosen is not None:
            selection = st.session_state[SELECTION_KEY] = chosen
    if page in ("whatif", "sweep") and (registry is None or scenario_problem):
        _sync_url(selection, page)
        st.error(registry_problem if registry is None else scenario_problem)
        return
    extra: dict[str, str] = {}
    if page == "whatif":
        _sync_url(selection, page)
        whatif.show(config, selection, started, first_run)
    elif page == "sweep":
        extra = sweep.show(config, selection)
    elif page == "reproductions":
        reproductions.show(config)
    else:
        explore.show(config)
    _sync_url(selection, page, extra)


def page_ui() -> str:
    """The page chooser at the top of the sidebar; returns the page's URL name."""
    st.sidebar.title("quiclab")
    return str(st.sidebar.radio("Page", list(PAGES), format_func=PAGES.__getitem__,
                                key="w.page", horizontal=True))


def _registry(config: AppConfig) -> tuple[Registry | None, str]:
    try:
        return load_registry(config.models_dir, models_stamp(config.models_dir)), ""
    except QuiclabError as err:
        return None, (f"No cost models: {err}. Run `quiclab calibrate` or start the app "
                      "with `quiclab --models DIR app`.")


def _cpu_name(registry: Registry, cpu: str, cpus: Sequence[str]) -> str:
    try:
        return registry.cpus.find(cpu).name
    except ScenarioError:
        return cpus[0]


def _sync_url(selection: Selection, page: str, extra: dict[str, str] | None = None) -> None:
    """Write the selection (and a page's own parameters) into the URL when they changed."""
    params = {**encode(selection, page), **(extra or {})}
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
