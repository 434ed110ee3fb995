"""Strict YAML for the files people write by hand: scenarios and sweep specs.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping without
a word, so a key typed twice (``mtu_bytes: 1500`` … ``mtu_bytes: 9000``)
silently changes a run. :func:`load` refuses it as a ``yaml.YAMLError`` with
the line of the second key; :func:`where` turns any YAML error into
``line N, column M: problem`` for a one-line message.
"""

from __future__ import annotations

import functools
from typing import Any


def load(text: str) -> Any:
    """Parse ``text`` like ``yaml.safe_load``, refusing a key repeated in one mapping."""
    import yaml

    return yaml.load(text, Loader=_loader())  # a SafeLoader subclass


def where(err: Exception) -> str:
    """``line N, column M: problem`` of a ``yaml.YAMLError`` (what is known of it)."""
    mark = getattr(err, "problem_mark", None)
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{at}{problem}"


def _unique_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
    import yaml

    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=deep))


@functools.cache
def _loader() -> type:
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """A SafeLoader whose mappings refuse a repeated key."""

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                    _unique_mapping)
    return UniqueKeyLoader
