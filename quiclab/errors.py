"""Errors that carry the one line a user needs: which file or field, which value, what is
allowed.

Every message is one bounded line. Two rules keep it so, whatever the input:

- a value quoted in a message is an :func:`excerpt` — at most :data:`EXCERPT_CHARS`
  characters of its ``repr``, built without walking more of the value than it shows
  (a 50 MB string or a YAML document of nested aliases costs no more to quote than
  a word);
- ``str()`` of any :class:`QuiclabError` is :func:`one_line` of its text: line breaks
  folded to spaces and at most :data:`MAX_MESSAGE_CHARS` characters, the middle cut
  (the head names the file and field, the tail says what is allowed).
"""

from __future__ import annotations

import reprlib
from typing import Any

#: Longest quoted value in a message (characters of its repr, the cut marked "…").
EXCERPT_CHARS = 60
#: Longest message, in characters, of any QuiclabError (room for two long paths and
#: a library's own first line; a few terminal lines at most).
MAX_MESSAGE_CHARS = 500


def _repr() -> reprlib.Repr:
    # reprlib stops at these sizes instead of building the whole repr first: a list of a
    # million items or a 10-level alias bomb is quoted in microseconds.
    r = reprlib.Repr()
    r.maxlevel = 3
    r.maxstring = r.maxother = r.maxlong = EXCERPT_CHARS
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 6
    r.fillvalue = "…"
    return r


_REPR = _repr()


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A bounded ``repr`` of ``value`` for a message: ``'1234…(400 digits)'`` style.

    >>> excerpt("x" * 1000)[:12], len(excerpt("x" * 1000)) <= EXCERPT_CHARS + 20
    ("'xxxxxxxxxxx", True)
    >>> excerpt(10**400)
    '1000000000…(401 digits)'
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        # repr() of a big int is quadratic (and refused past 4300 digits): count instead.
        digits = len(str(abs(value))) if abs(value) < 10**4000 else None
        head = str(value)[:10] if digits is not None else "…"
        return f"{head}…({digits or 'over 4000'} digits)"
    if isinstance(value, str) and len(value) > limit:
        cut = value[:limit]
        return repr(cut)[:-1] + f"…' ({len(value):,d} characters)"
    if isinstance(value, bytes) and len(value) > limit:
        return repr(value[:limit])[:-1] + f"…' ({len(value):,d} bytes)"
    try:
        text = _REPR.repr(value)
    except Exception:  # a value whose own __repr__ fails must not hide the message
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit + 20 else text[: limit + 19] + "…"


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` as one line of at most ``limit`` characters (the middle cut)."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    head = limit * 3 // 4
    tail = limit - head - 3
    return f"{flat[:head]} … {flat[-tail:]}"


class QuiclabError(Exception):
    """Base class: ``str(err)`` is a single bounded line fit for a terminal."""

    def __str__(self) -> str:
        return one_line(super().__str__())


class ScenarioError(QuiclabError, ValueError):
    """An impossible Scenario value.

    >>> str(ScenarioError("mtu_bytes", 100, "576 … 65535"))
    'mtu_bytes=100 is impossible: allowed 576 … 65535'
    """

    def __init__(self, field: str, value: object, allowed: str, source: str | None = None,
                 missing: bool = False):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.source = source
        where = f"{source}: " if source else ""
        name = field if isinstance(field, str) and len(field) <= EXCERPT_CHARS \
            else excerpt(field)
        if missing:  # "mtu_bytes" alone: the field is known, its value is not there
            super().__init__(f"{where}{name}: no value given: write {name}=VALUE")
        else:
            super().__init__(f"{where}{name}={excerpt(value)} is impossible: allowed {allowed}")


class DataError(QuiclabError):
    """A malformed or truncated input file: names the file, the field and the reason."""

    def __init__(self, path: object, reason: str, field: str | None = None):
        self.path = str(path)
        self.reason = reason
        self.field = field
        what = f" [{field}]" if field else ""
        super().__init__(f"{self.path}{what}: {reason}")


class SpecError(QuiclabError):
    """A sweep/experiment spec that does not validate (typo, bad range, unknown key)."""


class EngineError(QuiclabError):
    """An engine could not produce a Prediction (missing build tool, failed run)."""
