"""The examples are golden-output tests, as SimPy's are: each ``examples/NAME.py`` is run
as a user would run it, and its output must match ``examples/NAME.out`` line by line —
text exactly, every number within the tolerance stated here (relative). A re-fit of
the models that moves a number by more is a change the .out file must record."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")
#: Relative tolerance of every number. The engines and fits are deterministic; this
#: leaves room for the last printed digit and for the analytic core's numpy and
#: compiled backends, which agree to ~1e-12.
REL = 1e-3


def _numbers_and_text(line: str) -> tuple[list[float], str]:
    numbers = [float(n.replace(",", "")) for n in NUMBER.findall(line)]
    return numbers, NUMBER.sub("#", line.rstrip())


def assert_matches(expected: str, got: str, rel: float = REL) -> None:
    want_lines, got_lines = expected.strip().splitlines(), got.strip().splitlines()
    assert len(got_lines) == len(want_lines), f"{len(got_lines)} lines, expected " \
        f"{len(want_lines)}:\n{got}"
    for number, (want, have) in enumerate(zip(want_lines, got_lines, strict=True), 1):
        want_numbers, want_text = _numbers_and_text(want)
        have_numbers, have_text = _numbers_and_text(have)
        assert have_text == want_text, f"line {number}: {have!r}, expected {want!r}"
        for a, b in zip(have_numbers, want_numbers, strict=True):
            assert a == pytest.approx(b, rel=rel, abs=1e-9), \
                f"line {number}: {have!r}, expected {want!r} (±{rel:.1%})"


def run_example(name: str, *args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def expected(name: str) -> str:
    return (EXAMPLES / name).with_suffix(".out").read_text()


def test_the_comparison_can_fail() -> None:
    assert_matches("goodput 100.0 Mbit/s", "goodput 100.05 Mbit/s")
    with pytest.raises(AssertionError):
        assert_matches("goodput 100.0 Mbit/s", "goodput 100.2 Mbit/s")
    with pytest.raises(AssertionError):
        assert_matches("limit: cwnd", "limit: link")


def test_goodput_vs_rtt(tmp_path: Path) -> None:
    out = run_example("goodput_vs_rtt.py", "goodput_vs_rtt.png", cwd=tmp_path)
    assert_matches(expected("goodput_vs_rtt.py"), out)
    assert (tmp_path / "goodput_vs_rtt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dask_sweep(tmp_path: Path) -> None:
    out = run_example("dask_sweep.py", str(tmp_path / "example-dask-sweep"), cwd=tmp_path)
    assert_matches(expected("dask_sweep.py"), out)
    again = run_example("dask_sweep.py", str(tmp_path / "example-dask-sweep"), cwd=tmp_path)
    assert again.splitlines()[0] == "12 points, 0 computed on Dask (12 reused from " \
                                    "example-dask-sweep/parts)"


def test_calibrate_from_catalog(full_ingest, tmp_path: Path) -> None:
    out = run_example("calibrate_from_catalog.py", str(full_ingest.catalog), cwd=tmp_path)
    assert_matches(expected("calibrate_from_catalog.py"), out)


def test_sql_query(full_ingest, tmp_path: Path) -> None:
    out = run_example("sql_query.py", str(full_ingest.catalog), cwd=tmp_path)
    assert_matches(expected("sql_query.py"), out)
