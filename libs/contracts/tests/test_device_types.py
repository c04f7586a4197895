"""The device-type registry: the one list of device types, read by the Device door and by placement alike."""

from __future__ import annotations

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.nodes import admit_device, validate_device
from allot_contracts.objects.requests import device_requests


def _device(kind: str) -> dict[str, object]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {"name": "node-a"},
        "spec": {"devices": [{"type": kind, "minor": 0, "health": True, "resources": {}}]},
    }


def test_placement_allocates_the_registered_types_with_resources_and_the_door_admits_every_registered_type() -> (
    None
):
    allocated = tuple(t.name for t in n.DEVICE_TYPE_REGISTRY if t.resources)
    assert n.DEVICE_TYPES == allocated == ("gpu", "rdma", "fpga")
    assert n.RECORDED_DEVICE_TYPES == ("gpu", "rdma", "fpga", "npu", "xpu")
    assert frozenset().union(*(t.resources for t in n.DEVICE_TYPE_REGISTRY)) == n.DEVICE_FAMILY_NAMES
    for kind in n.RECORDED_DEVICE_TYPES:
        issues: list[FieldIssue] = []
        assert admit_device(_device(kind), issues, []) is not None, (kind, issues)


def test_a_type_outside_the_registry_is_refused_with_the_registered_types_named() -> None:
    issues = validate_device(_device("tpu"))
    assert [(i.path, i.message) for i in issues] == [
        ("spec.devices[0].type", "must be one of gpu, rdma, fpga, npu, xpu")
    ]


def test_each_allocated_type_besides_gpus_is_requested_by_its_registered_resource() -> None:
    for entry in n.DEVICE_TYPE_REGISTRY:
        if not entry.resources or entry.name == n.GPU:
            continue
        (resource,) = entry.resources
        errors: list[FieldIssue] = []
        requests = device_requests({resource: 1}, {}, errors)
        assert errors == [] and set(requests) == {entry.name}, (entry, requests, errors)
