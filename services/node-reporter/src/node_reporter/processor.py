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
        decided = self._decision(event, at)
        if decided is None:
            return []
        kind, name, answer = decided
        return [Emit(stream_id=stream_id(kind, name), event=answer)]

    def _decision(self, event: Event, at: int) -> tuple[str, str, Event] | None:
        """(stream kind, object name, the event recorded) in answer to ``event``; None when nothing is."""
        match event:
            case NodeApplied(name=name, manifest=manifest):
                issues: list[FieldIssue] = []
                warnings: list[FieldIssue] = []
                node = admit_node(manifest, issues, warnings)
                if node is None:
                    return "node", name, NodeRejected(name=name, errors=issues)
                registered = NodeRegistered(
                    name=name,
                    manifest=manifest,
                    node=node,
                    capacity=capacity_summary(manifest),
                    warnings=warnings,
                )
                return "node", name, registered
            case NodeDeleted(name=name) if name in self.nodes:
                return "node", name, NodeRemoved(name=name)
            case DeviceApplied(name=name, manifest=manifest):
                issues = []
                inventory = admit_device(manifest, issues, [])
                if inventory is None:
                    return "device", name, DevicesRejected(name=name, errors=issues)
                reported = DevicesReported(
                    name=name, manifest=manifest, inventory=inventory, devices=device_summary(manifest)
                )
                return "device", name, reported
            case DeviceDeleted(name=name) if name in self.devices:
                return "device", name, DevicesRemoved(name=name)
            case TopologyApplied(name=name, manifest=manifest):
                issues = []
                topology = admit_topology(manifest, issues, [])
                if topology is None:
                    return "topology", name, TopologyRejected(name=name, errors=issues)
                return "topology", name, TopologyReported(name=name, manifest=manifest, topology=topology)
            case NodeMetricApplied(name=name, manifest=manifest):
                return "nodemetric", name, nodemetric_decision(name, manifest, at)
            case NodeMetricDeleted(name=name) if name in self.metrics:
                return "nodemetric", name, NodeMetricRemoved(name=name)
            case TopologyDeleted(name=name) if name in self.topologies:
                return "topology", name, TopologyRemoved(name=name)
            case _:
                return None

    def snapshot(self) -> dict[str, object]:
        return {
            "scope": self.node,
            "nodes": dict(sorted(self.nodes.items())),
            "devices": dict(sorted(self.devices.items())),
            "topologies": sorted(self.topologies),
            "metrics": dict(sorted(self.metrics.items())),
        }
