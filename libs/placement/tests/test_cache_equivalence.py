"""Caches never change a decision: random clusters and pod sequences placed by an engine with every cache on and by
one with every cache off (``PlacementEngine(..., caches=False)``) must give identical decisions — node, devices,
cpuset, reasons, scores — and end in the same allocation state.

The clusters are built so that caches get shared: nodes come in a few hardware shapes (GPUs with or without NUMA and
PCIe topology, a few models), each GPU with its own UUID, with labels, taints, NodeResourceTopologies and bound pods.
The pods read per-node identities and node-side details: HAMi's use-/nouse-gpuuuid and use-/nouse-gputype, node
selectors and affinity (labels and ``metadata.name``), tolerations, ``requiredTopologyScope`` hints, cpusets, HAMi's
scheduler policies, and reservations (reserve pods, owners placed in them); under every placement policy.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allot_contracts.objects import names as n
from allot_placement import PlacementConfig, PlacementEngine
from allot_placement.reservations import Hold
from allot_placement.reserved import ReservationContext
from allot_placement.testing import a_device, a_node, a_pod, admit, an_nrt, bound, load

POLICIES = ("koordinator", "binpack", "spread", "gpuclustering", "random", "bestfit", "gpupacking", "fgd")
TYPICAL = {
    "typicalPods": [
        {"cpuMilli": 4000, "gpuCount": 1, "gpuMilli": 500, "weight": 3},
        {"cpuMilli": 4000, "gpuCount": 1, "gpuMilli": 1000, "weight": 2},
    ]
}
TYPES = ("A100", "A10", "H100", "T4")
# machine types (GPUs, NUMA nodes, GPU topology, model, cpu, NodeResourceTopology): few, so that identical machines
# (which share caches) are common; nodes differ by their identities (name, GPU UUIDs), labels, taints and pods
MACHINES = (
    (4, 2, True, "NVIDIA-A100-SXM4-80GB", "32", True),
    (2, 1, True, "NVIDIA-A10", "16", False),
    (4, 2, False, "NVIDIA-H100", "32", False),
    (0, 1, False, "", "16", True),
)
TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
RSPEC = {"requiredCPUBindPolicy": "FullPCPUs"}
PROD_LSR = {n.LABEL_QOS: "LSR", n.LABEL_PRIORITY_CLASS: "koord-prod"}


@st.composite
def nodes(draw: Any, max_nodes: int) -> list[dict[str, Any]]:
    count = draw(st.integers(2, max_nodes))
    out = []
    for i in range(count):
        gpus, numa, topology, model, cpu, nrt = MACHINES[draw(st.integers(0, len(MACHINES) - 1))]
        out.append(
            {
                "name": f"node-{i}",
                "gpus": gpus,
                "numa": numa,
                "topology": topology,
                "model": model,
                "cpu": cpu,
                "nrt": nrt,
                "zone": draw(st.sampled_from(("a", "b"))),
                "tainted": draw(st.integers(0, 3)) == 0,
                "bound": gpus > 0 and draw(st.integers(0, 3)) == 0,
            }
        )
    return out


def uuids(cluster: list[dict[str, Any]]) -> list[str]:
    return [f"GPU-{nd['name']}-{m}" for nd in cluster for m in range(nd["gpus"])] + ["GPU-elsewhere"]


@st.composite
def pod_ops(draw: Any, cluster: list[dict[str, Any]], max_ops: int) -> list[dict[str, Any]]:
    ids = uuids(cluster)
    names = [nd["name"] for nd in cluster]
    ops = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(("pod", "pod", "pod", "pod", "release", "reserve", "owner")))
        if kind == "release":
            ops.append({"kind": kind, "index": draw(st.integers(0, 40))})
            continue
        gpu = draw(st.sampled_from(("none", "whole", "whole", "shared", "shared")))
        ann: dict[str, Any] = {}
        pod: dict[str, Any] = {"kind": kind, "cpu": draw(st.sampled_from(("1", "2", "4"))), "ann": ann}
        pod["gpu"] = gpu
        pod["count"] = draw(st.integers(1, 2)) if gpu == "whole" else 1
        pod["share"] = draw(st.sampled_from(("25", "50")))
        if gpu != "none":
            if draw(st.integers(0, 2)) == 0:
                ann["nvidia.com/use-gpuuuid"] = ",".join(
                    draw(st.lists(st.sampled_from(ids), min_size=1, max_size=2))
                )
            if draw(st.integers(0, 2)) == 0:
                ann["nvidia.com/nouse-gpuuuid"] = ",".join(
                    draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3))
                )
            if draw(st.integers(0, 3)) == 0:
                ann["nvidia.com/use-gputype"] = draw(st.sampled_from(TYPES))
            if draw(st.integers(0, 3)) == 0:
                ann["nvidia.com/nouse-gputype"] = draw(st.sampled_from(TYPES))
            if gpu == "whole" and draw(st.integers(0, 2)) == 0:
                scope = draw(st.sampled_from(("PCIe", "NUMANode", "Node")))
                ann[n.ANN_DEVICE_ALLOCATE_HINT] = {"gpu": {"requiredTopologyScope": scope}}
            if draw(st.integers(0, 3)) == 0:
                ann["hami.io/gpu-scheduler-policy"] = draw(st.sampled_from(("spread", "binpack")))
        pod["cpuset"] = gpu == "none" and draw(st.integers(0, 3)) == 0
        pod["selector"] = draw(st.sampled_from((None, None, "a", "b")))
        pod["name_in"] = draw(st.sampled_from((None, None, None, *names)))
        pod["tolerates"] = draw(st.booleans())
        ops.append(pod)
    return ops


@st.composite
def scenarios(draw: Any, max_nodes: int = 4, max_ops: int = 16) -> dict[str, Any]:
    cluster = draw(nodes(max_nodes))
    return {
        "policy": draw(st.sampled_from(POLICIES)),
        "nodes": cluster,
        "ops": draw(pod_ops(cluster, max_ops)),
    }


def node_docs(nd: dict[str, Any]) -> list[dict[str, Any]]:
    name, gpus = nd["name"], nd["gpus"]
    extra = {n.GPU_CORE: str(100 * gpus), n.GPU_MEMORY_RATIO: str(100 * gpus)} if gpus else None
    docs = [
        a_node(
            name,
            cpu=nd["cpu"],
            labels={"zone": nd["zone"], "kubernetes.io/hostname": name},
            taints=[TAINT] if nd["tainted"] else None,
            extra=extra,
        )
    ]
    if gpus:
        docs.append(
            a_device(name, gpus=gpus, numa_nodes=nd["numa"], topology=nd["topology"], gpu_model=nd["model"])
        )
    if nd["nrt"]:
        docs.append(an_nrt(name, numa_nodes=2, cores_per_numa=4))
    if nd["bound"]:
        holder = a_pod(f"bound-{name}", namespace="bound", gpu=1)
        used = {"minor": 0, "resources": {n.GPU_CORE: "100", n.GPU_MEMORY_RATIO: "100"}}
        docs.append(bound(holder, name, device_allocated={"gpu": [used]}))
    return docs


def pod_manifest(op: dict[str, Any], name: str) -> dict[str, Any]:
    resources: dict[str, str] = {}
    gpu = None
    if op["gpu"] == "whole":
        gpu = op["count"]
    elif op["gpu"] == "shared":
        resources = {n.GPU_CORE: op["share"], n.GPU_MEMORY_RATIO: op["share"]}
    labels, ann = None, dict(op["ann"])
    if op["cpuset"]:
        labels, ann[n.ANN_RESOURCE_SPEC] = dict(PROD_LSR), RSPEC
    affinity = None
    if op["name_in"] is not None:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [op["name_in"]]}]}
        affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    return a_pod(
        name,
        cpu=op["cpu"],
        gpu=gpu,
        resources=resources,
        labels=labels,
        annotations=ann,
        node_selector={"zone": op["selector"]} if op["selector"] else None,
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
        if op["tolerates"]
        else None,
        affinity=affinity,
    )


def engine(scenario: dict[str, Any], caches: bool) -> PlacementEngine:
    config = PlacementConfig.from_dict({"policy": scenario["policy"], "fragmentation": TYPICAL, "seed": 7})
    eng = PlacementEngine(config, caches=caches)
    for nd in scenario["nodes"]:
        load(eng, *node_docs(nd))
    return eng


def run(scenario: dict[str, Any], caches: bool) -> tuple[list[Any], str]:
    """Every decision of the scenario (as plain data) and the final allocation digest."""
    eng = engine(scenario, caches)
    out: list[Any] = []
    placed: list[str] = []
    holds: list[str] = []
    for i, op in enumerate(scenario["ops"]):
        if op["kind"] == "release":
            if placed:
                ns, _, name = placed.pop(op["index"] % len(placed)).partition("/")
                freed = eng.release(ns, name)
                out.append(msgspec.to_builtins(freed))
            continue
        pod = admit(pod_manifest(op, f"p{i}"))
        if op["kind"] == "reserve":
            d = eng.schedule(pod, reserve_policy="")
            out.append(msgspec.to_builtins(d))
            if d.outcome == n.SCHEDULED and d.allocation is not None and d.node is not None:
                eng.reserve(Hold(name=f"r{i}", uid=f"u{i}", node=d.node, allocation=d.allocation))
                holds.append(f"r{i}")
            continue
        ctx = ReservationContext(candidates=tuple(holds)) if op["kind"] == "owner" and holds else None
        d = eng.schedule(pod, reservations=ctx)
        out.append(msgspec.to_builtins(d))
        if d.outcome == n.SCHEDULED:
            eng.assume(d)
            placed.append(pod.key)
    return out, eng.digest()


def check(scenario: dict[str, Any]) -> None:
    cached, cached_digest = run(scenario, caches=True)
    fresh, fresh_digest = run(scenario, caches=False)
    for i, (a, b) in enumerate(zip(cached, fresh, strict=True)):
        assert a == b, f"decision {i} differs with caches on / off"
    assert cached_digest == fresh_digest


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(scenarios())
def test_caches_never_change_a_decision(scenario: dict[str, Any]) -> None:
    check(scenario)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(max_nodes=7, max_ops=30))
def test_caches_never_change_a_decision_long(scenario: dict[str, Any]) -> None:
    check(scenario)
