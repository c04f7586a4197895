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


@pytest.mark.parametrize(
    ("selector", "values"),
    [
        ("a in (b,,c)", {"b", "", "c"}),
        ("a in (,b)", {"", "b"}),
        ("a notin (b, ,c)", {"b", "", "c"}),
        ("a in ()", {""}),
        ("a notin ()", {""}),
    ],
    ids=["between", "leading", "blank-between", "empty", "empty-notin"],
)
def test_an_empty_value_in_a_set_is_the_empty_label_value_as_in_kubernetes(
    selector: str, values: set[str]
) -> None:
    """Kubernetes' selector parser (apimachinery pkg/labels/selector.go, ``Parse``) takes an empty value in a set:
    its grammar note "(3) The empty string is a valid VALUE", its example "x in (foo,,baz),y,z notin ()", and the
    value-list parser reading "(,", ",," and ",)" as the value "", and "()" as that one value. So ``-l 'a in (b,,c)'`` is taken, not refused,
    and matches a label whose value is empty (an empty label value is valid: ``a=``)."""
    (requirement,) = parse_selector(selector).requirements
    assert requirement.values == frozenset(values)
    inside = requirement.op == "in"
    for value in ("", "b", "d"):
        assert parse_selector(selector).matches({"a": value}) is ((value in values) is inside)


def test_kinds_have_unique_words_and_rows_columns() -> None:
    words = [w for kind in KINDS for w in dict.fromkeys(kind.words)]
    assert len(words) == len(set(words))
    assert all("name" in (*kind.columns, *kind.wide) for kind in KINDS)
    assert kind_named("pmj").plural == "migrations" and kind_named("eq").plural == "quotas"
