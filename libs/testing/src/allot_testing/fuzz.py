"""Fuzzing every door: one convention for how long each property runs and what it reports.

A door's fuzz test is a hypothesis property written once and run at two lengths: ``DEFAULT`` in the default test run
(a few seconds per door) and ``SLOW`` in ``scripts/dev test-slow`` (``pytest.mark.slow``: at least 10,000 cases per
door). ``Tally`` counts what the cases did (admitted, refused, answered with which status) so that the slow run can
say how many cases it tried and what came of them; the counts are printed at the end of the session.

Usage::

    @pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
    def test_the_door_never_crashes(examples):
        tally = fuzz.Tally("manifests")

        @fuzz.settings_for(examples)
        @given(documents())
        def check(doc):
            ...
            tally.count("refused" if issues else "admitted")

        check()
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, settings

__all__ = ["DEFAULT", "LENGTHS", "LENGTH_IDS", "SLOW", "Tally", "merge", "report", "settings_for", "tallies"]

DEFAULT: Final = 200  # cases per door in the default run
SLOW: Final = 10_000  # cases per door in the slow run
LENGTHS: Final = (DEFAULT, pytest.param(SLOW, marks=pytest.mark.slow))
LENGTH_IDS: Final = ("short", "long")

_TALLIES: dict[str, Counter[str]] = {}


def settings_for(examples: int) -> Any:
    """Hypothesis settings for a run of ``examples`` cases: no deadline (a loaded CI machine is slow, and a hang is
    caught by the door's own timeouts), no database (runs do not depend on earlier runs), derandomized in the default
    run so that it is the same everywhere."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=examples <= DEFAULT,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


class Tally:
    """What a door did with the cases of one fuzz run, by outcome."""

    def __init__(self, door: str) -> None:
        self.door = door
        self.counts = _TALLIES.setdefault(door, Counter())

    def count(self, outcome: str) -> None:
        self.counts[outcome] += 1


def tallies() -> dict[str, dict[str, int]]:
    """This process's counts, as plain data (a test worker hands them to the process that prints the report)."""
    return {door: dict(counts) for door, counts in _TALLIES.items() if counts}


def merge(counts: dict[str, dict[str, int]]) -> None:
    """Add another process's counts (from :func:`tallies`) to this one's."""
    for door, outcomes in counts.items():
        _TALLIES.setdefault(door, Counter()).update(outcomes)


def report() -> list[str]:
    """One line per door: the number of cases and what came of them (printed at the end of the test session)."""
    return [
        f"fuzz {door}: {sum(counts.values())} cases ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"
        for door, counts in sorted(_TALLIES.items())
        if counts
    ]
