"""GPU placement: topology scopes, binpack/spread for shared GPUs, partitions, hints, unhealthy devices."""

from __future__ import annotations

import pytest

from allot_contracts.objects import names as n
from allot_placement.testing import a_device, a_node, a_pod, admit, bound, engine_with, minors, place

HINT = n.ANN_DEVICE_ALLOCATE_HINT


def gpu_alloc(*ms: int, share: int = 100) -> dict:
    return {
        "gpu": [
            {"minor": m, "resources": {n.GPU_CORE: str(share), n.GPU_MEMORY_RATIO: str(share)}} for m in ms
        ]
    }


def node8(name: str = "n1", **kw: object) -> list[dict]:
    return [a_node(name, cpu="64", memory="256Gi"), a_device(name, gpus=8, **kw)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("used", "gpus", "scope", "expected"),
    [
        ((), 1, "", [0]),
        ((), 2, "", [0, 1]),
        ((0,), 1, "", [1]),  # same PCIe switch as the used GPU
        ((0,), 2, "", [2, 3]),  # a free switch on the used NUMA node
        ((0, 2, 4), 2, "", [6, 7]),  # the only switch with two free GPUs
        ((0, 2, 4, 6), 2, "", [1, 3]),  # no switch fits: NUMA scope, lowest minors
        ((0, 5), 3, "NUMANode", [1, 2, 3]),
        ((0, 1, 4), 4, "", [2, 3, 5, 6]),  # no NUMA node fits 4: node scope, lowest minors
        ((), 4, "PCIe", None),
        ((0, 2, 4, 6), 2, "PCIe", None),
        ((), 1, "Device", [0]),
        ((), 2, "Device", None),
    ],
    ids=[
        "first",
        "pair",
        "pack-next-to-used",
        "pair-on-used-numa",
        "only-free-switch",
        "numa-fallback",
        "numa-required",
        "node-scope",
        "pcie-too-small",
        "pcie-all-broken",
        "device-one",
        "device-two",
    ],
)
def test_whole_gpu_topology(used: tuple[int, ...], gpus: int, scope: str, expected: list[int] | None) -> None:
    docs = node8()
    if used:
        docs.append(bound(a_pod("old", gpu=len(used)), "n1", device_allocated=gpu_alloc(*used)))
    ann = {HINT: {"gpu": {"requiredTopologyScope": scope}}} if scope else None
    d = engine_with(*docs).schedule(admit(a_pod("p", gpu=gpus, annotations=ann)))
    if expected is None:
        assert d.outcome == n.UNSCHEDULABLE
        assert d.codes == ["InsufficientTopologyScopedGPUs"]
    else:
        assert minors(d) == expected


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("MostAllocated", 2), ("LeastAllocated", 1)],
    ids=["binpack-picks-most-used", "spread-picks-least-used"],
)
def test_shared_gpu_device_scoring(strategy: str, expected: int) -> None:
    # GPU 0 is 70% used (30 left, too little), GPU 2 is 50% used, GPU 1 and the rest are free.
    docs = [
        *node8(numa_nodes=1, per_pcie=8),
        bound(
            a_pod("a", gpu=None, resources={n.GPU_CORE: "70", n.GPU_MEMORY_RATIO: "70"}),
            "n1",
            device_allocated=gpu_alloc(0, share=70),
        ),
        bound(
            a_pod("b", gpu=None, resources={n.GPU_CORE: "50", n.GPU_MEMORY_RATIO: "50"}),
            "n1",
            device_allocated=gpu_alloc(2, share=50),
        ),
    ]
    eng = engine_with(*docs, config={"scoring": {"deviceShare": {"strategy": strategy}}})
    d = eng.schedule(admit(a_pod("p", resources={n.GPU_CORE: "40", n.GPU_MEMORY_RATIO: "40"})))
    assert minors(d) == [expected]


def test_shared_gpu_memory_is_filled_from_ratio() -> None:
    eng = engine_with(a_node("n1"), a_device("n1", gpus=1, gpu_memory="16Gi"))
    d = eng.schedule(admit(a_pod("p", resources={n.GPU_CORE: "25", n.GPU_MEMORY_RATIO: "25"})))
    res = d.annotations[n.ANN_DEVICE_ALLOCATED]["gpu"][0]["resources"]
    assert res == {n.GPU_CORE: "25", n.GPU_MEMORY: "4Gi", n.GPU_MEMORY_RATIO: "25"}


def test_memory_only_request_fills_ratio() -> None:
    eng = engine_with(a_node("n1"), a_device("n1", gpus=1, gpu_memory="16Gi"))
    d = eng.schedule(admit(a_pod("p", resources={n.GPU_MEMORY: "4Gi"})))
    assert d.annotations[n.ANN_DEVICE_ALLOCATED]["gpu"][0]["resources"][n.GPU_MEMORY_RATIO] == "25"


def test_shared_pods_pack_onto_one_gpu_then_move_on() -> None:
    eng = engine_with(*node8())
    placed = [
        minors(place(eng, a_pod(f"p{i}", resources={n.GPU_CORE: "40", n.GPU_MEMORY_RATIO: "40"})))
        for i in range(5)
    ]
    assert placed == [[0], [0], [1], [1], [2]]


def test_multi_shared_without_topology_uses_default_allocator() -> None:
    eng = engine_with(*node8())
    d = eng.schedule(
        admit(a_pod("p", resources={n.GPU_SHARED: "2", n.GPU_CORE: "100", n.GPU_MEMORY_RATIO: "100"}))
    )
    assert minors(d) == [0, 1]
    d = eng.schedule(
        admit(
            a_pod(
                "q",
                resources={n.GPU_SHARED: "2", n.GPU_CORE: "100", n.GPU_MEMORY_RATIO: "100"},
                annotations={HINT: {"gpu": {"requiredTopologyScope": "PCIe"}}},
            )
        )
    )
    assert d.codes == ["UnsupportedMultiSharedGPU"]


@pytest.mark.parametrize(
    ("unhealthy", "gpus", "expected"),
    [((0,), 1, [1]), ((0, 1, 2, 3), 4, [4, 5, 6, 7]), (tuple(range(8)), 1, None)],
    ids=["skip-one", "skip-numa", "all-unhealthy"],
)
def test_unhealthy_gpus_are_never_allocated(
    unhealthy: tuple[int, ...], gpus: int, expected: list[int] | None
) -> None:
    d = engine_with(*node8(unhealthy=unhealthy)).schedule(admit(a_pod("p", gpu=gpus)))
    if expected is None:
        assert d.outcome == n.UNSCHEDULABLE and d.codes == ["InsufficientGPUDevices"]
    else:
        assert minors(d) == expected


def test_no_fitting_topology_scope_says_so_in_upstreams_words() -> None:
    # Koordinator's topology allocator fails with "Insufficient GPU Devices"; its default allocator (GPUs without
    # topology) with "Insufficient gpu devices"
    d = engine_with(*node8(unhealthy=(0, 1, 2, 3, 4, 5, 6))).schedule(admit(a_pod("p", gpu=2)))
    assert (d.codes, d.message) == (
        ["InsufficientGPUDevices"],
        "0/1 nodes are available: 1 Insufficient GPU Devices.",
    )
    d = engine_with(*node8(topology=False)).schedule(admit(a_pod("p", gpu=9)))
    assert (d.codes, d.message) == (
        ["InsufficientGPUDevices"],
        "0/1 nodes are available: 1 Insufficient gpu devices.",
    )


def test_gpu_without_health_field_is_unhealthy() -> None:
    dev = a_device("n1", gpus=2)
    for d in dev["spec"]["devices"]:
        del d["health"]
    d = engine_with(a_node("n1"), dev).schedule(admit(a_pod("p", gpu=1)))
    assert d.outcome == n.UNSCHEDULABLE


def test_hint_selector_restricts_gpus() -> None:
    dev = a_device("n1", gpus=4)
    for d in dev["spec"]["devices"]:
        d["labels"] = {"class": "big" if d["minor"] >= 2 else "small"}
    d = engine_with(a_node("n1"), dev).schedule(
        admit(a_pod("p", gpu=1, annotations={HINT: {"gpu": {"selector": {"matchLabels": {"class": "big"}}}}}))
    )
    assert minors(d) == [2]


def test_gpus_without_topology_use_default_allocator_unless_scope_required() -> None:
    eng = engine_with(a_node("n1"), a_device("n1", gpus=4, topology=False))
    assert minors(eng.schedule(admit(a_pod("p", gpu=2)))) == [0, 1]
    d = eng.schedule(admit(a_pod("q", gpu=2, annotations={HINT: {"gpu": {"requiredTopologyScope": "PCIe"}}})))
    assert d.codes == ["GPUTopologyUnknown"]


# --- partitions ---------------------------------------------------------------------------------------------------


def hopper(policy: str | None = "Honor") -> list[dict]:
    labels = {n.LABEL_GPU_MODEL: "H100"}
    if policy:
        labels[n.LABEL_GPU_PARTITION_POLICY] = policy
    return [a_node("h", cpu="64", memory="256Gi", labels=labels), a_device("h", gpus=8)]


@pytest.mark.parametrize(
    ("sequence", "expected"),
    [
        ([1, 2, 1, 4], [[0], [2, 3], [1], [4, 5, 6, 7]]),
        ([2, 2, 2, 2], [[0, 1], [2, 3], [4, 5], [6, 7]]),
        ([4, 1], [[0, 1, 2, 3], [4]]),
        ([8, 1], [[0, 1, 2, 3, 4, 5, 6, 7], None]),
    ],
    ids=["binpack-keeps-big-partitions", "pairs", "half-then-one", "full-then-none"],
)
def test_builtin_hopper_partitions(sequence: list[int], expected: list[list[int] | None]) -> None:
    eng = engine_with(*hopper())
    for i, (gpus, want) in enumerate(zip(sequence, expected)):
        d = place(eng, a_pod(f"p{i}", gpu=gpus))
        assert (minors(d) if d.outcome == n.SCHEDULED else None) == want


def test_honored_partition_rejects_unsupported_count() -> None:
    d = engine_with(*hopper()).schedule(admit(a_pod("p", gpu=3)))
    assert d.codes == ["UnsupportedGPUCount"]


def test_prefer_policy_falls_back_to_topology() -> None:
    d = engine_with(*hopper(policy=None)).schedule(admit(a_pod("p", gpu=3)))
    assert minors(d) == [0, 1, 2]


def test_pod_partition_spec_forces_partitions_on_prefer_nodes() -> None:
    d = engine_with(*hopper(policy=None)).schedule(
        admit(a_pod("p", gpu=3, annotations={n.ANN_GPU_PARTITION_SPEC: {"allocatePolicy": "BestEffort"}}))
    )
    assert d.codes == ["UnsupportedGPUCount"]


def test_partition_table_missing_when_honored() -> None:
    d = engine_with(a_node("n1"), a_device("n1", gpus=2)).schedule(
        admit(a_pod("p", gpu=1, annotations={n.ANN_GPU_PARTITION_SPEC: {}}))
    )
    assert d.codes == ["MissingGPUPartitionTable"]


TABLE = {
    "2": [
        {"minors": [0, 1], "allocationScore": 1, "ringBusBandwidth": "200Gi"},
        {"minors": [2, 3], "allocationScore": 5, "ringBusBandwidth": "400Gi"},
    ]
}


@pytest.mark.parametrize(
    ("used", "spec", "expected"),
    [
        ((), {}, [2, 3]),  # higher allocationScore preferred (decision 2)
        ((2,), {"allocatePolicy": "BestEffort"}, [0, 1]),
        ((2,), {"allocatePolicy": "Restricted"}, None),
        ((), {"ringBusBandwidth": "300Gi"}, [2, 3]),
        ((2,), {"ringBusBandwidth": "300Gi"}, None),
    ],
    ids=[
        "best-score",
        "besteffort-next-group",
        "restricted-best-group-only",
        "bandwidth-ok",
        "bandwidth-too-low",
    ],
)
def test_custom_partition_table(used: tuple[int, ...], spec: dict, expected: list[int] | None) -> None:
    docs = [
        a_node("n1"),
        a_device("n1", gpus=4, partitions=TABLE, labels={n.LABEL_GPU_PARTITION_POLICY: "Honor"}),
    ]
    if used:
        docs.append(bound(a_pod("old", gpu=1), "n1", device_allocated=gpu_alloc(*used)))
    d = engine_with(*docs).schedule(admit(a_pod("p", gpu=2, annotations={n.ANN_GPU_PARTITION_SPEC: spec})))
    if expected is None:
        assert d.codes == ["InsufficientPartitionedGPUs"]
    else:
        assert minors(d) == expected


def test_pcie_level_exclusive_avoids_switches_in_use() -> None:
    docs = [*node8(), bound(a_pod("old", gpu=1), "n1", device_allocated=gpu_alloc(0))]
    d = engine_with(*docs).schedule(
        admit(a_pod("p", gpu=1, annotations={HINT: {"gpu": {"exclusivePolicy": "PCIeLevel"}}}))
    )
    assert minors(d) == [2]
    d = engine_with(*docs).schedule(admit(a_pod("p", gpu=1)))
    assert minors(d) == [1]


def test_gpu_share_unsupported_models() -> None:
    docs = [
        a_node("t4", labels={n.LABEL_GPU_MODEL: "T4", n.LABEL_GPU_VENDOR: "nvidia"}),
        a_device("t4", gpus=2),
    ]
    cfg = {"devices": {"gpuShareUnsupportedModels": [{"vendor": "nvidia", "model": "T4"}]}}
    eng = engine_with(*docs, config=cfg)
    shared = eng.schedule(admit(a_pod("p", resources={n.GPU_CORE: "50", n.GPU_MEMORY_RATIO: "50"})))
    assert shared.codes == ["GPUShareUnsupportedModel"]
    # Koordinator's Filter message, naming the model and the vendor
    assert (
        shared.message
        == '0/1 nodes are available: 1 model "T4" of vendor "nvidia" does not support GPU Share.'
    )
    assert eng.schedule(admit(a_pod("q", gpu=1))).outcome == n.SCHEDULED


def test_isolation_provider_must_match_node_label() -> None:
    labels = {n.LABEL_GPU_ISOLATION_PROVIDER: "HAMi-core"}
    eng = engine_with(
        a_node("plain"), a_device("plain", gpus=1), a_node("hami", labels=labels), a_device("hami", gpus=1)
    )
    pod = a_pod("p", labels=labels, resources={n.GPU_SHARED: "1", n.GPU_CORE: "50", n.GPU_MEMORY_RATIO: "50"})
    assert eng.schedule(admit(pod)).node == "hami"
    whole = a_pod("w", labels=labels, gpu=1)  # not GPU-shared: the provider label does not apply
    assert eng.schedule(admit(whole)).node == "hami"
    eng.delete_node("hami")
    d = eng.schedule(admit(pod))
    assert d.message == "0/1 nodes are available: 1 node(s) didn't offer GPU isolation provider HAMi-core."
