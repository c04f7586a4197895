"""The runtime calculator in isolation: Hamilton apportionment, min scaling, redistribution (one dimension)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allot_quota.runtime import Share, hamilton, redistribute, scale_mins


@pytest.mark.parametrize(
    ("amount", "weights", "expected"),
    [
        pytest.param(10, [("a", 1), ("b", 1)], {"a": 5, "b": 5}, id="even-split"),
        pytest.param(
            3,
            [(f"q{i:02d}", 1) for i in range(10)],
            {**{f"q{i:02d}": 0 for i in range(10)}, "q00": 1, "q01": 1, "q02": 1},
            id="3-gpus-over-10-equal-siblings-go-to-first-names",
        ),
        pytest.param(
            2,
            [("a", 1), ("b", 1), ("c", 1)],
            {"a": 1, "b": 1, "c": 0},
            id="2-millicores-over-3-never-over-assigns",
        ),
        pytest.param(7, [("b", 2), ("a", 1)], {"a": 2, "b": 5}, id="largest-remainder-wins-over-name"),
        pytest.param(5, [("a", 0), ("b", 3)], {"a": 0, "b": 5}, id="zero-weight-gets-nothing"),
        pytest.param(5, [("a", 0), ("b", 0)], {"a": 0, "b": 0}, id="all-zero-weights-leave-surplus"),
        pytest.param(0, [("a", 1)], {"a": 0}, id="nothing-to-share"),
        pytest.param(
            10**18 + 1,
            [("a", 2**62), ("b", 2**62)],
            {"a": 5 * 10**17 + 1, "b": 5 * 10**17},
            id="huge-numbers-are-exact",
        ),
    ],
)
def test_hamilton(amount, weights, expected):
    got = hamilton(amount, weights)
    assert got == expected
    if any(w > 0 for _, w in weights) and amount > 0:
        assert sum(got.values()) == amount  # conserves the total exactly


@pytest.mark.parametrize(
    ("total", "mins", "expected"),
    [
        pytest.param(10, [("a", 4), ("b", 4)], None, id="mins-fit-keep-originals"),
        pytest.param(8, [("a", 4), ("b", 4)], None, id="exactly-equal-keeps-originals"),
        pytest.param(6, [("a", 4), ("b", 8)], {"a": 2, "b": 4}, id="scaled-proportionally"),
        pytest.param(
            5,
            [("a", 1), ("b", 1), ("c", 1), ("d", 3)],
            {"a": 0, "b": 0, "c": 0, "d": 2},
            id="scaled-rounds-down",
        ),
        pytest.param(0, [("a", 4)], {"a": 0}, id="no-capacity-scales-to-zero"),
    ],
)
def test_scale_mins(total, mins, expected):
    assert scale_mins(total, mins) == expected


def s(name, request, floor=0, weight=1, lent=True):
    return Share(name, request, floor, weight, lent)


@pytest.mark.parametrize(
    ("total", "shares", "expected"),
    [
        pytest.param(10, [s("a", 3, 4), s("b", 2, 4)], {"a": 3, "b": 2}, id="under-min-gets-request"),
        pytest.param(10, [s("a", 8, 4), s("b", 0, 4)], {"a": 8, "b": 0}, id="borrows-idle-min-of-sibling"),
        pytest.param(
            10,
            [s("a", 8, 4), s("b", 0, 4, lent=False)],
            {"a": 6, "b": 4},
            id="allow-lent-false-keeps-full-min-when-idle",
        ),
        pytest.param(10, [s("a", 10, 4), s("b", 10, 4)], {"a": 5, "b": 5}, id="both-borrow-equal-weights"),
        pytest.param(
            12,
            [s("a", 20, 2, weight=1), s("b", 20, 2, weight=3)],
            {"a": 4, "b": 8},
            id="surplus-by-shared-weight",
        ),
        pytest.param(
            12,
            [s("a", 3, 2, weight=1), s("b", 20, 2, weight=1)],
            {"a": 3, "b": 9},
            id="saturated-borrower-returns-excess-to-others",
        ),
        pytest.param(
            10,
            [s("a", 9, 2, weight=0), s("b", 9, 2, weight=1)],
            {"a": 2, "b": 8},
            id="zero-weight-never-borrows",
        ),
        pytest.param(
            5,
            [s("a", 9, 4), s("b", 9, 4)],
            {"a": 4, "b": 4},
            id="mins-over-total-without-scaling-still-give-min",
        ),
        pytest.param(
            3,
            [s(f"q{i}", 5, 0) for i in range(4)],
            {"q0": 1, "q1": 1, "q2": 1, "q3": 0},
            id="remainder-ties-by-name",
        ),
    ],
)
def test_redistribute(total, shares, expected):
    assert redistribute(total, shares) == expected


shares_strategy = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 30), st.integers(0, 5), st.booleans()),
    min_size=1,
    max_size=8,
)


@settings(derandomize=True, max_examples=300)
@given(total=st.integers(0, 200), raw=shares_strategy)
def test_redistribute_invariants(total, raw):
    shares = [Share(f"q{i}", req, floor, w, lent) for i, (req, floor, w, lent) in enumerate(raw)]
    rt = redistribute(total, shares)
    for s_ in shares:
        if s_.request <= s_.floor:
            assert rt[s_.name] == (s_.request if s_.allow_lent else s_.floor)
        else:
            assert s_.floor <= rt[s_.name] <= s_.request
    base = sum(s_.request if s_.request <= s_.floor and s_.allow_lent else s_.floor for s_ in shares)
    if base <= total:
        assert sum(rt.values()) <= total
        short = [s_ for s_ in shares if s_.weight > 0 and rt[s_.name] < s_.request]
        if short:
            assert sum(rt.values()) == total  # nothing is left idle while a weighted borrower is short
