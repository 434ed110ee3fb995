"""What every property checks about a command's reaction to input.

:func:`run_cli` runs ``quiclab …`` in this process (no traceback can hide: an exception
other than argparse's SystemExit fails the test); :func:`assert_clean` holds the house
rule for bad input: exit 0 (accepted) or 2 (refused) and, when refused, exactly one
``quiclab: error:`` line, bounded, naming what the caller says it must name.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from quiclab.cli import main
from quiclab.errors import MAX_MESSAGE_CHARS

PREFIX = "quiclab: error: "


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def error(self) -> str:
        lines = [line for line in self.err.splitlines() if line.startswith(PREFIX)]
        return lines[0] if lines else ""


def run_cli(*argv: str) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as done:  # argparse refuses with exit 2
            code = int(done.code or 0) if not isinstance(done.code, str) else 2
    return Outcome(code, out.getvalue(), err.getvalue())


def assert_one_line(message: str, names: tuple[str, ...] = ()) -> None:
    """A refusal's text: one line, bounded, naming at least one of ``names``."""
    assert "\n" not in message.strip(), message[:500]
    assert len(message) <= len(PREFIX) + MAX_MESSAGE_CHARS + 80, len(message)
    if names:
        assert any(n in message for n in names), (names, message)


def assert_clean(outcome: Outcome, names: tuple[str, ...] = (), ok: tuple[int, ...] = (0,)
                 ) -> bool:
    """Exit ``ok`` (accepted) or 2 (refused in one line naming one of ``names``);
    returns whether it was refused."""
    assert "Traceback" not in outcome.err, outcome.err[-2000:]
    assert outcome.code in (*ok, 2), (outcome.code, outcome.err[-1000:])
    if outcome.code != 2:
        return False
    errors = [line for line in outcome.err.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(PREFIX), outcome.err[-2000:]
    assert_one_line(errors[0], names)
    return True


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes ("" if absent): the catalog unchanged means this is."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
