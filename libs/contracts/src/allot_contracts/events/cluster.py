"""node-reporter's decisions: which Node, Device and NodeResourceTopology objects are scheduling input."""

from __future__ import annotations

from typing import Any

from allot_contracts.events._base import Event, FieldIssue


class NodeRegistered(Event, frozen=True, kw_only=True, tag="node.registered.v1"):
    """node-reporter accepted a Node: it is schedulable input from now on. ``capacity`` is a summary for humans."""

    name: str
    manifest: dict[str, Any]
    capacity: dict[str, str] = {}


class NodeRejected(Event, frozen=True, kw_only=True, tag="node.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class NodeRemoved(Event, frozen=True, kw_only=True, tag="node.removed.v1"):
    name: str


class DevicesReported(Event, frozen=True, kw_only=True, tag="device.reported.v1"):
    """node-reporter accepted a node's device inventory (Koordinator ``Device``)."""

    name: str
    manifest: dict[str, Any]
    devices: dict[str, int] = {}


class DevicesRejected(Event, frozen=True, kw_only=True, tag="device.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class DevicesRemoved(Event, frozen=True, kw_only=True, tag="device.removed.v1"):
    name: str


class TopologyReported(Event, frozen=True, kw_only=True, tag="topology.reported.v1"):
    name: str
    manifest: dict[str, Any]


class TopologyRejected(Event, frozen=True, kw_only=True, tag="topology.rejected.v1"):
    name: str
    errors: list[FieldIssue]


class TopologyRemoved(Event, frozen=True, kw_only=True, tag="topology.removed.v1"):
    name: str
