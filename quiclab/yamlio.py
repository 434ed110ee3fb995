"""Strict YAML for the files people write by hand: scenarios and sweep specs.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping without
a word, so a key typed twice (``mtu_bytes: 1500`` … ``mtu_bytes: 9000``)
silently changes a run. :func:`load` refuses it as a ``yaml.YAMLError`` with
the line of the second key; :func:`where` turns any YAML error into
``line N, column M: problem`` for a one-line message.

A hand-written file is small, so :func:`load` also refuses, with the line
where the limit is passed, what only a mistake or an attack produces:

- text longer than :data:`MAX_CHARS` (a 25 MB "scenario" took minutes and GBs);
- more than :data:`MAX_NODES` values once aliases are expanded (nested aliases
  double at each level — "billion laughs" — and hang whatever walks them),
  and recursive aliases;
- nesting deeper than :data:`MAX_DEPTH` (PyYAML composes recursively);
- a whole number of more than :data:`MAX_DIGITS` digits (``int()`` of a long
  text is quadratic and refuses 4300 digits with a bare ValueError).

:func:`read` reads such a file's text with the size limit checked first.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from quiclab.errors import DataError, excerpt

#: Largest hand-written YAML file, in characters (256 KiB; the largest shipped spec is
#: 4 KB). PyYAML reads ~10,000 values a second on a busy core.
MAX_CHARS = 1 << 18
#: Most values in one document, counting each alias as a copy of what it names (a
#: sweep's long axes are ranges, not lists).
MAX_NODES = 20_000
#: Deepest nesting of mappings and lists.
MAX_DEPTH = 64
#: Most digits of a whole number (a seed has 19).
MAX_DIGITS = 40


def read(path: Path | str, what: str = "file") -> str:
    """The UTF-8 text of a hand-written file, refused (DataError, one line) when it is
    not a file, larger than :data:`MAX_CHARS` bytes, unreadable or not UTF-8."""
    file = Path(path)
    try:
        if file.is_dir():
            raise DataError(file, f"is a directory, not a {what}")
        size = file.stat().st_size
    except OSError as err:
        raise DataError(file, f"cannot be read ({err.strerror or err})") from None
    if size > MAX_CHARS:
        raise DataError(file, f"{size:,d} bytes: a {what} is at most {MAX_CHARS:,d} bytes")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(file, f"not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise DataError(file, f"cannot be read ({err.strerror or err})") from None
    return text


def load(text: str) -> Any:
    """Parse ``text`` like ``yaml.safe_load``, refusing a key repeated in one mapping
    and the oversized inputs listed in the module docstring (as ``yaml.YAMLError``)."""
    import yaml

    if len(text) > MAX_CHARS:
        raise yaml.YAMLError(f"{len(text):,d} characters: at most {MAX_CHARS:,d}")
    try:
        return yaml.load(text, Loader=_loader())  # a SafeLoader subclass
    except RecursionError:  # a guard below should have stopped it first
        raise yaml.YAMLError(f"nested too deeply (at most {MAX_DEPTH} levels)") from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError) as err:
        # PyYAML's constructors of explicitly tagged values ("!!int " with nothing after
        # it, "!!float x") fail with Python's own errors, not a YAMLError.
        raise yaml.YAMLError(f"a value cannot be read ({type(err).__name__}: "
                             f"{excerpt(str(err))})") from None


def where(err: Exception) -> str:
    """``line N, column M: problem`` of a ``yaml.YAMLError`` (what is known of it)."""
    mark = getattr(err, "problem_mark", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or (str(err).splitlines() or [""])[0]
    return f"{at}{problem}"


def _unique_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
    import yaml

    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            repeated = key in seen
        except TypeError:  # a list or mapping as a key ("? [a]: 1")
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be one value, not a {type(key).__name__}",
                key_node.start_mark) from None
        if repeated:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {excerpt(key)}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=deep))


_DIGITS = re.compile(r"[0-9]")


def _bounded_int(loader: Any, node: Any) -> int:
    import yaml

    text = loader.construct_scalar(node)
    digits = len(_DIGITS.findall(text))
    if digits > MAX_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"{excerpt(text)}: a whole number of {digits} digits; at most "
                        f"{MAX_DIGITS}", node.start_mark)
    return int(yaml.SafeLoader.construct_yaml_int(loader, node))


def _expanded_size(root: Any) -> tuple[int, Any]:
    """(values in the document with aliases expanded, a node where MAX_NODES is passed
    or a cycle closes, else None). Each node's size is computed once (memoised), so the
    walk is linear in the file even when the expansion is exponential."""

    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            kids = _children(node)
            total = 1 + sum(size[id(k)] for k in kids)
            size[key] = total
            if total > MAX_NODES:
                return total, node
            continue
        if key in size:
            continue
        if key in on_path:
            return -1, node  # a recursive alias: infinite once expanded
        on_path.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in on_path:
                return -1, kid
            if id(kid) not in size:
                stack.append((kid, False))
    return size.get(id(root), 0), None


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


@functools.cache
def _loader() -> type:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """A SafeLoader whose mappings refuse a repeated key, and which refuses deep
        nesting, alias expansions past MAX_NODES and whole numbers past MAX_DIGITS."""

        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self._depth = 0
            self._nodes = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth += 1
            self._nodes += 1  # stops a long list early; aliases are counted after
            try:
                if self._depth > MAX_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nested deeper than {MAX_DEPTH} levels",
                        self.peek_event().start_mark)
                if self._nodes > MAX_NODES:
                    raise yaml.composer.ComposerError(
                        None, None, f"more than {MAX_NODES:,d} values",
                        self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None:
                total, at = _expanded_size(node)
                if at is not None:
                    problem = ("a recursive alias (it would never end)" if total < 0 else
                               f"more than {MAX_NODES:,d} values once aliases are expanded")
                    raise yaml.composer.ComposerError(None, None, problem, at.start_mark)
            return node

    BoundedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                  _unique_mapping)
    BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)
    return BoundedLoader
