"""Human units, label selector parsing and the kinds table of :mod:`allot_cli.output`; listing pods imports no
scheduling engine even when it runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from allot_cli.output import KINDS, kind_named, parse_selector
from allot_views.units import human, human_list


@pytest.mark.parametrize(
    ("resource", "quantity", "shown"),
    [
        ("memory", "16Gi", "16Gi"),
        ("memory", "16777216Ki", "16Gi"),
        ("memory", 17179869184, "16Gi"),
        ("memory", "16G", "14.9Gi"),
        ("memory", "1536Mi", "1.5Gi"),
        ("memory", "100", "100"),
        ("koordinator.sh/gpu-memory", "85899345920", "80Gi"),
        ("cpu", "500m", "500m"),
        ("cpu", "4000m", "4"),
        ("cpu", "0.25", "250m"),
        ("nvidia.com/gpu", "2", "2"),
        ("memory", "1844674407370955161", "unlimited"),  # Koordinator's MaxInt64/5 on the built-in quotas
        ("cpu", "1844674407370955161", "unlimited"),
        ("cpu", str((2**63 - 1) // 2000), "unlimited"),  # a profile root's unrestricted key
        ("memory", "4Pi", "4Pi"),  # big, but a real amount
        ("cpu", "n/a", "n/a"),
    ],
)
def test_human_units(resource: str, quantity: object, shown: str) -> None:
    assert human(resource, quantity) == shown


def test_human_lists_skip_pods_and_say_when_empty() -> None:
    assert human_list({"pods": "110", "memory": "128Gi", "cpu": "32"}) == "cpu=32 memory=128Gi"
    assert human_list({}) == "-"


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
