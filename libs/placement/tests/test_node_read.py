"""node_read: what the device-allocator keeps of each Node is what node_facts reads, so the facts are the same."""

from __future__ import annotations

import json
from typing import Any

from allot_contracts.objects import names as n
from allot_contracts.objects.sharing import Parts
from allot_placement.overcommit_facts import ANN_AMPLIFICATION, ANN_COLOCATION_STRATEGY, node_facts, node_read


def _node(name: str) -> dict[str, Any]:
    """A Node as the API server gives it, with what Koordinator's slo-controller reads of it."""
    amounts = {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "4711",
            "labels": {"kubernetes.io/hostname": name, "node.koordinator.sh/cpu-reclaim-ratio": "0.7"},
            "annotations": {
                n.ANN_NODE_RESERVATION: json.dumps({"resources": {"cpu": "2", "memory": "4Gi"}}),
                ANN_AMPLIFICATION: json.dumps({"cpu": 1.5}),
                ANN_COLOCATION_STRATEGY: json.dumps({"cpuReclaimThresholdPercent": 60}),
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "capacity": amounts,
            "allocatable": {**amounts, "cpu": "63"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
            "images": [{"names": [f"registry.example/train:{i}"], "sizeBytes": 1 << 30} for i in range(40)],
            "nodeInfo": {"kubeletVersion": "v1.28.3", "machineID": name},
        },
    }


def test_the_facts_of_what_is_kept_are_the_facts_of_the_node() -> None:
    node = _node("n1")
    kept = node_read(node)
    assert node_facts(kept, None, {}) == node_facts(node, None, {})
    status = kept["status"]
    assert isinstance(status, dict) and "images" not in status and "spec" not in kept
    assert len(json.dumps(kept)) < len(json.dumps(node)) / 4


def test_nodes_of_one_pool_hold_one_capacity_and_one_allocatable() -> None:
    parts = Parts()
    one, two = (node_read(_node(name), parts.one) for name in ("n1", "n2"))
    status_one, status_two = one["status"], two["status"]
    assert isinstance(status_one, dict) and isinstance(status_two, dict)
    assert status_one["capacity"] is status_two["capacity"]
    assert status_one["allocatable"] is status_two["allocatable"]
    assert node_facts(two, None, {}) == node_facts(_node("n2"), None, {})


def test_a_node_without_status_is_kept_without_one() -> None:
    bare: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n3"}}
    assert node_read(bare) == {"metadata": {"name": "n3"}}
    assert node_facts(node_read(bare), None, {}) == node_facts(bare, None, {})
