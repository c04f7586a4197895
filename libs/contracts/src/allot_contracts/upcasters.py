"""Upcasters: pure functions that turn an old event payload into the current schema, applied on read.

One table maps an old tag to ``(new_tag, function)``; chains are followed until the tag is current. Every step is
unit-tested (tests/test_upcasters.py). The catalogue starts at v1 for every event, so the table is empty; it exists
so that the first breaking change has a place to go and a test pattern to follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

UPCASTERS: dict[str, tuple[str, Upcaster]] = {}


def upcast(tag: str, payload: dict[str, Any], table: dict[str, tuple[str, Upcaster]] | None = None) -> dict[str, Any]:
    """Follow the chain of upcasters from ``tag``; returns ``payload`` itself when there is nothing to do."""
    steps = UPCASTERS if table is None else table
    current, out = tag, payload
    seen: set[str] = set()
    while current in steps:
        if current in seen:
            raise ValueError(f"upcaster cycle at {current}")
        seen.add(current)
        current, fn = steps[current]
        out = fn(dict(out))
        out["type"] = current
    return out
