"""The public surface of allot_placement: a sorted ``__all__`` whose names all resolve."""

from __future__ import annotations

import allot_placement


def test_all_is_sorted_and_resolves() -> None:
    assert allot_placement.__all__ == sorted(allot_placement.__all__)
    for name in allot_placement.__all__:
        assert getattr(allot_placement, name) is not None
    assert {"PlacementEngine", "PlacementConfig", "Decision", "FieldIssue", "GroupDecision"} <= set(
        allot_placement.__all__
    )
