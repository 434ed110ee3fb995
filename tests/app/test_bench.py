"""``quiclab bench analytic`` on small batches (its app benchmark is in test_pages.py)."""

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
