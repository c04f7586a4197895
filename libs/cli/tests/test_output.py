"""Label selector parsing and the kinds table of :mod:`allot_cli.output`; listing pods imports no scheduling engine
even when it runs (human units: libs/views/tests/test_units.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from allot_cli.output import KINDS, kind_named, parse_selector


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a!=b", {}, True),  # as in Kubernetes: a missing key is not equal
        ("a in (b, c),d", {"a": "c", "d": ""}, True),
        ("a notin (b)", {"a": "b"}, False),
        ("!a", {"a": "x"}, False),
        ("example.com/team=ml", {"example.com/team": "ml"}, True),
        ("a=", {"a": ""}, True),
        ("", {"x": "y"}, True),
    ],
)
def test_selectors(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(selector).matches(labels) is matches


def test_kinds_have_unique_words_and_rows_columns() -> None:
    words = [w for kind in KINDS for w in dict.fromkeys(kind.words)]
    assert len(words) == len(set(words))
    assert all("name" in (*kind.columns, *kind.wide) for kind in KINDS)
    assert kind_named("pmj").plural == "migrations" and kind_named("eq").plural == "quotas"


def test_listing_pods_runs_without_a_scheduling_engine() -> None:
    code = (
        "import asyncio, sys\n"
        "from allot_cli.output import kind_named\n"
        "from allot_eventstore.memory import InMemoryEventStore\n"
        "asyncio.run(kind_named('pods').load()(InMemoryEventStore(), 0))\n"
        "asyncio.run(kind_named('nodes').load()(InMemoryEventStore(), 0))\n"
        "print(' '.join(m for m in sys.modules if m.startswith('allot_')))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert "allot_stack.listing" in loaded
    assert not {"allot_placement", "allot_quota", "allot_gang", "allot_reservation"} & loaded
