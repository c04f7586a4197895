"""Every cache keys on every input its filter or score reads: a result computed for one node is never reused for a
node that differs in something the pod's filters or the policy read, however alike the two machines are."""

from __future__ import annotations

from typing import Any

from allot_contracts.objects import names as n
from allot_placement import PlacementConfig, PlacementEngine
from allot_placement.reservations import Hold
from allot_placement.reserved import ReservationContext
from allot_placement.testing import a_device, a_node, a_pod, admit, bound, engine_with, load, minors, place

A100 = "NVIDIA-A100-SXM4-80GB"
GPU_NODE = {n.GPU_CORE: "400", n.GPU_MEMORY_RATIO: "400"}


def with_ids(node: str, ids: list[str]) -> dict[str, Any]:
    """Four A100s of the same shape on every node; only their UUIDs differ."""
    device = a_device(node, gpus=4, gpu_model=A100)
    for entry, uuid in zip(device["spec"]["devices"], ids, strict=True):
        entry["id"] = uuid
    return device


def twins() -> PlacementEngine:
    return engine_with(
        a_node("node-1", extra=GPU_NODE),
        with_ids("node-1", ["GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3"]),
        a_node("node-2", extra=GPU_NODE),
        with_ids("node-2", ["GPU-b0", "GPU-b1", "GPU-b2", "GPU-b3"]),
    )


def test_use_gpuuuid_finds_the_named_gpu_on_the_second_of_two_identical_nodes() -> None:
    eng = twins()
    d = place(eng, a_pod("p", gpu=1, annotations={"nvidia.com/use-gpuuuid": "GPU-b2"}))
    assert (d.outcome, d.node, minors(d)) == (n.SCHEDULED, "node-2", [2])
    assert d.annotations[n.ANN_DEVICE_ALLOCATED]["gpu"][0]["id"] == "GPU-b2"
    # and the first node is still answered for itself
    d = place(eng, a_pod("q", gpu=1, annotations={"nvidia.com/use-gpuuuid": "GPU-a3"}))
    assert (d.outcome, d.node, minors(d)) == (n.SCHEDULED, "node-1", [3])


def test_nouse_gpuuuid_excluding_the_first_nodes_gpus_leaves_the_second() -> None:
    eng = twins()
    d = place(eng, a_pod("p", gpu=2, annotations={"nvidia.com/nouse-gpuuuid": "GPU-a0,GPU-a1,GPU-a2,GPU-b0"}))
    assert (d.outcome, d.node, minors(d)) == (n.SCHEDULED, "node-2", [2, 3])


def test_identical_nodes_still_share_results_for_pods_that_read_no_identity() -> None:
    eng = twins()
    eng.schedule(admit(a_pod("p", gpu=1)))
    assert eng.stats["evaluations"] == 1  # one evaluation answers both machines
    eng.schedule(admit(a_pod("q", gpu=1, annotations={"nvidia.com/use-gpuuuid": "GPU-b1"})))
    assert eng.stats["evaluations"] == 3  # the UUID selector reads each machine's own GPUs


def shared_pod(name: str) -> dict[str, Any]:
    return a_pod(name, cpu="1", resources={n.GPU_CORE: "50", n.GPU_MEMORY_RATIO: "50"})


def test_random_policy_chooses_a_shared_gpu_per_node_name() -> None:
    """The random policy keys a shared request's GPU by the node's name: identical nodes choose differently, and
    the GPU a node gets does not depend on which other nodes were evaluated first."""
    config = PlacementConfig.from_dict({"policy": "random", "seed": 11})
    docs = {nm: [a_node(nm, extra=GPU_NODE), a_device(nm, gpus=4, gpu_model=A100)] for nm in ("n1", "n2")}
    for i in range(8):
        both = PlacementEngine(config)
        load(both, *docs["n1"], *docs["n2"])
        d = both.schedule(admit(shared_pod(f"p{i}")))
        assert d.node is not None
        alone = PlacementEngine(config)
        load(alone, *docs[d.node])
        assert minors(d) == minors(alone.schedule(admit(shared_pod(f"p{i}")))), f"pod p{i} on {d.node}"


def test_gpu_clustering_scores_by_the_gpu_shapes_on_each_node() -> None:
    """Two nodes with the same totals in use (GPU 0 full, 2 cpus, 2 pods) but different pods: two half-GPU pods
    on n1, a whole-GPU pod and a CPU pod on n2. A half-GPU pod clusters with its own shape: n1 scores higher."""
    half = {"minor": 0, "resources": {n.GPU_CORE: "50", n.GPU_MEMORY_RATIO: "50"}}
    whole = {"minor": 0, "resources": {n.GPU_CORE: "100", n.GPU_MEMORY_RATIO: "100"}}
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": "gpuclustering"}))
    load(
        eng,
        *(
            d
            for nm in ("n1", "n2")
            for d in (a_node(nm, extra=GPU_NODE), a_device(nm, gpus=4, gpu_model=A100))
        ),
        bound(shared_pod("h1"), "n1", device_allocated={"gpu": [half]}),
        bound(shared_pod("h2"), "n1", device_allocated={"gpu": [half]}),
        bound(a_pod("w", memory=None, resources=whole["resources"]), "n2", device_allocated={"gpu": [whole]}),
        bound(a_pod("c", memory="2Gi"), "n2"),
    )
    d = eng.schedule(admit(shared_pod("p")))
    scores = {s.node: s.components["GpuClustering"] for s in d.scores}
    assert d.node == "n1" and scores["n1"] > scores["n2"], scores


def test_a_policy_scores_the_restored_node_for_a_reservation_owner() -> None:
    """BestFit scores an owner on the node with its reservation given back (cpu left 32 of 32), not on the node as
    other pods see it (28 of 32), even right after scoring the node for another pod."""
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": "bestfit"}))
    load(eng, a_node("n1", extra=GPU_NODE), a_device("n1", gpus=4, gpu_model=A100))
    reserve = eng.schedule(admit(a_pod("r1", cpu="4", memory=None)), reserve_policy="")
    assert reserve.allocation is not None and reserve.node == "n1"
    eng.reserve(Hold(name="r1", uid="u1", node="n1", allocation=reserve.allocation))
    other = eng.schedule(admit(a_pod("other", cpu="2", memory=None, gpu=1)))
    assert other.scores[0].components["BestFit"] == 71  # 100·(1 − (26000/256000 + 3000/16000))
    owner = eng.schedule(
        admit(a_pod("owner", cpu="2", memory=None, gpu=1)),
        reservations=ReservationContext(candidates=("r1",)),
    )
    assert owner.reservation == {"name": "r1", "uid": "u1"}
    assert owner.scores[0].components["BestFit"] == 69  # 100·(1 − (30000/256000 + 3000/16000))
