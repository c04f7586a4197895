"""The satisfaction predicate per match policy, as a table over counts."""

from __future__ import annotations

import pytest

from allot_gang import is_satisfied

CASES = [
    # policy, min, waiting, running, once, expected
    ("only-waiting", 4, 4, 0, False, True),
    ("only-waiting", 4, 3, 5, False, False),
    ("only-waiting", 4, 3, 0, True, False),
    ("waiting-and-running", 4, 1, 3, False, True),
    ("waiting-and-running", 4, 1, 2, False, False),
    ("waiting-and-running", 4, 0, 4, False, True),
    ("waiting-and-running", 4, 0, 0, True, False),
    ("once-satisfied", 4, 4, 0, False, True),
    ("once-satisfied", 4, 3, 0, False, False),
    ("once-satisfied", 4, 0, 0, True, True),
    ("once-satisfied", 4, 1, 3, False, False),
    ("once-satisfied", 1, 1, 0, False, True),
]


@pytest.mark.parametrize(
    ("policy", "min_available", "waiting", "running", "once", "expected"),
    CASES,
    ids=[f"{c[0]} min={c[1]} waiting={c[2]} running={c[3]} once={c[4]}" for c in CASES],
)
def test_is_satisfied(
    policy: str, min_available: int, waiting: int, running: int, once: bool, expected: bool
) -> None:
    assert (
        is_satisfied(
            policy=policy, min_available=min_available, waiting=waiting, running=running, once_satisfied=once
        )
        is expected
    )
