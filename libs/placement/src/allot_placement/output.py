"""Output annotations in Koordinator's exact JSON shapes, and the allocation state snapshot.

- ``scheduling.koordinator.sh/device-allocated``: ``{type: [{"minor", "resources", "id", "extension": {"vfs":
  [{"minor", "busID"}]}}]}`` — types in gpu/rdma/fpga order, entries by minor, quantities as strings, ``id`` omitted
  when the Device lists none, VF ``minor`` always written when known (decision 5).
- ``scheduling.koordinator.sh/resource-status``: ``{"cpuset": "0-3", "numaNodeResources": [{"node", "resources"}]}``
  with empty parts omitted.
- ``scheduling.koordinator.sh/resource-spec`` is written back, whole, when a cpuset was bound and the pod's spec lacks
  the policy used (Koordinator's ``appendResourceSpecIfMissed``): a required policy (the pod's or the node's) fills an
  empty or ``Default`` ``requiredCPUBindPolicy``, a ``Default`` preferred policy becomes the policy used, and a spec
  naming neither gets it as ``preferredCPUBindPolicy``; the other fields are kept.
Pure.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import ResourceSpec
from allot_contracts.objects.cpuset import format_cpuset
from allot_contracts.objects.inventory import Inventory
from allot_contracts.resources import format_resource_list
from allot_placement.state import Allocation, NodeState

__all__ = ["NodeSnapshot", "output_annotations", "snapshot_node"]


class AllocatedVf(TypedDict):
    minor: NotRequired[int]
    busID: str


class AllocatedExtension(TypedDict):
    vfs: list[AllocatedVf]


class AllocatedDevice(TypedDict):
    """One entry of the device-allocated annotation."""

    minor: int
    resources: dict[str, str]
    id: NotRequired[str]
    extension: NotRequired[AllocatedExtension]


class NumaNodeResource(TypedDict):
    node: int
    resources: dict[str, str]


class ResourceStatus(TypedDict, total=False):
    """The resource-status annotation."""

    cpuset: str
    numaNodeResources: list[NumaNodeResource]


DeviceAllocated = dict[str, list[AllocatedDevice]]  # device type -> its entries


class DeviceUse(TypedDict):
    total: dict[str, str]
    used: dict[str, str]


class NodeSnapshot(TypedDict):
    """A node's allocation state: device type -> minor -> use, and the cpuset taken."""

    devices: dict[str, dict[str, DeviceUse]]
    cpusetAllocated: str


def output_annotations(
    inv: Inventory | None, alloc: Allocation, bind: str, required: bool, spec: ResourceSpec
) -> dict[str, DeviceAllocated | ResourceStatus | dict[str, str]]:
    out: dict[str, DeviceAllocated | ResourceStatus | dict[str, str]] = {}
    if alloc.devices:
        dev: DeviceAllocated = {}
        for dtype, entries in alloc.devices.items():
            items: list[AllocatedDevice] = []
            for e in entries:
                item: AllocatedDevice = {"minor": e.minor, "resources": format_resource_list(e.resources)}
                d = inv.device(dtype, e.minor) if inv is not None else None
                if d is not None and d.id:
                    item["id"] = d.id
                if e.vfs:
                    item["extension"] = {
                        "vfs": [
                            {"minor": v.minor, "busID": v.bus_id}
                            if v.minor is not None
                            else {"busID": v.bus_id}
                            for v in e.vfs
                        ]
                    }
                items.append(item)
            dev[dtype] = items
        out[n.ANN_DEVICE_ALLOCATED] = dev
    status: ResourceStatus = {}
    if alloc.cpuset:
        status["cpuset"] = format_cpuset(alloc.cpuset)
    if alloc.numa:
        status["numaNodeResources"] = [
            {"node": z.node, "resources": format_resource_list(z.resources)} for z in alloc.numa
        ]
    if status:
        out[n.ANN_RESOURCE_STATUS] = status
    written = _completed_spec(spec, bind, required) if alloc.cpuset and bind else None
    if written is not None:
        out[n.ANN_RESOURCE_SPEC] = written
    return out


def _completed_spec(spec: ResourceSpec, bind: str, required: bool) -> dict[str, str] | None:
    """The resource-spec with the bind policy used filled in, or None when the pod's spec already says it."""
    req, pref = spec.required_bind, spec.preferred_bind
    if required and req in ("", "Default"):
        req = bind
    if pref == "Default":
        pref = bind
    if not req and not pref:
        pref = bind
    if (req, pref) == (spec.required_bind, spec.preferred_bind):
        return None
    fields = (
        ("requiredCPUBindPolicy", req),
        ("preferredCPUBindPolicy", pref),
        ("preferredCPUExclusivePolicy", spec.exclusive),
    )
    return {k: v for k, v in fields if v}


def snapshot_node(state: NodeState) -> NodeSnapshot:
    devices: dict[str, dict[str, DeviceUse]] = {}
    inv = state.inventory
    types = sorted(set(inv.devices if inv is not None else ()) | set(state.dev_used))
    for dtype in types:
        minors = sorted(
            {d.minor for d in (inv.devices.get(dtype, ()) if inv is not None else ())}
            | set(state.dev_used.get(dtype, {}))
        )
        per: dict[str, DeviceUse] = {}
        for m in minors:
            d = inv.device(dtype, m) if inv is not None else None
            per[str(m)] = {
                "total": format_resource_list(d.resources if d is not None else {}),
                "used": format_resource_list(state.dev_used.get(dtype, {}).get(m, {})),
            }
        devices[dtype] = per
    return {"devices": devices, "cpusetAllocated": format_cpuset(state.cpu_owner)}
