"""RDMA/FPGA placement: instance counts, VFs with selectors, joint GPU+RDMA on the same PCIe switches."""

from __future__ import annotations

import pytest

from allot_contracts.objects import names as n
from allot_placement.testing import a_device, a_node, a_pod, admit, bound, engine_with, minors, place

HINT, JOINT = n.ANN_DEVICE_ALLOCATE_HINT, n.ANN_DEVICE_JOINT_ALLOCATE
SAME_PCIE = {"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}


def cluster(vfs: int = 2, **kw: object) -> object:
    return engine_with(
        a_node("n1", cpu="96", memory="512Gi"), a_device("n1", gpus=8, rdma=4, rdma_vfs=vfs, **kw)
    )  # type: ignore[arg-type]


def vf_buses(d: object) -> list[str]:
    return [
        vf["busID"]
        for e in d.annotations[n.ANN_DEVICE_ALLOCATED].get("rdma", [])  # type: ignore[attr-defined]
        for vf in e.get("extension", {}).get("vfs", [])
    ]


@pytest.mark.parametrize(
    ("rdma", "hint", "expected"),
    [
        ("1", None, [0]),
        ("200", None, [0, 1]),
        ("1", {"allocateStrategy": "ApplyForAll"}, [0, 1, 2, 3]),
        ("3", {"allocateStrategy": "RequestsAsCount"}, [0, 1, 2]),
        ("1", {"selector": {"matchLabels": {"type": "other"}}}, None),
    ],
    ids=["share-of-one", "two-whole", "apply-for-all", "requests-as-count", "selector-matches-none"],
)
def test_rdma_counts(rdma: str, hint: dict | None, expected: list[int] | None) -> None:
    d = cluster().schedule(
        admit(a_pod("p", resources={n.RDMA: rdma}, annotations={HINT: {"rdma": hint}} if hint else None))
    )
    if expected is None:
        assert d.codes == ["InsufficientRDMADevices"]
    else:
        assert minors(d, "rdma") == expected


def test_apply_for_all_puts_the_request_on_every_device() -> None:
    d = cluster().schedule(
        admit(
            a_pod(
                "p",
                resources={n.RDMA: "5"},
                annotations={HINT: {"rdma": {"allocateStrategy": "ApplyForAll"}}},
            )
        )
    )
    assert {e["resources"][n.RDMA] for e in d.annotations[n.ANN_DEVICE_ALLOCATED]["rdma"]} == {"5"}


def test_vf_selector_takes_first_free_vf_by_bus_id() -> None:
    eng = cluster()
    hint = {HINT: {"rdma": {"vfSelector": {"matchLabels": {"type": "general"}}}}}
    first = place(eng, a_pod("a", resources={n.RDMA: "1"}, annotations=hint))
    second = place(eng, a_pod("b", resources={n.RDMA: "1"}, annotations=hint))
    third = place(eng, a_pod("c", resources={n.RDMA: "1"}, annotations=hint))
    assert vf_buses(first) == ["0000:80:00.2"]
    assert vf_buses(second) == ["0000:80:00.3"]  # binpack keeps the same NIC while it has VFs
    assert minors(third, "rdma") == [1]
    entry = first.annotations[n.ANN_DEVICE_ALLOCATED]["rdma"][0]
    assert entry["extension"]["vfs"] == [
        {"minor": 0, "busID": "0000:80:00.2"}
    ]  # VF minor 0 is written (decision 5)


def test_vf_selector_without_vf_groups_is_unschedulable() -> None:
    d = cluster(vfs=0).schedule(
        admit(
            a_pod(
                "p",
                resources={n.RDMA: "1"},
                annotations={HINT: {"rdma": {"vfSelector": {"matchLabels": {"type": "general"}}}}},
            )
        )
    )
    assert d.codes == ["InsufficientVirtualFunctions"]
    assert d.message == "0/1 nodes are available: 1 Insufficient rdma VirtualFunctions."


def test_vf_selector_matching_no_group_leaves_devices_unusable() -> None:
    d = cluster().schedule(
        admit(
            a_pod(
                "p",
                resources={n.RDMA: "1"},
                annotations={HINT: {"rdma": {"vfSelector": {"matchLabels": {"type": "storage"}}}}},
            )
        )
    )
    assert d.codes == ["InsufficientRDMADevices"]


@pytest.mark.parametrize(
    ("gpus", "expected_gpu", "expected_rdma"),
    [(1, [0], [0]), (2, [0, 1], [0]), (4, [0, 1, 2, 3], [0, 1]), (8, list(range(8)), [0, 1, 2, 3])],
    ids=["one", "pair", "quad-two-switches", "all"],
)
def test_joint_same_pcie(gpus: int, expected_gpu: list[int], expected_rdma: list[int]) -> None:
    d = cluster().schedule(
        admit(a_pod("p", gpu=gpus, resources={n.RDMA: "1"}, annotations={JOINT: SAME_PCIE}))
    )
    assert (minors(d), minors(d, "rdma")) == (expected_gpu, expected_rdma)


def test_joint_same_pcie_violation_when_the_switch_nic_is_excluded() -> None:
    dev = a_device("n1", gpus=4, rdma=2)
    for d in dev["spec"]["devices"]:
        if d["type"] == "rdma" and d["minor"] == 0:
            d["labels"] = {"type": "slow"}
    eng = engine_with(a_node("n1"), dev)
    d = eng.schedule(
        admit(
            a_pod(
                "p",
                gpu=2,
                resources={n.RDMA: "1"},
                annotations={
                    JOINT: SAME_PCIE,
                    HINT: {"rdma": {"selector": {"matchLabels": {"type": "fakeW"}}}},
                },
            )
        )
    )
    assert d.codes == ["JointAllocateViolation"]


def test_joint_without_scope_prefers_primary_switches() -> None:
    eng = cluster()
    d = eng.schedule(
        admit(
            a_pod("p", gpu=2, resources={n.RDMA: "1"}, annotations={JOINT: {"deviceTypes": ["gpu", "rdma"]}})
        )
    )
    assert minors(d, "rdma") == [0]


def test_joint_allocates_secondaries_at_placement_even_when_well_planned() -> None:
    dev = a_device("n1", gpus=2, rdma=1, labels={"node.koordinator.sh/secondary-device-well-planned": "true"})
    d = engine_with(a_node("n1"), dev).schedule(
        admit(a_pod("p", gpu=1, resources={n.RDMA: "1"}, annotations={JOINT: SAME_PCIE}))
    )
    assert minors(d, "rdma") == [0]  # decision 11: never a partial placement


def test_rdma_used_by_bound_pod_counts() -> None:
    docs = [
        a_node("n1"),
        a_device("n1", rdma=1),
        bound(
            a_pod("old", resources={n.RDMA: "100"}),
            "n1",
            device_allocated={"rdma": [{"minor": 0, "resources": {n.RDMA: "100"}}]},
        ),
    ]
    d = engine_with(*docs).schedule(admit(a_pod("p", resources={n.RDMA: "1"})))
    assert d.codes == ["InsufficientRDMADevices"]


def test_fpga() -> None:
    dev = a_device("n1")
    dev["spec"]["devices"] = [
        {"type": "fpga", "minor": i, "health": True, "resources": {n.FPGA: "100"}} for i in range(2)
    ]
    d = engine_with(a_node("n1"), dev).schedule(admit(a_pod("p", resources={n.FPGA: "200"})))
    assert minors(d, "fpga") == [0, 1]
    d = engine_with(a_node("n1"), dev).schedule(admit(a_pod("p", resources={n.FPGA: "300"})))
    assert d.codes == ["InsufficientFPGADevices"]


WHOLE_GPU = {n.GPU_CORE: "100", n.GPU_MEMORY_RATIO: "100"}


def test_a_joint_nic_comes_from_the_gpus_own_switch_without_a_required_scope() -> None:
    # the GPUs of switch 0 are taken: the pod's GPU is on switch 1, and so is its NIC, although NIC 0 has free VFs
    # (the primary's switches are tried first for the secondary type, SamePCIe or not)
    docs = [
        a_node("n1", cpu="96", memory="512Gi"),
        a_device("n1", gpus=8, rdma=4, rdma_vfs=2),
        bound(
            a_pod("old", gpu=2),
            "n1",
            device_allocated={"gpu": [{"minor": m, "resources": WHOLE_GPU} for m in (0, 1)]},
        ),
    ]
    hint = {HINT: {"rdma": {"vfSelector": {}}}, JOINT: {"deviceTypes": ["gpu", "rdma"]}}
    d = engine_with(*docs).schedule(admit(a_pod("p", gpu=1, resources={n.RDMA: "1"}, annotations=hint)))
    assert (minors(d), minors(d, "rdma")) == ([2], [1])
    rdma = d.annotations[n.ANN_DEVICE_ALLOCATED]["rdma"]
    assert [e["resources"][n.RDMA] for e in rdma] == ["1"], (
        "a VF is one instance, written as upstream writes it"
    )
    assert len(vf_buses(d)) == 1
