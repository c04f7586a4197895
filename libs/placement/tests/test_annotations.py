"""Annotation parsing: every malformed input is rejected with the field path that locates it."""

from __future__ import annotations

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.pod import parse_pod
from allot_placement.testing import a_pod

HINT = f'metadata.annotations["{n.ANN_DEVICE_ALLOCATE_HINT}"]'


@pytest.mark.parametrize(
    ("annotations", "path", "message_part"),
    [
        ({n.ANN_DEVICE_ALLOCATE_HINT: "{not json"}, HINT, "invalid JSON"),
        (
            {n.ANN_DEVICE_ALLOCATE_HINT: {"gpu": {"requiredTopologyScope": "Rack"}}},
            f"{HINT}.gpu.requiredTopologyScope",
            "unsupported value 'Rack'",
        ),
        (
            {n.ANN_DEVICE_ALLOCATE_HINT: {"gpu": {"preferredTopologyScope": "PCIe"}}},
            f"{HINT}.gpu.preferredTopologyScope",
            "unknown field",
        ),
        (
            {
                n.ANN_DEVICE_ALLOCATE_HINT: {
                    "rdma": {"selector": {"matchExpressions": [{"key": "t", "operator": "Near"}]}}
                }
            },
            f"{HINT}.rdma.selector.matchExpressions[0].operator",
            "unsupported operator",
        ),
        ({n.ANN_DEVICE_ALLOCATE_HINT: {"npu": {}}}, f"{HINT}.npu", "unknown field"),
        (
            {n.ANN_DEVICE_JOINT_ALLOCATE: {"deviceTypes": ["gpu", "gpu"]}},
            f'metadata.annotations["{n.ANN_DEVICE_JOINT_ALLOCATE}"].deviceTypes',
            "distinct device types",
        ),
        (
            {n.ANN_GPU_PARTITION_SPEC: {"allocatePolicy": "Strict"}},
            f'metadata.annotations["{n.ANN_GPU_PARTITION_SPEC}"].allocatePolicy',
            "unsupported value",
        ),
        (
            {n.ANN_RESOURCE_SPEC: {"requiredCPUBindPolicy": "Whole"}},
            f'metadata.annotations["{n.ANN_RESOURCE_SPEC}"].requiredCPUBindPolicy',
            "unsupported value",
        ),
        (
            {n.ANN_NUMA_TOPOLOGY_SPEC: "[1, 2]"},
            f'metadata.annotations["{n.ANN_NUMA_TOPOLOGY_SPEC}"]',
            "must be an object",
        ),
        (
            {n.ANN_NUMA_TOPOLOGY_SPEC: {"singleNUMANodeExclusive": "Always"}},
            f'metadata.annotations["{n.ANN_NUMA_TOPOLOGY_SPEC}"].singleNUMANodeExclusive',
            "unsupported value",
        ),
    ],
    ids=[
        "hint-bad-json",
        "hint-bad-scope",
        "hint-unknown-field",
        "hint-bad-selector",
        "hint-unknown-type",
        "joint-duplicate-types",
        "partition-bad-policy",
        "resource-spec-bad-policy",
        "numa-spec-not-object",
        "numa-spec-bad-exclusive",
    ],
)
def test_malformed_annotations_are_rejected_with_paths(
    annotations: dict, path: str, message_part: str
) -> None:
    errors: list[FieldIssue] = []
    assert parse_pod(a_pod("p", gpu=1, annotations=annotations), errors, []) is None
    assert [e.path for e in errors] == [path]
    assert message_part in errors[0].message
    assert errors[0].code == "InvalidAnnotation"


def test_valid_annotations_pass() -> None:
    pod = a_pod(
        "p",
        gpu=2,
        resources={n.RDMA: "1"},
        annotations={
            n.ANN_DEVICE_ALLOCATE_HINT: {
                "gpu": {"requiredTopologyScope": "PCIe"},
                "rdma": {"vfSelector": {"matchLabels": {"type": "general"}}, "exclusivePolicy": "PCIeLevel"},
            },
            n.ANN_DEVICE_JOINT_ALLOCATE: {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"},
            n.ANN_GPU_PARTITION_SPEC: {"allocatePolicy": "Restricted", "ringBusBandwidth": "200Gi"},
            n.ANN_NUMA_TOPOLOGY_SPEC: {
                "numaTopologyPolicy": "SingleNUMANode",
                "singleNUMANodeExclusive": "Preferred",
            },
        },
    )
    errors: list[FieldIssue] = []
    assert parse_pod(pod, errors, []) is not None and errors == []
