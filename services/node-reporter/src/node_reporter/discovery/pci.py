"""PCI functions and RDMA devices: readings from sysfs and the PCIe placement derived from them.

Responsibility: ``read_pci`` lists every PCI function of ``/sys/bus/pci/devices`` with its ids, NUMA node, SR-IOV
links and position in the PCIe tree; ``read_rdma`` lists ``/sys/class/infiniband`` devices with the PCI function each
one belongs to (IO). ``parse_pci_path``, ``pcie_id``, ``normalize_bus_id`` and the class predicates are pure.

The PCIe position of a function is the resolved path of its ``/sys/bus/pci/devices/<address>`` link below
``/sys/devices``: the last ``pci<domain>:<bus>`` component is the host bridge (root complex), the PCI addresses after
it are the bridges from the root port down, and then the function itself. Components before the host bridge (ACPI or
Hyper-V VMBus parents in virtual machines) are ignored.

``pcieID`` rule: the address of the **root port** a function hangs under, that is the first bridge below the host
bridge. Every function behind one PCIe switch (and behind cascaded switches) shares the switch's root port, so GPUs
and NICs under the same switch get the same ``pcieID``, and functions under different switches or root ports get
different ones. A function on the root bus itself (no bridge above it, as in many virtual machines and for
integrated devices) gets the host bridge's name, ``pci<domain>:<bus>``. Root port addresses are unique on the
machine, so ``pcieID`` is unique across NUMA nodes as Koordinator requires.

Other rules: a function or RDMA device that cannot be read is left out and reported as a problem (the message names
the file), never silently; ``numa_node`` absent counts as ``-1`` (unknown); a function with a ``physfn`` link is an
SR-IOV virtual function and belongs to its physical function; a physical function's VFs are its ``virtfn<N>`` links,
``N`` being the VF index; ``sriov_numvfs`` absent counts as "not SR-IOV capable".
"""

from __future__ import annotations

import re

import msgspec

from node_reporter.discovery.sysfs import DiscoveryError, Root

__all__ = [
    "PciFunction",
    "RdmaLink",
    "is_nvidia_gpu",
    "normalize_bus_id",
    "parse_pci_path",
    "pcie_id",
    "read_pci",
    "read_rdma",
]

NVIDIA = 0x10DE
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


class PciFunction(msgspec.Struct, frozen=True, kw_only=True):
    address: str  # 0000:3b:00.0
    vendor: int
    device: int
    class_code: int  # 24 bits: base class, subclass, programming interface
    numa_node: int  # -1 = unknown
    host_bridge: str  # pci0000:3a
    bridges: tuple[str, ...]  # from the root port down to the parent bridge; () on the root bus
    physfn: str | None = None  # set on SR-IOV virtual functions
    vfs: tuple[tuple[int, str], ...] = ()  # (VF index, address), by index
    sriov_numvfs: int | None = None


class RdmaLink(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # mlx5_0
    address: str | None  # the PCI function; None for a device that is not on PCI (e.g. soft RoCE)


# --- pure ------------------------------------------------------------------------------------------------------------
def parse_pci_path(relative: str, where: str) -> tuple[str, tuple[str, ...]]:
    """(host bridge, PCI addresses below it ending with the function) of a path relative to /sys/devices."""
    parts = relative.split("/")
    hosts = [i for i, p in enumerate(parts) if _HOST_BRIDGE.match(p)]
    if not hosts:
        raise DiscoveryError(
            where, f"resolves to devices/{relative}, which has no pci<domain>:<bus> component"
        )
    start = hosts[-1]
    chain = tuple(parts[start + 1 :])
    if not chain or not all(_BDF.match(p) for p in chain):
        raise DiscoveryError(where, f"resolves to devices/{relative}, not a PCI function below a host bridge")
    return parts[start], chain


def pcie_id(fn: PciFunction) -> str:
    """The root port the function hangs under, or the host bridge for a function on the root bus."""
    return fn.bridges[0] if fn.bridges else fn.host_bridge


def normalize_bus_id(text: str) -> str:
    """``00000000:1B:00.0`` (NVML) or ``0000:1b:00.0`` -> ``0000:1b:00.0``; other text is returned lowercased."""
    value = text.strip().lower()
    domain, sep, rest = value.partition(":")
    if sep and len(domain) > 4 and set(domain[:-4]) <= {"0"}:
        value = f"{domain[-4:]}:{rest}"
    return value


def is_nvidia_gpu(fn: PciFunction) -> bool:
    """An NVIDIA display controller: VGA (0x0300) or 3D controller (0x0302)."""
    return fn.vendor == NVIDIA and (fn.class_code >> 8) in (0x0300, 0x0302)


# --- reading ---------------------------------------------------------------------------------------------------------
def _read_function(root: Root, address: str) -> PciFunction:
    link = root.sys("bus", "pci", "devices", address)
    host, chain = parse_pci_path(root.resolve(link, inside=root.sys("devices")), link)
    if chain[-1] != address:
        raise DiscoveryError(link, f"resolves to function {chain[-1]}, not {address}")
    vfs: list[tuple[int, str]] = []
    for name in root.entries(link, "virtfn"):
        target = root.link_name(f"{link}/{name}")
        if name[6:].isdigit() and target is not None:
            vfs.append((int(name[6:]), target))
    numa = root.optional_integer(f"{link}/numa_node")
    return PciFunction(
        address=address,
        vendor=root.integer(f"{link}/vendor", base=16),
        device=root.integer(f"{link}/device", base=16),
        class_code=root.integer(f"{link}/class", base=16),
        numa_node=-1 if numa is None or numa < 0 else numa,
        host_bridge=host,
        bridges=chain[:-1],
        physfn=root.link_name(f"{link}/physfn"),
        vfs=tuple(sorted(vfs)),
        sriov_numvfs=root.optional_integer(f"{link}/sriov_numvfs"),
    )


def read_pci(root: Root) -> tuple[dict[str, PciFunction], list[str]]:
    """(every readable PCI function by address, problems); no ``/sys/bus/pci`` (no PCI) gives ``{}``.

    A function that cannot be read is left out with its ``DiscoveryError`` message among the problems: one odd
    function must not hide the rest of the machine (a GPU or NIC among those left out is then reported without
    topology, or not at all).
    """
    directory = root.sys("bus", "pci", "devices")
    found: dict[str, PciFunction] = {}
    problems: list[str] = []
    for address in sorted(root.entries(directory)):
        if _BDF.match(address):
            try:
                found[address] = _read_function(root, address)
            except DiscoveryError as exc:
                problems.append(f"PCI function left out: {exc}")
    return found, problems


def read_rdma(root: Root) -> tuple[tuple[RdmaLink, ...], list[str]]:
    """(RDMA devices of ``/sys/class/infiniband`` by name, problems); none when the directory is absent."""
    directory = root.sys("class", "infiniband")
    out: list[RdmaLink] = []
    problems: list[str] = []
    for name in root.entries(directory):
        try:
            target = root.link_name(f"{directory}/{name}/device")
        except DiscoveryError as exc:
            problems.append(f"RDMA device left out: {exc}")
            continue
        out.append(RdmaLink(name=name, address=target if target and _BDF.match(target) else None))
    return tuple(out), problems
