"""Defects a bad-input campaign found in `quiclab sweep`, one test each: a refusal
is one bounded line and exit 2; what was computed is kept and said to be kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import duckdb
import pytest

from quiclab.cli import main
from quiclab.errors import MAX_MESSAGE_CHARS

from .conftest import write

SPEC = """\
kind: sweep
base: {transfer_bytes: 100000000}
axes:
  - {field: implementation, values: [fast, slow]}
  - {field: mtu_bytes, values: [1500, 9000]}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as done:
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("quiclab: error: "), err[:2000]
    assert len(lines[0]) <= len("quiclab: error: ") + MAX_MESSAGE_CHARS
    return lines[0]


@pytest.fixture
def sweep(tmp_path: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]):
    def run(spec_text: str, *extra: str, catalog: Path | None = None):
        spec = write(tmp_path / "sweep-t.yaml", spec_text)
        return _run(capsys, "--models", str(models_dir), "--catalog",
                    str(catalog or tmp_path / "c.duckdb"), "sweep", str(spec), "--quiet",
                    *extra)
    return run


# 3 -- sweep --out at a file or on a read-only file system: tracebacks before ----------
def test_sweep_out_at_a_file_is_one_line(tmp_path: Path, sweep):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    for out in (blocker, blocker / "sub"):
        code, _, err = sweep(SPEC, "--out", str(out))
        line = _one_error_line(err)
        assert code == 2 and "[--out]: " in line and "a file" in line


def test_sweep_out_on_a_read_only_file_system_is_one_line(tmp_path: Path, sweep):
    ro = tmp_path / "ro"
    ro.mkdir()
    code, _, _ = sweep(SPEC, "--out", str(ro / "done"))  # an existing sweep folder there
    assert code == 0
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k",
                                            "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("mounting a read-only tmpfs needs root")
    try:
        for out in (ro / "new", ro):
            code, _, err = sweep(SPEC, "--out", str(out))
            assert code == 2 and "Read-only file system" in _one_error_line(err)
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@pytest.mark.parametrize("digits", [400, 5000])
def test_a_huge_integer_in_a_sweep_spec_is_one_line(sweep, digits: int):
    for text in (SPEC.replace("100000000", "9" * digits),
                 SPEC + f"repetitions: {'9' * digits}\n"):
        code, _, err = sweep(text)
        line = _one_error_line(err)
        assert code == 2 and "sweep-t.yaml" in line and "digits" in line


# 9 -- `stop: 1e9` said "expected a number, got '1e9'" with no hint --------------------
def test_a_number_yaml_reads_as_text_says_how_to_write_it(sweep):
    spec = SPEC.replace("{field: mtu_bytes, values: [1500, 9000]}",
                        "{field: transfer_bytes, range: {start: 1000000, stop: 1e9, step: 1e8}}")
    code, _, err = sweep(spec)
    line = _one_error_line(err)
    assert code == 2 and "axes[1].range.stop: expected a number, got '1e9'" in line
    assert "YAML reads 1e9 as text: write 1000000000 or 1.0e+9" in line


# 9 -- a sweep stopped by a locked catalog did not say its parts are kept ---------------
def test_a_locked_catalog_says_the_computed_rows_are_kept(
        tmp_path: Path, sweep, monkeypatch: pytest.MonkeyPatch):
    from quiclab.datasets import catalog as catalog_module

    locked = tmp_path / "locked.duckdb"
    duckdb.connect(str(locked)).close()

    def refuse(self, read_only):  # what DuckDB raises while another process writes
        raise duckdb.IOException(f'IO Error: Could not set lock on file "{locked}": '
                                 "Conflicting lock is held in python (PID 1)")

    monkeypatch.setattr(catalog_module.Catalog, "_connect", refuse)
    out = tmp_path / "out"
    code, _, err = sweep(SPEC, "--out", str(out), catalog=locked)
    line = _one_error_line(err)
    assert code == 2 and "Could not set lock" in line
    assert f"the sweep's 4 rows are kept in {out}/parts" in line
    assert len(list((out / "parts").rglob("*.parquet"))) >= 1
