"""Hardware discovery for node-reporter: a machine's CPUs, NUMA nodes, GPUs and RDMA NICs as Koordinator objects.

Reads sysfs and procfs under configurable roots (``/`` on the node, a captured tree in tests) and NVML, and builds
the node's ``Device`` (``scheduling.koordinator.sh/v1alpha1``) and ``NodeResourceTopology``
(``topology.node.k8s.io/v1alpha1``) as plain dicts in Koordinator's API shape, as koordlet reports them.

Modules: ``sysfs`` (file access, errors naming the path), ``cpus`` (CPU and NUMA topology), ``pci`` (PCI functions,
RDMA devices, the ``pcieID`` rule), ``nvml`` (the NVML adapter and GPU health), ``build`` (the pure mapping to
objects), ``machine`` (one discovery pass).
"""

from __future__ import annotations

from node_reporter.discovery.build import KubeletSettings, build_device, build_nrt
from node_reporter.discovery.machine import Discovery, Machine, discover, read_machine
from node_reporter.discovery.nvml import GpuRecord, NvmlAnswer, decode_answer, encode_answer
from node_reporter.discovery.sysfs import DiscoveryError

__all__ = [
    "Discovery",
    "DiscoveryError",
    "GpuRecord",
    "KubeletSettings",
    "Machine",
    "NvmlAnswer",
    "build_device",
    "build_nrt",
    "decode_answer",
    "discover",
    "encode_answer",
    "read_machine",
]
