"""Reservation preemption (§5.7) through the chained services: a pod that matched a reservation and fits nowhere
evicts lower-priority, preemptible pods on the reservation's node — pods placed inside the reservation as well as
other pods of the node — and each victim is recorded with why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_testing.builders import a_node, a_pod
from allot_testing.scenario import Scenario

IGNORED = {"scheduling.koordinator.sh/reservation-ignored": "true"}
PROTECTED = {"scheduling.koordinator.sh/disable-preemptible": "true"}
AFFINITY = {"scheduling.koordinator.sh/reservation-affinity": json.dumps({"name": "slot"})}


def reservation(cpu: str = "2") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "slot"},
        "spec": {
            "template": {
                "metadata": {"namespace": "default"},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "prod"}}}],
            "allocateOnce": False,
        },
    }


def pod(
    name: str,
    cpu: str,
    priority: int,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    never: bool = False,
) -> dict[str, Any]:
    body = a_pod(name, cpu=cpu, labels=labels, annotations=annotations)
    body["spec"]["priority"] = priority
    if never:
        body["spec"]["preemptionPolicy"] = "Never"
    return body


def evicted(s: Scenario) -> list[str]:
    return sorted(e["pod"]["name"] for e in s.of_type("pod.evicted") if e["cause"] == "Preempted")


@pytest.mark.parametrize(
    ("protected_labels", "victims"),
    [
        (PROTECTED, ["batch"]),  # the lowest-priority pod is disable-preemptible: the next one goes
        ({}, ["low"]),  # without the label the lowest-priority pod is the one victim needed
    ],
    ids=["disable-preemptible-spared", "lowest-priority-first"],
)
def test_victims_are_lower_priority_and_preemptible(protected_labels, victims):
    # n1: 6 CPUs, the reservation holds 2; low (2 CPUs) and batch (4, reservation-ignored: it uses the reserved 2)
    # fill it. prod (must use the reservation) needs the reservation's 2 back: evicting either pod gives them.
    s = Scenario().apply(a_node("n1", cpu="6", memory="16Gi"), reservation())
    s.apply(
        pod("low", "2", 10, labels={**protected_labels, "app": "other"}),
        pod("batch", "4", 100, labels=IGNORED),
        pod("prod", "2", 1000, labels={"app": "prod"}, annotations=AFFINITY),
    )
    assert evicted(s) == victims
    event = next(e for e in s.of_type("pod.evicted") if e["pod"]["name"] == victims[0])
    assert event["message"] == "preempted by default/prod (priority 1000) to use its reservation on n1"
    assert event["detail"]["preemptor"] == "default/prod"
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "prod"]
    assert placed and placed[-1]["decision"]["reservation"]["name"] == "slot"
    s.assert_replays()


def test_an_owner_inside_the_reservation_may_be_a_victim():
    s = Scenario().apply(a_node("n1", cpu="4", memory="16Gi"), reservation())
    s.apply(
        pod("owner-low", "2", 10, labels={"app": "prod"}),  # placed inside the reservation
        pod("filler", "2", 10, labels=PROTECTED),
    )
    first = next(p for p in s.of_type("pod.placed") if p["pod"]["name"] == "owner-low")
    assert first["decision"]["reservation"]["name"] == "slot"
    s.apply(pod("prod", "2", 1000, labels={"app": "prod"}, annotations=AFFINITY))
    assert evicted(s) == ["owner-low"]
    placed = [p for p in s.of_type("pod.placed") if p["pod"]["name"] == "prod"]
    assert placed and placed[-1]["node"] == "n1" and placed[-1]["decision"]["reservation"]["name"] == "slot"


@pytest.mark.parametrize(
    ("owner_priority", "never"),
    [(1000, False), (2000, False), (10, True)],
    ids=["equal-priority", "higher-priority", "preemption-policy-never"],
)
def test_no_victim_without_a_lower_priority_pod_or_when_the_pod_never_preempts(owner_priority, never):
    s = Scenario().apply(a_node("n1", cpu="4", memory="16Gi"), reservation())
    s.apply(
        pod("owner", "2", owner_priority, labels={"app": "prod"}),
        pod("filler", "2", owner_priority, labels={"app": "other"}),
        pod("prod", "2", 1000, labels={"app": "prod"}, annotations=AFFINITY, never=never),
    )
    assert evicted(s) == []
    assert s.phase("default/prod") == "Unschedulable"
