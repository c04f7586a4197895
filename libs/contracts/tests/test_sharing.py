"""Parts: repeated parts of pods, nodes and devices held once, each value given back equal and encoding the same."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.inventory import parse_device_cr, parse_node
from allot_contracts.objects.pod import ResourceSpec, parse_pod
from allot_contracts.objects.sharing import Parts
from allot_testing.builders import a_gpu_device

# a Koordinator GPU-share pod, as its docs write one (koordinator.sh/gpu-core and gpu-memory-ratio)
_GPU_SHARE = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "pod-example",
        "namespace": "default",
        "labels": {"koordinator.sh/qosClass": "LS", "app": "train"},
    },
    "spec": {
        "priorityClassName": "koord-prod",
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {
                    "requests": {**_GPU_SHARE, "cpu": "4", "memory": "8Gi"},
                    "limits": {**_GPU_SHARE, "cpu": "4", "memory": "8Gi"},
                },
            }
        ],
    },
}


def _pod(name: str, manifest: dict[str, Any] = POD) -> Any:
    body = copy.deepcopy(manifest)
    body["metadata"]["name"] = name
    issues: list[FieldIssue] = []
    pod = parse_pod(body, issues, [])
    assert pod is not None, issues
    # as a service decodes an event: every part a copy of its own
    return msgspec.msgpack.decode(msgspec.msgpack.encode(pod), type=type(pod))


def _encoded(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


def test_two_pods_of_one_shape_hold_one_copy_of_their_parts_and_stay_equal_to_what_was_read() -> None:
    parts = Parts()
    first, second = _pod("a"), _pod("b")
    assert first.requests is not second.requests  # decoded apart: two copies
    kept_first, kept_second = parts.pod(first), parts.pod(second)
    assert kept_first == first and kept_second == second
    assert _encoded(kept_first) == _encoded(first) and _encoded(kept_second) == _encoded(second)
    for field in ("requests", "limits", "containers", "devices", "labels", "koord_priority", "resource_spec"):
        assert getattr(kept_second, field) is getattr(kept_first, field), field
    assert kept_second.name == "b" and kept_second.uid == second.uid


def test_a_part_is_shared_only_with_one_that_encodes_the_same_so_the_order_of_keys_is_kept() -> None:
    parts = Parts()
    pod = _pod("a")
    ordered = msgspec.structs.replace(pod, requests={"cpu": 4000, "memory": 8 << 30})
    reordered = msgspec.structs.replace(pod, name="b", requests={"memory": 8 << 30, "cpu": 4000})
    first, second = parts.pod(ordered), parts.pod(reordered)
    assert first.requests == second.requests and first.requests is not second.requests
    assert list(second.requests) == ["memory", "cpu"]
    assert parts.pod(msgspec.structs.replace(reordered, name="c")).requests is second.requests


def test_values_of_different_types_that_encode_alike_are_not_shared() -> None:
    parts = Parts()
    assert parts.one(()) == () and type(parts.one([])) is list  # both encode as an empty array
    spec = ResourceSpec()
    assert parts.one({}) == {} and parts.one(spec) is spec  # both encode as an empty map


def test_the_table_is_bounded_and_what_was_shared_stays_shared() -> None:
    parts = Parts(limit=3)
    first = parts.pod(_pod("a"))
    assert len(parts) <= 3
    second = parts.pod(_pod("b"))
    assert second == _pod("b")
    assert len(parts) <= 3
    # equal either way; whether shared depends on what the table still holds
    assert first.requests == second.requests


def test_two_nodes_devices_of_one_model_share_their_resources_and_keep_their_ids() -> None:
    parts = Parts()
    inventories = []
    for node in ("n1", "n2"):
        _, inventory, issues = parse_device_cr(dict(a_gpu_device(node, gpus=2)))
        assert inventory is not None, issues
        kept = parts.inventory(inventory)
        assert kept == inventory and _encoded(kept) == _encoded(inventory)
        inventories.append(kept)
    one, two = (inventory.devices["gpu"] for inventory in inventories)
    assert one[0].resources is two[0].resources is two[1].resources
    assert [d.id for d in two] == ["GPU-n2-0", "GPU-n2-1"]
    assert inventories[0].content_key is inventories[1].content_key


def test_two_nodes_of_one_pool_share_their_allocatable_and_keep_their_names() -> None:
    parts = Parts()
    nodes = []
    for name in ("n1", "n2"):
        node, issues = parse_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
            }
        )
        assert node is not None, issues
        kept = parts.node(node)
        assert kept == node
        nodes.append(kept)
    assert nodes[0].allocatable is nodes[1].allocatable
    assert nodes[1].name == "n2" and nodes[1].labels == {"kubernetes.io/hostname": "n2"}
