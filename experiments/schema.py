"""Validation helpers for YAML specs: unknown keys, types and ranges as one-line SpecErrors.

Every message starts with the file and the dotted key path that is wrong,
e.g. ``experiments/sweep-mtu.yaml: axes[1].feild: unknown key; allowed: field,
values, range, logrange, zip``. The spec modules declare their allowed keys
as tuples and call these helpers; nothing here knows about sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import yaml

from quiclab import yamlio
from quiclab.errors import SpecError, excerpt


def where(source: str, path: str) -> str:
    """``file: key.path`` (or just ``file`` at the top level)."""
    return f"{source}: {path}" if path else source


def fail(source: str, path: str, message: str) -> SpecError:
    return SpecError(f"{where(source, path)}: {message}")


def read_text(path: Any) -> str:
    """A hand-written file's text (UTF-8, at most ``yamlio.MAX_CHARS``); SpecError naming
    the file if it cannot be read, is too large or is not UTF-8 text, e.g.
    ``s.yaml: not UTF-8 text (byte 17)``."""
    from quiclab.errors import DataError

    try:
        return yamlio.read(path, "spec")
    except DataError as err:
        raise SpecError(str(err)) from None


def load_yaml(path: Any) -> dict[str, Any]:
    """Read one YAML mapping; raises SpecError naming the file on any problem."""
    from pathlib import Path

    file = Path(path)
    if not file.is_file():
        raise SpecError(f"{file}: no such spec file")
    try:
        data = yamlio.load(read_text(file))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{file}{line}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{file}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def check_keys(data: Any, allowed: Sequence[str], source: str, path: str,
               required: Sequence[str] = ()) -> dict[str, Any]:
    """``data`` must be a mapping whose keys are in ``allowed`` and include ``required``."""
    if not isinstance(data, dict):
        raise fail(source, path, f"expected a mapping with keys {', '.join(allowed)}, "
                                 f"got {_kind(data)}")
    for key in data:
        if key not in allowed:
            name = key if isinstance(key, str) and len(key) <= 60 else excerpt(key)
            sub = f"{path}.{name}" if path else str(name)
            raise fail(source, sub, f"unknown key; allowed: {', '.join(allowed)}")
    for key in required:
        if key not in data:
            raise fail(source, path or "(top level)",
                       f"missing required key {key!r}; allowed: {', '.join(allowed)}")
    return data


def need_str(value: Any, source: str, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail(source, path, f"expected a non-empty string, got {_kind(value)}")
    return value


def need_list(value: Any, source: str, path: str, min_len: int = 1) -> list[Any]:
    if not isinstance(value, list) or len(value) < min_len:
        got = _kind(value) if not isinstance(value, list) else \
            "an empty list" if not value else f"a list of {len(value)} item(s)"
        raise fail(source, path, f"expected a list of at least {min_len} item(s), got {got}")
    return value


def need_number(value: Any, source: str, path: str, lo: float | None = None,
                hi: float | None = None, integer: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and not math.isfinite(value):
        raise fail(source, path, f"{value!r} is not a finite number")
    if ok and integer and not float(value).is_integer():
        ok = False
    if not ok:
        raise fail(source, path, f"expected {'a whole number' if integer else 'a number'}, "
                                 f"got {excerpt(value)}{_yaml_number_hint(value)}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f"{'' if lo is None else lo:g} … {'' if hi is None else hi:g}" \
            if lo is not None and hi is not None else (f"≥ {lo:g}" if lo is not None
                                                          else f"≤ {hi:g}")
        raise fail(source, path, f"{excerpt(value)} is out of range; allowed {bounds}")
    return float(value)


def _yaml_number_hint(value: Any) -> str:
    """Why a number can arrive as text: YAML 1.1 (PyYAML) reads ``1e9`` as a string —
    its floats need a dot (``1.0e9``) and a signed exponent is optional only there."""
    if not isinstance(value, str) or len(value) > 40:
        return ""
    try:
        number = float(value.replace("_", ""))
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    plain = f"{number:.0f}" if number.is_integer() and abs(number) < 1e16 else repr(number)
    mantissa, _, exponent = f"{number:.1e}".partition("e")
    # PyYAML's float needs a dot and a signed exponent: 1.0e+9, 1.0e-3.
    exp = f" or {mantissa}e{exponent[0]}{exponent[1:].lstrip('0') or '0'}" \
        if "e" in value.lower() else ""
    return f" (YAML reads {value.strip()} as text: write {plain}{exp})"


def need_choice(value: Any, allowed: Sequence[str], source: str, path: str) -> str:
    if value not in allowed:
        raise fail(source, path, f"{excerpt(value)} is not allowed; allowed: {', '.join(allowed)}")
    return str(value)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {excerpt(value)}"
