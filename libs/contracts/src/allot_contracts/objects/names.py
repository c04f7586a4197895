"""Names the placement engine reads and writes: resources, labels, annotations, policies.

Every string that appears in a Kubernetes or Koordinator object lives here once, so a spelling (``gpu.shared`` with
a dot, ``koordinator.sh/qosClass`` in camel case) cannot drift between modules.
"""

from __future__ import annotations

from typing import Final, NamedTuple

# --- core resources --------------------------------------------------------------------------------------------------
CPU: Final = "cpu"
MEMORY: Final = "memory"
PODS: Final = "pods"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"

# --- device resources (Koordinator protocol) ------------------------------------------------------------------------
NVIDIA_GPU: Final = "nvidia.com/gpu"
AMD_GPU: Final = "amd.com/gpu"
DCU_GPU: Final = "dcu.com/gpu"
KOORD_GPU: Final = "koordinator.sh/gpu"
GPU_SHARED: Final = "koordinator.sh/gpu.shared"
GPU_CORE: Final = "koordinator.sh/gpu-core"
GPU_MEMORY: Final = "koordinator.sh/gpu-memory"
GPU_MEMORY_RATIO: Final = "koordinator.sh/gpu-memory-ratio"
NPU_CORE: Final = "huawei.com/npu-core"
NPU_CPU: Final = "huawei.com/npu-cpu"
NPU_DVPP: Final = "huawei.com/npu-dvpp"
RDMA: Final = "koordinator.sh/rdma"
FPGA: Final = "koordinator.sh/fpga"

# HAMi names accepted as aliases (per-GPU amounts; converted per container).
HAMI_GPUMEM: Final = "nvidia.com/gpumem"
HAMI_GPUCORES: Final = "nvidia.com/gpucores"
HAMI_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
HAMI_NAMES: Final = frozenset({HAMI_GPUMEM, HAMI_GPUCORES, HAMI_GPUMEM_PERCENTAGE})

# Deprecated ``kubernetes.io/`` names, rewritten to the ``koordinator.sh/`` ones in specs and annotations.
DEPRECATED_ALIASES: Final = {
    "kubernetes.io/gpu": KOORD_GPU,
    "kubernetes.io/gpu-core": GPU_CORE,
    "kubernetes.io/gpu-memory": GPU_MEMORY,
    "kubernetes.io/gpu-memory-ratio": GPU_MEMORY_RATIO,
    "kubernetes.io/rdma": RDMA,
    "kubernetes.io/fpga": FPGA,
}

# Batch / mid overcommit resources (ordinary extended resources for the fit check).
BATCH_CPU: Final = "kubernetes.io/batch-cpu"
BATCH_MEMORY: Final = "kubernetes.io/batch-memory"
MID_CPU: Final = "kubernetes.io/mid-cpu"
MID_MEMORY: Final = "kubernetes.io/mid-memory"

WHOLE_GPU_NAMES: Final = (NVIDIA_GPU, AMD_GPU, DCU_GPU)
GPU_RESOURCE_NAMES: Final = frozenset(
    {
        NVIDIA_GPU,
        AMD_GPU,
        DCU_GPU,
        KOORD_GPU,
        GPU_SHARED,
        GPU_CORE,
        GPU_MEMORY,
        GPU_MEMORY_RATIO,
        NPU_CORE,
        NPU_CPU,
        NPU_DVPP,
    }
)

# --- device types: the one registry ------------------------------------------------------------------------------------
GPU: Final = "gpu"
RDMA_TYPE: Final = "rdma"
FPGA_TYPE: Final = "fpga"
NPU_TYPE: Final = "npu"
XPU_TYPE: Final = "xpu"


class DeviceType(NamedTuple):
    """One kind of device a node's ``Device`` object may list.

    ``resources``: the extended resources a pod requests it by, which the device allocator places on devices of
    this type. A type without resources is recorded (admitted on ``Device`` objects, stored, shown) but not
    allocated: placement ignores it, and a pod cannot ask for it by type.
    """

    name: str
    resources: frozenset[str] = frozenset()

    @property
    def allocated(self) -> bool:
        return bool(self.resources)


# Adding a device type: one entry here, plus its allocator in allot_placement. The order is the canonical order of
# types in outputs.
DEVICE_TYPE_REGISTRY: Final = (
    DeviceType(GPU, GPU_RESOURCE_NAMES),
    DeviceType(RDMA_TYPE, frozenset({RDMA})),
    DeviceType(FPGA_TYPE, frozenset({FPGA})),
    DeviceType(NPU_TYPE),
    DeviceType(XPU_TYPE),
)
# The types placement allocates (and the canonical order of types in outputs).
DEVICE_TYPES: Final = tuple(t.name for t in DEVICE_TYPE_REGISTRY if t.allocated)
# Every type a Device object may list, allocated or only recorded.
RECORDED_DEVICE_TYPES: Final = tuple(t.name for t in DEVICE_TYPE_REGISTRY)
RESOURCES_BY_TYPE: Final = {t.name: t.resources for t in DEVICE_TYPE_REGISTRY if t.allocated}
# Names whose node-level fit is decided by the device allocator when the node does not advertise them.
DEVICE_FAMILY_NAMES: Final = frozenset().union(*RESOURCES_BY_TYPE.values())

# --- labels -----------------------------------------------------------------------------------------------------------
LABEL_QOS: Final = "koordinator.sh/qosClass"
LABEL_PRIORITY_CLASS: Final = "koordinator.sh/priority-class"
LABEL_GPU_ISOLATION_PROVIDER: Final = "koordinator.sh/gpu-isolation-provider"
LABEL_GPU_MODEL: Final = "node.koordinator.sh/gpu-model"
LABEL_GPU_VENDOR: Final = "node.koordinator.sh/gpu-vendor"
LABEL_GPU_PARTITION_POLICY: Final = "node.koordinator.sh/gpu-partition-policy"
LABEL_NUMA_TOPOLOGY_POLICY: Final = "node.koordinator.sh/numa-topology-policy"
LABEL_CPU_BIND_POLICY: Final = "node.koordinator.sh/cpu-bind-policy"
LABEL_NUMA_ALLOCATE_STRATEGY: Final = "node.koordinator.sh/numa-allocate-strategy"

# --- annotations ------------------------------------------------------------------------------------------------------
ANN_DEVICE_ALLOCATED: Final = "scheduling.koordinator.sh/device-allocated"
ANN_DEVICE_ALLOCATE_HINT: Final = "scheduling.koordinator.sh/device-allocate-hint"
ANN_DEVICE_JOINT_ALLOCATE: Final = "scheduling.koordinator.sh/device-joint-allocate"
ANN_GPU_PARTITION_SPEC: Final = "scheduling.koordinator.sh/gpu-partition-spec"
ANN_GPU_PARTITIONS: Final = "scheduling.koordinator.sh/gpu-partitions"
ANN_RESOURCE_SPEC: Final = "scheduling.koordinator.sh/resource-spec"
ANN_RESOURCE_STATUS: Final = "scheduling.koordinator.sh/resource-status"
ANN_NUMA_TOPOLOGY_SPEC: Final = "scheduling.koordinator.sh/numa-topology-spec"
ANN_CPU_TOPOLOGY: Final = "node.koordinator.sh/cpu-topology"
ANN_POD_CPU_ALLOCS: Final = "node.koordinator.sh/pod-cpu-allocs"
ANN_KUBELET_CPU_MANAGER_POLICY: Final = "kubelet.koordinator.sh/cpu-manager-policy"
ANN_NODE_RESERVATION: Final = "node.koordinator.sh/reservation"

POD_ANNOTATIONS_READ: Final = (
    ANN_DEVICE_ALLOCATE_HINT,
    ANN_DEVICE_JOINT_ALLOCATE,
    ANN_GPU_PARTITION_SPEC,
    ANN_NUMA_TOPOLOGY_SPEC,
    ANN_RESOURCE_SPEC,
)
POD_LABELS_READ: Final = (LABEL_GPU_ISOLATION_PROVIDER, LABEL_PRIORITY_CLASS, LABEL_QOS)

# --- enumerations -----------------------------------------------------------------------------------------------------
TOPOLOGY_SCOPES: Final = {"Device": 4, "PCIe": 3, "NUMANode": 2, "Node": 1}
ALLOCATE_STRATEGIES: Final = frozenset({"ApplyForAll", "RequestsAsCount"})
DEVICE_EXCLUSIVE_POLICIES: Final = frozenset({"DeviceLevel", "PCIeLevel"})
JOINT_SCOPES: Final = frozenset({"SamePCIe"})
PARTITION_POLICIES: Final = frozenset({"Restricted", "BestEffort"})
CPU_BIND_POLICIES: Final = frozenset({"Default", "FullPCPUs", "SpreadByPCPUs", "ConstrainedBurst"})
CPU_EXCLUSIVE_POLICIES: Final = frozenset({"None", "PCPULevel", "NUMANodeLevel"})
NUMA_POLICIES: Final = frozenset({"", "None", "BestEffort", "Restricted", "SingleNUMANode"})
NUMA_EXCLUSIVE: Final = frozenset({"Required", "Preferred"})
QOS_CLASSES: Final = frozenset({"LSE", "LSR", "LS", "BE", "SYSTEM"})
# Koordinator's priority classes and their spec.priority bands (inclusive), highest first: the one table.
PRIORITY_BANDS: Final = (
    ("koord-prod", 9000, 9999),
    ("koord-mid", 7000, 7999),
    ("koord-batch", 5000, 5999),
    ("koord-free", 3000, 3999),
)
PRIORITY_CLASSES: Final = frozenset(name for name, _, _ in PRIORITY_BANDS)
HOPPER_MODELS: Final = frozenset({"H100", "H800", "H20"})

# Outcomes.
SCHEDULED: Final = "Scheduled"
UNSCHEDULABLE: Final = "Unschedulable"
REJECTED: Final = "Rejected"
