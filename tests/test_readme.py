"""Every command of the README runs, and prints what the README shows, in shape.

The README's ``sh`` blocks are run in order, each as one bash script, against a copy
of the catalog ingested from the shared data; the ``text`` block after a ``sh`` block
is its output, cut short with ``…`` lines. Each shown line must appear, in order, with
its text as shown and any number in place of each number (and any 8-hex-digit code
digest), so a changed model moves no test but a changed output format or a failing
command does. ``make`` targets are checked with ``make -n``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```(sh|text)\n(.*?)```", re.S)
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"


def blocks() -> list[tuple[str, str | None]]:
    """(sh script, the text block right after it or None), in README order."""
    found = BLOCK.findall(README.read_text())
    out: list[tuple[str, str | None]] = []
    for i, (kind, body) in enumerate(found):
        if kind == "sh":
            follows = found[i + 1][1] if i + 1 < len(found) and found[i + 1][0] == "text" \
                else None
            out.append((body, follows))
    return out


def _pattern(line: str) -> re.Pattern[str]:
    parts = re.split(rf"(\+[0-9a-f]{{8}}\b|{NUMBER})", " ".join(line.split()))
    regex = "".join(
        (r"\+[0-9a-f]{8}" if p.startswith("+") and len(p) == 9 else NUMBER)
        if i % 2 else re.escape(p) for i, p in enumerate(parts))
    return re.compile(regex + r"$")


def assert_shape(shown: str, output: str) -> None:
    """Each shown line matches a later output line, in order; ``…`` skips any lines,
    and without one the next shown line must be the next output line."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    at, may_skip = 0, False
    for want in shown.strip("\n").splitlines():
        if want.strip() == "…":
            may_skip = True
            continue
        pattern = _pattern(want)
        while at < len(lines) and not pattern.match(lines[at]):
            assert may_skip, f"expected {want!r}, got {lines[at]!r}\n{output}"
            at += 1
        assert at < len(lines), f"{want!r} not in the output:\n{output}"
        at, may_skip = at + 1, False


def test_the_shape_check_can_fail() -> None:
    assert_shape("goodput 1283.4 Mbit/s limit: interop (analytic-1.0+3f5bb9d5)\n…",
                 "goodput 99.5 Mbit/s limit: interop (analytic-1.0+0a1b2c3d)\nmore")
    with pytest.raises(AssertionError):
        assert_shape("goodput 1.0 Mbit/s limit: interop", "goodput 1.0 Mbit/s limit: link")
    with pytest.raises(AssertionError):
        assert_shape("a 1\nb 2", "a 1\nx\nb 2")  # no … between them


def test_the_readme_is_short() -> None:
    assert len(README.read_bytes()) <= 12 * 1024


def test_every_readme_command(full_ingest, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.duckdb"
    shutil.copy(full_ingest.catalog, catalog)
    env = {**os.environ, "QUICLAB_CATALOG": str(catalog), "QUICLAB_DATA_DIR": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    scripts = blocks()
    assert len(scripts) >= 8
    for script, shown in scripts:
        if script.lstrip().startswith("make "):
            for line in script.strip().splitlines():
                target = line.split("#")[0].split()[1]
                done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True,
                                      text=True, env=env, timeout=120)
                assert done.returncode == 0, (target, done.stderr)
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                              capture_output=True, text=True, env=env, timeout=900)
        # `| head` may close the pipe early; the command's own failure still shows here.
        assert done.returncode in (0, 141), f"{script}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, done.stderr
        if shown is not None:
            assert_shape(shown, done.stdout)
