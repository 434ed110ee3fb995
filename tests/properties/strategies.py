"""Hypothesis strategies for the inputs people give quiclab: values of every kind a
YAML file, a flag or a URL can carry, and damage to well-formed files."""

from __future__ import annotations

from hypothesis import strategies as st

#: Texts that look like numbers, booleans and names, and their near misses.
NUMBERISH = st.sampled_from([
    "0", "1", "-1", "9000", "1500.0", "1e9", "1.0e+9", "8.6e9", "1_000", "0x10", "inf",
    "-inf", "nan", "NaN", "1e400", "9" * 41, "9" * 400, "1,5", " 12 ", "+7", "--1", "1e",
    "true", "false", "yes", "no", "on", "null", "~", "", " ", "lsquic", "lsquic@",
    "@march", "quiche@2025", "EPYC 7543", "W-2145", "aes-ni", "h3", "cubic", "requests"])

SCALARS = st.one_of(
    st.none(), st.booleans(), NUMBERISH,
    st.integers(min_value=-(10**60), max_value=10**60),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=200, max_size=2000),
)

#: Values of any shape: scalars, lists and mappings of them, a few levels deep.
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` truncated, with bytes changed, inserted or deleted, or replaced by
    random bytes."""
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "random", "zero"]))
    if kind == "random" or not data:
        return draw(st.binary(max_size=max(64, len(data))))
    b = bytearray(data)
    if kind == "truncate":
        return bytes(b[: draw(st.integers(0, len(b) - 1))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] = draw(st.integers(0, 255))
        return bytes(b)
    if kind == "insert":
        i = draw(st.integers(0, len(b)))
        return bytes(b[:i] + draw(st.binary(min_size=1, max_size=64)) + b[i:])
    if kind == "delete":
        i = draw(st.integers(0, len(b) - 1))
        return bytes(b[:i] + b[i + draw(st.integers(1, 64)):])
    i = draw(st.integers(0, len(b) - 1))
    n = draw(st.integers(1, 4096))
    return bytes(b[:i] + bytes(min(n, len(b) - i)) + b[i + n:])
