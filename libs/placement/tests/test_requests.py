"""Pod requests and the device-request protocol: PodRequests semantics, combination table, normalisation, HAMi."""

from __future__ import annotations

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects import names as n
from allot_contracts.objects.pod import parse_pod
from allot_contracts.objects.requests import device_requests, pod_requests
from allot_placement.pod import pod_spec
from allot_placement.testing import a_pod, admit

GiB = 2**30


def _spec(**kw: object) -> dict:
    return a_pod("p", **kw)["spec"]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (_spec(cpu="500m", memory="1Gi"), {"cpu": 500, "memory": GiB}),
        (
            {
                "containers": [
                    {"resources": {"requests": {"cpu": "1"}}},
                    {"resources": {"requests": {"cpu": "2"}}},
                ],
                "initContainers": [{"resources": {"requests": {"cpu": "5"}}}],
            },
            {"cpu": 5000},
        ),
        (
            {
                "containers": [
                    {"resources": {"requests": {"cpu": "1"}}},
                    {"resources": {"requests": {"cpu": "2"}}},
                ],
                "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
                "overhead": {"cpu": "250m"},
            },
            {"cpu": 3250},
        ),
        (
            {"containers": [{"resources": {"limits": {n.NVIDIA_GPU: "2", "cpu": "1"}}}]},
            {"cpu": 1000, n.NVIDIA_GPU: 2},
        ),
        (
            {
                "containers": [
                    {
                        "resources": {
                            "requests": {
                                "kubernetes.io/gpu-core": "50",
                                "kubernetes.io/gpu-memory-ratio": "50",
                            }
                        }
                    }
                ]
            },
            {n.GPU_CORE: 50, n.GPU_MEMORY_RATIO: 50},
        ),
        (
            {
                "containers": [
                    {
                        "resources": {
                            "requests": {n.NVIDIA_GPU: "2", n.HAMI_GPUMEM: "4000", n.HAMI_GPUCORES: "30"}
                        }
                    }
                ]
            },
            {n.GPU_SHARED: 2, n.GPU_MEMORY: 2 * 4000 * 2**20, n.GPU_CORE: 60},
        ),
        (
            {"containers": [{"resources": {"requests": {n.HAMI_GPUCORES: "30"}}}]},
            {n.GPU_SHARED: 1, n.GPU_MEMORY_RATIO: 100, n.GPU_CORE: 30},
        ),
        (
            {
                "containers": [
                    {"resources": {"requests": {n.NVIDIA_GPU: "1", n.HAMI_GPUMEM_PERCENTAGE: "25"}}}
                ]
            },
            {n.GPU_SHARED: 1, n.GPU_MEMORY_RATIO: 25},
        ),
        ({"containers": [{"resources": {"requests": {"cpu": "0", "memory": "1Gi"}}}]}, {"memory": GiB}),
    ],
    ids=[
        "basic",
        "init-max",
        "init-plus-overhead",
        "limits-default-requests",
        "deprecated-aliases",
        "hami-mem-cores",
        "hami-cores-only",
        "hami-percentage",
        "zeros-dropped",
    ],
)
def test_pod_requests(spec: dict, expected: dict) -> None:
    errors: list[FieldIssue] = []
    assert pod_requests(spec, errors) == expected
    assert errors == []


@pytest.mark.parametrize(
    ("resources", "path_part", "message_part"),
    [
        ({"cpu": "-1"}, "requests[cpu]", "greater than or equal to 0"),
        ({n.NVIDIA_GPU: "0.5"}, f"requests[{n.NVIDIA_GPU}]", "must be an integer"),
        ({"memory": "lots"}, "requests[memory]", "not a valid quantity"),
        ({n.HAMI_GPUMEM_PERCENTAGE: "150"}, n.HAMI_GPUMEM_PERCENTAGE, "between 0 and 100"),
        ({n.HAMI_GPUCORES: "101"}, n.HAMI_GPUCORES, "between 0 and 100"),
        ({n.HAMI_GPUMEM: "100", n.GPU_CORE: "50"}, "resources", "cannot mix HAMi"),
    ],
    ids=[
        "negative",
        "fractional-extended",
        "garbage",
        "hami-percentage-range",
        "hami-cores-range",
        "hami-mixed",
    ],
)
def test_pod_requests_errors_have_paths(resources: dict, path_part: str, message_part: str) -> None:
    errors: list[FieldIssue] = []
    pod_requests({"containers": [{"resources": {"requests": resources}}]}, errors)
    assert len(errors) == 1
    assert path_part in errors[0].path and errors[0].path.startswith("spec.containers[0]")
    assert message_part in errors[0].message


# (requests, expected per-instance, count, shared) — the upstream combination table and its normalisation.
VALID = [
    ({n.NVIDIA_GPU: 3}, {n.GPU_CORE: 100, n.GPU_MEMORY_RATIO: 100}, 3, False),
    ({n.AMD_GPU: 1}, {n.GPU_CORE: 100, n.GPU_MEMORY_RATIO: 100}, 1, False),
    ({n.KOORD_GPU: 50}, {n.GPU_CORE: 50, n.GPU_MEMORY_RATIO: 50}, 1, True),
    ({n.KOORD_GPU: 200}, {n.GPU_CORE: 100, n.GPU_MEMORY_RATIO: 100}, 2, False),
    ({n.GPU_MEMORY: 8 * GiB}, {n.GPU_MEMORY: 8 * GiB}, 1, True),
    ({n.GPU_MEMORY_RATIO: 300}, {n.GPU_MEMORY_RATIO: 100}, 3, False),
    ({n.GPU_CORE: 50, n.GPU_MEMORY_RATIO: 50}, {n.GPU_CORE: 50, n.GPU_MEMORY_RATIO: 50}, 1, True),
    ({n.GPU_CORE: 100, n.GPU_MEMORY_RATIO: 200}, {n.GPU_CORE: 50, n.GPU_MEMORY_RATIO: 100}, 2, False),
    ({n.GPU_CORE: 30, n.GPU_MEMORY: GiB}, {n.GPU_CORE: 30, n.GPU_MEMORY: GiB}, 1, True),
    ({n.GPU_SHARED: 2, n.GPU_MEMORY_RATIO: 100}, {n.GPU_MEMORY_RATIO: 50}, 2, True),
    (
        {n.GPU_SHARED: 2, n.GPU_CORE: 100, n.GPU_MEMORY: 4 * GiB},
        {n.GPU_CORE: 50, n.GPU_MEMORY: 2 * GiB},
        2,
        True,
    ),
    ({n.NPU_CORE: 20, n.GPU_MEMORY_RATIO: 50}, {n.NPU_CORE: 20, n.GPU_MEMORY_RATIO: 50}, 1, True),
]


@pytest.mark.parametrize(
    ("req", "per", "count", "shared"),
    VALID,
    ids=[
        "nvidia-3",
        "amd-1",
        "koord-gpu-50",
        "koord-gpu-200",
        "memory-only",
        "ratio-300",
        "core-ratio-half",
        "ratio-200-core-100",
        "core-memory",
        "shared-ratio",
        "shared-core-memory",
        "npu-core-ratio",
    ],
)
def test_valid_gpu_requests(req: dict, per: dict, count: int, shared: bool) -> None:
    errors: list[FieldIssue] = []
    got = device_requests(req, {}, errors)
    assert errors == []
    assert got[n.GPU].per_instance == per
    assert (got[n.GPU].count, got[n.GPU].shared) == (count, shared)


@pytest.mark.parametrize(
    ("req", "message_part"),
    [
        ({n.GPU_CORE: 101}, f"[{n.GPU_CORE}]"),
        ({n.GPU_CORE: 150, n.GPU_MEMORY_RATIO: 150}, "invalid resource device requests"),
        ({n.GPU_CORE: 100, n.GPU_MEMORY_RATIO: 101}, "invalid resource device requests"),
        ({n.KOORD_GPU: 101}, f"invalid resource unit {n.KOORD_GPU}: 101"),
        ({n.RDMA: 201}, f"invalid resource unit {n.RDMA}: 201"),
        ({n.NVIDIA_GPU: 1, n.KOORD_GPU: 100}, "not a supported combination"),
        ({n.GPU_SHARED: 2, n.GPU_CORE: 101, n.GPU_MEMORY_RATIO: 100}, "invalid resource device requests"),
        ({n.GPU_SHARED: 1, n.GPU_MEMORY: GiB, n.GPU_MEMORY_RATIO: 50}, "not a supported combination"),
        ({n.GPU_SHARED: 1, n.GPU_CORE: 50}, "not a supported combination"),
        ({n.NPU_CORE: 1, n.GPU_MEMORY: GiB}, "not a supported combination"),
        ({n.GPU_CORE: 200, n.GPU_MEMORY_RATIO: 100}, "works out at 200 per GPU"),
    ],
    ids=[
        "core-alone",
        "not-multiple-of-100",
        "ratio-101",
        "koord-gpu-101",
        "rdma-201",
        "mixed-whole-and-percent",
        "shared-not-divisible",
        "shared-memory-and-ratio",
        "shared-without-memory",
        "npu-core-memory",
        "core-exceeds-one-gpu",
    ],
)
def test_invalid_gpu_requests(req: dict, message_part: str) -> None:
    errors: list[FieldIssue] = []
    assert device_requests(req, {}, errors) == {}
    assert len(errors) == 1
    assert errors[0].code == "InvalidDeviceRequest"
    assert errors[0].path == "spec.containers[*].resources.requests"
    assert message_part in errors[0].message


@pytest.mark.parametrize(
    ("q", "strategy", "exclusive", "count", "per"),
    [
        (1, "", "", 1, 1),
        (200, "", "", 2, 100),
        (1, "ApplyForAll", "", 0, 1),
        (3, "RequestsAsCount", "", 3, 1),
        (2, "RequestsAsCount", "DeviceLevel", 2, 100),
    ],
    ids=["percent-of-one", "two-whole", "apply-for-all", "requests-as-count", "as-count-device-level"],
)
def test_rdma_instance_counts(q: int, strategy: str, exclusive: str, count: int, per: int) -> None:
    got = device_requests({n.RDMA: q}, {"rdma": (strategy, exclusive)}, [])
    assert (got["rdma"].count, got["rdma"].per_instance) == (count, {n.RDMA: per})


@pytest.mark.parametrize(
    ("labels", "annotations", "cpu", "bind", "error"),
    [
        ({n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}, {}, "4", "FullPCPUs", None),
        (
            {n.LABEL_QOS: "LSE"},
            {n.ANN_RESOURCE_SPEC: {"preferredCPUBindPolicy": "SpreadByPCPUs"}},
            "2",
            "SpreadByPCPUs",
            None,
        ),
        ({n.LABEL_QOS: "LS"}, {}, "4", "", None),
        ({n.LABEL_QOS: "LSE", n.LABEL_PRIORITY_CLASS: "koord-batch"}, {}, "4", "", None),
        (
            {n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"},
            {},
            "1500m",
            "",
            "the requested CPUs of LSR Pod must be integer",
        ),
    ],
    ids=[
        "lsr-default-full-pcpus",
        "lse-spread",
        "ls-no-binding",
        "non-prod-no-binding",
        "lsr-fractional-rejected",
    ],
)
def test_cpu_bind_intent(labels: dict, annotations: dict, cpu: str, bind: str, error: str | None) -> None:
    manifest = a_pod("p", cpu=cpu, labels=labels, annotations=annotations)
    if error:
        issues: list[FieldIssue] = []
        assert parse_pod(manifest, issues, []) is None  # the door refuses it, as Koordinator's webhook does
        assert error in issues[0].message and issues[0].code == "InvalidCPURequest"
        return
    spec, errors = pod_spec(admit(manifest))
    if error:
        assert spec is None and error in errors[0].message and errors[0].code == "InvalidCPURequest"
    else:
        assert spec is not None and spec.bind_policy == bind
