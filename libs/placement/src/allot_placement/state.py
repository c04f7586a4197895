"""Allocation state of one node, and the ``Allocation`` value that moves a pod onto it.

Responsibility: hold what is in use on a node (node-level requests, per-device resources, VFs, CPUs with their
exclusive policy, per-NUMA resources, NUMA footprints) as the sum of the ``Allocation`` of every pod placed there;
apply and remove allocations exactly (``remove`` is the inverse of ``apply``); expose a hashable ``dyn_key`` that
identifies the state for caching.

Invariants:
- ``used`` values are exact sums of the pods' allocations; a device or CPU listed by a pod that the node's inventory
  does not (or no longer) have is still counted, so free capacity never goes up by losing an inventory entry.
- ``version`` changes on every mutation (given by the engine from a global counter, so a re-created node never
  reuses a version).
Not thread-safe: the engine is used from one thread (the scheduling cycle is serial).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Any

from allot_contracts.decisions.placement import VF, Allocation, DeviceAlloc, NumaAlloc
from allot_contracts.objects.inventory import Inventory, NodeInfo, Topology
from allot_contracts.resources import add_into

if TYPE_CHECKING:
    from allot_placement.loadaware import NodeLoad
    from allot_placement.nodeside import NodeOverrides

__all__ = ["VF", "Allocation", "DeviceAlloc", "NodeState", "NumaAlloc", "amplify"]


def amplify(value: int, ratio: Decimal | None) -> int:
    """``ceil(value × ratio)``; a missing ratio or one at most 1 leaves the value as it is."""
    if ratio is None or ratio <= 1:
        return value
    return int((Decimal(value) * ratio).to_integral_value(rounding=ROUND_CEILING))


class NodeState:
    """Mutable allocation state of one node (owned by the engine)."""

    __slots__ = (
        "base",
        "base_topology",
        "cpu_owner",
        "dev_used",
        "info",
        "inventory",
        "load",
        "name",
        "numa_footprints",
        "numa_used",
        "overrides",
        "pods",
        "requested",
        "topology",
        "version",
        "vf_used",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.info: NodeInfo | None = None
        self.inventory: Inventory | None = None
        self.topology: Topology | None = None
        self.pods: dict[str, Allocation] = {}
        self.requested: dict[str, int] = {}
        self.dev_used: dict[str, dict[int, dict[str, int]]] = {}
        self.vf_used: dict[str, dict[int, frozenset[str]]] = {}
        self.cpu_owner: dict[int, str] = {}
        self.numa_used: dict[int, dict[str, int]] = {}
        self.numa_footprints: dict[str, tuple[int, ...]] = {}
        self.version = 0
        # node side (allot_placement.nodeside): the Node as parsed, before overrides; batch/mid and heartbeat
        # overrides; the load-aware view of its NodeMetric
        self.base: NodeInfo | None = None
        self.base_topology: Topology | None = (
            None  # the NodeResourceTopology as parsed (``topology``: overridden)
        )
        self.overrides: NodeOverrides | None = None
        self.load: NodeLoad | None = None

    # --- mutation ---------------------------------------------------------------------------------------------------
    def apply(self, pod: str, alloc: Allocation) -> None:
        if pod in self.pods:
            self.remove(pod)
        self.pods[pod] = alloc
        self._account(alloc, 1)
        if alloc.numa or alloc.cpuset:
            self.numa_footprints[pod] = self._footprint(alloc)

    def remove(self, pod: str) -> Allocation | None:
        alloc = self.pods.pop(pod, None)
        if alloc is not None:
            self._account(alloc, -1)
            self.numa_footprints.pop(pod, None)
        return alloc

    def _footprint(self, alloc: Allocation) -> tuple[int, ...]:
        nodes = set(alloc.numa_nodes)
        if self.topology is not None:
            nodes.update(self.topology.cpus[c][2] for c in alloc.cpuset if c in self.topology.cpus)
        return tuple(sorted(nodes))

    def _account(self, alloc: Allocation, sign: int) -> None:
        add_into(self.requested, alloc.requests, sign)
        for dtype, entries in alloc.devices.items():
            per_type = self.dev_used.setdefault(dtype, {})
            for e in entries:
                used = per_type.setdefault(e.minor, {})
                add_into(used, e.resources, sign)
                if not used:
                    del per_type[e.minor]
                if e.vfs:
                    vf_type = self.vf_used.setdefault(dtype, {})
                    buses = set(vf_type.get(e.minor, frozenset()))
                    for vf in e.vfs:
                        (buses.add if sign > 0 else buses.discard)(vf.bus_id)
                    if buses:
                        vf_type[e.minor] = frozenset(buses)
                    else:
                        vf_type.pop(e.minor, None)
            if not per_type:
                del self.dev_used[dtype]
        for cpu in alloc.cpuset:
            if sign > 0:
                self.cpu_owner[cpu] = alloc.cpu_exclusive
            else:
                self.cpu_owner.pop(cpu, None)
        for z in alloc.numa:
            used = self.numa_used.setdefault(z.node, {})
            add_into(used, z.resources, sign)
            if not used:
                del self.numa_used[z.node]

    # --- views ------------------------------------------------------------------------------------------------------
    def dyn_key(self) -> tuple[Any, ...]:
        """Hashable identity of the allocation state (everything a decision on this node reads)."""
        return (
            len(self.pods),
            tuple(sorted(self.requested.items())),
            tuple(
                (t, tuple((m, tuple(sorted(r.items()))) for m, r in sorted(u.items())))
                for t, u in sorted(self.dev_used.items())
            ),
            tuple(
                (t, tuple((m, tuple(sorted(b))) for m, b in sorted(u.items())))
                for t, u in sorted(self.vf_used.items())
            ),
            tuple(sorted(self.cpu_owner.items())),
            tuple((z, tuple(sorted(r.items()))) for z, r in sorted(self.numa_used.items())),
            tuple(sorted(self.numa_footprints.values())),
        )

    def amplified_extra(self, ratio: Decimal | None) -> tuple[int, dict[int, int]]:
        """What cpuset-bound pods consume beyond their requests when the node's cpu is amplified by ``ratio``:
        (node level, per NUMA zone), in millicores."""
        node, zones = 0, dict[int, int]()
        if ratio is None or ratio <= 1:
            return node, zones
        for alloc in self.pods.values():
            if not alloc.cpuset:
                continue
            cpu = 1000 * len(alloc.cpuset)
            node += amplify(cpu, ratio) - cpu
            for z in alloc.numa:
                zcpu = z.resources.get("cpu", 0)
                if zcpu:
                    zones[z.node] = zones.get(z.node, 0) + amplify(zcpu, ratio) - zcpu
        return node, zones

    def numa_status(self) -> dict[int, str]:
        """NUMA node status: ``single`` if only single-NUMA pods use it, ``shared`` if a multi-NUMA pod does."""
        status: dict[int, str] = {}
        for fp in self.numa_footprints.values():
            for z in fp:
                if len(fp) > 1:
                    status[z] = "shared"
                elif status.get(z) != "shared":
                    status[z] = "single"
        return status
