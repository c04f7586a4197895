"""node-reporter's decisions: which Node, Device and NodeResourceTopology objects are scheduling input."""

from __future__ import annotations

from typing import Any

from allot_contracts.events._base import Event, FieldIssue
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


class NodeRegistered(Event, frozen=True, kw_only=True, tag="node.registered.v2"):
    """node-reporter accepted a Node: it is schedulable input from now on. ``node`` is the Node read at the door,
    what every engine acts on; ``capacity`` is a summary for humans; ``warnings`` list what was read but is not acted
    on (an unreadable annotation, with its path). v1 (manifest only) is upcast by reading it."""

    name: str
    manifest: dict[str, Any]
    node: NodeInfo
    capacity: dict[str, str] = {}
    warnings: list[FieldIssue] = []


class NodeRejected(Event, frozen=True, kw_only=True, tag="node.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class NodeRemoved(Event, frozen=True, kw_only=True, tag="node.removed.v1"):
    name: str


class DevicesReported(Event, frozen=True, kw_only=True, tag="device.reported.v2"):
    """node-reporter accepted a node's device inventory (Koordinator ``Device``); ``inventory`` as read at the
    door."""

    name: str
    manifest: dict[str, Any]
    inventory: Inventory
    devices: dict[str, int] = {}


class DevicesRejected(Event, frozen=True, kw_only=True, tag="device.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class DevicesRemoved(Event, frozen=True, kw_only=True, tag="device.removed.v1"):
    name: str


class TopologyReported(Event, frozen=True, kw_only=True, tag="topology.reported.v2"):
    """node-reporter accepted a node's ``NodeResourceTopology``; ``topology`` as read at the door."""

    name: str
    manifest: dict[str, Any]
    topology: Topology


class TopologyRejected(Event, frozen=True, kw_only=True, tag="topology.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class TopologyRemoved(Event, frozen=True, kw_only=True, tag="topology.removed.v1"):
    name: str
