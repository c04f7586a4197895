"""One discovery pass over a machine: read everything once, then build its ``Device`` and ``NodeResourceTopology``.

Responsibility: ``read_machine`` gathers the raw readings (CPUs, PCI functions, RDMA devices) under the given roots;
``discover`` adds the NVML answer (queried unless one is given) and builds both objects with ``build``. The readings
are plain data, so a pass can be recorded and replayed; everything after the reading is pure.

Errors: a required file (CPUs, NUMA nodes, memory, ``/proc/cpuinfo``) that is missing, unreadable or malformed raises
``DiscoveryError`` naming it. What discovery can work around — a PCI function or RDMA device that cannot be read, no
GPU or no NVML, a GPU without PCI topology, an RDMA device that is not on PCI, an unhealthy GPU — is reported in
``Discovery.warnings`` instead, each message naming the file or device concerned.
"""

from __future__ import annotations

from typing import Any

import msgspec

from node_reporter.discovery.build import KubeletSettings, build_device, build_nrt
from node_reporter.discovery.cpus import CpuReadings, cpu_topology, read_cpus
from node_reporter.discovery.nvml import NvmlAnswer, query
from node_reporter.discovery.pci import PciFunction, RdmaLink, read_pci, read_rdma
from node_reporter.discovery.sysfs import Root

__all__ = ["Discovery", "Machine", "discover", "read_machine"]


class Machine(msgspec.Struct, frozen=True, kw_only=True):
    cpus: CpuReadings
    pci: dict[str, PciFunction]
    rdma: tuple[RdmaLink, ...]
    problems: tuple[str, ...] = ()  # PCI functions and RDMA devices that could not be read


class Discovery(msgspec.Struct, frozen=True, kw_only=True):
    device: dict[str, Any]  # scheduling.koordinator.sh/v1alpha1 Device
    topology: dict[str, Any]  # topology.node.k8s.io/v1alpha1 NodeResourceTopology
    warnings: tuple[str, ...] = ()


def read_machine(sys_root: str = "/", proc_root: str = "/") -> Machine:
    root = Root(sys_root=sys_root, proc_root=proc_root)
    cpus = read_cpus(root)
    pci, pci_problems = read_pci(root)
    rdma, rdma_problems = read_rdma(root)
    return Machine(cpus=cpus, pci=pci, rdma=rdma, problems=(*pci_problems, *rdma_problems))


def discover(
    node_name: str,
    *,
    sys_root: str = "/",
    proc_root: str = "/",
    nvml: NvmlAnswer | None = None,
    kubelet: KubeletSettings | None = None,
    vf_group_labels: dict[str, str] | None = None,
) -> Discovery:
    machine = read_machine(sys_root, proc_root)
    answer = query() if nvml is None else nvml
    device, warnings = build_device(
        node_name,
        cpu_topology(machine.cpus),
        machine.pci,
        machine.rdma,
        answer,
        vf_group_labels=vf_group_labels,
    )
    if not answer.devices and answer.reason:
        warnings.insert(0, f"no GPU reported: {answer.reason}")
    warnings[:0] = machine.problems
    return Discovery(
        device=device, topology=build_nrt(node_name, machine.cpus, kubelet), warnings=tuple(warnings)
    )
