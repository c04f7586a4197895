"""node-reporter's decisions: which Node, Device and NodeResourceTopology objects become scheduling input.

Consumes ``node.applied``/``node.deleted``, ``device.applied``/``device.deleted``, ``topology.applied``/
``topology.deleted`` (recorded by ``allot apply``, or by the Kubernetes watch in ``adapters/kube.py``). Emits
``node.registered`` / ``node.rejected`` / ``node.removed`` and the device and topology counterparts. A rejected object
changes nothing: the node keeps its last accepted version.

Pure: validation is structural (names, quantities, device entries) and deterministic; the state is the set of
accepted objects' names, used to answer deletes and to keep the projection digest meaningful.
"""

from __future__ import annotations

from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    DeviceApplied,
    DeviceDeleted,
    DevicesRejected,
    DevicesRemoved,
    DevicesReported,
    Event,
    NodeApplied,
    NodeDeleted,
    NodeRegistered,
    NodeRejected,
    NodeRemoved,
    TopologyApplied,
    TopologyDeleted,
    TopologyRejected,
    TopologyRemoved,
    TopologyReported,
)
from allot_runtime.processor import Emit
from node_reporter.validate import (
    capacity_summary,
    device_summary,
    validate_device,
    validate_node,
    validate_topology,
)


class NodeReporter:
    name: ClassVar[str] = "node-reporter"
    interests: ClassVar[frozenset[str]] = frozenset(
        {"node.applied", "node.deleted", "device.applied", "device.deleted", "topology.applied", "topology.deleted"}
    )
    SCOPED: ClassVar[bool] = True  # one instance per node (a DaemonSet pod) decides for its own node only

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.node = str(((config or {}).get("scope") or {}).get("node") or "")
        self.nodes: dict[str, str] = {}  # name -> resourceVersion-ish summary (capacity text)
        self.devices: dict[str, int] = {}
        self.topologies: set[str] = set()

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case NodeRegistered(name=name, capacity=capacity):
                self.nodes[name] = ",".join(f"{k}={v}" for k, v in sorted(capacity.items()))
            case NodeRemoved(name=name):
                self.nodes.pop(name, None)
            case DevicesReported(name=name, devices=devices):
                self.devices[name] = sum(devices.values())
            case DevicesRemoved(name=name):
                self.devices.pop(name, None)
            case TopologyReported(name=name):
                self.topologies.add(name)
            case TopologyRemoved(name=name):
                self.topologies.discard(name)
            case _:
                pass

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        if self.node and getattr(event, "name", self.node) != self.node:
            return []  # another node's instance decides for it
        match event:
            case NodeApplied(name=name, manifest=manifest):
                issues = validate_node(manifest)
                if issues:
                    return [Emit(stream_id=stream_id("node", name), event=NodeRejected(name=name, errors=issues))]
                return [
                    Emit(
                        stream_id=stream_id("node", name),
                        event=NodeRegistered(name=name, manifest=manifest, capacity=capacity_summary(manifest)),
                    )
                ]
            case NodeDeleted(name=name):
                if name not in self.nodes:
                    return []
                return [Emit(stream_id=stream_id("node", name), event=NodeRemoved(name=name))]
            case DeviceApplied(name=name, manifest=manifest):
                issues = validate_device(manifest)
                if issues:
                    return [Emit(stream_id=stream_id("device", name), event=DevicesRejected(name=name, errors=issues))]
                return [
                    Emit(
                        stream_id=stream_id("device", name),
                        event=DevicesReported(name=name, manifest=manifest, devices=device_summary(manifest)),
                    )
                ]
            case DeviceDeleted(name=name):
                if name not in self.devices:
                    return []
                return [Emit(stream_id=stream_id("device", name), event=DevicesRemoved(name=name))]
            case TopologyApplied(name=name, manifest=manifest):
                issues = validate_topology(manifest)
                if issues:
                    return [Emit(stream_id=stream_id("topology", name), event=TopologyRejected(name=name, errors=issues))]
                return [Emit(stream_id=stream_id("topology", name), event=TopologyReported(name=name, manifest=manifest))]
            case TopologyDeleted(name=name):
                if name not in self.topologies:
                    return []
                return [Emit(stream_id=stream_id("topology", name), event=TopologyRemoved(name=name))]
            case _:
                return []

    def snapshot(self) -> dict[str, Any]:
        return {
            "scope": self.node,
            "nodes": dict(sorted(self.nodes.items())),
            "devices": dict(sorted(self.devices.items())),
            "topologies": sorted(self.topologies),
        }
