"""The explorer's views in a real browser, their numbers checked against `quiclab
predict` and the catalog: the band and what it covers beside the measured spread,
engines side by side with the note where they disagree, the CPU breakdown, and
the server × client matrix with a click into What-if. A full-page screenshot of
each goes to the artifacts (``artifacts/app/view-*.png``) for the docs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import numpy as np
import pytest

from quiclab.app import browser
from quiclab.app.charts import three_digits
from quiclab.app.labels import limit_name
from quiclab.app.measured import measured_points
from quiclab.models.registry import Registry
from quiclab.sim.resolve import resolve
from quiclab.sim.scenario import Scenario

from .appdata import CPU, CPU_SAMPLES, PERF_SAMPLES, AppData
from .test_browser import artifacts, sync_api  # noqa: F401  (the fixture)
from .test_browser_deadends import body_text, chromium, open_whatif, run_button, wait_text  # noqa: F401

pytestmark = pytest.mark.browser

Predict = Callable[..., dict[str, Any]]


@pytest.fixture(scope="module")
def served(appdata: AppData) -> Iterator[str]:
    paths = {"--models": str(appdata.models), "--data-dir": str(appdata.data_dir),
             "--catalog": str(appdata.catalog)}
    with browser.running_app(paths, browser.free_port(),
                             artifacts() / "app-server-views.log") as url:
        yield url


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:  # noqa: F811
    context = chromium.new_context(viewport={"width": 1500, "height": 2600})
    tab = context.new_page()
    yield tab
    context.close()


def shot(page: Any, name: str) -> None:
    page.wait_for_timeout(800)  # let the charts draw
    page.screenshot(path=str(artifacts() / f"view-{name}.png"), full_page=True)


def plain(markdown: str) -> str:
    """Markdown as the browser shows it (no backticks, no emphasis marks)."""
    return markdown.replace("`", "").replace("*", "")


@pytest.mark.timeout(300)
def test_the_band_says_what_it_covers_beside_the_measured_spread(
        page: Any, served: str, predict: Predict, appdata: AppData) -> None:
    open_whatif(page, served)
    p = predict()
    section = page.locator('[data-testid="stExpander"]').filter(has_text="How sure")
    text = str(section.inner_text())
    lo, hi = p["goodput_lo_mbps"], p["goodput_hi_mbps"]
    assert f"{three_digits(lo)} … {three_digits(hi)} Mbit/s" in text
    if p["interval_level"] is None or not math.isfinite(p["interval_level"]):
        # These models carry no interval model: the page says the band is narrower
        # than what measurements would show, and why.
        assert "it covers the fitted parameters only, not the model's error" in text
    else:
        assert f"{p['interval_level'] * 100:g} % predictive band" in text
    assert plain(p["interval_source"]) in text
    # The matching measured runs' spread, from the catalog.
    with duckdb.connect(str(appdata.catalog), read_only=True) as con:
        found = measured_points(con, Scenario(), CPU)
    for source, part in found[found["bound"].isna()].groupby("source"):
        values = part["goodput_mbps"].astype(float).to_numpy()
        inside = ((values >= lo) & (values <= hi)).mean()
        p5, p95 = np.percentile(values, [5, 95])
        assert (f"Measured ({source}): {len(values)} value(s), median "
                f"{three_digits(float(np.median(values)))}, 5–95 % {three_digits(p5)} … "
                f"{three_digits(p95)}") in text, text
        assert f"{inside * 100:.0f} % of them inside the band" in text
    # The chart draws them on a row of their own, as a box over a strip (its legend).
    legend = page.locator('[data-testid="stVegaLiteChart"] svg text').filter(
        has_text=re.compile(r"^measured · qir10g$"))
    assert legend.count() >= 1
    shot(page, "uncertainty")


@pytest.mark.timeout(600)
def test_engines_side_by_side_say_where_they_disagree_and_why(
        page: Any, served: str, predict: Predict) -> None:
    """lsquic → quiche at +20 ms over 100 MB: the analytic engine finds the client's
    CPU, the DES receive-buffer drops, and their bands do not overlap."""
    fields = {"client": "quiche", "rtt_ms": 20, "transfer_bytes": 100_000_000}
    query = "&engines=analytic,des" + "".join(f"&{k}={v}" for k, v in fields.items())
    open_whatif(page, served, query)
    run_button(page).click()
    wait_text(page, "des: all 1 run(s) done for this scenario", timeout_ms=300_000)
    browser.wait_idle(page)
    analytic, des = predict(**fields), predict(engine="des", **fields)
    assert des["goodput_hi_mbps"] < analytic["goodput_lo_mbps"]  # the case this tests
    text = body_text(page)
    assert "1 disagreement(s) beyond the engines' bands" in text
    for name, p in (("the analytic engine", analytic), ("the DES", des)):
        assert (f"{name} {three_digits(p['goodput_mbps'])} Mbit/s (band "
                f"{three_digits(p['goodput_lo_mbps'])} … "
                f"{three_digits(p['goodput_hi_mbps'])}), limited by "
                f"{limit_name(p['limit'])} ({p['limit']})") in text, text
        assert f"{name} models {limit_name(p['limit'])} as " in text
    link = page.get_by_role("link", name="open this scenario with all three engines")
    href = str(link.get_attribute("href"))
    assert re.search(r"engines=analytic(,|%2C)des(,|%2C)ns3", href), href
    assert "client=quiche" in href and "rtt_ms=20" in href
    shot(page, "engines")


@pytest.mark.timeout(300)
def test_the_cpu_breakdown_is_the_models_components(
        page: Any, served: str, predict: Predict, appdata: AppData) -> None:
    """Each side's share per component, recomputed here from the resolved costs and
    `quiclab predict`'s ACK count: kernel per datagram, system calls per batch,
    crypto, protocol, application, ACKs, hand-offs."""
    open_whatif(page, served, "&client=quiche")
    p = predict(client="quiche")
    acks = p["acks"] / p["server_packets_sent"]
    r = resolve(Scenario(client="quiche"), Registry.load(appdata.models))
    page.get_by_text("CPU breakdown per side").wait_for()
    text = body_text(page)
    for side, ep in (("server", r.sender), ("client", r.receiver)):
        costs = {"kernel per datagram (UDP/IP, driver)": ep.ns_segment,
                 "system calls (per batch)": ep.ns_per_call / max(ep.segments_per_call, 1),
                 "crypto (AEAD, header protection)": ep.ns_crypto,
                 "QUIC protocol (packets, streams, CC)": ep.ns_protocol,
                 "application layer": ep.ns_app, "ACKs": acks * ep.ns_per_ack,
                 "pipeline hand-offs": ep.ns_handoff}
        total = sum(costs.values())
        line = next(x for x in text.splitlines() if x.startswith(f"{side} ({ep.impl}):"))
        for name, ns in costs.items():
            if ns / total >= 0.005:
                assert f"{name} {ns / total * 100:.0f} %" in line, (name, line)
    # Beside it, the catalog's perf profile of the server's stack (t-base-1, lsquic):
    # its categories in the calibration's groups, file I/O and GENERAL left out.
    perf = PERF_SAMPLES["server"]
    kept = perf["PACKET_IO"] + perf["CRYPTO"] + perf["CONN_MGMT"]
    assert (f"server · qir10g perf: lsquic (t-base-1): packet I/O "
            f"{perf['PACKET_IO'] / kept * 100:.0f} % · crypto {perf['CRYPTO'] / kept * 100:.0f} %"
            f" · protocol {perf['CONN_MGMT'] / kept * 100:.0f} %") in text
    # The client's stack is quiche: lsquic's client profile is not shown for it.
    assert "client · qir10g perf" not in text
    shot(page, "breakdown")


@pytest.mark.timeout(300)
def test_the_matrix_shows_every_pair_and_a_click_opens_it(
        page: Any, served: str, predict: Predict, appdata: AppData) -> None:
    page.goto(f"{served}/?page=matrix")
    browser.wait_idle(page)
    chart = page.locator('[data-testid="stVegaLiteChart"]').first
    chart.locator("svg").wait_for()
    registry = Registry.load(appdata.models)
    impls = registry.names()
    with duckdb.connect(str(appdata.catalog), read_only=True) as con:
        measured = {(s, c): measured_points(con, Scenario(server=s, client=c), CPU)
                    for s in impls for c in impls}
    ringed = 0
    for server in impls:
        for client in impls:
            cell = chart.locator(f'svg path[aria-label*="pair: {server} → {client};"]').first
            label = str(cell.get_attribute("aria-label"))
            found = measured[(server, client)]
            values = found[found["bound"].isna()]["goodput_mbps"].astype(float)
            assert f"measured values: {len(values)};" in label, label
            ringed += len(values) > 0
            try:
                expected = predict(server=server, client=client)
            except AssertionError:  # `quiclab predict` refuses the pair: a grey cell
                assert "limited by: the models refuse this pair" in label
                continue
            assert f"predicted (Mbit/s): {expected['goodput_mbps']:,.0f};" in label, label
            assert f"limited by: {limit_name(expected['limit'])};" in label
    assert f"Orange ring: {ringed} pair(s) with measured values" in body_text(page)
    shot(page, "matrix")
    # A click on quiche → lsquic opens that pair on the What-if page.
    cell = chart.locator('svg path[aria-label*="pair: quiche → lsquic;"]').first
    box = cell.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(re.compile(r"page=whatif.*server=quiche&client=lsquic"), timeout=60_000)
    browser.wait_idle(page)
    expected = predict(server="quiche", client="lsquic")
    assert browser.goodput_text(page) == f"{three_digits(expected['goodput_mbps'])} Mbit/s"


@pytest.mark.timeout(600)
def test_the_dynamics_are_the_des_runs_series(page: Any, served: str, predict: Predict,
                                              appdata: AppData) -> None:
    """The DES run of the Dynamics page: its goodput is `quiclab predict --engine
    des`'s (sampling changes nothing), and the CSV it downloads holds the series the
    DES records at the page's sampling interval, sample for sample."""
    import pandas as pd

    from quiclab.app.worker import sample_interval_s
    from quiclab.sim.engine import get_engine

    fields = {"transfer_bytes": 20_000_000, "seed": 9}
    page.goto(f"{served}/?page=dynamics" + "".join(f"&{k}={v}" for k, v in fields.items()))
    browser.wait_idle(page)
    page.get_by_role("button", name="Run des for its time series").click()
    page.get_by_role("button", name="Download the series (CSV)").wait_for(timeout=300_000)
    browser.wait_idle(page)
    scenario = Scenario(**fields)
    expected = predict(engine="des", **fields)
    registry = Registry.load(appdata.models)
    interval = sample_interval_s(str(appdata.models), 0.0, scenario)
    run = get_engine("des", registry, timeseries=True,
                     timeseries_interval_s=interval).predict(scenario)
    series = run.timeseries or {}
    assert run.goodput_mbps == pytest.approx(expected["goodput_mbps"], rel=1e-12)
    label = page.locator('[data-testid="stMetric"]').filter(has_text="Predicted goodput (des)")
    assert str(label.locator('[data-testid="stMetricValue"]').inner_text()) == \
        f"{three_digits(expected['goodput_mbps'])} Mbit/s"
    assert f"{len(series['t_s'])} samples" in str(label.inner_text())
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the series (CSV)").click()
    table = pd.read_csv(download.value.path())
    goodput = table[(table["metric"] == "goodput_mbps") & (table["series"] == "des")]
    assert list(goodput["t_s"]) == pytest.approx(series["t_s"])
    assert list(goodput["value"]) == pytest.approx(series["goodput_mbps"])
    cwnd = table[(table["metric"] == "cwnd_bytes") & (table["series"] == "des")]
    assert list(cwnd["value"]) == pytest.approx(series["cwnd_bytes"])
    shot(page, "dynamics")


@pytest.mark.timeout(300)
def test_the_dynamics_overlay_a_matching_runs_cpu_samples(page: Any, served: str) -> None:
    """The default scenario matches t-base-1, which has per-second CPU samples: its
    server's mean CPU over the steady window is on the page, and its samples are in
    the CSV beside nothing else (no packet engine has run for this scenario)."""
    import pandas as pd

    page.goto(f"{served}/?page=dynamics")
    browser.wait_idle(page)
    window = [r["total_pct"] for r in CPU_SAMPLES if r["side"] == "server" and r["in_window"]]
    label = page.locator('[data-testid="stMetric"]').filter(
        has_text="Measured server CPU (t-base-1)")
    assert str(label.locator('[data-testid="stMetricValue"]').inner_text()) == \
        f"{sum(window) / len(window):.3g} %"
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the series (CSV)").click()
    table = pd.read_csv(download.value.path())
    for side in ("server", "client"):
        rows = table[table["series"] == f"measured t-base-1 · {side}"]
        assert list(rows["value"]) == [r["total_pct"] for r in CPU_SAMPLES
                                       if r["side"] == side]
        assert set(rows["metric"]) == {"cpu_pct"}


@pytest.mark.timeout(300)
def test_sweep_legends_are_whole_and_headroom_is_a_factor(page: Any, served: str) -> None:
    """Sweep legends used to cut curve names to "lsquic → quiche · loss_pct…" and the
    limits chart to write the headroom of a far-off resource as "+19747 %"."""
    page.goto(f"{served}/?page=sweep&server=lsquic&client=lsquic,quiche&sweep_axis=rtt_ms"
              "&sweep_from=0&sweep_to=20&sweep_points=3&sweep_axis2=loss_pct"
              "&sweep_values=0,0.1")
    browser.wait_idle(page)
    chart = page.locator('[data-testid="stVegaLiteChart"]').first
    chart.locator("svg").wait_for()
    texts = chart.locator("svg text").evaluate_all("es => es.map(e => e.textContent)")
    for name in ("lsquic → lsquic · loss_pct=0.0", "lsquic → lsquic · loss_pct=0.1",
                 "lsquic → quiche · loss_pct=0.0", "lsquic → quiche · loss_pct=0.1"):
        assert name in texts, texts
    assert not any(t.endswith("…") for t in texts), texts

    open_whatif(page, served)
    labels = [t for t in page.locator('[data-testid="stVegaLiteChart"] svg text')
              .evaluate_all("es => es.map(e => e.textContent)")
              if re.fullmatch(r"[+-]\d+ %|×[\d,.]+|limit", t)]
    assert "limit" in labels and any(t.startswith("×") for t in labels), labels
    # Percentages only below ×2 (at most +99 %); beyond, a factor.
    assert all(abs(int(t.split()[0])) < 100 for t in labels if t.endswith(" %")), labels
