"""Reservations on nodes: what a placed reservation holds, and how a pod that may use it sees the node (§5.3–5.6,
§1.14 of the behaviour reference).

A reservation placed on a node *holds* what its reserve pod was given (node resources, devices, cpuset, NUMA): the
hold is an entry of the node's allocation state under the key ``reservation:<name>`` whose allocation is the
reservation's *remaining* part — what it was given minus what its owner pods took — so every pod that does not
match it sees those resources as used, and the reserve pod counts as a pod on the node, as upstream's reserve pod
does. A pod that matches reservations on a node sees that node *restored*: the holds of its matched reservations
removed (for a ``reservation-ignored`` pod, every hold on the node), the ``Restricted`` and ``Aligned`` policies
applied, and nothing else changed.

- Default / Aligned: the pod may use the reservation's remaining part plus the node's free resources; devices and
  CPUs of the reservation are preferred (tried first, alone).
- Restricted: for the reservation's restricted resources (``reservation-restricted-options``, else every reserved
  resource) the request must fit what remains in it ("Reservation(s) Insufficient cpu"), its devices come from the
  reserved minors only and its CPUs from the reserved cpuset; with ``pods`` reserved, at most that many owners
  ("Reservation(s) Too many pods").
- Choosing among matched reservations on the chosen node (nominate): the affinity's single match; else the smallest
  non-zero ``reservation-order``; else the highest ReservationScore (MostAllocated over the reservation's resources
  with the pod added), ties by name.
- A reserve pod with policy Default cannot share a node with matchable reservations of policy Aligned/Restricted and
  vice versa ("node(s) reservation allocate policy conflict").
Pure; nothing here reads a clock.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Final

import msgspec

from allot_contracts.objects import names as n
from allot_placement.state import VF, Allocation, DeviceAlloc, NodeState, NumaAlloc

__all__ = [
    "HOLD_PREFIX",
    "POLICY_CONFLICT",
    "Hold",
    "fits_reservation",
    "hold_key",
    "nominate",
    "policy_conflict",
    "reservation_score",
    "restore",
    "restrict",
    "subtract",
]

HOLD_PREFIX: Final = "reservation:"
BLOCK_PREFIX: Final = "reservation-restricted:"
POLICY_CONFLICT: Final = "node(s) reservation allocate policy conflict"
REASON_PREFIX: Final = "Reservation(s) "


def hold_key(name: str) -> str:
    return f"{HOLD_PREFIX}{name}"


class Hold(msgspec.Struct, frozen=True, kw_only=True):
    """A reservation placed on a node: what it was given, its policy, and the owner pods allocated in it."""

    name: str
    uid: str = ""
    node: str
    allocation: Allocation
    policy: str = ""
    restricted: tuple[str, ...] = ()
    allocate_once: bool = True
    order: int = 0
    owners: dict[str, Allocation] = {}

    @property
    def key(self) -> str:
        return hold_key(self.name)

    @property
    def matchable(self) -> bool:
        return not (self.allocate_once and self.owners)

    def remaining(self) -> Allocation:
        return subtract(self.allocation, self.owners.values())

    def allocated(self) -> dict[str, int]:
        """What the owners requested of the reserved resources (upstream's ``status.allocated``)."""
        total: dict[str, int] = {}
        for alloc in self.owners.values():
            for k, v in alloc.requests.items():
                if k in self.allocation.requests:
                    total[k] = total.get(k, 0) + v
        return dict(sorted(total.items()))

    def resource_names(self) -> tuple[str, ...]:
        """Upstream's ResourceNames: what it reserves (Restricted: its restricted resources)."""
        if self.policy == "Restricted":
            return self.restricted_names()
        return tuple(sorted(self.allocation.requests))

    def restricted_names(self) -> tuple[str, ...]:
        """Restricted applies to the listed resources the reservation reserves; none of them listed → all."""
        reserved = [k for k in sorted(self.allocation.requests) if k != n.PODS]
        named = [k for k in reserved if k in self.restricted]
        return tuple(named or reserved)


def _minus(a: dict[str, int], used: Iterable[dict[str, int]]) -> dict[str, int]:
    out = dict(a)
    for u in used:
        for k, v in u.items():
            if k in out:
                out[k] -= v
    return {k: v for k, v in sorted(out.items()) if v > 0}


def subtract(full: Allocation, used: Iterable[Allocation]) -> Allocation:
    """What remains of ``full`` after ``used`` (per resource, device minor, VF, CPU and NUMA node, never below 0)."""
    used = list(used)
    if not used:
        return full
    devices: dict[str, tuple[DeviceAlloc, ...]] = {}
    for dtype, entries in full.devices.items():
        kept = []
        for e in entries:
            taken = [d for u in used for d in u.devices.get(dtype, ()) if d.minor == e.minor]
            res = _minus(e.resources, (d.resources for d in taken))
            gone = {vf.bus_id for d in taken for vf in d.vfs}
            vfs = tuple(vf for vf in e.vfs if vf.bus_id not in gone)
            if res or vfs:
                kept.append(DeviceAlloc(minor=e.minor, resources=res, vfs=vfs))
        if kept:
            devices[dtype] = tuple(kept)
    cpus = {c for u in used for c in u.cpuset}
    numa = []
    for z in full.numa:
        res = _minus(z.resources, (y.resources for u in used for y in u.numa if y.node == z.node))
        if res:
            numa.append(NumaAlloc(node=z.node, resources=res))
    return Allocation(
        node=full.node,
        requests=_minus(full.requests, (u.requests for u in used)),
        devices=devices,
        cpuset=tuple(c for c in full.cpuset if c not in cpus),
        cpu_exclusive=full.cpu_exclusive,
        numa=tuple(numa),
    )


def fits_reservation(requests: dict[str, int], hold: Hold, detailed: bool = False) -> list[str]:
    """Restricted: the reasons the pod does not fit in what remains of the reservation (empty when it does)."""
    out: list[str] = []
    pods = hold.allocation.requests.get(n.PODS)
    if pods is not None and len(hold.owners) + 1 > pods:
        out.append(
            f"{REASON_PREFIX}Too many pods, requested: 1, used: {len(hold.owners)}, capacity: {pods}"
            if detailed
            else f"{REASON_PREFIX}Too many pods"
        )
    allocated = hold.allocated()
    for name in hold.restricted_names():
        want = requests.get(name, 0)
        if not want:
            continue
        capacity = hold.allocation.requests.get(name, 0)
        used = allocated.get(name, 0)
        if want > capacity - used:
            out.append(
                f"{REASON_PREFIX}Insufficient {name}, requested: {want}, used: {used}, capacity: {capacity}"
                if detailed
                else f"{REASON_PREFIX}Insufficient {name}"
            )
    return out


def reservation_score(requests: dict[str, int], hold: Hold) -> int:
    """Upstream's ReservationScore: MostAllocated over the reservation's non-zero resources, with the pod added."""
    allocated = hold.allocated()
    total = count = 0
    for name, cap in sorted(hold.allocation.requests.items()):
        if cap <= 0:
            continue
        count += 1
        req = requests.get(name, 0) + allocated.get(name, 0)
        total += req * 100 // cap if req <= cap else 0
    return total // count if count else 0


def nominate(holds: list[Hold], requests: dict[str, int], name: str = "") -> Hold | None:
    """The reservation a pod uses among those it matched on one node."""
    if not holds:
        return None
    if name:
        return next((h for h in holds if h.name == name), None)
    if len(holds) == 1:
        return holds[0]
    ordered = [h for h in holds if h.order > 0]
    if ordered:
        return min(ordered, key=lambda h: (h.order, h.name))
    return max(holds, key=lambda h: (reservation_score(requests, h), [-ord(c) for c in h.name]))


def policy_conflict(policy: str, holds: Iterable[Hold]) -> bool:
    """A Default-policy reservation cannot share a node with Aligned/Restricted ones (Aligned and Restricted can)."""
    return any(h.matchable and (policy == "" or h.policy == "") and policy != h.policy for h in holds)


def _clone(state: NodeState) -> NodeState:
    """A copy to change freely; its version is -1, so that no cache keyed by (node, version) takes it for the
    node the engine tracks."""
    out = copy.copy(state)
    out.version = -1
    for slot in ("pods", "requested", "dev_used", "vf_used", "cpu_owner", "numa_used", "numa_footprints"):
        setattr(out, slot, copy.deepcopy(getattr(state, slot)))
    return out


def restore(state: NodeState, holds: Iterable[Hold]) -> NodeState:
    """A copy of the node's state with these reservations' holds given back (what their owners may use)."""
    out = _clone(state)
    for h in holds:
        out.remove(h.key)
    return out


def restrict(state: NodeState, hold: Hold, *, devices: bool = True, cpus: bool = True) -> NodeState:
    """A copy of ``state`` in which only the reservation's devices (of the types it reserved) and CPUs (if it
    reserved a cpuset) are free: what a Restricted reservation allows, and what "prefer the reservation's devices"
    tries first. ``state`` should already be restored."""
    out = _clone(state)
    block_devices: dict[str, tuple[DeviceAlloc, ...]] = {}
    inventory = out.inventory
    if devices and inventory is not None:
        for dtype, entries in hold.allocation.devices.items():
            mine = {e.minor for e in entries}
            blocked = []
            for dev in inventory.devices.get(dtype, ()):
                if dev.minor in mine:
                    continue
                used = out.dev_used.get(dtype, {}).get(dev.minor, {})
                free = {k: v - used.get(k, 0) for k, v in dev.resources.items() if v - used.get(k, 0) > 0}
                taken_vfs = out.vf_used.get(dtype, {}).get(dev.minor, frozenset())
                vfs = tuple(
                    VF(bus_id=b) for _, group in dev.vf_groups for _, b in group if b not in taken_vfs
                )
                if free or vfs:
                    blocked.append(DeviceAlloc(minor=dev.minor, resources=free, vfs=vfs))
            if blocked:
                block_devices[dtype] = tuple(blocked)
    block_cpus: tuple[int, ...] = ()
    if cpus and hold.allocation.cpuset and out.topology is not None:
        mine_cpus = set(hold.allocation.cpuset)
        block_cpus = tuple(
            c for c in sorted(out.topology.cpus) if c not in mine_cpus and c not in out.cpu_owner
        )
    if block_devices or block_cpus:
        out.apply(
            f"{BLOCK_PREFIX}{hold.name}",
            Allocation(node=out.name, requests={}, devices=block_devices, cpuset=block_cpus),
        )
    return out
