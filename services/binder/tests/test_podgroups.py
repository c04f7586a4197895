"""PodGroup status as the coscheduling controller sets it, and the Node annotations koord-manager keeps, rendered
from recorded events (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.events import (
    Event,
    GangMemberWaiting,
    NodeAllocatableUpdated,
    ObjectRef,
    PodBound,
    PodDeleted,
    PodGroupApplied,
    PodGroupDeleted,
    PodPhaseObserved,
    PodSubmitted,
)
from binder.notices import Renderer, node_annotations
from binder.podgroups import phase

PHASES = [
    # previous, members, min, scheduled, running, succeeded, failed -> phase
    ("", 0, 2, 0, 0, 0, 0, "Pending"),
    ("", 1, 2, 0, 0, 0, 0, "Pending"),
    ("Pending", 2, 2, 0, 0, 0, 0, "PreScheduling"),
    ("PreScheduling", 2, 2, 1, 0, 0, 0, "Scheduling"),
    ("Scheduling", 2, 2, 2, 0, 0, 0, "Scheduled"),
    ("Scheduling", 2, 2, 2, 1, 0, 0, "Scheduled"),  # one of two running: not yet
    ("Scheduled", 2, 2, 2, 2, 0, 0, "Running"),
    ("Scheduling", 2, 2, 2, 2, 0, 0, "Running"),  # Scheduled and Running in one pass
    ("Scheduled", 2, 2, 2, 1, 1, 0, "Running"),  # running + succeeded count together
    ("Scheduling", 3, 2, 1, 1, 1, 0, "Scheduling"),  # Running needs Scheduled first
    ("Running", 2, 2, 1, 1, 0, 0, "Running"),  # a running member deleted: Running stays
    ("Running", 0, 2, 0, 0, 0, 0, "Pending"),  # every pod gone
    ("Running", 2, 2, 2, 1, 0, 1, "Failed"),
    ("Running", 3, 2, 3, 0, 1, 1, "Failed"),
    ("Running", 3, 3, 3, 1, 0, 1, "Running"),  # failed + running + succeeded below minMember
    ("Scheduling", 2, 2, 1, 0, 0, 1, "Scheduling"),  # a failure alone is not Failed
    ("Running", 3, 2, 3, 0, 2, 1, "Finished"),  # Finished wins over Failed
    ("Running", 2, 2, 2, 0, 2, 0, "Finished"),
    ("Finished", 0, 2, 0, 0, 0, 0, "Finished"),  # final
    ("Failed", 2, 2, 2, 2, 0, 0, "Failed"),  # final
    ("", 1, 0, 0, 0, 0, 0, "Pending"),  # no minMember known yet
]


@pytest.mark.parametrize(
    ("previous", "members", "minimum", "scheduled", "running", "succeeded", "failed", "expected"), PHASES
)
def test_phase(
    previous: str,
    members: int,
    minimum: int,
    scheduled: int,
    running: int,
    succeeded: int,
    failed: int,
    expected: str,
) -> None:
    got = phase(
        previous,
        members=members,
        min_member=minimum,
        scheduled=scheduled,
        running=running,
        succeeded=succeeded,
        failed=failed,
    )
    assert got == expected


GROUP = ObjectRef(namespace="ml", name="llm")


def ref(name: str) -> ObjectRef:
    return ObjectRef(namespace="ml", name=name)


def manifest(min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"minMember": min_member},
    }


def gang_of(*names: str, min_member: int = 2) -> list[Event]:
    events: list[Event] = [PodGroupApplied(group=GROUP, manifest=manifest(min_member))]
    for i, name in enumerate(names):
        events += [
            PodSubmitted(pod=ref(name), uid=f"uid-{name}", manifest={}),
            GangMemberWaiting(
                pod=ref(name),
                gang="ml/llm",
                group="ml/llm",
                present=i + 1,
                min_available=min_member,
                reason="gang-incomplete",
            ),
        ]
    events += [
        PodBound(pod=ref(name), uid=f"uid-{name}", attempt=1, node="n1", mode="kubernetes") for name in names
    ]
    return events


def observed(name: str, pod_phase: str, uid: str = "") -> PodPhaseObserved:
    return PodPhaseObserved(pod=ref(name), uid=uid or f"uid-{name}", phase=pod_phase)


def fold(renderer: Renderer, events: list[Event]) -> list[dict[str, Any] | None]:
    """The PodGroup status after each event that touched it."""
    out = []
    for event in events:
        if "ml/llm" in renderer.render(event).pod_groups:
            out.append(renderer.group_status("ml/llm"))
    return out


def test_a_group_runs_and_finishes_and_a_finished_member_stays_counted_after_its_pod_deleted() -> None:
    renderer = Renderer()
    statuses = fold(renderer, gang_of("a", "b"))
    assert [s["phase"] for s in statuses if s] == [
        "Pending",
        "Pending",
        "PreScheduling",
        "Scheduling",
        "Scheduled",
    ]
    statuses = fold(
        renderer,
        [
            observed("a", "Running"),
            observed("a", "Running"),  # recorded once; nothing changes
            observed("b", "Running"),
            observed("a", "Succeeded"),
            PodDeleted(pod=ref("a"), uid="uid-a"),  # kube-sync: finished, resources free
            observed("b", "Succeeded"),
            PodDeleted(pod=ref("b"), uid="uid-b"),
        ],
    )
    assert statuses == [
        {"phase": "Scheduled", "scheduled": 2, "running": 1, "succeeded": 0, "failed": 0},
        {"phase": "Running", "scheduled": 2, "running": 2, "succeeded": 0, "failed": 0},
        {"phase": "Running", "scheduled": 2, "running": 1, "succeeded": 1, "failed": 0},
        {"phase": "Running", "scheduled": 2, "running": 1, "succeeded": 1, "failed": 0},
        {"phase": "Finished", "scheduled": 2, "running": 0, "succeeded": 2, "failed": 0},
        {"phase": "Finished", "scheduled": 2, "running": 0, "succeeded": 2, "failed": 0},
    ]


def test_a_failed_member_fails_a_full_group_for_good() -> None:
    renderer = Renderer()
    fold(renderer, gang_of("a", "b"))
    statuses = fold(
        renderer,
        [
            observed("a", "Running"),
            observed("b", "Running"),
            observed("b", "Failed"),
            PodDeleted(pod=ref("b"), uid="uid-b"),
            # The job controller's replacement runs and the other member succeeds: Failed is final.
            observed("a", "Succeeded"),
        ],
    )
    assert [s["phase"] for s in statuses if s] == ["Scheduled", "Running", "Failed", "Failed", "Failed"]
    assert statuses[-1] == {"phase": "Failed", "scheduled": 2, "running": 0, "succeeded": 1, "failed": 1}


def test_a_running_member_deleted_leaves_the_group_and_a_new_life_starts_over() -> None:
    renderer = Renderer()
    fold(renderer, gang_of("a", "b"))
    statuses = fold(
        renderer,
        [
            observed("a", "Running"),
            observed("b", "Running"),
            PodDeleted(pod=ref("b"), uid="uid-b"),  # deleted while running: no longer counted
            observed("b", "Failed"),  # about the life that ended: ignored
        ],
    )
    assert statuses[-1] == {"phase": "Running", "scheduled": 1, "running": 1, "succeeded": 0, "failed": 0}

    # A finished member whose name gets a new life: the earlier life no longer counts.
    fold(renderer, [observed("a", "Succeeded"), PodDeleted(pod=ref("a"), uid="uid-a")])
    assert renderer.group_status("ml/llm") == {
        "phase": "Running",
        "scheduled": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
    }
    statuses = fold(renderer, [PodSubmitted(pod=ref("a"), uid="uid-a2", manifest={})])
    assert statuses == [{"phase": "Pending", "scheduled": 0, "running": 0, "succeeded": 0, "failed": 0}]


def test_the_same_log_gives_the_same_phases_and_a_deleted_group_starts_over() -> None:
    events = [
        *gang_of("a", "b"),
        observed("a", "Running"),
        observed("b", "Running"),
        PodDeleted(pod=ref("b"), uid="uid-b"),
    ]
    first, second = Renderer(), Renderer()
    assert fold(first, events) == fold(second, events)
    assert first.group_status("ml/llm") == {
        "phase": "Running",
        "scheduled": 1,
        "running": 1,
        "succeeded": 0,
        "failed": 0,
    }
    first.render(PodGroupDeleted(group=GROUP))
    assert first.group_status("ml/llm") is None
    first.render(PodGroupApplied(group=GROUP, manifest=manifest(2)))
    assert first.group_status("ml/llm") == {
        "phase": "Pending",
        "scheduled": 0,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
    }


def test_phases_of_pods_outside_any_group_render_nothing() -> None:
    renderer = Renderer()
    renderer.render(PodSubmitted(pod=ref("plain"), uid="u", manifest={}))
    assert renderer.render(observed("plain", "Running", uid="u")).pod_groups == []


def allocatable_updated(**kw: Any) -> NodeAllocatableUpdated:
    return NodeAllocatableUpdated(name="n1", allocatable=kw.pop("allocatable", {}), **kw)


def test_node_annotations_follow_the_recorded_decision() -> None:
    # Normalization only: the ratio; nothing amplified, so no raw allocatable.
    assert node_annotations(allocatable_updated(cpu_normalization_ratio="1.20")) == {
        "node.koordinator.sh/cpu-normalization-ratio": "1.20"
    }
    # Disabled: "1.00", as koord-manager writes it then.
    assert node_annotations(allocatable_updated()) == {"node.koordinator.sh/cpu-normalization-ratio": "1.00"}
    # cpu amplified: the un-amplified cpu and memory the calculation started from.
    amplified = allocatable_updated(
        allocatable={"cpu": "60"},
        cpu_normalization_ratio="1.20",
        amplification={"cpu": "1.50"},
        inputs={"capacity": {"cpu": 48000, "memory": 2**36}, "allocatable": {"cpu": 40000, "memory": 2**35}},
    )
    annotations = node_annotations(amplified)
    assert annotations["node.koordinator.sh/cpu-normalization-ratio"] == "1.20"
    assert annotations["node.koordinator.sh/raw-allocatable"] == '{"cpu":"40","memory":"32Gi"}'
    assert json.loads(annotations["node.koordinator.sh/raw-allocatable"]) == {"cpu": "40", "memory": "32Gi"}
    # A ratio at or below 1 amplifies nothing; a resource Koordinator does not amplify neither.
    for ratios in ({"cpu": "1"}, {"cpu": "0.80"}, {"pods": "2"}, {"cpu": "x"}):
        event = allocatable_updated(amplification=ratios, inputs={"allocatable": {"cpu": 1000, "memory": 1}})
        assert "node.koordinator.sh/raw-allocatable" not in node_annotations(event), ratios


def test_annotations_changing_mark_the_node_and_the_same_decision_does_not() -> None:
    renderer = Renderer()
    event = allocatable_updated(cpu_normalization_ratio="1.20")
    assert renderer.render(event).nodes == ["n1"]
    assert renderer.render(event).nodes == []
    assert renderer.render(allocatable_updated(cpu_normalization_ratio="1.30")).nodes == ["n1"]
    assert renderer.node_annotations("n1") == {"node.koordinator.sh/cpu-normalization-ratio": "1.30"}
