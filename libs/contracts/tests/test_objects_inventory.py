"""Node and Device parsing: Koordinator's deprecated device resource names, as its transformers rename them."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects.inventory import parse_device_cr, parse_node, parse_nrt


def _node(allocatable: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "host04"},
        "status": {"allocatable": allocatable},
    }


def test_deprecated_device_names_in_node_allocatable_are_read_as_koordinator_names() -> None:
    node, issues = parse_node(
        _node(
            {
                "cpu": "6",
                "kubernetes.io/gpu": "200",
                "kubernetes.io/gpu-core": "200",
                "kubernetes.io/rdma": "100",
            }
        )
    )
    assert issues == []
    assert node is not None
    assert node.allocatable["koordinator.sh/gpu"] == 200
    assert node.allocatable["koordinator.sh/gpu-core"] == 200
    assert node.allocatable["koordinator.sh/rdma"] == 100
    assert not any(name.startswith("kubernetes.io/") for name in node.allocatable)


def test_a_deprecated_name_beside_its_new_name_is_left_as_it_is() -> None:
    node, _ = parse_node(_node({"kubernetes.io/gpu-core": "100", "koordinator.sh/gpu-core": "200"}))
    assert node is not None
    assert node.allocatable["koordinator.sh/gpu-core"] == 200
    assert node.allocatable["kubernetes.io/gpu-core"] == 100


def test_node_capacity_is_read_when_allocatable_is_absent_and_a_malformed_list_is_reported() -> None:
    node, _ = parse_node(
        {"metadata": {"name": "n"}, "status": {"capacity": {"kubernetes.io/gpu-memory": "32Gi"}}}
    )
    assert node is not None and node.allocatable == {"koordinator.sh/gpu-memory": 32 * 2**30}
    _, issues = parse_node(_node(["cpu"]))
    assert [(i.path, i.message) for i in issues] == [("status.allocatable", "must be a map of quantities")]


def test_deprecated_device_names_in_a_device_are_read_as_koordinator_names() -> None:
    _, inv, issues = parse_device_cr(
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {"name": "host04"},
            "spec": {
                "devices": [
                    {
                        "type": "gpu",
                        "minor": 0,
                        "id": "GPU-04cea5cd-966f-7116-1d58-1ac34421541b",
                        "health": True,
                        "resources": {"kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory": "16Gi"},
                    }
                ]
            },
        }
    )
    assert issues == []
    assert inv is not None
    assert inv.devices["gpu"][0].resources == {
        "koordinator.sh/gpu-core": 100,
        "koordinator.sh/gpu-memory": 16 * 2**30,
    }


def test_a_device_field_the_crd_does_not_have_is_refused_with_its_path() -> None:
    """``resource:`` for ``resources`` left the GPU with nothing to give and no word; the API server's strict field
    validation refuses it, and so does the door."""
    gpu = {
        "type": "gpu",
        "id": "GPU-0",
        "minor": 0,
        "health": True,
        "resource": {"koordinator.sh/gpu-core": "100"},
        "topology": {"socketID": 0, "nodeID": 0, "pcieId": "0"},
        "vfGroups": [{"vfs": [{"busID": "0000:1f:00.2", "minr": 1}], "label": {}}],
    }
    manifest = {"kind": "Device", "metadata": {"name": "n"}, "spec": {"devices": [gpu], "device": []}}
    _, _, issues = parse_device_cr(manifest)
    assert sorted(i.path for i in issues) == [
        "spec.device",
        "spec.devices[0].resource",
        "spec.devices[0].topology.pcieId",
        "spec.devices[0].vfGroups[0].label",
        "spec.devices[0].vfGroups[0].vfs[0].minr",
    ]
    assert all(i.message.startswith("unknown field; supported: ") for i in issues)
    gpu["resources"] = gpu.pop("resource")
    gpu["topology"] = {"socketID": 0, "nodeID": 0, "pcieID": "0", "busID": "0000:1f:00.0"}
    gpu["vfGroups"] = [{"vfs": [{"busID": "0000:1f:00.2", "minor": 1}], "labels": {}}]
    _, inventory, issues = parse_device_cr({**manifest, "spec": {"devices": [gpu]}})
    assert issues == [] and inventory is not None


@pytest.mark.parametrize(
    ("zones", "expected"),
    [
        ({"node-0": {}}, "zones: must be a list of zones, not an object"),
        (["node-0"], "zones[0]: must be an object, not a string"),
        (
            [{"name": "node-²", "type": "Node"}],
            "zones[0].name: NUMA zones are named node-<id>, an id below 1024",
        ),
        (
            [{"name": "node-99999", "type": "Node"}],
            "zones[0].name: NUMA zones are named node-<id>, an id below 1024",
        ),
        (
            [{"name": "node-0", "type": "Node", "resources": {"cpu": "4"}}],
            "zones[0].resources: must be a list of resources, not an object",
        ),
        (
            [{"name": "node-0", "type": "Node", "resources": ["cpu"]}],
            "zones[0].resources[0]: must be an object, not a string",
        ),
        (
            [{"name": "node-0", "type": "Node", "resources": [{"allocatable": "4"}]}],
            "zones[0].resources[0].name: is required: a resource name",
        ),
        (
            [{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "allocatable": ["4"]}]}],
            "zones[0].resources[0].allocatable: quantity must be a string or number, got list",
        ),
    ],
    ids=[
        "zones-object",
        "zone-string",
        "name-digit",
        "name-range",
        "resources-object",
        "resource-string",
        "resource-name",
        "allocatable-list",
    ],
)
def test_a_topology_zone_of_the_wrong_shape_is_refused_with_its_path(zones: Any, expected: str) -> None:
    manifest = {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "topologyPolicies": ["None"],
        "zones": zones,
    }
    _, _, errors = parse_nrt(manifest)
    assert [str(e).split(" (got")[0] for e in errors] == [expected]


def test_a_device_field_of_the_wrong_type_is_refused_not_turned_into_text_or_a_default() -> None:
    gpu = {
        "type": "gpu",
        "id": 7,
        "minor": 0,
        "health": True,
        "resources": {"koordinator.sh/gpu-core": "100"},
        "topology": {"socketID": "0", "nodeID": [0], "pcieID": 1, "busID": 60.0},
        "vfGroups": [{"vfs": [{"busID": 5, "minor": 1}]}],
    }
    manifest = {"kind": "Device", "metadata": {"name": "n"}, "spec": {"devices": [gpu]}}
    _, _, issues = parse_device_cr(manifest)
    assert sorted(f"{i.path}: {i.message}" for i in issues) == [
        "spec.devices[0].id: must be a string",
        "spec.devices[0].topology.busID: must be a string",
        "spec.devices[0].topology.nodeID: must be an integer >= -1",
        "spec.devices[0].topology.pcieID: must be a string",
        "spec.devices[0].topology.socketID: must be an integer >= -1",
        "spec.devices[0].vfGroups[0].vfs[0].busID: is required (a string)",
    ]
