"""The descheduler in the running stack (`allot up`: real processes, PostgreSQL and NATS): reservation-manager's
shell records the round timers at wall-clock deadlines, a round asks for a PodMigrationJob, the migration controller
moves the pod, and `allot replay --verify` re-derives every round and job step from the log. A GPUDefrag dry run
records its plan for a GPU pod the scheduler refused, with the fragmentation before and after (~25 s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # the whole stack as processes: ~40 s each

CONFIG = {
    "descheduler": {
        "deschedulingInterval": "1s",
        "profiles": [
            {
                "name": "lnl",
                "pluginConfig": [
                    {
                        "name": "LowNodeLoad",
                        "args": {
                            "lowThresholds": {"cpu": 30, "memory": 30},
                            "highThresholds": {"cpu": 60, "memory": 80},
                            "anomalyCondition": {"consecutiveAbnormalities": 1},
                        },
                    }
                ],
            }
        ],
    }
}


def docs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in ("node-hot", "node-idle"):
        alloc = {"cpu": "16", "memory": "64Gi", "pods": "110"}
        out.append(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": alloc}}
        )
    for i in range(4):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"web-{i}",
                    "namespace": "shop",
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": "web",
                            "uid": "rs-web",
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "nodeName": "node-hot",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                },
            }
        )
    for name, cpu, pods in (("node-hot", "12500m", 4), ("node-idle", "500m", 0)):
        out.append(
            {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": name},
                "status": {
                    "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "8Gi"}}},
                    "podsMetric": [
                        {
                            "namespace": "shop",
                            "name": f"web-{i}",
                            "podUsage": {"resources": {"cpu": "3", "memory": "1Gi"}},
                        }
                        for i in range(pods)
                    ],
                },
            }
        )
    return out


def start(stack: Any, config: dict[str, Any], manifests: list[dict[str, Any]], tmp_path: Path) -> Any:
    """``allot up`` with ``config`` as reservation-manager's, then ``allot apply`` of ``manifests``."""
    config_dir = stack.state_dir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "reservation-manager.yaml").write_text(yaml.safe_dump(config))
    stack.run("up", "--timeout", "120")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(manifests))
    stack.run("apply", "-f", str(path))
    return stack


def test_live_rounds_move_a_pod_and_replay_verifies_them(running_stack, tmp_path: Path):
    stack = start(running_stack, CONFIG, docs(), tmp_path)
    stack.wait_for(
        lambda: bool(stack.events("migration.succeeded")), timeout=60, what="a migration succeeded"
    )
    rounds = [r.payload_dict() for r in stack.events("descheduler.round")]
    chosen = [r for r in rounds if r["jobs"]]
    # 12.5 of 16 cores, high 60 % (9.6): one 3-core pod brings node-hot to 9.5
    assert len(chosen) == 1 and len(chosen[0]["jobs"]) == 1, [r["message"] for r in rounds]
    assert [c["target"] for c in chosen[0]["candidates"] if c.get("chosen")] == ["node-idle"]
    assert any(t.payload_dict()["service"] == "reservation-manager" for t in stack.events("timer.fired"))
    report = json.loads(stack.run("replay", "--verify", "--json").stdout)
    assert report["ok"], report
    assert report["decisions"]["reservation-manager"]["mismatches"] == 0


DEFRAG = {
    "descheduler": {
        "deschedulingInterval": "1s",
        "profiles": [{"name": "gpu", "pluginConfig": [{"name": "GPUDefrag", "args": {"dryRun": True}}]}],
    }
}


def gpu_docs() -> list[dict[str, Any]]:
    """Two 2-GPU nodes with half a GPU taken on each; ``ml/train`` (2 GPUs) fits only once one half moves."""
    share = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"node.koordinator.sh/gpu-model": "A100"}},
            "status": {
                "allocatable": {
                    "cpu": "16",
                    "memory": "64Gi",
                    "pods": "110",
                    "koordinator.sh/gpu-core": "200",
                    "koordinator.sh/gpu-memory-ratio": "200",
                }
            },
        }
        for node in ("gpu-a", "gpu-b")
    ]
    for name, node in (("half-a", "gpu-a"), ("half-b", "gpu-b")):
        allocated = json.dumps({"gpu": [{"minor": 0, "resources": share}]})
        requests = {"cpu": "1", "memory": "1Gi", **share}
        owner = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": name,
            "uid": f"rs-{name}",
            "controller": True,
        }
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "ml",
                    "annotations": {"scheduling.koordinator.sh/device-allocated": allocated},
                    "ownerReferences": [owner],
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"requests": requests}}],
                },
            }
        )
    whole = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}
    out.append(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": whole, "limits": whole}}]},
        }
    )
    return out


def test_live_gpu_defrag_dry_run_records_the_plan_for_a_refused_pod(running_stack, tmp_path: Path):
    stack = start(running_stack, DEFRAG, gpu_docs(), tmp_path)
    stack.wait_for(
        lambda: any(r.payload_dict()["plans"] for r in stack.events("descheduler.defrag_planned")),
        timeout=30,
        what="a GPUDefrag plan",
    )
    assert any(e.payload_dict()["pod"]["name"] == "train" for e in stack.events("pod.unschedulable"))
    planned = next(
        p for p in (r.payload_dict() for r in stack.events("descheduler.defrag_planned")) if p["plans"]
    )
    [plan] = planned["plans"]
    [move] = plan["moves"]
    assert planned["dry_run"] and not planned["jobs"] and "dry run" in planned["message"]
    assert plan["pending"] == "ml/train" and move["pod"] in {"ml/half-a", "ml/half-b"}
    assert move["target"] != move["source"] == plan["target"]
    assert planned["frag_after"] < planned["frag_before"]
    assert not stack.events("migration.applied")
    report = json.loads(stack.run("replay", "--verify", "--json").stdout)
    assert report["ok"], report
