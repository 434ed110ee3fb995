"""Errors that carry the one line a user needs: which file or field, which value, what is
allowed."""

from __future__ import annotations


class QuiclabError(Exception):
    """Base class: ``str(err)`` is a single line fit for a terminal."""


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
        if missing:  # "mtu_bytes" alone: the field is known, its value is not there
            super().__init__(f"{where}{field}: no value given: write {field}=VALUE")
        else:
            super().__init__(f"{where}{field}={value!r} is impossible: allowed {allowed}")


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
