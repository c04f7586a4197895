"""A descheduler round over a gang, for tests: LowNodeLoad on four 16-core nodes where the hot node's smallest
sufficient pod is a member of gang ``ml/train`` whose mate runs on another node (``cluster(**args)``: the round with
those LowNodeLoad args, run in the simulator)."""

from __future__ import annotations

from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_testing.scenario import Scenario

__all__ = ["GANG", "NODES", "PLACEMENT", "cluster", "config", "node", "node_metric", "pod"]

GANG = {"gang.scheduling.koordinator.sh/name": "train", "gang.scheduling.koordinator.sh/min-available": "2"}
# node-hot: 10 of 16 cores (62.5 %, above 60 %): train-0 (2 cores) is the smallest pod whose move alone relieves it;
# its gang mate train-1 runs on node-warm (53 %); node-idle and node-idle-2 are the low nodes
PLACEMENT = {
    "train-0": ("node-hot", 2000),
    **{f"web-{i}": ("node-hot", 2500) for i in range(3)},
    "train-1": ("node-warm", 2000),
    **{f"api-{i}": ("node-warm", 3000) for i in range(2)},
}
NODES = ("node-hot", "node-warm", "node-idle", "node-idle-2")


def config(**args: JsonValue) -> dict[str, JsonObject]:
    thresholds: JsonObject = {
        "lowThresholds": {"cpu": 30, "memory": 30},
        "highThresholds": {"cpu": 60, "memory": 80},
    }
    plugin: JsonObject = {**thresholds, "anomalyCondition": {"consecutiveAbnormalities": 1}, **args}
    profile: JsonObject = {"name": "lnl", "pluginConfig": [{"name": "LowNodeLoad", "args": plugin}]}
    return {"reservation-manager": {"descheduler": {"deschedulingInterval": "60s", "profiles": [profile]}}}


def node(name: str) -> JsonObject:
    alloc: JsonObject = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": alloc}}


def pod(name: str, on: str) -> JsonObject:
    app = name.rsplit("-", 1)[0]
    owner: JsonObject = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": app,
        "uid": f"rs-{app}",
        "controller": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {**GANG} if app == "train" else {},
            "ownerReferences": [owner],
        },
        "spec": {
            "nodeName": on,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}],
        },
    }


def node_metric(name: str) -> JsonObject:
    on = sorted(p for p, (at, _) in PLACEMENT.items() if at == name)
    cpu = 500 + sum(PLACEMENT[p][1] for p in on)
    pods: list[JsonValue] = [
        {
            "namespace": "ml",
            "name": p,
            "podUsage": {"resources": {"cpu": f"{PLACEMENT[p][1]}m", "memory": "2Gi"}},
        }
        for p in on
    ]
    usage: JsonObject = {"resources": {"cpu": f"{cpu}m", "memory": f"{2 + 2 * len(on)}Gi"}}
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "status": {"nodeMetric": {"nodeUsage": usage}, "podsMetric": pods},
    }


def cluster(**args: JsonValue) -> Scenario:
    sc = Scenario(config(**args))
    sc.apply(*[node(n) for n in NODES], *[pod(p, on) for p, (on, _) in sorted(PLACEMENT.items())])
    sc.apply(*[node_metric(n) for n in NODES])
    sc.advance(60)
    return sc
