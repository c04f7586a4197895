"""GPUDefrag inside reservation-manager, driven through the simulator: a waiting 2-GPU pod, two nodes each with
half a GPU taken; the round records the plan (one migration) with its FGD fragmentation before and after, and asks
for the PodMigrationJob only when it is not a dry run."""

from __future__ import annotations

import json
from typing import Any

from allot_testing.scenario import Scenario


def config(**args: Any) -> dict[str, Any]:
    profile = {"name": "gpu", "pluginConfig": [{"name": "GPUDefrag", "args": args}]}
    return {"reservation-manager": {"descheduler": {"deschedulingInterval": "60s", "profiles": [profile]}}}


def gpu_node(name: str, gpus: int = 2) -> dict[str, Any]:
    alloc = {
        "cpu": "32",
        "memory": "128Gi",
        "pods": "110",
        "koordinator.sh/gpu-core": str(100 * gpus),
        "koordinator.sh/gpu-memory-ratio": str(100 * gpus),
    }
    labels = {"node.koordinator.sh/gpu-model": "V100"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": alloc},
    }


def half_gpu_pod(name: str, on: str, **annotations: str) -> dict[str, Any]:
    allocated = {
        "gpu": [
            {
                "minor": 0,
                "resources": {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
            }
        ]
    }
    requests = {
        "cpu": "1",
        "memory": "1Gi",
        "koordinator.sh/gpu-core": "50",
        "koordinator.sh/gpu-memory-ratio": "50",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {
                "scheduling.koordinator.sh/device-allocated": json.dumps(allocated),
                **annotations,
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": name,
                    "uid": f"rs-{name}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": on,
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}],
        },
    }


def waiting_pod() -> dict[str, Any]:
    requests = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}]},
    }


def cluster(**args: Any) -> Scenario:
    sc = Scenario(config(**args))
    sc.apply(gpu_node("a"), gpu_node("b"), half_gpu_pod("x", "a"), half_gpu_pod("y", "b"), waiting_pod())
    sc.advance(60)
    return sc


def test_a_dry_run_records_the_plan_and_its_fragmentation_and_asks_for_nothing() -> None:
    sc = cluster()
    [planned] = sc.of_type("descheduler.defrag_planned")[:1]
    assert planned["dry_run"] and not planned["jobs"]
    [plan] = planned["plans"]
    assert plan["pending"] == "ml/train" and len(plan["moves"]) == 1
    assert plan["frag_after"] < plan["frag_before"] == planned["frag_before"]
    assert not sc.of_type("migration.applied")
    sc.assert_replays()


def test_a_round_that_is_not_a_dry_run_asks_for_the_migration() -> None:
    sc = cluster(dryRun=False)
    planned = sc.of_type("descheduler.defrag_planned")[0]
    [plan] = planned["plans"]
    [move] = plan["moves"]
    [job] = [j for j in sc.of_type("migration.applied") if j["job"]["name"] == move["job"]]
    annotations = job["manifest"]["metadata"]["annotations"]
    assert annotations["koordinator.sh/evict-trigger"] == "GPUDefrag"
    assert annotations["descheduler.allot.dev/target"] == move["target"]
    assert planned["jobs"] == [move["job"]]
    sc.assert_replays()


def test_a_gang_whose_policy_allows_it_moves_whole_every_member_with_its_job() -> None:
    gang = {
        "gang.scheduling.koordinator.sh/name": "g",
        "gang.scheduling.koordinator.sh/min-available": "2",
        "descheduler.allot.dev/gang-migration": "Whole",
    }
    sc = Scenario(config(dryRun=False))
    sc.apply(
        gpu_node("a"),
        gpu_node("b"),
        gpu_node("c", gpus=1),
        half_gpu_pod("x", "a", **gang),
        half_gpu_pod("x2", "c", **gang),
        half_gpu_pod("y", "b", **{"descheduler.alpha.kubernetes.io/prevent-eviction": "true"}),
        waiting_pod(),
    )
    sc.advance(60)
    planned = sc.of_type("descheduler.defrag_planned")[0]
    [plan] = planned["plans"]
    assert sorted((m["pod"], m["gang"]) for m in plan["moves"]) == [("ml/x", "ml/g"), ("ml/x2", "ml/g")]
    applied = {j["job"]["name"] for j in sc.of_type("migration.applied")}
    assert {m["job"] for m in plan["moves"]} <= applied and len(planned["jobs"]) == 2


def test_only_a_pod_the_scheduler_refused_is_made_room_for_not_one_merely_submitted() -> None:
    """``ml/train`` is refused (``pod.unschedulable``); ``ml/gang-0`` waits for the rest of its gang, so the scheduler
    never tried it: the round plans for the first only, and names no other waiting pod."""
    gang = {"gang.scheduling.koordinator.sh/name": "g", "gang.scheduling.koordinator.sh/min-available": "2"}
    member = waiting_pod()
    member["metadata"] |= {"name": "gang-0", "annotations": gang}
    sc = Scenario(config())
    sc.apply(
        gpu_node("a"), gpu_node("b"), half_gpu_pod("x", "a"), half_gpu_pod("y", "b"), member, waiting_pod()
    )
    sc.advance(60)
    refused = {e["pod"]["name"] for e in sc.of_type("pod.unschedulable")}
    assert "train" in refused and "gang-0" not in refused
    assert not sc.of_type("gang.group_unschedulable")
    planned = sc.of_type("descheduler.defrag_planned")[0]
    assert [p["pending"] for p in planned["plans"]] == ["ml/train"]
    assert "ml/gang-0" not in json.dumps(planned)
    sc.assert_replays()


def test_a_gang_the_scheduler_refused_is_made_room_for_member_by_member() -> None:
    """``gang.group_unschedulable`` refuses both members: ``ml/m0`` (2 GPUs) gets the plan, ``ml/m1`` (1 GPU) fits
    as things are."""
    gang = {"gang.scheduling.koordinator.sh/name": "g", "gang.scheduling.koordinator.sh/min-available": "2"}
    members = []
    for name, gpus in (("m0", "2"), ("m1", "1")):
        pod = waiting_pod()
        pod["metadata"] |= {"name": name, "annotations": gang}
        pod["spec"]["containers"][0]["resources"] = {
            "requests": {"nvidia.com/gpu": gpus},
            "limits": {"nvidia.com/gpu": gpus},
        }
        members.append(pod)
    sc = Scenario(config())
    sc.apply(gpu_node("a"), gpu_node("b"), half_gpu_pod("x", "a"), half_gpu_pod("y", "b"), *members)
    sc.advance(60)
    assert sc.of_type("gang.group_unschedulable") and not sc.of_type("pod.unschedulable")
    planned = sc.of_type("descheduler.defrag_planned")[0]
    assert [p["pending"] for p in planned["plans"]] == ["ml/m0"]
    assert [(w["pod"], w["code"]) for w in planned["waiting"]] == [("ml/m1", "Fits")]
