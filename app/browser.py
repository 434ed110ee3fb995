"""Drive the app in a real browser: Debian's Chromium under Playwright.

Used by the browser tests (``tests/app/test_browser*.py``), by ``quiclab bench
app`` (:func:`measure`: key press to new goodput on screen) and, as a script, to
take screenshots of the pages for the docs::

    python -m quiclab.app.browser --models DIR --data-dir DIR --out DIR

The app is started the way a user starts it (``quiclab … app --server.port N
--server.headless true``) in its own process group, which is ended when done.
Chromium is ``/usr/bin/chromium`` from Debian (``make test`` installs it);
Playwright only drives it, it downloads no browser of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
#: As root on a machine with a closed network (see the machine notes): no sandbox,
#: no GPU, and none of Chromium's own background connections.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
PAGES = ("whatif", "matrix", "dynamics", "sweep", "reproductions", "data")
TITLES = {"whatif": "What-if", "matrix": "Matrix", "dynamics": "Dynamics", "sweep": "Sweep",
          "reproductions": "Reproductions", "data": "Data"}
START_TIMEOUT_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(url: str) -> bool:
    """Whether the Streamlit server at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def running_app(paths: Mapping[str, str], port: int, log: Path) -> Iterator[str]:
    """Start ``quiclab app`` on ``port``; yield its URL; end its process group after.

    ``paths`` are the global options (``--models``, ``--data-dir``, ``--catalog``).
    Raises RuntimeError (with the log's tail) if it does not answer in time.
    """
    argv = [sys.executable, "-m", "quiclab.cli"]
    for flag, value in paths.items():
        argv += [flag, value]
    argv += ["app", "--server.port", str(port), "--server.headless", "true",
             "--server.fileWatcherType", "none"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=dict(os.environ))
    url = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"quiclab app exited with {process.returncode}: "
                                   + log.read_text()[-2000:])
            if healthy(url):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"quiclab app did not answer in {START_TIMEOUT_S:.0f} s: "
                                   + log.read_text()[-2000:])
            time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def launch(playwright: Any) -> Any:
    """Debian's Chromium, headless, with the flags this machine needs."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                      args=CHROMIUM_ARGS)


def wait_idle(page: Any, timeout_ms: float = 60_000) -> None:
    """Wait until the app has run its script and stopped (state "notRunning").

    The state starts as "initial" before the first run; call this after a
    change has visibly started a rerun, or right after loading a page.
    """
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    page.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            return app && app.getAttribute('data-test-script-state') === 'notRunning'
                && !document.querySelector('[data-testid="stSkeleton"]');
        }""", timeout=timeout_ms)


def goodput_text(page: Any) -> str:
    """The text of the analytic goodput metric on the What-if page."""
    metric = page.locator('[data-testid="stMetric"]').filter(
        has_text="Predicted goodput (analytic)")
    return str(metric.locator('[data-testid="stMetricValue"]').inner_text())


def run_packet_engines(page: Any, timeout_ms: float = 900_000) -> None:
    """Press the page's Run button of the packet-level engines, if it has one, and wait
    until their runs are done (the button is gone or enabled again)."""
    import re

    button = page.get_by_role("button", name=re.compile(r"^Run (des|ns3)"))
    if button.count() == 0:
        return
    button.first.click()
    page.wait_for_function(
        """() => ![...document.querySelectorAll('button')]
                .some(b => b.innerText.startsWith('Running '))
            && !document.querySelector('[data-testid="stProgress"]')""",
        timeout=timeout_ms, polling=1000)
    wait_idle(page)


def shoot(page: Any, url: str, name: str, out: Path, query: str = "", suffix: str = "",
          run: bool = False) -> Path:
    """Open one page, wait for it (and its charts), save ``out/<name><suffix>.png``;
    with ``run``, run its packet-level engines first."""
    page.goto(f"{url}/?page={name}{query}")
    wait_idle(page)
    if run:
        run_packet_engines(page)
        page.goto(f"{url}/?page={name}{query}")  # from the top, the results kept
        wait_idle(page)
    page.wait_for_timeout(1500)  # let charts draw
    path = out / f"{name}{suffix}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def screenshot_pages(page: Any, url: str, out: Path, query: str = "",
                     pages: tuple[str, ...] = PAGES, suffix: str = "",
                     run: bool = False) -> list[Path]:
    """Open pages and save a full-page PNG of each as ``out/<page><suffix>.png``."""
    out.mkdir(parents=True, exist_ok=True)
    return [shoot(page, url, name, out, query, suffix, run) for name in pages]


#: MTUs typed one after the other by :func:`measure`: each changes the goodput.
MTUS = (9000, 1500, 4000, 1400, 8000, 3000, 1280, 6000, 2000, 1500, 9000)
#: The What-if answer's targets (README, "Speed"): one pair, and six pairs at once.
TARGET_ONE_MS, TARGET_SIX_MS = 200.0, 300.0


def available() -> str:
    """'' when Chromium and Playwright are here, else why a browser cannot be driven."""
    if not CHROMIUM.is_file():
        return f"no browser: {CHROMIUM} is missing (`make browser` installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as err:
        return f"no Playwright: {err} (`pip install -e '.[dev]'` installs it)"
    return ""


def change_mtu(page: Any, mtu: int, timeout_ms: float = 60_000) -> float:
    """Type an MTU into the What-if sidebar and press Enter; ms from the key press
    until the first pair's analytic goodput on screen is another."""
    before = goodput_text(page)
    box = page.get_by_role("spinbutton", name="MTU (bytes)")
    box.fill(str(mtu))
    started = time.perf_counter()
    box.press("Enter")
    page.wait_for_function(
        """(before) => {
            const metric = [...document.querySelectorAll('[data-testid="stMetric"]')]
                .find(m => m.innerText.includes('Predicted goodput (analytic)'));
            const value = metric && metric.querySelector('[data-testid="stMetricValue"]');
            return value && value.innerText !== before;
        }""", arg=before, polling="raf", timeout=timeout_ms)
    return (time.perf_counter() - started) * 1000


def measure(paths: Mapping[str, str], pairs: Mapping[str, str], log: Path,
            mtus: tuple[int, ...] = MTUS) -> dict[str, Any]:
    """Key press to new goodput on screen, in Chromium, for each selection of
    ``pairs`` (name → URL query, e.g. ``"six_pairs": "&server=a,b&client=c,d,e"``):
    the app served by ``quiclab app`` with ``paths``; one MTU typed after another
    (the first change of each selection is a warm-up, not counted). Returns per
    selection the times, their median and the target it is held to."""
    from playwright.sync_api import sync_playwright

    out: dict[str, Any] = {}
    with running_app(paths, free_port(), log) as url, sync_playwright() as pw:
        chromium = launch(pw)
        page = chromium.new_page(viewport={"width": 1500, "height": 2200})
        for name, query in pairs.items():
            page.goto(f"{url}/?page=whatif{query}")
            wait_idle(page)
            times = []
            for mtu in mtus:
                times.append(change_mtu(page, mtu))
                wait_idle(page)
            counted = sorted(times[1:])
            out[f"browser_{name}_ms"] = [round(t, 1) for t in times[1:]]
            out[f"browser_{name}_median_ms"] = counted[len(counted) // 2]
        chromium.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshots of every page of the app.")
    parser.add_argument("--models", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--catalog")
    parser.add_argument("--out", required=True, help="folder for <page>.png")
    parser.add_argument("--query", default="", help="extra query string, e.g. &mtu_bytes=9000")
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=PAGES,
                        help="which pages (default all)")
    parser.add_argument("--suffix", default="", help="added to each file name")
    parser.add_argument("--height", type=int, default=2200,
                        help="window height, px (the app scrolls inside it: a screenshot "
                             "holds what fits)")
    parser.add_argument("--run", action="store_true",
                        help="press each page's Run button of DES/ns-3 and wait for the runs")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    paths = {"--models": args.models, "--data-dir": args.data_dir}
    if args.catalog:
        paths["--catalog"] = args.catalog
    out = Path(args.out)
    with running_app(paths, free_port(), out / "app.log") as url, sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page(viewport={"width": 1500, "height": args.height})
        for path in screenshot_pages(page, url, out, args.query, tuple(args.pages),
                                     args.suffix, args.run):
            print(path)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
