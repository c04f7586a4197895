"""Label selector parsing and the kinds table of :mod:`allot_views.kinds` (human units: test_units.py)."""

from __future__ import annotations

import pytest

from allot_views.kinds import KINDS, kind_named, parse_selector


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
