"""The app's ``main()``: configuration, page choice, the shared sidebar, the URL.

Each Streamlit run (every widget change) calls :func:`main` once, from top to
bottom, like ``demo-self-driving``: read where things are, let the sidebar
choose the page and the scenario, write the scenario into the URL, draw the
page.

The URL is the state a user shares and walks back through: every change is a
new browser history entry (Streamlit pushes one when the query string
changes), and a run whose URL differs from the one this session last wrote
came from Back or Forward (or an edited address), so the app reads it again,
as on a first visit. A combination of settings the Scenario refuses never
blanks the page: the page keeps drawing the last possible scenario, says what
is impossible and marks the fields involved.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import streamlit as st

from quiclab.app import dynamics, explore, matrix, reproductions, sweep, whatif
from quiclab.app.config import AppConfig, parse_config
from quiclab.app.resources import (
    catalog_cpus,
    catalog_stamp,
    implementation_names,
    load_registry,
    models_stamp,
)
from quiclab.app.urlstate import PAGES, Selection, decode, encode
from quiclab.app.widgets import (
    mentioned_fields,
    read_selection,
    scenario_ui,
    seed_widgets,
    testbed_names,
)
from quiclab.errors import QuiclabError, ScenarioError
from quiclab.models.registry import Registry

SELECTION_KEY = "app.selection"
#: The query parameters this session last wrote: a run that finds others came from
#: the browser's Back or Forward (or an edited address).
URL_KEY = "app.url"
#: Pages that draw the scenario sidebar.
SCENARIO_PAGES = ("whatif", "matrix", "dynamics", "sweep")
#: Pages whose sidebar offers the packet-level engines.
ENGINE_PAGES = ("whatif", "dynamics")
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
    first_run = SELECTION_KEY not in st.session_state
    problems, navigated = _read_url(impls, first_run)
    page = page_ui()
    for problem in problems:
        st.warning(problem)
    selection: Selection = st.session_state[SELECTION_KEY]
    scenario_problem = None
    head: whatif.Answer | None = None
    body: whatif.Body | None = None
    if page in SCENARIO_PAGES and registry is not None:
        cpus = _cpu_options(config, registry)
        cpu_name = _cpu_name(registry, selection.base.cpu, cpus)
        testbeds = testbed_names(registry)
        seed_widgets(selection, cpu_name, impls, cpus, testbeds, overwrite=navigated)
        with_engines = page in ENGINE_PAGES
        chosen, scenario_problem = read_selection(selection, cpu_name, with_engines)
        if chosen is not None:
            selection = st.session_state[SELECTION_KEY] = chosen
        else:
            # Keep the page: it goes on showing the last possible scenario.
            st.error(f"Impossible settings: {scenario_problem}. The page shows the last "
                     "possible scenario; change the marked fields.", icon="⛔")
        if page == "whatif":
            # The answer before the sidebar: the browser shows it before it redraws
            # some forty widgets (their values are already known from their state).
            head = whatif.answer(config, selection)
            paused = time.perf_counter()
            if head is not None:
                body = whatif.prepare(config, selection, head)
            time.sleep(max(0.0, ANSWER_PAUSE_S - (time.perf_counter() - paused)))
        scenario_ui(selection, impls, cpus, cpu_name, testbeds, registry, with_engines,
                    marked=mentioned_fields(scenario_problem))
    if page in SCENARIO_PAGES and registry is None:
        _sync_url(selection, page)
        st.error(registry_problem)
        return
    extra: dict[str, str] = {}
    finish: Callable[[], None] | None = None
    if page == "whatif":
        _sync_url(selection, page)
        if head is not None:
            finish = whatif.show(config, selection, started, first_run, head, body)
    elif page == "matrix":
        extra = matrix.show(config, selection)
    elif page == "dynamics":
        extra = dynamics.show(config, selection)
    elif page == "sweep":
        extra = sweep.show(config, selection)
    elif page == "reproductions":
        reproductions.show(config)
    else:
        explore.show(config)
    _sync_url(selection, page, extra)
    if finish is not None:
        finish()  # the response time of the whole run, shown at the top of the page


def _read_url(impls: Sequence[str], first_run: bool) -> tuple[list[str], bool]:
    """On a session's first run, or when the URL is not the one this session wrote
    last (Back, Forward, an edited address): the selection, page and page parameters
    from the URL. Returns the URL's problems, and whether the sidebar's widgets must
    take the URL's values (they hold the user's last ones)."""
    url = st.query_params.to_dict()
    if not first_run and url == st.session_state.get(URL_KEY):
        return [], False
    selection, page, problems = decode(url, impls or None)
    problems += sweep.seed_from_url(url)
    problems += matrix.seed_from_url(url)
    st.session_state[SELECTION_KEY] = selection
    st.session_state["w.page"] = page
    st.session_state[URL_KEY] = url
    return problems, not first_run


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


def _cpu_options(config: AppConfig, registry: Registry) -> list[str]:
    """The catalog's CPUs the models scale to, and the stand-in CPUs of testbeds whose
    hosts' CPU is not recorded (so that choosing such a testbed can set its CPU)."""
    cpus = catalog_cpus(config.catalog, catalog_stamp(config.catalog), registry)
    known = set(registry.cpus.names())
    for name in testbed_names(registry):
        testbed = registry.testbed(name)
        cpu = testbed.cpu_name if testbed is not None else ""
        if cpu and cpu in known and cpu not in cpus:
            cpus = [*cpus, cpu]
    return cpus


def _cpu_name(registry: Registry, cpu: str, cpus: Sequence[str]) -> str:
    try:
        return registry.cpus.find(cpu).name
    except ScenarioError:
        return cpus[0]


def _sync_url(selection: Selection, page: str, extra: dict[str, str] | None = None) -> None:
    """Write the selection (and a page's own parameters) into the URL when they changed;
    remember what was written (see :func:`_read_url`)."""
    params = {**encode(selection, page), **(extra or {})}
    if st.query_params.to_dict() != params:
        st.query_params.from_dict(params)
    st.session_state[URL_KEY] = params
