"""What a service's state still holds, for tests of what it keeps: every object reachable from it, and the dicts and
lists of a decoded manifest (none of which a slim state may reach)."""

from __future__ import annotations

import gc
import types
from typing import Any

__all__ = ["containers_of", "reachable"]


def reachable(root: object) -> set[int]:
    """The ids of every object reachable from ``root``'s data (classes, modules and functions not followed)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(obj))
        stack.extend(gc.get_referents(obj))
    return seen


def containers_of(value: Any) -> list[object]:
    """Every dict and list within a decoded manifest, itself included."""
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in containers_of(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in containers_of(v))]
    return []
