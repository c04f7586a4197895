"""The descheduler in the running stack (`allot up`: real processes, PostgreSQL and NATS): reservation-manager's
shell records the round timers at wall-clock deadlines, a round asks for a PodMigrationJob, the migration controller
moves the pod, and `allot replay --verify` re-derives every round and job step from the log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # the whole stack as processes: ~40 s

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


def test_live_rounds_move_a_pod_and_replay_verifies_them(running_stack, tmp_path: Path):
    stack = running_stack
    config_dir = stack.state_dir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "reservation-manager.yaml").write_text(yaml.safe_dump(CONFIG))
    stack.run("up", "--timeout", "120")
    manifests = tmp_path / "cluster.yaml"
    manifests.write_text(yaml.safe_dump_all(docs()))
    stack.run("apply", "-f", str(manifests))
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
