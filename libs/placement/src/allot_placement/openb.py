"""The openb GPU-cluster trace (Alibaba, 2023) mapped onto the objects the engine reads.

Responsibility: read the trace CSVs and build ordinary v1 Node, Koordinator Device and v1 Pod manifests from them, so
the benchmark and the trace simulator drive the engine through exactly the code path a live cluster uses.

Mapping (documented in docs/benchmarks/fragmentation.md):
- Node: ``cpu_milli``, ``memory_mib``; allocatable also lists ``koordinator.sh/gpu-core`` / ``gpu-memory-ratio``
  (100 per GPU) and ``gpu-memory`` as koordlet reports them; label ``node.koordinator.sh/gpu-model`` = ``model``.
- Device: ``gpu`` GPUs with a synthetic topology — two sockets, one NUMA node each, GPUs split evenly and paired per
  PCIe switch — and per-GPU memory by model (P100/T4/V100M16/G1 16 GiB, V100M32/G2 32 GiB, A10 24 GiB, G3 80 GiB;
  the G models are undisclosed, so these are assumptions; sharing is by ratio, so they do not change placements).
- Pod: ``num_gpu = n`` and ``gpu_milli = m`` ask for ``koordinator.sh/gpu-core`` and ``gpu-memory-ratio`` of
  ``n * m / 10``, or ``nvidia.com/gpu: n`` for whole GPUs (``m == 1000``) when ``whole_gpu_as_nvidia`` is set;
  ``gpu_spec`` becomes a required node affinity on the GPU-model label.
Pure but for ``read_nodes`` and ``read_pods``, which read the CSV files (``_read``).
"""

from __future__ import annotations

import copy
import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from allot_contracts.errors import InvalidInput
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects import names as n
from allot_contracts.objects.inventory import parse_device_cr, parse_node
from allot_contracts.objects.pod import Pod, parse_pod
from allot_placement.testing import gpu_topology

__all__ = [
    "GPU_MEMORY_GIB",
    "TraceNode",
    "TracePod",
    "node_manifests",
    "pod_manifest",
    "read_nodes",
    "read_pods",
    "replicate",
]

GPU_MEMORY_GIB = {"P100": 16, "T4": 16, "V100M16": 16, "V100M32": 32, "A10": 24, "G1": 16, "G2": 32, "G3": 80}


class TraceNode:
    __slots__ = ("cpu_milli", "gpus", "memory_mib", "model", "name")

    def __init__(self, name: str, cpu_milli: int, memory_mib: int, gpus: int, model: str) -> None:
        self.name, self.cpu_milli, self.memory_mib, self.gpus, self.model = (
            name,
            cpu_milli,
            memory_mib,
            gpus,
            model,
        )


class TracePod:
    __slots__ = ("cpu_milli", "gpu_milli", "gpu_spec", "memory_mib", "name", "num_gpu")

    def __init__(
        self,
        name: str,
        cpu_milli: int,
        memory_mib: int,
        num_gpu: int,
        gpu_milli: int,
        gpu_spec: tuple[str, ...],
    ) -> None:
        self.name, self.cpu_milli, self.memory_mib = name, cpu_milli, memory_mib
        self.num_gpu, self.gpu_milli, self.gpu_spec = num_gpu, gpu_milli, gpu_spec

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


_Named = TypeVar("_Named", TraceNode, TracePod)


def read_nodes(path: Path) -> list[TraceNode]:
    return _read(
        path,
        lambda r: TraceNode(
            r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"] or 0), r.get("model") or ""
        ),
    )


def _pod(r: dict[str, str]) -> TracePod:
    spec = tuple(sorted(m for m in (r.get("gpu_spec") or "").split("|") if m))
    return TracePod(
        r["name"],
        int(r["cpu_milli"]),
        int(r["memory_mib"]),
        int(r["num_gpu"] or 0),
        int(r["gpu_milli"] or 0),
        spec,
    )


def read_pods(path: Path) -> list[TracePod]:
    return _read(path, _pod)


_Row = TypeVar("_Row")


def _read(path: Path, build: Callable[[dict[str, str]], _Row]) -> list[_Row]:
    """Every row of the CSV at ``path`` built by ``build``; a file that is not an openb list (a missing column, a
    number that is not one) is refused as input naming the file, the line and why."""
    out = []
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            for row in reader:
                try:
                    out.append(build(row))
                except KeyError as exc:
                    reason = f"no {exc.args[0]!r} column: not an openb trace list"
                    raise InvalidInput([(f"{path} line {reader.line_num}", reason)]) from None
                except (TypeError, ValueError):
                    reason = "a field is missing or not a whole number: not an openb trace list"
                    raise InvalidInput([(f"{path} line {reader.line_num}", reason)]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(
            [(str(path), f"cannot be read: {getattr(exc, 'strerror', None) or exc}")]
        ) from None
    return out


def replicate(items: list[_Named], count: int) -> list[_Named]:
    """``count`` items: ``items`` cycled, copies after the first named ``<name>-r<k>`` (a larger cluster or pod list
    of the same mix; used by ``allot bench placement --node-count``)."""
    out: list[_Named] = []
    for i in range(count):
        k, src = divmod(i, len(items))
        item = copy.copy(items[src])
        if k:
            item.name = f"{item.name}-r{k}"
        out.append(item)
    return out


def node_manifests(node: TraceNode, numa_nodes: int = 2) -> tuple[JsonObject, JsonObject | None]:
    """The v1 Node and (for GPU nodes) the Device of a trace node."""
    mem_gib = GPU_MEMORY_GIB.get(node.model, 16)
    alloc: JsonObject = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": "1001"}
    labels: JsonObject = {"kubernetes.io/hostname": node.name}
    if node.gpus:
        alloc.update(
            {
                n.GPU_CORE: str(100 * node.gpus),
                n.GPU_MEMORY_RATIO: str(100 * node.gpus),
                n.GPU_MEMORY: f"{mem_gib * node.gpus}Gi",
            }
        )
        labels.update({n.LABEL_GPU_MODEL: node.model, n.LABEL_GPU_VENDOR: "nvidia"})
    manifest: JsonObject = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }
    if not node.gpus:
        return manifest, None
    numa = numa_nodes if node.gpus >= numa_nodes else 1
    devices: list[JsonValue] = [
        {
            "type": "gpu",
            "id": f"GPU-{node.name}-{m}",
            "minor": m,
            "health": True,
            "resources": {n.GPU_CORE: "100", n.GPU_MEMORY: f"{mem_gib}Gi", n.GPU_MEMORY_RATIO: "100"},
            "topology": gpu_topology(m, node.gpus, numa, 2),
        }
        for m in range(node.gpus)
    ]
    device: JsonObject = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Device",
        "metadata": {
            "name": node.name,
            "labels": {n.LABEL_GPU_MODEL: node.model, n.LABEL_GPU_VENDOR: "nvidia"},
        },
        "spec": {"devices": devices},
    }
    return manifest, device


def pod_manifest(
    pod: TracePod, name: str | None = None, namespace: str = "openb", whole_gpu_as_nvidia: bool = True
) -> JsonObject:
    req: JsonObject = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    if pod.num_gpu and pod.gpu_milli:
        if pod.gpu_milli >= 1000 and whole_gpu_as_nvidia:
            req[n.NVIDIA_GPU] = str(pod.num_gpu)
        else:
            pct = pod.num_gpu * pod.gpu_milli // 10
            req[n.GPU_CORE] = str(pct)
            req[n.GPU_MEMORY_RATIO] = str(pct)
    spec: JsonObject = {"containers": [{"name": "main", "resources": {"requests": req}}]}
    if pod.gpu_spec and pod.num_gpu:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": n.LABEL_GPU_MODEL, "operator": "In", "values": list(pod.gpu_spec)}
                            ]
                        }
                    ]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name or pod.name, "namespace": namespace},
        "spec": spec,
    }


def load_node(eng: Any, node: TraceNode, numa_nodes: int = 2) -> None:
    """Register a trace node (its Node and, with GPUs, its Device) with an engine, read as the door reads them."""
    manifest, device = node_manifests(node, numa_nodes)
    info, errors = parse_node(manifest)
    if info is None or errors:
        raise ValueError(f"trace node {node.name}: {[str(e) for e in errors]}")
    eng.upsert_node(info)
    if device is not None:
        name, inv, errors = parse_device_cr(device)
        if inv is None or errors:
            raise ValueError(f"trace device {node.name}: {[str(e) for e in errors]}")
        eng.upsert_device(name, inv)


def trace_pod(pod: TracePod, **kw: Any) -> Pod:
    """A trace pod read as the door reads it."""
    issues: list[FieldIssue] = []
    out = parse_pod(pod_manifest(pod, **kw), issues, [])
    if out is None:
        raise ValueError(f"trace pod {pod.name}: {[str(i) for i in issues]}")
    return out
