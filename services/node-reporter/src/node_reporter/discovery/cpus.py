"""CPUs, cores, sockets and NUMA nodes: readings from sysfs/procfs and the topology built from them.

Responsibility: ``read_cpus`` collects the raw facts (IO); ``cpu_topology`` and ``cpu_basic_info`` turn them into the
node's CPU topology and Koordinator's ``CPUBasicInfo`` (pure).

Sources and rules:
- CPUs are the online ones (``/sys/devices/system/cpu/online``); each one's socket is its
  ``topology/physical_package_id`` (``-1``, reported by some virtual machines, counts as socket 0) and its physical
  core its ``topology/core_id``.
- ``core`` in the topology is a node-unique logical core id, like the ``CORE`` column of ``lscpu -e`` that koordlet
  publishes: the distinct (socket, core_id) pairs numbered from 0 in (socket, core_id) order. Linux core ids repeat
  across sockets and may have gaps; the logical id has neither.
- NUMA nodes come from ``/sys/devices/system/node/node<N>/cpulist``. Without that directory (kernels without NUMA,
  many virtual machines) the machine is one NUMA node 0 holding every CPU. A CPU that no node lists belongs to the
  lowest node.
- Memory per NUMA node is ``MemTotal`` of ``node<N>/meminfo`` (``/proc/meminfo`` for the single node of a machine
  without the NUMA directory); huge pages per node and size come from ``node<N>/hugepages/hugepages-<size>kB/
  nr_hugepages`` (``/sys/kernel/mm/hugepages`` without NUMA), absent = 0.
- Hyper-threading is enabled when ``/sys/devices/system/cpu/smt/active`` says ``1`` or, without that file, when some
  core has more than one online CPU. (The ``ht`` flag of ``/proc/cpuinfo`` only says the processor is capable, and is
  set in most virtual machines, so it is not used.)
- Turbo is enabled when ``intel_pstate/no_turbo`` is ``0``, else when ``cpufreq/boost`` is ``1``; without either file
  it is reported disabled.
- Model and vendor are the ``model name`` and ``vendor_id`` of the first processor in ``/proc/cpuinfo`` (empty when
  the architecture does not report them, e.g. most ARM kernels).
"""

from __future__ import annotations

from typing import TypedDict

import msgspec

from allot_contracts.objects.cpuset import CpusetError, parse_cpuset
from node_reporter.discovery.sysfs import DiscoveryError, Root

__all__ = [
    "Cpu",
    "CpuReadings",
    "CpuTopology",
    "cpu_basic_info",
    "cpu_topology",
    "hyper_threading",
    "read_cpus",
    "turbo",
]

HUGEPAGE_SIZES = {"2048kB": ("hugepages-2Mi", 2 * 1024**2), "1048576kB": ("hugepages-1Gi", 1024**3)}


class CpuReadings(msgspec.Struct, frozen=True, kw_only=True):
    """What the kernel says about the CPUs and memory, unprocessed."""

    online: tuple[int, ...]
    package: dict[int, int]  # cpu -> physical_package_id
    core_id: dict[int, int]  # cpu -> topology/core_id
    node_cpus: dict[int, tuple[int, ...]]  # NUMA node -> cpulist; {} when the kernel has no NUMA directory
    node_memory: dict[int, int]  # NUMA node -> MemTotal in bytes
    node_hugepages: dict[int, dict[str, int]]  # NUMA node -> {"hugepages-2Mi": bytes, ...}
    model_name: str = ""
    vendor_id: str = ""
    smt_active: bool | None = None
    no_turbo: bool | None = None  # intel_pstate
    boost: bool | None = None  # cpufreq


class Cpu(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    core: int  # node-unique logical core id
    socket: int
    node: int


class CpuTopology(msgspec.Struct, frozen=True, kw_only=True):
    cpus: tuple[Cpu, ...]  # by id
    numa_nodes: tuple[int, ...]
    memory: dict[int, int]  # NUMA node -> bytes (huge pages excluded)
    hugepages: dict[int, dict[str, int]]

    def node_socket(self) -> dict[int, int]:
        """NUMA node -> socket of its CPUs (the lowest, should a node span two); nodes without CPUs are absent."""
        out: dict[int, int] = {}
        for c in self.cpus:
            out[c.node] = min(out.get(c.node, c.socket), c.socket)
        return dict(sorted(out.items()))


# --- reading ---------------------------------------------------------------------------------------------------------
def _cpuset(root: Root, path: str) -> tuple[int, ...]:
    try:
        return tuple(parse_cpuset(root.text(path).strip()))
    except CpusetError as exc:
        raise DiscoveryError(path, str(exc)) from None


def _mem_total(text: str, path: str) -> int:
    for line in text.splitlines():
        words = line.split()
        if "MemTotal:" in words:
            i = words.index("MemTotal:")
            try:
                amount = int(words[i + 1])
            except (IndexError, ValueError):
                break
            unit = words[i + 2] if len(words) > i + 2 else ""
            return amount * 1024 if unit == "kB" else amount
    raise DiscoveryError(path, "has no 'MemTotal: <n> kB' line")


def _hugepages(root: Root, directory: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for size, (name, page) in HUGEPAGE_SIZES.items():
        count = root.optional_integer(f"{directory}/hugepages-{size}/nr_hugepages")
        out[name] = (count or 0) * page
    return out


def _cpuinfo(text: str) -> dict[str, str]:
    """Fields of the first processor block of /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def _flag(root: Root, path: str) -> bool | None:
    value = root.optional_integer(path)
    return None if value is None else value != 0


def read_cpus(root: Root) -> CpuReadings:
    cpu_dir = root.sys("devices", "system", "cpu")
    online = _cpuset(root, f"{cpu_dir}/online")
    if not online:
        raise DiscoveryError(f"{cpu_dir}/online", "lists no CPU")
    package = {c: root.integer(f"{cpu_dir}/cpu{c}/topology/physical_package_id") for c in online}
    core_id = {c: root.integer(f"{cpu_dir}/cpu{c}/topology/core_id") for c in online}
    node_dir = root.sys("devices", "system", "node")
    node_cpus: dict[int, tuple[int, ...]] = {}
    node_memory: dict[int, int] = {}
    node_hugepages: dict[int, dict[str, int]] = {}
    for name in root.entries(node_dir, "node"):
        if not name[4:].isdigit():
            continue
        nid = int(name[4:])
        node_cpus[nid] = _cpuset(root, f"{node_dir}/{name}/cpulist")
        meminfo = f"{node_dir}/{name}/meminfo"
        node_memory[nid] = _mem_total(root.text(meminfo), meminfo)
        node_hugepages[nid] = _hugepages(root, f"{node_dir}/{name}/hugepages")
    if not node_cpus:
        meminfo = root.proc("meminfo")
        node_memory = {0: _mem_total(root.text(meminfo), meminfo)}
        node_hugepages = {0: _hugepages(root, root.sys("kernel", "mm", "hugepages"))}
    info = _cpuinfo(root.text(root.proc("cpuinfo")))
    return CpuReadings(
        online=online,
        package=package,
        core_id=core_id,
        node_cpus=node_cpus,
        node_memory=node_memory,
        node_hugepages=node_hugepages,
        model_name=info.get("model name", ""),
        vendor_id=info.get("vendor_id", ""),
        smt_active=_flag(root, f"{cpu_dir}/smt/active"),
        no_turbo=_flag(root, f"{cpu_dir}/intel_pstate/no_turbo"),
        boost=_flag(root, f"{cpu_dir}/cpufreq/boost"),
    )


# --- pure ------------------------------------------------------------------------------------------------------------
def cpu_topology(r: CpuReadings) -> CpuTopology:
    numa = sorted(r.node_cpus) or [0]
    node_of: dict[int, int] = {}
    for nid in sorted(r.node_cpus, reverse=True):  # the lowest node wins should two list one CPU
        node_of.update(dict.fromkeys(r.node_cpus[nid], nid))
    socket = {c: max(r.package[c], 0) for c in r.online}
    pairs = sorted({(socket[c], r.core_id[c]) for c in r.online})
    logical = {pair: i for i, pair in enumerate(pairs)}
    cpus = tuple(
        Cpu(id=c, core=logical[(socket[c], r.core_id[c])], socket=socket[c], node=node_of.get(c, numa[0]))
        for c in sorted(r.online)
    )
    nodes = sorted(set(numa) | set(r.node_memory))
    hugepages = {nid: dict(sorted(r.node_hugepages.get(nid, {}).items())) for nid in nodes}
    memory = {nid: max(r.node_memory.get(nid, 0) - sum(hugepages[nid].values()), 0) for nid in nodes}
    return CpuTopology(cpus=cpus, numa_nodes=tuple(nodes), memory=memory, hugepages=hugepages)


def hyper_threading(r: CpuReadings, topo: CpuTopology) -> bool:
    if r.smt_active is not None:
        return r.smt_active
    per_core: dict[int, int] = {}
    for c in topo.cpus:
        per_core[c.core] = per_core.get(c.core, 0) + 1
    return any(n > 1 for n in per_core.values())


def turbo(r: CpuReadings) -> bool:
    if r.no_turbo is not None:
        return not r.no_turbo
    return bool(r.boost)


class CpuBasicInfo(TypedDict, total=False):
    """Koordinator's ``CPUBasicInfo`` (the cpu-basic-info annotation), in its field order."""

    cpuModel: str
    hyperThreadEnabled: bool
    turboEnabled: bool
    vendorID: str


def cpu_basic_info(r: CpuReadings, topo: CpuTopology) -> CpuBasicInfo:
    """Koordinator's ``CPUBasicInfo`` as JSON fields, in its field order; empty and false fields are omitted."""
    info: CpuBasicInfo = {}
    if r.model_name:
        info["cpuModel"] = r.model_name
    if hyper_threading(r, topo):
        info["hyperThreadEnabled"] = True
    if turbo(r):
        info["turboEnabled"] = True
    if r.vendor_id:
        info["vendorID"] = r.vendor_id
    return info
