"""Inputs at awkward moments or in awkward shapes: a pod deleted and created again under the same name while a
decision about its first life is on its way, a gang member deleted while its group is being placed, a PodGroup named
like a pod, a running pod whose allocation annotations cannot be read."""

from __future__ import annotations

from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario

GANG = "gang.scheduling.koordinator.sh/"


def about(event_type: str, name: str):
    return lambda record: record.type == event_type and record.payload_dict()["pod"]["name"] == name


def delete(name: str, namespace: str = "default") -> dict:
    return {
        "apiVersion": "allot.dev/v1",
        "kind": "Delete",
        "spec": {"kind": "Pod", "namespace": namespace, "name": name},
    }


def test_a_decision_about_a_pods_earlier_life_never_applies_to_its_new_life():
    s = Scenario()
    s.apply(a_node("n1", gpus=4), a_gpu_device("n1", gpus=4))
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "1"}))
    # x (first life) is admitted; before the placement lands, x is deleted, y takes the quota, x comes back
    s.interleave(
        about("quota.admitted", "x"),
        delete("x", "team"),
        a_pod("y", namespace="team", gpus=1, uid="y1"),
        a_pod("x", namespace="team", gpus=1, uid="x2"),
    )
    s.apply(a_pod("x", namespace="team", gpus=1, uid="x1"))
    assert s.phase("team/y") == "Bound"
    assert s.phase("team/x") == "Waiting", (
        "the new x must wait for quota: the old life's admission is not its own"
    )
    bound = [e for e in s.of_type("pod.bound") if e["pod"]["name"] == "x"]
    assert bound == [], bound
    assert s.sim.host("device-allocator").processor.placed == {"team/y": "n1"}
    assert {e["uid"] for e in s.of_type("pod.placed")} == {"y1"}
    s.assert_replays()


def test_a_placement_of_a_deleted_pod_does_not_bind_the_pod_that_replaced_it():
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
    gang = {f"{GANG}name": "job", f"{GANG}min-available": "3"}
    s.interleave(about("pod.placed", "x"), delete("x"), a_pod("x", gpus=1, uid="x2", annotations=gang))
    s.apply(a_pod("x", gpus=1, uid="x1"))
    s.apply(a_pod("y", gpus=1, annotations=gang))  # 2 of min-available 3: nobody may start
    assert s.phase("default/x") != "Bound" and s.phase("default/y") != "Bound"
    assert s.sim.host("device-allocator").processor.placed == {}
    assert s.sim.host("binder").processor.bound == {}
    s.assert_replays()


def test_a_gang_member_deleted_while_its_group_is_placed_does_not_strand_the_others():
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
    gang = {f"{GANG}name": "job", f"{GANG}min-available": "3", f"{GANG}mode": "NonStrict"}
    s.apply(a_pod("a", gpus=1, annotations=gang), a_pod("b", gpus=1, annotations=gang))
    s.interleave("reservation.group_resolved", delete("c"))
    s.apply(a_pod("c", gpus=1, annotations=gang))
    s.apply(a_pod("d", gpus=1, annotations=gang))
    # a and b were placed by the first attempt, d by the second; all three start together
    assert {key: s.phase(key) for key in ("default/a", "default/b", "default/d")} == dict.fromkeys(
        ("default/a", "default/b", "default/d"), "Bound"
    )
    assert s.phase("default/c") == "Absent"
    s.assert_replays()


def test_a_refused_pod_group_is_its_own_event_and_releases_no_pod_of_the_same_name():
    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_quota("team", namespace="team", max={"cpu": "10", "memory": "100Gi", "nvidia.com/gpu": "2"}))
    s.apply(
        a_pod(
            "job", namespace="team", gpus=1, annotations={f"{GANG}name": "job", f"{GANG}min-available": "1"}
        )
    )
    assert s.phase("team/job") == "Bound"
    s.apply(
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": "team"},
            "spec": {"minMember": 1},
        }
    )
    refused = s.of_type("podgroup.rejected")
    assert len(refused) == 1 and "already declared by pod team/job" in refused[0]["message"]
    assert s.of_type("pod.rejected") == [] and s.of_type("quota.released") == []
    assert s.phase("team/job") == "Bound"
    s.apply(a_pod("other", namespace="team", gpus=1), a_pod("third", namespace="team", gpus=1))
    assert s.phase("team/other") == "Bound"
    assert s.phase("team/third") == "Waiting", "the quota's 2 GPUs are used by job and other"
    s.assert_replays()


def test_a_running_pod_with_unreadable_allocation_annotations_still_gives_its_resources_back():
    s = Scenario()
    s.apply(a_node("n1", cpu="4", gpus=1), a_gpu_device("n1", gpus=1))
    old = a_pod("old", cpu="4")
    old["spec"]["nodeName"] = "n1"
    old["metadata"]["annotations"] = {"scheduling.koordinator.sh/resource-status": "{not json"}
    s.apply(old)
    s.apply(a_pod("waiting", cpu="4"))
    assert s.phase("default/waiting") == "Unschedulable", "old holds the node's 4 CPUs"
    s.delete("Pod", "old")
    assert s.phase("default/waiting") == "Bound"
    s.assert_replays()


def test_pods_held_back_for_a_gang_go_on_when_the_gang_is_deleted():
    s = Scenario({"device-allocator": {"queue": {"maxBypasses": 1}}})
    s.apply(a_node("n1", gpus=4), a_gpu_device("n1", gpus=4))
    gang = {f"{GANG}name": "big", f"{GANG}min-available": "2"}
    s.apply(a_pod("big-0", gpus=4, annotations=gang), a_pod("big-1", gpus=4, annotations=gang))
    s.apply(a_pod("p1", gpus=1))
    s.apply(a_pod("p2", gpus=1))
    assert "HeldForGang" in s.view().pods["default/p2"].codes
    s.apply(delete("big-0"), delete("big-1"))
    assert s.phase("default/p2") == "Bound"
    s.assert_replays()


def test_a_gang_member_that_can_never_be_placed_is_rejected_instead_of_failing_its_gang_for_ever():
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
    gang = {f"{GANG}name": "job", f"{GANG}min-available": "2"}
    s.apply(a_pod("w-0", gpus=1, annotations=gang))
    s.apply_unchecked(
        a_pod(
            "w-1",
            annotations=gang,
            extra={"koordinator.sh/gpu-core": "150", "koordinator.sh/gpu-memory-ratio": "150"},
        )
    )
    s.advance(3600)
    assert s.phase("default/w-1") == "Rejected"
    assert "InvalidDeviceRequest" in s.view().pods["default/w-1"].codes
    assert s.of_type("gang.group_ready") == [], "no attempt is made with a member that can never be placed"
    assert s.phase("default/w-0") == "Waiting"
    s.assert_replays()


def test_a_gang_member_already_running_counts_towards_its_gangs_minimum():
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
    gang = {f"{GANG}name": "job", f"{GANG}min-available": "2"}
    running = a_pod("w-0", gpus=1, annotations=gang)
    running["spec"]["nodeName"] = "n1"
    s.apply(running)  # recorded from the cluster: already bound
    s.apply(a_pod("w-1", gpus=1, annotations=gang))
    assert s.phase("default/w-1") == "Bound", "w-0 is running, so the gang has its 2 members"
    s.assert_replays()


def test_a_delete_that_names_no_uid_releases_the_life_it_ended():
    s = Scenario()
    s.apply(a_node("n1", gpus=4), a_gpu_device("n1", gpus=4))
    s.apply(a_pod("x", gpus=1, uid="x1"))
    assert s.phase("default/x") == "Bound"
    s.delete("Pod", "x")  # an `allot apply` Delete document: no uid given
    assert [e["uid"] for e in s.of_type("pod.deleted")] == [""]
    released = s.of_type("pod.released")
    assert [(e["pod"]["name"], e["uid"]) for e in released] == [("x", "x1")]
    assert {e["uid"] for e in s.of_type("quota.released")} <= {"x1"}
    s.apply(a_pod("x", gpus=1, uid="x2"))  # the next life is not confused with the one that ended
    s.delete("Pod", "x")
    assert [e["uid"] for e in s.of_type("pod.released")] == ["x1", "x2"]
    s.assert_replays()
