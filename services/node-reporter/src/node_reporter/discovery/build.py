"""The node's Koordinator objects from discovery readings: ``Device`` and ``NodeResourceTopology`` as plain dicts.

Responsibility: map CPU readings, PCI functions, RDMA devices and an NVML answer to the objects koordlet reports,
in Koordinator's API shape (``scheduling.koordinator.sh/v1alpha1`` ``Device``, ``topology.node.k8s.io/v1alpha1``
``NodeResourceTopology``), so that ``allot_contracts.objects.inventory`` reads them as it reads koordlet's. Pure: no IO.

``Device`` (named after the node), rules:
- GPUs come from NVML only: ``id`` = UUID, ``minor`` = NVML's minor number (its index when NVML cannot tell),
  ``health`` per ``nvml.gpu_health``; resources ``gpu-core: 100``, ``gpu-memory`` = total memory (binary quantity),
  ``gpu-memory-ratio: 100``. An NVIDIA display controller on PCI that NVML does not report is a warning, not a device.
- RDMA devices are the PCI physical functions behind ``/sys/class/infiniband`` (a virtual function's own RDMA device
  is part of its physical function): ``id`` = PCI address, ``minor`` = position in address order (as koordlet
  numbers them), ``health`` true, ``rdma: 100``; SR-IOV VFs form one ``vfGroups`` entry, each VF's ``minor`` being its
  ``virtfn`` index, listed by address.
- ``topology``: ``busID`` = PCI address, ``pcieID`` per ``pci.pcie_id`` (the root port), ``nodeID`` = the function's
  ``numa_node`` — when the kernel does not know it (``-1``) and the machine has one NUMA node, that node, otherwise
  ``-1`` (unknown) — and ``socketID`` = the socket of that NUMA node's CPUs (``-1`` when unknown). A GPU whose bus id
  is not on PCI is reported without ``topology``.
- Labels, only when NVML reports GPUs: ``gpu-vendor: nvidia``, ``gpu-driver-version``, and ``gpu-model`` = the model
  koordlet derives (name without ``NVIDIA ``, spaces as ``-``: ``H800``, ``RTX-A6000``; any other character a label
  value cannot hold also becomes ``-``) when all GPUs share one model.
- Devices are ordered GPUs then RDMA, each by minor; labels and resources by name.

``NodeResourceTopology``, rules: one zone ``node-<id>`` of type ``Node`` per NUMA node with ``cpu`` (online CPUs),
``memory`` (MemTotal less huge pages) and ``hugepages-2Mi``/``hugepages-1Gi``, capacity = allocatable = available;
``topologyPolicies`` from the kubelet topology manager policy and scope (koordlet's mapping, ``None`` by default);
annotations ``cpu-topology``, ``cpu-basic-info``, ``cpu-shared-pools`` and ``be-cpu-shared-pools`` (every CPU of a
NUMA node, as koordlet reports a node without pods) and the kubelet CPU manager policy. JSON annotations are compact
with Koordinator's field order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

import msgspec

from allot_contracts.objects import names as n
from allot_contracts.objects.cpuset import format_cpuset
from allot_contracts.quantity import format_quantity
from node_reporter.discovery.cpus import CpuReadings, CpuTopology, cpu_basic_info, cpu_topology
from node_reporter.discovery.nvml import NvmlAnswer, gpu_health
from node_reporter.discovery.pci import PciFunction, RdmaLink, is_nvidia_gpu, normalize_bus_id, pcie_id

__all__ = ["KubeletSettings", "build_device", "build_nrt", "gpu_model", "topology_policy"]

DEVICE_API = "scheduling.koordinator.sh/v1alpha1"
NRT_API = "topology.node.k8s.io/v1alpha1"
LABEL_GPU_DRIVER_VERSION = "node.koordinator.sh/gpu-driver-version"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
ANN_CPU_BASIC_INFO = "node.koordinator.sh/cpu-basic-info"
ANN_CPU_SHARED_POOLS = "node.koordinator.sh/cpu-shared-pools"
ANN_BE_CPU_SHARED_POOLS = "node.koordinator.sh/be-cpu-shared-pools"


class KubeletSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The kubelet configuration the topology reports (from its ``/configz``); defaults are the kubelet's."""

    cpu_manager_policy: str = "none"
    cpu_manager_policy_options: dict[str, str] = {}
    reserved_cpus: str = ""  # the static policy's reserved CPUs, as a cpuset list
    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"


_TOPOLOGY_POLICIES = {
    "single-numa-node": "SingleNUMANode",
    "restricted": "Restricted",
    "best-effort": "BestEffort",
}


def topology_policy(kubelet: KubeletSettings) -> str:
    """koordlet's NRT policy: ``<Policy><Pod|Container>Level``, ``None`` for the ``none`` or an unknown policy."""
    base = _TOPOLOGY_POLICIES.get(kubelet.topology_manager_policy)
    if base is None:
        return "None"
    return base + ("PodLevel" if kubelet.topology_manager_scope == "pod" else "ContainerLevel")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def gpu_model(name: str) -> str:
    """``NVIDIA H800`` -> ``H800``; ``Tesla V100-SXM2-16GB`` -> ``Tesla-V100-SXM2-16GB`` (a valid label value)."""
    return _LABEL_UNSAFE.sub("-", name.strip().removeprefix("NVIDIA "))[:63].strip("-_.")


# --- Device ----------------------------------------------------------------------------------------------------------
class DeviceTopology(TypedDict):
    """Where a device sits: its socket, NUMA node and PCIe switch (-1 when unknown)."""

    socketID: int
    nodeID: int
    pcieID: str
    busID: str


class VirtualFunction(TypedDict):
    minor: int
    busID: str


class VfGroup(TypedDict):
    labels: NotRequired[dict[str, str]]
    vfs: list[VirtualFunction]


class DeviceEntry(TypedDict):
    """One device of the ``Device`` object's ``spec.devices``."""

    type: str
    id: str
    minor: int
    health: bool
    resources: dict[str, str]
    topology: NotRequired[DeviceTopology]
    vfGroups: NotRequired[list[VfGroup]]


class _Metadata(TypedDict):
    name: str
    labels: NotRequired[dict[str, str]]


def _topology(bus_id: str, fn: PciFunction, topo: CpuTopology) -> DeviceTopology:
    numa = fn.numa_node
    if numa < 0 and len(topo.numa_nodes) == 1:
        numa = topo.numa_nodes[0]
    socket = topo.node_socket().get(numa, -1) if numa >= 0 else -1
    return {"socketID": socket, "nodeID": numa, "pcieID": pcie_id(fn), "busID": bus_id}


def _gpus(
    nvml: NvmlAnswer, pci: Mapping[str, PciFunction], topo: CpuTopology, warnings: list[str]
) -> list[DeviceEntry]:
    entries: dict[int, DeviceEntry] = {}
    for rec in sorted(nvml.devices, key=lambda r: r.index):
        minor = rec.minor if rec.minor is not None else rec.index
        if minor in entries:
            warnings.append(
                f"GPU {rec.uuid}: minor {minor} is already taken by {entries[minor]['id']}; skipped"
            )
            continue
        healthy, why = gpu_health(rec)
        if not healthy:
            warnings.append(f"GPU {minor} ({rec.uuid}) is unhealthy: {why}")
        entry: DeviceEntry = {
            "type": n.GPU,
            "id": rec.uuid,
            "minor": minor,
            "health": healthy,
            "resources": {
                n.GPU_CORE: "100",
                n.GPU_MEMORY: format_quantity(n.GPU_MEMORY, rec.memory_total),
                n.GPU_MEMORY_RATIO: "100",
            },
        }
        bus_id = normalize_bus_id(rec.pci_bus_id)
        fn = pci.get(bus_id)
        if fn is None:
            warnings.append(f"GPU {minor} ({rec.uuid}): bus id {bus_id} is not a PCI function; no topology")
        else:
            entry["topology"] = _topology(bus_id, fn, topo)
        entries[minor] = entry
    reported = {normalize_bus_id(r.pci_bus_id) for r in nvml.devices}
    for fn in (pci[a] for a in sorted(pci)):
        if is_nvidia_gpu(fn) and fn.physfn is None and fn.address not in reported:
            cause = f" ({nvml.reason})" if nvml.reason else ""
            warnings.append(f"PCI function {fn.address} is an NVIDIA GPU that NVML does not report{cause}")
    return [entries[m] for m in sorted(entries)]


def _rdma(
    rdma: Sequence[RdmaLink],
    pci: Mapping[str, PciFunction],
    topo: CpuTopology,
    vf_group_labels: Mapping[str, str],
    warnings: list[str],
) -> list[DeviceEntry]:
    pfs: dict[str, PciFunction] = {}
    for link in sorted(rdma, key=lambda r: r.name):
        fn = pci.get(link.address) if link.address else None
        if fn is None:
            warnings.append(f"RDMA device {link.name} is not a PCI function; skipped")
        elif fn.physfn is None:
            pfs.setdefault(fn.address, fn)
    out: list[DeviceEntry] = []
    for minor, (address, fn) in enumerate(sorted(pfs.items())):
        entry: DeviceEntry = {
            "type": n.RDMA_TYPE,
            "id": address,
            "minor": minor,
            "health": True,
            "resources": {n.RDMA: "100"},
            "topology": _topology(address, fn, topo),
        }
        if fn.sriov_numvfs is not None and fn.sriov_numvfs != len(fn.vfs):
            warnings.append(
                f"RDMA {address}: sriov_numvfs is {fn.sriov_numvfs} but {len(fn.vfs)} VFs are linked"
            )
        if fn.vfs:
            vfs: list[VirtualFunction] = [
                {"minor": i, "busID": a} for i, a in sorted(fn.vfs, key=lambda v: v[1])
            ]
            group: VfGroup = (
                {"labels": dict(sorted(vf_group_labels.items())), "vfs": vfs}
                if vf_group_labels
                else {"vfs": vfs}
            )
            entry["vfGroups"] = [group]
        out.append(entry)
    return out


def build_device(
    node_name: str,
    topo: CpuTopology,
    pci: Mapping[str, PciFunction],
    rdma: Sequence[RdmaLink],
    nvml: NvmlAnswer,
    *,
    vf_group_labels: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(the ``Device`` object, warnings about what was left out or is unhealthy)."""
    warnings: list[str] = []
    devices = _gpus(nvml, pci, topo, warnings) + _rdma(rdma, pci, topo, vf_group_labels or {}, warnings)
    labels: dict[str, str] = {}
    if nvml.devices:
        labels[n.LABEL_GPU_VENDOR] = "nvidia"
        models = sorted({gpu_model(r.name) for r in nvml.devices})
        if len(models) == 1 and models[0]:
            labels[n.LABEL_GPU_MODEL] = models[0]
        else:
            warnings.append(f"GPU models differ ({', '.join(models)}): no {n.LABEL_GPU_MODEL} label")
        if nvml.driver_version:
            labels[LABEL_GPU_DRIVER_VERSION] = nvml.driver_version
    metadata: _Metadata = {"name": node_name}
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    manifest = {
        "apiVersion": DEVICE_API,
        "kind": "Device",
        "metadata": metadata,
        "spec": {"devices": devices},
    }
    return manifest, warnings


# --- NodeResourceTopology --------------------------------------------------------------------------------------------
class SharedPool(TypedDict):
    """The CPUs of one NUMA node that pods share (the cpu-shared-pools annotation)."""

    socket: int
    node: int
    cpuset: str


class ZoneResource(TypedDict):
    name: str
    capacity: str
    allocatable: str
    available: str


class Zone(TypedDict):
    """One NUMA node of the NodeResourceTopology's ``zones``."""

    name: str
    type: str
    resources: list[ZoneResource]


class CpuManagerPolicy(TypedDict):
    """The kubelet's CPU manager as the kubelet-cpu-manager-policy annotation tells it."""

    policy: str
    options: NotRequired[dict[str, str]]
    reservedCPUs: NotRequired[str]


def _shared_pools(topo: CpuTopology) -> list[SharedPool]:
    by_node: dict[int, list[int]] = {}
    for c in topo.cpus:
        by_node.setdefault(c.node, []).append(c.id)
    sockets = topo.node_socket()
    pools: list[SharedPool] = [
        {"socket": sockets[nid], "node": nid, "cpuset": format_cpuset(cpus)} for nid, cpus in by_node.items()
    ]
    return sorted(pools, key=lambda p: (p["socket"], p["node"]))


def _resource(name: str, amount: int) -> ZoneResource:
    q = format_quantity(name, amount)
    return {"name": name, "capacity": q, "allocatable": q, "available": q}


def _zones(topo: CpuTopology) -> list[Zone]:
    zones: list[Zone] = []
    for nid in topo.numa_nodes:
        amounts = {
            n.CPU: 1000 * sum(1 for c in topo.cpus if c.node == nid),
            n.MEMORY: topo.memory.get(nid, 0),
            **topo.hugepages.get(nid, {}),
        }
        resources = [_resource(name, amount) for name, amount in sorted(amounts.items())]
        zones.append({"name": f"node-{nid}", "type": "Node", "resources": resources})
    return zones


def build_nrt(
    node_name: str, readings: CpuReadings, kubelet: KubeletSettings | None = None
) -> dict[str, Any]:
    kubelet = kubelet or KubeletSettings()
    topo = cpu_topology(readings)
    detail = [{"id": c.id, "core": c.core, "socket": c.socket, "node": c.node} for c in topo.cpus]
    policy: CpuManagerPolicy = {"policy": kubelet.cpu_manager_policy}
    if kubelet.cpu_manager_policy_options:
        policy["options"] = dict(sorted(kubelet.cpu_manager_policy_options.items()))
    if kubelet.reserved_cpus:
        policy["reservedCPUs"] = kubelet.reserved_cpus
    pools = _json(_shared_pools(topo))
    annotations = {
        ANN_CPU_BASIC_INFO: _json(cpu_basic_info(readings, topo)),
        n.ANN_CPU_TOPOLOGY: _json({"detail": detail}),
        ANN_CPU_SHARED_POOLS: pools,
        ANN_BE_CPU_SHARED_POOLS: pools,
        n.ANN_KUBELET_CPU_MANAGER_POLICY: _json({k: v for k, v in policy.items() if v}),
    }
    return {
        "apiVersion": NRT_API,
        "kind": "NodeResourceTopology",
        "metadata": {
            "name": node_name,
            "labels": {LABEL_MANAGED_BY: "Koordinator"},
            "annotations": dict(sorted(annotations.items())),
        },
        "topologyPolicies": [topology_policy(kubelet)],
        "zones": _zones(topo),
    }
