"""The testbed's one error type: a single line naming what was refused or what failed."""

from __future__ import annotations

from quiclab.errors import QuiclabError


class TestbedError(QuiclabError):
    """A run that cannot be made here (no root, a knob a stack cannot honour, a missing build)."""

    __test__ = False  # not a pytest test class despite the name
