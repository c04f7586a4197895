"""The placed pods know at once whether any of them has a lower priority than a job's."""

from __future__ import annotations

from allot_contracts.objects.pod import parse_pod
from allot_testing.builders import a_pod
from device_allocator.preemption import PlacedPods


def pod_with_priority(name: str, priority: int):
    body = a_pod(name, cpu="1")
    body["spec"]["priority"] = priority
    pod = parse_pod(body, [], [])
    assert pod is not None
    return pod


def test_the_lowest_priority_follows_placements_moves_and_releases() -> None:
    pods = {p.key: p for p in (pod_with_priority("low", 10), pod_with_priority("high", 100))}
    placed = PlacedPods(pods)
    assert not placed.any_below(1_000)
    placed["default/high"] = "n1"
    assert placed.any_below(101) and not placed.any_below(100)
    placed["default/low"] = "n1"
    placed["default/low"] = "n2"  # moved: still counted once
    assert placed.any_below(11) and not placed.any_below(10)
    assert placed.pop("default/low") == "n2"
    assert not placed.any_below(100) and placed.any_below(101)
    assert placed.pop("default/low", None) is None
    del placed["default/high"]
    assert not placed.any_below(10**9) and dict(placed) == {}
