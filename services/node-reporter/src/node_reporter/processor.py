"""node-reporter's decisions: which Node, Device and NodeResourceTopology objects become scheduling input.

Consumes ``node.applied``/``node.deleted``, ``device.applied``/``device.deleted``, ``topology.applied``/
``topology.deleted`` (recorded by ``allot apply``, or by the Kubernetes watch in ``adapters/kube.py``). Emits
``node.registered`` / ``node.rejected`` / ``node.removed`` and the device and topology counterparts. A rejected object
changes nothing: the node keeps its last accepted version. ``nodemetric.applied``/``nodemetric.deleted`` (the node's
own agent, koordlet through the Kubernetes watch, or ``allot apply``) become ``nodemetric.reported`` (with its
``updateTime``, the recorded time when it had none) / ``nodemetric.rejected`` / ``nodemetric.removed``.

Pure: validation is structural (names, quantities, device entries) and deterministic; the state is the set of
accepted objects' names, used to answer deletes and to keep the projection digest meaningful.
"""

from __future__ import annotations

from typing import ClassVar

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
from allot_contracts.events.nodeside import (
    NodeMetricApplied,
    NodeMetricDeleted,
    NodeMetricRemoved,
    NodeMetricReported,
)
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.nodes import (
    admit_device,
    admit_node,
    admit_topology,
    capacity_summary,
    device_summary,
)
from allot_runtime.processor import Emit, config_keys, scoped_node
from node_reporter.metrics.report import nodemetric_decision


class NodeReporter:
    name: ClassVar[str] = "node-reporter"
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            "node.applied",
            "node.deleted",
            "device.applied",
            "device.deleted",
            "topology.applied",
            "topology.deleted",
            "nodemetric.applied",
            "nodemetric.deleted",
        }
    )
    SCOPED: ClassVar[bool] = True  # one instance per node (a DaemonSet pod) decides for its own node only

    def __init__(self, config: JsonObject | None = None) -> None:
        # "agent": the per-node agent's settings (adapters/agent.py, checked by main before anything starts)
        self.node = scoped_node(config_keys(config, ("scope", "agent"), "node-reporter"))
        self.nodes: dict[str, str] = {}  # name -> resourceVersion-ish summary (capacity text)
        self.devices: dict[str, int] = {}
        self.topologies: set[str] = set()
        self.metrics: dict[str, int] = {}  # node -> update time of its accepted NodeMetric

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
            case NodeMetricReported(name=name, update_time=update_time):
                self.metrics[name] = update_time
            case NodeMetricRemoved(name=name):
                self.metrics.pop(name, None)
            case _:
                pass

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        if self.node and getattr(event, "name", self.node) != self.node:
            return []  # another node's instance decides for it
        match event:
            case NodeApplied(name=name, manifest=manifest):
                issues: list[FieldIssue] = []
                warnings: list[FieldIssue] = []
                node = admit_node(manifest, issues, warnings)
                if node is None:
                    return [
                        Emit(stream_id=stream_id("node", name), event=NodeRejected(name=name, errors=issues))
                    ]
                return [
                    Emit(
                        stream_id=stream_id("node", name),
                        event=NodeRegistered(
                            name=name,
                            manifest=manifest,
                            node=node,
                            capacity=capacity_summary(manifest),
                            warnings=warnings,
                        ),
                    )
                ]
            case NodeDeleted(name=name):
                if name not in self.nodes:
                    return []
                return [Emit(stream_id=stream_id("node", name), event=NodeRemoved(name=name))]
            case DeviceApplied(name=name, manifest=manifest):
                issues = []
                inventory = admit_device(manifest, issues, [])
                if inventory is None:
                    return [
                        Emit(
                            stream_id=stream_id("device", name),
                            event=DevicesRejected(name=name, errors=issues),
                        )
                    ]
                return [
                    Emit(
                        stream_id=stream_id("device", name),
                        event=DevicesReported(
                            name=name,
                            manifest=manifest,
                            inventory=inventory,
                            devices=device_summary(manifest),
                        ),
                    )
                ]
            case DeviceDeleted(name=name):
                if name not in self.devices:
                    return []
                return [Emit(stream_id=stream_id("device", name), event=DevicesRemoved(name=name))]
            case TopologyApplied(name=name, manifest=manifest):
                issues = []
                topology = admit_topology(manifest, issues, [])
                if topology is None:
                    return [
                        Emit(
                            stream_id=stream_id("topology", name),
                            event=TopologyRejected(name=name, errors=issues),
                        )
                    ]
                return [
                    Emit(
                        stream_id=stream_id("topology", name),
                        event=TopologyReported(name=name, manifest=manifest, topology=topology),
                    )
                ]
            case NodeMetricApplied(name=name, manifest=manifest):
                return [
                    Emit(
                        stream_id=stream_id("nodemetric", name), event=nodemetric_decision(name, manifest, at)
                    )
                ]
            case NodeMetricDeleted(name=name):
                if name not in self.metrics:
                    return []
                return [Emit(stream_id=stream_id("nodemetric", name), event=NodeMetricRemoved(name=name))]
            case TopologyDeleted(name=name):
                if name not in self.topologies:
                    return []
                return [Emit(stream_id=stream_id("topology", name), event=TopologyRemoved(name=name))]
            case _:
                return []

    def snapshot(self) -> dict[str, object]:
        return {
            "scope": self.node,
            "nodes": dict(sorted(self.nodes.items())),
            "devices": dict(sorted(self.devices.items())),
            "topologies": sorted(self.topologies),
            "metrics": dict(sorted(self.metrics.items())),
        }
