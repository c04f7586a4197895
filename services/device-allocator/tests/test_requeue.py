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


def test_a_pod_that_still_does_not_fit_when_its_nodes_devices_arrive_is_tried_again_for_its_real_reason() -> (
    None
):
    """Decided before the node's Device was reported, a pod waits for "Insufficient gpu devices"; once the Device is
    there it still does not fit (no PCIe switch holds two free GPUs), and is tried again so that its reason says so,
    as in the order where the Device came first."""
    from allot_testing.builders import a_gpu_device, a_pod

    pod = a_pod("pair", gpus=2)
    pod["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/device-allocate-hint": '{"gpu": {"requiredTopologyScope": "PCIe"}}'
    }
    device = a_gpu_device("node-0", gpus=2)
    for i, entry in enumerate(device["spec"]["devices"]):
        entry["topology"] = {"socketID": 0, "nodeID": 0, "pcieID": str(i), "busID": f"0000:1{i}:00.0"}

    late = Scenario().apply(a_node("node-0", gpus=2), pod, device)
    early = Scenario().apply(a_node("node-0", gpus=2), device, pod)
    first, last = late.decisions()[0], late.decisions()[-1]
    assert first["codes"] != last["codes"]
    assert (last["outcome"], last["codes"], last["message"]) == (
        early.decisions()[-1]["outcome"],
        early.decisions()[-1]["codes"],
        early.decisions()[-1]["message"],
    )
    requeued = [e.payload_dict()["reason"] for e in late.events if e.type == "pod.requeued"]
    assert requeued == ["capacity added: the reasons it waits for changed"]
    # nothing changes when the Device is reported again: no further attempt
    late.apply(device)
    assert len([e for e in late.events if e.type == "pod.requeued"]) == 1
