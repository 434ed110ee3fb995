"""No dead ends, in a real browser: each test walks into a place where the explorer
used to stop a user (a refusal instead of an answer, a blank page, a warning that
blamed the wrong field, a result gone on reload, Back doing nothing, a Run button
that could be pressed twice, a server that outlived SIGTERM, engine jargon and
local paths on screen) and checks that the page goes on.

`quiclab app` served on localhost, Debian's Chromium driven by Playwright, as in
``test_browser.py``; the numbers on screen are compared with `quiclab predict`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quiclab.app import browser
from quiclab.app.charts import three_digits
from quiclab.app.labels import limit_name
from quiclab.app.urlstate import WORKLOAD_DEFAULTS

from .appdata import AppData
from .test_browser import artifacts, sync_api  # noqa: F401  (the fixture)

pytestmark = pytest.mark.browser

Predict = Callable[..., dict[str, Any]]
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def served(appdata: AppData) -> Iterator[str]:
    paths = {"--models": str(appdata.models), "--data-dir": str(appdata.data_dir),
             "--catalog": str(appdata.catalog)}
    with browser.running_app(paths, browser.free_port(),
                             artifacts() / "app-server-deadends.log") as url:
        yield url


@pytest.fixture(scope="module")
def chromium(sync_api: Any) -> Iterator[Any]:  # noqa: F811
    with sync_api.sync_playwright() as pw:
        launched = browser.launch(pw)
        yield launched
        launched.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A new tab in a new browser context: a session of its own, as a second user's."""
    context = chromium.new_context(viewport={"width": 1500, "height": 2200})
    tab = context.new_page()
    yield tab
    context.close()


def open_whatif(page: Any, served: str, query: str = "") -> None:
    page.goto(f"{served}/?page=whatif{query}")
    browser.wait_idle(page)


def wait_text(page: Any, text: str, timeout_ms: float = WAIT_MS) -> None:
    """Wait until ``text`` is part of the page's visible text."""
    page.wait_for_function("(t) => document.body.innerText.includes(t)", arg=text,
                           timeout=timeout_ms)


def body_text(page: Any) -> str:
    return str(page.locator("body").inner_text())


def metric(page: Any, label: str) -> Any:
    """The metric whose label is exactly ``label``."""
    name = page.locator('[data-testid="stMetricLabel"]').filter(
        has_text=re.compile(f"^{re.escape(label)}$"))
    return page.locator('[data-testid="stMetric"]').filter(has=name).first


def metric_text(page: Any, label: str) -> str:
    return str(metric(page, label).locator('[data-testid="stMetricValue"]').inner_text())


def goodput(expected: dict[str, Any]) -> str:
    """The goodput as the page writes it (three significant digits, thousands
    separated: 2,979 Mbit/s, 45.3 Mbit/s)."""
    return f"{three_digits(expected['goodput_mbps'])} Mbit/s"


def wait_goodput(page: Any, text: str) -> None:
    page.wait_for_function(
        """(want) => {
            const metric = [...document.querySelectorAll('[data-testid="stMetric"]')]
                .find(m => m.innerText.includes('Predicted goodput (analytic)'));
            const value = metric && metric.querySelector('[data-testid="stMetricValue"]');
            return value && value.innerText === want;
        }""", arg=text, timeout=WAIT_MS)
    browser.wait_idle(page)


def choose(page: Any, label: str, option: str) -> None:
    """Pick ``option`` in the select box labelled ``label``."""
    page.get_by_role("combobox", name=label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


def type_number(page: Any, label: str, value: int) -> None:
    box = page.get_by_role("spinbutton", name=label)
    box.fill(str(value))
    box.press("Enter")


def number_value(page: Any, label: str) -> str:
    return str(page.get_by_role("spinbutton", name=label).input_value())


PAYLOAD = "QUIC packet size (UDP payload, 0 = default)"


def open_more(page: Any) -> None:
    """Open the sidebar's "More conditions" (where the packet size is) if closed."""
    if not page.get_by_role("spinbutton", name=PAYLOAD).is_visible():
        page.locator('[data-testid="stExpander"] summary').filter(
            has_text="More conditions").click()
        page.get_by_role("spinbutton", name=PAYLOAD).wait_for(timeout=WAIT_MS)


# -- defaults, impossible settings, URL warnings ---------------------------------------


@pytest.mark.timeout(300)
def test_switching_the_workload_to_requests_answers_at_once(
        page: Any, served: str, predict: Predict) -> None:
    """Choosing ``requests`` used to replace the page with ``request_bytes=0 is
    impossible…`` until both request fields were typed; now they start from the
    workload's defaults and the answer is `quiclab predict`'s for them."""
    open_whatif(page, served)
    choose(page, "Workload", "requests")
    defaults = WORKLOAD_DEFAULTS["requests"]
    expected = predict(workload="requests", **defaults)
    wait_goodput(page, goodput(expected))
    assert "is impossible" not in body_text(page)
    assert number_value(page, "Request size (bytes)") == str(defaults["request_bytes"])
    assert f"request_bytes={defaults['request_bytes']}" in page.url


@pytest.mark.timeout(300)
def test_an_impossible_combination_keeps_the_page_and_marks_the_fields(
        page: Any, served: str, predict: Predict) -> None:
    """A packet of 4000 bytes at MTU 1500 used to blank the page (one error line);
    now the page goes on showing the last possible scenario, says what is impossible
    and marks both fields under their widgets."""
    open_whatif(page, served)
    before = browser.goodput_text(page)
    open_more(page)
    type_number(page, PAYLOAD, 4000)
    wait_text(page, "Impossible settings")
    browser.wait_idle(page)
    text = body_text(page)
    assert "udp_payload_bytes is part of the impossible settings" in text
    assert "mtu_bytes is part of the impossible settings" in text
    # The answer, the charts and the rest of the page stay: the last possible scenario.
    assert browser.goodput_text(page) == before == goodput(predict())
    assert page.locator('[data-testid="stVegaLiteChart"]').count() >= 3
    assert page.locator('[data-testid="stException"]').count() == 0
    # Making it possible again clears the marks and answers for the new scenario.
    type_number(page, "MTU (bytes)", 9000)
    wait_goodput(page, goodput(predict(mtu_bytes=9000, udp_payload_bytes=4000)))
    assert "Impossible settings" not in body_text(page)


@pytest.mark.timeout(300)
def test_a_url_warning_names_the_field_it_dropped(page: Any, served: str,
                                                  predict: Predict) -> None:
    """``udp_payload_bytes=1400&mtu_bytes=1280``: the MTU is what is left out (the
    payload fits the default MTU), so the warning names the MTU, not the payload."""
    open_whatif(page, served, "&udp_payload_bytes=1400&mtu_bytes=1280")
    alerts = page.locator('[data-testid="stAlert"]').filter(has_text="URL:")
    assert alerts.count() == 1
    warning = str(alerts.first.inner_text())
    assert "mtu_bytes=1280 was left out" in warning, warning
    assert number_value(page, "MTU (bytes)") == "1500"
    open_more(page)
    assert number_value(page, PAYLOAD) == "1400"
    assert browser.goodput_text(page) == goodput(predict(udp_payload_bytes=1400))


# -- labels and paths --------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_limits_are_named_in_plain_words_and_no_local_path_is_shown(
        page: Any, served: str, predict: Predict, appdata: AppData) -> None:
    open_whatif(page, served)
    code = predict()["limit"]
    assert metric_text(page, "Limit") == limit_name(code) != code
    # The engine's own name is in the metric's tooltip.
    metric(page, "Limit").locator('[data-testid="stTooltipHoverTarget"]').hover()
    tooltip = page.locator('[data-testid="stTooltipContent"]')
    tooltip.wait_for(timeout=10_000)
    assert f"engine name {code}" in str(tooltip.inner_text())
    text = body_text(page)
    for path in (appdata.root, appdata.models, appdata.catalog):
        assert str(path) not in text
    assert metric_text(page, "Server CPU").endswith(" %")


# -- packet-level results: kept, shared, progress, one run at a time -------------------


def _des_query(**fields: Any) -> str:
    extra = "".join(f"&{k}={v}" for k, v in fields.items())
    return f"&engines=analytic,des{extra}"


def run_button(page: Any) -> Any:
    """The What-if page's Run button of the DES (visible ones only: a rerun may keep
    the last run's element, hidden, for a moment)."""
    return page.get_by_role("button", name=re.compile(r"^(Run|Running) des"))


@pytest.mark.timeout(600)
def test_a_des_result_comes_back_on_reload_and_from_a_shared_url(
        page: Any, chromium: Any, served: str, predict: Predict) -> None:
    """A DES result used to live in the session that ran it: a reload, or the URL
    sent to a colleague, brought back only the Run button. Now it is kept by
    scenario, and another session opening the URL sees it without running again."""
    query = _des_query(transfer_bytes=20000000, seed=11, run=3)
    open_whatif(page, served, query)
    run_button(page).click()
    wait_text(page, "des: all 1 run(s) done for this scenario", timeout_ms=300_000)
    browser.wait_idle(page)
    expected = predict(engine="des", transfer_bytes=20_000_000, seed=11, run=3)
    line = "lsquic → lsquic · des"
    assert line in body_text(page)

    other = chromium.new_context(viewport={"width": 1500, "height": 2200})
    try:
        shared = other.new_page()
        shared.goto(page.url)
        browser.wait_idle(shared)
        text = body_text(shared)
        assert "des: all 1 run(s) done for this scenario" in text
        assert line in text
        assert run_button(shared).count() == 0
        # The DES's answer is on the page: its band in the uncertainty section.
        band = f"{expected['goodput_lo_mbps']:,.0f}"
        assert any(band.replace(",", sep) in text for sep in (",", "")), (band, text)
    finally:
        other.close()
    page.reload()
    browser.wait_idle(page)
    assert "des: all 1 run(s) done for this scenario" in body_text(page)


@pytest.mark.timeout(600)
def test_a_run_shows_progress_and_its_button_cannot_be_pressed_again(
        page: Any, served: str) -> None:
    """A DES run of a 40 ms path takes seconds: while it goes the button says
    "Running des …" and is disabled, and the progress bar moves with a text that
    says which run, how long, and against what estimate."""
    open_whatif(page, served, _des_query(rtt_ms=40))
    button = run_button(page)
    assert button.is_enabled()
    button.click()
    running = page.get_by_role("button", name=re.compile("^Running des"))
    running.wait_for(timeout=WAIT_MS)
    assert running.is_disabled()
    bar = page.locator('[data-testid="stProgress"]')
    bar.wait_for(timeout=WAIT_MS)
    page.wait_for_function(
        """() => {
            const bar = document.querySelector('[data-testid="stProgress"]');
            return bar && /run 1 of 1, [0-9]+ s of about [0-9]+ s/.test(bar.innerText);
        }""", timeout=WAIT_MS)
    page.screenshot(path=str(artifacts() / "browser-deadends-progress.png"), full_page=True)
    wait_text(page, "des: all 1 run(s) done for this scenario", timeout_ms=300_000)
    assert run_button(page).count() == 0


# -- Back and Forward ------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_back_and_forward_walk_through_the_what_ifs(page: Any, served: str,
                                                    predict: Predict) -> None:
    open_whatif(page, served)
    first = goodput(predict())
    assert browser.goodput_text(page) == first
    type_number(page, "MTU (bytes)", 9000)
    second = goodput(predict(mtu_bytes=9000))
    wait_goodput(page, second)
    page.wait_for_url(re.compile(r"mtu_bytes=9000"), timeout=WAIT_MS)
    page.go_back()
    wait_goodput(page, first)
    assert number_value(page, "MTU (bytes)") == "1500"
    assert "mtu_bytes=9000" not in page.url
    page.go_forward()
    wait_goodput(page, second)
    assert number_value(page, "MTU (bytes)") == "9000"


# -- SIGTERM ---------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Every living descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        todo += kids
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(600)
def test_sigterm_stops_the_server_and_its_simulations(chromium: Any, appdata: AppData,
                                                      tmp_path: Path) -> None:
    """SIGTERM to `quiclab app` (the process a user or a service manager starts)
    used to end only that process: Streamlit went on serving, its worker on
    simulating. Now the server and the worker, mid-run, are gone within seconds."""
    port = browser.free_port()
    argv = [sys.executable, "-m", "quiclab.cli", "--models", str(appdata.models),
            "--data-dir", str(tmp_path / "data"), "--catalog", str(appdata.catalog), "app",
            "--server.port", str(port), "--server.headless", "true",
            "--server.fileWatcherType", "none"]
    log = artifacts() / "app-server-sigterm.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=dict(os.environ))
    url = f"http://localhost:{port}"
    descendants: list[int] = []
    try:
        deadline = time.monotonic() + browser.START_TIMEOUT_S
        while not browser.healthy(url):
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.3)
        context = chromium.new_context(viewport={"width": 1500, "height": 2200})
        tab = context.new_page()
        open_whatif(tab, url, _des_query(rtt_ms=40, seed=5))
        run_button(tab).click()
        tab.locator('[data-testid="stProgress"]').wait_for(timeout=WAIT_MS)
        context.close()
        descendants = _children(process.pid)
        assert len(descendants) >= 2, descendants  # Streamlit and its worker, at least
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
                any(_alive(p) for p in descendants) or browser.healthy(url)):
            time.sleep(0.2)
        assert not browser.healthy(url), "the server still answers after SIGTERM"
        assert [p for p in descendants if _alive(p)] == []
    finally:
        # On a failure before the signal too: end whatever the app started.
        for pid in [process.pid, *descendants, *_children(process.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
