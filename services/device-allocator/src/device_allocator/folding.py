"""A fold's quick test of whether an event is one it folds, before its ``match``.

A ``match`` statement tries its class patterns one after another, so an event none of them matches pays a failed
test per pattern, and most events a fold sees are not its own. ``folds_any`` answers that question once per event
type (the answer of ``isinstance``, remembered by exact type), so every event after the first of its type costs one
dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["folds_any"]


def folds_any(*classes: type) -> Callable[[object], bool]:
    """``event -> isinstance(event, classes)``, remembered per exact type of ``event``."""
    known: dict[type, bool] = {}

    def test(event: object) -> bool:
        kind = type(event)
        got = known.get(kind)
        if got is None:
            got = known[kind] = isinstance(event, classes)
        return got

    return test
