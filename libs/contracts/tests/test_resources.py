import pytest

from allot_contracts.quantity import QuantityError
from allot_contracts.resources import (
    add,
    equals,
    exceeded_dimensions,
    format_resource_list,
    is_zero,
    less_than_or_equal,
    mask,
    max_of,
    parse_resource_list,
    remove_zeros,
    subtract,
    subtract_non_negative,
)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"cpu": 1000}, {"cpu": 2000}, True),
        ({"cpu": 3000}, {"cpu": 2000}, False),
        ({"cpu": 3000, "memory": 1}, {"memory": 5}, True),  # cpu only in a: not checked
        ({"cpu": 3000}, {}, True),  # empty limit constrains nothing
        ({}, {"cpu": 0}, True),
        ({"gpu": 2, "cpu": 1}, {"gpu": 1, "cpu": 5}, False),
    ],
    ids=["fits", "exceeds", "key-only-in-a-unchecked", "empty-limit", "empty-request", "one-of-two-exceeds"],
)
def test_less_than_or_equal(a, b, expected):
    assert less_than_or_equal(a, b) is expected


def test_exceeded_dimensions_lists_only_shared_keys():
    assert exceeded_dimensions({"cpu": 3, "memory": 9, "x": 100}, {"memory": 5, "cpu": 1}) == [
        "cpu",
        "memory",
    ]


@pytest.mark.parametrize(
    ("fn", "a", "b", "expected"),
    [
        (add, {"cpu": 1}, {"cpu": 2, "memory": 3}, {"cpu": 3, "memory": 3}),
        (subtract, {"cpu": 1}, {"cpu": 2, "memory": 3}, {"cpu": -1, "memory": -3}),
        (subtract_non_negative, {"cpu": 1, "memory": 5}, {"cpu": 2, "memory": 3}, {"cpu": 0, "memory": 2}),
        (max_of, {"cpu": 1, "memory": 9}, {"cpu": 2}, {"cpu": 2, "memory": 9}),
    ],
    ids=["add", "subtract-negative", "subtract-clamped", "max"],
)
def test_binary_ops(fn, a, b, expected):
    result = fn(a, b)
    assert result == expected
    assert list(result) == sorted(result)


def test_mask_zero_equals():
    assert mask({"cpu": 1, "memory": 2}, ["memory"]) == {"memory": 2}
    assert remove_zeros({"cpu": 0, "memory": 2}) == {"memory": 2}
    assert is_zero({}) and is_zero({"cpu": 0}) and not is_zero({"cpu": 1})
    assert equals({"cpu": 1}, {"cpu": 1}) and not equals({"cpu": 1}, {"cpu": 1, "memory": 0})


def test_parse_and_format_round_trip():
    rl = parse_resource_list({"memory": "8Gi", "cpu": "500m", "nvidia.com/gpu": 2})
    assert rl == {"cpu": 500, "memory": 8 * 2**30, "nvidia.com/gpu": 2}
    assert format_resource_list(rl) == {"cpu": "500m", "memory": "8Gi", "nvidia.com/gpu": "2"}


@pytest.mark.parametrize("raw", [{"cpu": "lots"}, {"cpu": True}, {"cpu": None}], ids=["text", "bool", "none"])
def test_parse_rejects(raw):
    with pytest.raises(QuantityError):
        parse_resource_list(raw)
