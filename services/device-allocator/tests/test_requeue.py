"""Queueing hints: an unschedulable pod is tried again when something that could help it happens."""

from __future__ import annotations

from allot_testing.builders import a_node
from allot_testing.scenario import Scenario


def bound_pod(name: str, cpu: str, phase: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "node-0",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": phase},
    }


def pending_pod(name: str, cpu: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]
        },
    }


def test_a_pod_waiting_for_cpu_is_placed_when_a_running_pod_finishes() -> None:
    s = Scenario().apply(a_node("node-0", cpu="4", memory="8Gi", gpus=0))
    s.apply(bound_pod("job-a", "3", "Running"), pending_pod("web", "2"))
    assert s.decisions()[-1]["outcome"] == "Unschedulable"
    s.apply(bound_pod("job-a", "3", "Succeeded"))
    last = s.decisions()[-1]
    assert (last["pod"], last["outcome"], last["node"]) == ("default/web", "Scheduled", "node-0")
    requeued = [e.payload_dict() for e in s.events if e.type == "pod.requeued"]
    assert [r["reason"] for r in requeued] == ["default/job-a finished"]


def test_a_failed_pod_frees_its_room_too_but_a_running_update_does_not_requeue() -> None:
    s = Scenario().apply(a_node("node-0", cpu="4", memory="8Gi", gpus=0))
    s.apply(bound_pod("job-a", "3", "Running"), pending_pod("web", "2"))
    s.apply(bound_pod("job-a", "3", "Running"))
    assert not [e for e in s.events if e.type == "pod.requeued"]
    s.apply(bound_pod("job-a", "3", "Failed"))
    assert s.decisions()[-1]["outcome"] == "Scheduled"
