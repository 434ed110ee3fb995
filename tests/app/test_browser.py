"""End to end in a real browser: `quiclab app` served on localhost, Debian's Chromium
driven by Playwright. Changing the MTU on the What-if page changes the predicted
goodput to what `quiclab predict` says; screenshots are kept as test artifacts
(``artifacts/app/``, or ``$QUICLAB_ARTIFACTS/app``).

Skipped, with the reason, only where no browser can be had: ``make test``
installs Debian's ``chromium`` first (``make browser``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quiclab.paths import PROJECT_ROOT

from . import browser
from .appdata import AppData

pytestmark = pytest.mark.browser

Predict = Callable[..., dict[str, Any]]


def artifacts() -> Path:
    root = Path(os.environ.get("QUICLAB_ARTIFACTS", PROJECT_ROOT / "artifacts"))
    out = root / "app"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def sync_api() -> Any:
    if not browser.CHROMIUM.is_file():
        pytest.skip(f"no browser: {browser.CHROMIUM} is missing (Debian's chromium package; "
                    "`make browser` installs it with apt-get, as root)")
    try:
        from playwright import sync_api
    except ImportError as err:
        pytest.skip(f"no Playwright: {err} (`pip install -e '.[dev]'` installs it)")
    return sync_api


@pytest.fixture(scope="module")
def served(appdata: AppData) -> Iterator[str]:
    paths = {"--models": str(appdata.models), "--data-dir": str(appdata.data_dir),
             "--catalog": str(appdata.catalog)}
    with browser.running_app(paths, browser.free_port(), artifacts() / "app-server.log") as url:
        yield url


@pytest.fixture(scope="module")
def page(sync_api: Any, served: str) -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        chromium = browser.launch(pw)
        tab = chromium.new_page(viewport={"width": 1500, "height": 2200})
        yield tab
        chromium.close()


@pytest.mark.timeout(300)
def test_changing_the_mtu_changes_the_predicted_goodput(
        page: Any, served: str, predict: Predict) -> None:
    page.goto(served)
    browser.wait_idle(page)
    before = browser.goodput_text(page)
    assert before == f"{predict()['goodput_mbps']:,.0f} Mbit/s"
    page.screenshot(path=str(artifacts() / "browser-whatif-mtu1500.png"), full_page=True)

    mtu = page.get_by_role("spinbutton", name="MTU (bytes)")
    mtu.fill("9000")
    started = time.perf_counter()
    mtu.press("Enter")
    page.wait_for_function(
        """(before) => {
            const metric = [...document.querySelectorAll('[data-testid="stMetric"]')]
                .find(m => m.innerText.includes('Predicted goodput (analytic)'));
            const value = metric && metric.querySelector('[data-testid="stMetricValue"]');
            return value && value.innerText !== before;
        }""", arg=before, polling="raf", timeout=30_000)
    seconds = time.perf_counter() - started
    after = browser.goodput_text(page)
    assert after == f"{predict(mtu_bytes=9000)['goodput_mbps']:,.0f} Mbit/s"
    assert after != before
    browser.wait_idle(page)
    assert "mtu_bytes=9000" in page.url  # the what-if can be shared
    page.screenshot(path=str(artifacts() / "browser-whatif-mtu9000.png"), full_page=True)
    timing = {"mtu_change_to_new_goodput_ms": round(seconds * 1000, 1),
              "before": before, "after": after}
    (artifacts() / "browser-timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    print(f"MTU 1500 → 9000: goodput {before} → {after} in {seconds * 1000:.0f} ms")


@pytest.mark.timeout(300)
def test_a_shared_url_opens_the_same_what_if(page: Any, served: str, predict: Predict) -> None:
    page.goto(f"{served}/?page=whatif&server=quiche&client=lsquic&mtu_bytes=9000&gso=false")
    browser.wait_idle(page)
    expected = predict(server="quiche", mtu_bytes=9000, gso=False)
    assert browser.goodput_text(page) == f"{expected['goodput_mbps']:,.0f} Mbit/s"


@pytest.mark.timeout(300)
def test_every_page_renders_without_an_exception(page: Any, served: str) -> None:
    for name in browser.PAGES:
        path = browser.shoot(page, served, name, artifacts())
        assert path.stat().st_size > 10_000, name  # a picture of the page, not a blank one
        assert page.locator('[data-testid="stException"]').count() == 0, name
        assert page.locator("h2").filter(has_text=browser.TITLES[name]).count() == 1, name
