"""Why a node cannot take a pod: kube-scheduler-style messages paired with stable reason codes.

A ``Reason`` is ``(message, code)``. Messages keep the wording of kube-scheduler and Koordinator where one exists
(``Insufficient cpu``, ``node(s) had untolerated taint {k: v}``, ``Insufficient gpu devices``) so that operators can
search for them; codes are the stable, machine-readable catalogue documented in docs/placement.md.
"""

from __future__ import annotations

from typing import Final

__all__ = ["Reason", "summary_message"]

Reason = tuple[str, str]

TOO_MANY_PODS: Final = ("Too many pods", "TooManyPods")
NODE_UNSCHEDULABLE: Final = ("node(s) were unschedulable", "NodeUnschedulable")
NODE_NAME: Final = ("node(s) didn't match the requested node name", "NodeNameMismatch")
AFFINITY: Final = ("node(s) didn't match Pod's node affinity/selector", "NodeAffinityMismatch")
HINT_NODES: Final = ("node(s) didn't match the scheduling hint's node names", "SchedulingHintMismatch")
GPU_FILTER: Final = ("node(s) had no GPU of the type or UUID the pod asks for", "GPUTypeOrUUIDMismatch")
TOPOLOGY_SCOPED: Final = ("Insufficient Topology Scoped GPU Devices", "InsufficientTopologyScopedGPUs")
# the topology allocator's own wording when no scope of the GPU tree fits (no scope required)
TOPOLOGY_GPUS: Final = ("Insufficient GPU Devices", "InsufficientGPUDevices")
GPU_TOPOLOGY_UNKNOWN: Final = ("node(s) GPU topology unknown", "GPUTopologyUnknown")
MISSING_PARTITION_TABLE: Final = ("node(s) missing GPU Partition Table", "MissingGPUPartitionTable")
UNSUPPORTED_GPU_COUNT: Final = ("node(s) Unsupported number of GPU requests", "UnsupportedGPUCount")
INSUFFICIENT_PARTITIONED: Final = ("Insufficient Partitioned GPU Devices", "InsufficientPartitionedGPUs")
MULTI_SHARED: Final = ("node(s) Unsupported Multi-Shared GPU", "UnsupportedMultiSharedGPU")
JOINT_VIOLATION: Final = ("node(s) Device Joint-Allocate rules violation", "JointAllocateViolation")
NUMA_POLICY_MISMATCH: Final = ("node(s) NUMA Topology policy not match", "NUMAPolicyMismatch")
NUMA_TOPOLOGY_UNKNOWN: Final = ("node(s) missing NUMA topology", "NUMATopologyUnknown")
INVALID_CPU_TOPOLOGY: Final = ("node(s) invalid CPU Topology", "InvalidCPUTopology")
BIND_CONFLICT: Final = (
    "node(s) cpu bind policy conflicts with pod's required cpu bind policy",
    "CPUBindPolicyConflict",
)
NOT_MULTIPLE_CORE: Final = ("node(s) requested cpus not multiple cpus per core", "CPUsNotMultipleOfCore")
NON_INTEGER_CPU: Final = ("the requested CPUs must be integer", "NonIntegerCPUs")
UNALIGNED_NUMA: Final = ("node(s) Unaligned NUMA Hint", "NUMAAffinityUnaligned")
INSUFFICIENT_CPUS: Final = ("node(s) not enough cpus available to satisfy request", "InsufficientCPUs")
POLICY_INFEASIBLE: Final = ("node(s) rejected by the GPU placement policy", "PolicyInfeasible")

_DEVICE_CODES: Final = {
    "gpu": "InsufficientGPUDevices",
    "rdma": "InsufficientRDMADevices",
    "fpga": "InsufficientFPGADevices",
}


def insufficient(resource: str) -> Reason:
    return (f"Insufficient {resource}", "InsufficientResource")


def taint(key: str, value: str) -> Reason:
    return (f"node(s) had untolerated taint {{{key}: {value}}}", "TaintNotTolerated")


def insufficient_devices(dtype: str) -> Reason:
    return (f"Insufficient {dtype} devices", _DEVICE_CODES.get(dtype, "InsufficientDevices"))


def insufficient_vfs(dtype: str) -> Reason:
    return (f"Insufficient {dtype} VirtualFunctions", "InsufficientVirtualFunctions")


def isolation_provider(provider: str) -> Reason:
    return (f"node(s) didn't offer GPU isolation provider {provider}", "GPUIsolationProviderMismatch")


def gpu_share_unsupported(vendor: str, model: str) -> Reason:
    return (f'model "{model}" of vendor "{vendor}" does not support GPU Share', "GPUShareUnsupportedModel")


def insufficient_numa(resource: str) -> Reason:
    return (f"Insufficient NUMA {resource}", "InsufficientNUMAResource")


def unsatisfied_numa(resource: str) -> Reason:
    """No NUMA node set can hold ``resource`` (the topology manager's reason under Restricted/SingleNUMANode)."""
    return (f"Unsatisfied NUMA {resource}", "UnsatisfiedNUMAResource")


def summary_message(total: int, counts: dict[str, int]) -> str:
    """kube-scheduler's FitError text: ``0/N nodes are available: <count reason>, ...`` sorted as strings."""
    if not counts:
        return f"0/{total} nodes are available."
    parts = sorted(f"{c} {r}" for r, c in counts.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."
