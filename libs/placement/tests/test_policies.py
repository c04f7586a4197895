"""FGD and the baseline policies inside the live engine: scores, GPU choices, configuration."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects import names as n
from allot_placement import ConfigError, PlacementConfig, PlacementEngine
from allot_placement.openb import TraceNode, TracePod, node_manifests, pod_manifest
from allot_placement.testing import admit, load, minors, place

TYPICAL = {
    "typicalPods": [
        {"cpuMilli": 4000, "gpuCount": 1, "gpuMilli": 500, "weight": 3},
        {"cpuMilli": 4000, "gpuCount": 1, "gpuMilli": 1000, "weight": 2},
        {"cpuMilli": 8000, "gpuCount": 0, "gpuMilli": 0, "weight": 1},
    ]
}


def cluster(policy: str, *nodes: TraceNode) -> PlacementEngine:
    eng = PlacementEngine(PlacementConfig.from_dict({"policy": policy, "fragmentation": TYPICAL, "seed": 3}))
    for nd in nodes:
        manifest, device = node_manifests(nd)
        load(eng, manifest)
        if device is not None:
            load(eng, device)
    return eng


def pod(name: str, gpus: int, milli: int, cpu: int = 4000, node: str | None = None) -> dict[str, Any]:
    m = pod_manifest(TracePod(name, cpu, 8192, gpus, milli, ()), namespace="t")
    if node:
        m["spec"]["nodeName"] = node
    return m


def test_fgd_needs_a_typical_pod_distribution() -> None:
    with pytest.raises(ConfigError, match="typicalPods"):
        PlacementConfig.from_dict({"policy": "fgd"})


def test_policy_presets_score_alone() -> None:
    cfg = PlacementConfig.from_dict({"policy": "bestfit"})
    assert (cfg.node_fit.weight, cfg.numa.weight, cfg.gpu_policy) == (0, 0, "bestfit")


def test_fgd_fills_a_half_used_gpu_instead_of_opening_a_new_one() -> None:
    eng = cluster("fgd", TraceNode("a", 32000, 65536, 2, "T4"), TraceNode("b", 32000, 65536, 2, "T4"))
    first = place(eng, pod("p1", 1, 500))
    second = place(eng, pod("p2", 1, 500))
    assert (second.node, minors(second)) == (first.node, minors(first))
    assert "FGD" in second.scores[0].components


def test_fgd_avoids_leaving_a_useless_leftover() -> None:
    # GPU 0 has 600m left, GPU 1 has 550m left. A 500m pod on GPU 0 leaves 100m (useless), on GPU 1 50m (useless):
    # both fragment; FGD prefers the smaller fragment.
    eng = cluster("fgd", TraceNode("a", 32000, 65536, 2, "T4"))
    place(eng, pod("x", 1, 400))
    place(eng, pod("y", 1, 450))
    d = eng.schedule(admit(pod("p", 1, 500)))
    assert minors(d) == [1]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("bestfit", "small"), ("gpupacking", "big"), ("dotproduct", "small"), ("gpuclustering", "big")],
    ids=["bestfit-least-left", "packing-used-gpu", "dotproduct-least-aligned", "clustering-same-shape"],
)
def test_baselines_choose_nodes(policy: str, expected: str) -> None:
    eng = cluster(policy, TraceNode("big", 96000, 393216, 8, "G2"), TraceNode("small", 16000, 65536, 2, "T4"))
    place(eng, pod("seed-big", 1, 500, node="big"))  # big already runs a shared pod on GPU 0
    d = eng.schedule(admit(pod("p", 1, 500)))
    assert d.node == ("big" if policy == "gpupacking" else expected)  # packing: the shared GPU already in use


def test_random_is_keyed_and_spreads() -> None:
    nodes = [TraceNode(f"n{i}", 32000, 65536, 2, "T4") for i in range(8)]
    picks = {cluster("random", *nodes).schedule(admit(pod(f"p{i}", 1, 1000))).node for i in range(20)}
    assert len(picks) > 3
    again = {cluster("random", *nodes).schedule(admit(pod(f"p{i}", 1, 1000))).node for i in range(20)}
    assert picks == again


def test_best_fit_gpu_choice_for_shared_pods() -> None:
    eng = cluster("bestfit", TraceNode("a", 32000, 65536, 4, "T4"))
    place(eng, pod("x", 1, 300))  # GPU 0: 700 left
    held = pod("held", 1, 600, node="a")
    held["metadata"]["annotations"] = {
        n.ANN_DEVICE_ALLOCATED: {
            "gpu": [{"minor": 1, "resources": {n.GPU_CORE: "60", n.GPU_MEMORY_RATIO: "60"}}]
        }
    }
    load(eng, held)  # GPU 1: 400 left
    d = eng.schedule(admit(pod("p", 1, 350)))
    assert minors(d) == [1]  # the tightest fit, not the lowest index


def test_cpu_only_pods_are_scored_by_the_policy() -> None:
    eng = cluster("fgd", TraceNode("a", 16000, 65536, 2, "T4"), TraceNode("b", 64000, 65536, 2, "T4"))
    d = eng.schedule(admit(pod_manifest(TracePod("cpu", 14000, 1024, 0, 0, ()), namespace="t")))
    assert d.node == "b"  # on a the 2 cores left would starve the GPUs (every idle GPU becomes a fragment)
    assert set(d.scores[0].components) == {"NodeResourcesFit", "NodeNUMAResource", "FGD"}
    assert n.ANN_DEVICE_ALLOCATED not in d.annotations
