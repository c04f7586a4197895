"""Quantities for people (:mod:`allot_views.units`): binary units for bytes, milli-units for cpu, ``unlimited`` for
Koordinator's no-limit values, anything that is not a quantity shown as it is."""

from __future__ import annotations

import pytest

from allot_views.units import age, human, human_list, percent


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


def test_ages_count_seconds_minutes_hours_then_days_unless_told_not_to() -> None:
    second = 1_000_000
    assert [age(s * second) for s in (-5, 119, 120, 7199, 7200, 172799, 172800)] == [
        "0s",
        "119s",
        "2m",
        "119m",
        "2h",
        "47h",
        "2d",
    ]
    assert age(172800 * second, days=False) == "48h"


def test_a_share_of_a_capacity_is_a_whole_percentage_or_nothing() -> None:
    assert percent("12", "16", "cpu") == "75%"
    assert percent("500m", "1", "cpu") == "50%"
    assert percent("96Gi", "128Gi", "memory") == "75%"
    assert percent("1", "0", "cpu") is None  # no capacity
    assert percent("lots", "16", "cpu") is None  # not a quantity
