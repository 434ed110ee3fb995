"""What a malformed perf trace is refused with, to the character, and that folded
stacks are values (STYLE.md: value objects are frozen)."""

from __future__ import annotations

import dataclasses

import pytest

from quiclab.datasets.sources.perf import FoldedStack, fold
from quiclab.errors import DataError

LONG = "x" * 100


@pytest.mark.parametrize(("text", "reason"), [
    # The offending line is quoted, cut to its first 60 characters.
    (f"{LONG}\n", f"line 1: not a perf sample header: {'x' * 60!r}"),
    (f"http_server 1 [000]  1.0:  5 cycles:\n\t{LONG}\n",
     f"line 2: not a stack frame: {chr(9) + 'x' * 59!r}"),
])
def test_a_bad_line_is_quoted_up_to_60_characters(text, reason):
    with pytest.raises(DataError) as err:
        fold(text.splitlines(True), "client/out.perf")
    assert err.value.reason == reason


def test_folded_stacks_are_frozen_values():
    stack = FoldedStack("c", "c;f", 1, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stack.samples = 2  # type: ignore[misc]
