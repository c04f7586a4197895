"""node-reporter's decisions: which Node, Device and NodeResourceTopology objects are scheduling input."""

from __future__ import annotations

from typing import Final

from allot_contracts.events._base import FieldIssue, Named, NamedManifest, NameRefused
from allot_contracts.objects.inventory import Inventory, NodeInfo, Topology

__all__ = [
    "DevicesRejected",
    "DevicesRemoved",
    "DevicesReported",
    "NodeRegistered",
    "NodeRejected",
    "NodeRemoved",
    "TopologyRejected",
    "TopologyRemoved",
    "TopologyReported",
]

# A node's accepted inventory as it changes: what a service that keeps its own copy of the nodes follows.
INVENTORY_TYPES: Final = frozenset(
    {
        "node.registered",
        "node.removed",
        "device.reported",
        "device.removed",
        "topology.reported",
        "topology.removed",
    }
)


class NodeRegistered(NamedManifest, frozen=True, kw_only=True, tag="node.registered.v2"):
    """node-reporter accepted a Node: it is schedulable input from now on. ``node`` is the Node read at the door,
    what every engine acts on; ``capacity`` is a summary for humans; ``warnings`` list what was read but is not acted
    on (an unreadable annotation, with its path). v1 (manifest only) is upcast by reading it."""

    node: NodeInfo
    capacity: dict[str, str] = {}
    warnings: list[FieldIssue] = []


class NodeRejected(NameRefused, frozen=True, kw_only=True, tag="node.rejected.v1"):
    pass


class NodeRemoved(Named, frozen=True, kw_only=True, tag="node.removed.v1"):
    pass


class DevicesReported(NamedManifest, frozen=True, kw_only=True, tag="device.reported.v2"):
    """node-reporter accepted a node's device inventory (Koordinator ``Device``); ``inventory`` as read at the
    door."""

    inventory: Inventory
    devices: dict[str, int] = {}


class DevicesRejected(NameRefused, frozen=True, kw_only=True, tag="device.rejected.v1"):
    pass


class DevicesRemoved(Named, frozen=True, kw_only=True, tag="device.removed.v1"):
    pass


class TopologyReported(NamedManifest, frozen=True, kw_only=True, tag="topology.reported.v2"):
    """node-reporter accepted a node's ``NodeResourceTopology``; ``topology`` as read at the door."""

    topology: Topology


class TopologyRejected(NameRefused, frozen=True, kw_only=True, tag="topology.rejected.v1"):
    pass


class TopologyRemoved(Named, frozen=True, kw_only=True, tag="topology.removed.v1"):
    pass
