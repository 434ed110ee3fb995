"""The app's ``main()``: configuration, page choice, the shared sidebar, the URL.

Each Streamlit run (every widget change) calls :func:`main` once, from top to
bottom, like ``demo-self-driving``: read where things are, let the sidebar
choose the page and the scenario, write the scenario into the URL, draw the
page.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

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
from quiclab.app.widgets import read_selection, scenario_ui, seed_widgets
from quiclab.errors import QuiclabError, ScenarioError
from quiclab.models.registry import Registry

SELECTION_KEY = "app.selection"
#: The gap between the What-if answer and the sidebar, spent computing the rest of the
#: page (and sleeping what is left of it): the browser renders the elements it has in
#: one batch, so without a gap it shows the answer only together with the forty-odd
#: sidebar widgets after it (key press to new goodput on the 2-core development VM,
#: real models and catalog: median 171 ms without the gap, 99–125 ms with it).
ANSWER_PAUSE_S = 0.05


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
    head: whatif.Answer | None = None
    body: whatif.Body | None = None
    if page in ("whatif", "sweep") and registry is not None:
        cpus = catalog_cpus(config.catalog, catalog_stamp(config.catalog), registry)
        cpu_name = _cpu_name(registry, selection.base.cpu, cpus)
        seed_widgets(selection, cpu_name, impls, cpus)
        with_engines = page == "whatif"
        chosen, scenario_problem = read_selection(selection, cpu_name, with_engines)
        if chosen is not None and page == "whatif":
            # The answer before the sidebar: the browser shows it before it redraws
            # some forty widgets (their values are already known from their state).
            head = whatif.answer(config, chosen)
            paused = time.perf_counter()
            if head is not None:
                body = whatif.prepare(config, chosen, head)
            time.sleep(max(0.0, ANSWER_PAUSE_S - (time.perf_counter() - paused)))
        scenario_ui(selection, impls, cpus, cpu_name, with_engines)
        if chosen is not None:
            selection = st.session_state[SELECTION_KEY] = chosen
    if page in ("whatif", "sweep") and (registry is None or scenario_problem):
        _sync_url(selection, page)
        st.error(registry_problem if registry is None else scenario_problem)
        return
    extra: dict[str, str] = {}
    finish: Callable[[], None] | None = None
    if page == "whatif":
        _sync_url(selection, page)
        if head is not None:
            finish = whatif.show(config, selection, started, first_run, head, body)
    elif page == "sweep":
        extra = sweep.show(config, selection)
    elif page == "reproductions":
        reproductions.show(config)
    else:
        explore.show(config)
    _sync_url(selection, page, extra)
    if finish is not None:
        finish()  # the response time of the whole run, shown at the top of the page


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
