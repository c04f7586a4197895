"""The public surface of allot_gang is exactly its sorted ``__all__``."""

from __future__ import annotations

import allot_gang


def test_all_is_sorted_and_exported() -> None:
    assert allot_gang.__all__ == sorted(allot_gang.__all__)
    for name in allot_gang.__all__:
        assert hasattr(allot_gang, name), name
    public = {
        n
        for n in dir(allot_gang)
        if not n.startswith("_") and not hasattr(getattr(allot_gang, n), "__path__")
    }
    modules = {n for n in public if type(getattr(allot_gang, n)).__name__ == "module"}
    assert public - modules == set(allot_gang.__all__)
