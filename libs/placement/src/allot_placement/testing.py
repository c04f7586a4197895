"""Builders for the objects the engine reads: small functions with sensible defaults, for tests and benchmarks.

``a_node("n1", cpu="32")``, ``a_device("n1", gpus=8)`` (two NUMA nodes, PCIe pairs), ``an_nrt("n1")``,
``a_pod("p", gpu=2)``, ``bound(pod, "n1", device_allocated={...})``. They return plain manifest dicts in the exact
shapes a cluster (or a scenario file) carries, so tests exercise the same parsing as production.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from allot_contracts.decisions.placement import Decision
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import parse_device_cr, parse_node, parse_nrt
from allot_contracts.objects.pod import Pod, parse_pod

if TYPE_CHECKING:
    from allot_placement.engine import PlacementEngine

__all__ = [
    "a_device",
    "a_node",
    "a_pod",
    "admit",
    "an_nrt",
    "bound",
    "engine_with",
    "gpu_topology",
    "load",
    "minors",
    "place",
    "schedule",
]


def a_node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "128Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: Mapping[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> JsonObject:
    alloc: JsonObject = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    spec: JsonObject = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
        "spec": spec,
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def gpu_topology(minor: int, gpus: int, numa_nodes: int = 2, per_pcie: int = 2) -> JsonObject:
    """Synthetic topology: GPUs split evenly over NUMA nodes (one per socket), ``per_pcie`` GPUs per PCIe switch."""
    per_numa = max(gpus // max(numa_nodes, 1), 1)
    numa = min(minor // per_numa, numa_nodes - 1)
    return {
        "socketID": numa,
        "nodeID": numa,
        "pcieID": str(minor // per_pcie),
        "busID": f"0000:{0x10 + minor:02x}:00.0",
    }


def a_device(
    node: str,
    *,
    gpus: int = 0,
    gpu_memory: str = "80Gi",
    gpu_model: str | None = None,
    numa_nodes: int = 2,
    per_pcie: int = 2,
    topology: bool = True,
    health: bool = True,
    unhealthy: tuple[int, ...] = (),
    rdma: int = 0,
    rdma_vfs: int = 0,
    rdma_vf_labels: dict[str, str] | None = None,
    rdma_labels: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    partitions: JsonValue = None,
) -> JsonObject:
    """A Koordinator Device object. RDMA NIC ``j`` sits on PCIe switch ``j`` (next to GPUs ``j*per_pcie``...)."""
    devices: list[JsonValue] = []
    for m in range(gpus):
        d: JsonObject = {
            "type": "gpu",
            "id": f"GPU-{node}-{m}",
            "minor": m,
            "health": health and m not in unhealthy,
            "resources": {n.GPU_CORE: "100", n.GPU_MEMORY: gpu_memory, n.GPU_MEMORY_RATIO: "100"},
        }
        if topology:
            d["topology"] = gpu_topology(m, gpus, numa_nodes, per_pcie)
        devices.append(d)
    for j in range(rdma):
        pcie_gpu = min(j * per_pcie, max(gpus - 1, 0))
        topo = gpu_topology(pcie_gpu, max(gpus, rdma * per_pcie), numa_nodes, per_pcie)
        topo = {**topo, "pcieID": str(j), "busID": f"0000:{0x80 + j:02x}:00.0"}
        r: JsonObject = {
            "type": "rdma",
            "id": f"0000:{0x80 + j:02x}:00.0",
            "minor": j,
            "health": health,
            "labels": dict(rdma_labels or {"type": "fakeW"}),
            "resources": {n.RDMA: "100"},
            "topology": topo,
        }
        if rdma_vfs:
            r["vfGroups"] = [
                {
                    "labels": dict(rdma_vf_labels or {"type": "general"}),
                    "vfs": [
                        {"minor": v, "busID": f"0000:{0x80 + j:02x}:00.{v + 2}"} for v in range(rdma_vfs)
                    ],
                }
            ]
        devices.append(r)
    meta_labels: JsonObject = dict(labels or {})
    if gpu_model:
        meta_labels[n.LABEL_GPU_MODEL] = gpu_model
    meta: JsonObject = {"name": node, "labels": meta_labels}
    if partitions is not None:
        meta["annotations"] = {n.ANN_GPU_PARTITIONS: json.dumps(partitions)}
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": meta,
        "spec": {"devices": devices},
    }


def an_nrt(
    node: str,
    *,
    numa_nodes: int = 2,
    cores_per_numa: int = 8,
    threads: int = 2,
    memory_per_numa: str = "64Gi",
    policy: str | None = None,
    reserved: str | None = None,
    zones: bool = True,
) -> JsonObject:
    """A NodeResourceTopology: ``numa_nodes`` sockets with one NUMA node each; CPU id = thread*cores + core."""
    total_cores = numa_nodes * cores_per_numa
    detail: list[JsonValue] = []
    for t in range(threads):
        for core in range(total_cores):
            z = core // cores_per_numa
            detail.append({"id": t * total_cores + core, "core": core, "socket": z, "node": z})
    ann: JsonObject = {n.ANN_CPU_TOPOLOGY: json.dumps({"detail": detail})}
    if reserved:
        ann[n.ANN_KUBELET_CPU_MANAGER_POLICY] = json.dumps({"policy": "static", "reservedCPUs": reserved})
    out: JsonObject = {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node, "annotations": ann},
    }
    if policy:
        out["topologyPolicies"] = [policy]
    if zones:
        out["zones"] = [
            {
                "name": f"node-{z}",
                "type": "Node",
                "resources": [
                    {
                        "name": "cpu",
                        "capacity": str(cores_per_numa * threads),
                        "allocatable": str(cores_per_numa * threads),
                    },
                    {"name": "memory", "capacity": memory_per_numa, "allocatable": memory_per_numa},
                ],
            }
            for z in range(numa_nodes)
        ]
    return out


def a_pod(
    name: str,
    *,
    namespace: str = "default",
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    gpu: int | None = None,
    resources: Mapping[str, str | int] | None = None,
    limits: Mapping[str, str | int] | None = None,
    labels: dict[str, str] | None = None,
    annotations: Mapping[str, JsonValue] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    affinity: JsonObject | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    init: list[Mapping[str, str | int]] | None = None,
) -> JsonObject:
    req: JsonObject = {}
    if cpu is not None:
        req["cpu"] = cpu
    if memory is not None:
        req["memory"] = memory
    if gpu is not None:
        req[n.NVIDIA_GPU] = str(gpu)
    req.update(resources or {})
    res: JsonObject = {"requests": req}
    if limits:
        res["limits"] = dict(limits)
    spec: JsonObject = {"containers": [{"name": "main", "image": "busybox", "resources": res}]}
    if init:
        spec["initContainers"] = [
            {"name": f"init-{i}", "image": "busybox", "resources": {"requests": dict(r)}}
            for i, r in enumerate(init)
        ]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if affinity:
        spec["affinity"] = affinity
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    ann: JsonObject = {
        k: (v if isinstance(v, str) else json.dumps(v)) for k, v in (annotations or {}).items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": dict(labels or {}),
            "annotations": ann,
        },
        "spec": spec,
    }


def _child(parent: JsonObject, key: str) -> JsonObject:
    """``parent[key]``, an object (a new empty one when the key is missing)."""
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key} is not an object")
    return value


def bound(
    pod: JsonObject,
    node: str,
    *,
    device_allocated: JsonValue = None,
    resource_status: JsonValue = None,
) -> JsonObject:
    """``pod`` bound to ``node`` with the given allocation annotations."""
    out: JsonObject = json.loads(json.dumps(pod))
    _child(out, "spec")["nodeName"] = node
    ann = _child(_child(out, "metadata"), "annotations")
    if device_allocated is not None:
        ann[n.ANN_DEVICE_ALLOCATED] = json.dumps(device_allocated)
    if resource_status is not None:
        ann[n.ANN_RESOURCE_STATUS] = json.dumps(resource_status)
    return out


def _name(manifest: JsonObject) -> JsonValue:
    meta = manifest.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None


def admit(manifest: JsonObject) -> Pod:
    """A pod manifest read as the door reads it; raises when the door refuses it."""
    issues: list[FieldIssue] = []
    pod = parse_pod(manifest, issues, [])
    if pod is None:
        raise ValueError(f"pod {_name(manifest)} refused: {[str(i) for i in issues]}")
    return pod


def load(eng: PlacementEngine, *docs: JsonObject) -> None:
    """Feed objects (Node, Device, NodeResourceTopology, bound Pods) to an engine, read as the door reads them."""
    for doc in docs:
        kind = str(doc.get("kind"))
        name = _name(doc)
        if kind == "Node":
            info, errors = parse_node(doc)
            if info is None or errors:
                raise ValueError(f"Node {name}: {errors}")
            eng.upsert_node(info)
        elif kind == "Device":
            node, inv, errors = parse_device_cr(doc)
            if inv is None or errors:
                raise ValueError(f"Device {name}: {errors}")
            eng.upsert_device(node, inv)
        elif kind == "NodeResourceTopology":
            node, topo, errors = parse_nrt(doc)
            if topo is None or errors:
                raise ValueError(f"NodeResourceTopology {name}: {errors}")
            eng.upsert_topology(node, topo)
        elif kind == "Pod":
            eng.add_bound_pod(admit(doc))
        else:
            raise ValueError(f"cannot load a {kind}")


def engine_with(*docs: JsonObject, config: JsonObject | None = None) -> PlacementEngine:
    """An engine loaded with the given objects (Node, Device, NodeResourceTopology, bound Pods), in order."""
    from allot_placement.config import PlacementConfig
    from allot_placement.engine import PlacementEngine

    eng = PlacementEngine(PlacementConfig.from_dict(config) if config is not None else None)
    load(eng, *docs)
    return eng


def schedule(eng: PlacementEngine, pod: JsonObject | Pod) -> Decision:
    """``eng.schedule`` for a manifest (read at the door first) or a Pod."""
    return eng.schedule(admit(pod) if isinstance(pod, dict) else pod)


def place(eng: PlacementEngine, pod: JsonObject | Pod) -> Decision:
    """Schedule ``pod`` and assume it when Scheduled; returns the Decision."""
    d = schedule(eng, pod)
    if d.outcome == n.SCHEDULED:
        eng.assume(d)
    return d


def minors(decision: Decision, dtype: str = "gpu") -> list[int]:
    """The minors of ``dtype`` a decision allocated (from its device-allocated annotation)."""
    return [e["minor"] for e in decision.annotations.get(n.ANN_DEVICE_ALLOCATED, {}).get(dtype, [])]
