"""``quiclab bench analytic`` on small batches, and the Chromium part of ``quiclab bench
app`` (its AppTest part is in test_pages.py)."""

from __future__ import annotations

import json

import pytest

from quiclab.cli import main

from .appdata import AppData


@pytest.mark.parametrize("n", [1, 1000])
def test_bench_analytic_runs_any_batch_size(app_env: AppData, n: int,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """End to end on min(2000, n) scenarios: a batch below 2000 used to index past its end."""
    assert main(["--models", str(app_env.models), "bench", "analytic", "--n", str(n),
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["batch"], result["end_to_end_batch"], result["predictions_checked"]) == \
        (n, n, n)


@pytest.mark.parametrize("n", [0, -5])
def test_bench_analytic_refuses_an_empty_batch(app_env: AppData, n: int,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--models", str(app_env.models), "bench", "analytic", "--n", str(n)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (f"quiclab: error: --n {n}: the analytic batch needs at least "
                            "1 scenario\n")
    assert not captured.out


@pytest.mark.browser
@pytest.mark.timeout(600)
def test_bench_app_measures_one_and_six_pairs_in_chromium(app_env: AppData) -> None:
    """The key press to the new goodput on screen, for one pair and for six: figures
    with their targets (not a timed assertion: the wall clock depends on the host)."""
    from quiclab.app import browser
    from quiclab.bench import _browser_timings
    from quiclab.paths import Paths

    if browser.available():
        pytest.skip(browser.available())
    paths = Paths.resolve(models=str(app_env.models), catalog=str(app_env.catalog),
                          data_dir=str(app_env.data_dir))
    result = _browser_timings(paths)
    assert len(result["browser_one_pair_ms"]) == len(browser.MTUS) - 1
    assert len(result["browser_six_pairs_ms"]) == len(browser.MTUS) - 1
    assert 0 < result["browser_one_pair_median_ms"] < 60_000
    assert (result["browser_target_one_pair_ms"], result["browser_target_six_pairs_ms"]) == \
        (200.0, 300.0)
    print(f"Chromium, key press to new goodput: one pair median "
          f"{result['browser_one_pair_median_ms']:.0f} ms, six pairs "
          f"{result['browser_six_pairs_median_ms']:.0f} ms")
