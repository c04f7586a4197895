"""device-allocator's decisions: where each pod runs, on which devices and CPUs (Filter / Score / Reserve).

Consumes the cluster (``node.registered``/``node.removed``, ``device.reported``/``device.removed``,
``topology.reported``/``topology.removed``), pods (``pod.submitted`` for their manifests, ``pod.observed`` for pods
already bound with allocation annotations, ``pod.deleted``, ``pod.bind_failed``) and the trigger
``reservation.resolved`` (a pod admitted by quota and cleared by reservation-manager).

Emits ``pod.placed`` (the placement engine's full decision: node, devices, cpuset, output annotations, scores),
``pod.unschedulable`` (Kubernetes-style summary, reason codes, per-node reasons), ``pod.rejected`` (an invalid
request: never retried), ``pod.released`` (a deleted or unbindable pod's allocation freed), and ``pod.requeued``
(an unschedulable pod that would now fit after capacity changed goes back through admission).

Invariants: a pod holds at most one allocation; an allocation exists only between ``pod.placed`` and
``pod.released``; decisions read only the projection (engine state) and the trigger's time, so replay re-derives
them; unschedulable pods are retried in queue order (priority desc, then arrival) only when a retry can succeed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    DevicesRemoved,
    DevicesReported,
    Event,
    FieldIssue,
    NodeRegistered,
    NodeRemoved,
    ObjectRef,
    PodBindFailed,
    PodDeleted,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    ReservationResolved,
    TopologyRemoved,
    TopologyReported,
)
from allot_contracts.kube import priority_value
from allot_placement import Decision, PlacementConfig, PlacementEngine
from allot_runtime.processor import Emit


class DeviceAllocator:
    name: ClassVar[str] = "device-allocator"
    interests: ClassVar[frozenset[str]] = frozenset(
        {"node.registered", "node.removed", "device.reported", "device.removed", "topology.reported",
         "topology.removed", "pod.submitted", "pod.observed", "pod.deleted", "pod.bind_failed",
         "reservation.resolved"}
    )

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = PlacementConfig.from_dict(config or {})
        self.engine = PlacementEngine(self.config)
        self.manifests: dict[str, dict[str, Any]] = {}
        self.arrival: dict[str, int] = {}  # pod -> arrival sequence (queue order tie-break)
        self.placed: dict[str, str] = {}  # pod -> node
        self.unschedulable: dict[str, int] = {}  # pod -> last attempt
        self.freed: dict[str, tuple[str, dict[str, Any]]] = {}  # pod -> (node, allocation) freed, not yet recorded
        self._arrivals = 0

    # -- evolve ----------------------------------------------------------------------------------------------

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        match event:
            case NodeRegistered(manifest=manifest):
                self.engine.upsert_node(manifest)
            case NodeRemoved(name=name):
                self.engine.delete_node(name)
            case DevicesReported(manifest=manifest):
                self.engine.upsert_device(manifest)
            case DevicesRemoved(name=name):
                self.engine.delete_device(name)
            case TopologyReported(manifest=manifest):
                self.engine.upsert_topology(manifest)
            case TopologyRemoved(name=name):
                self.engine.delete_topology(name)
            case PodSubmitted(pod=pod, manifest=manifest):
                self.manifests[pod.key] = manifest
                self._arrivals += 1
                self.arrival[pod.key] = self._arrivals
            case PodObserved(pod=pod, manifest=manifest):
                self.manifests[pod.key] = manifest
                if not self.engine.add_bound_pod(manifest):
                    node = (manifest.get("spec") or {}).get("nodeName")
                    if node:
                        self.placed[pod.key] = str(node)
            case PodDeleted(pod=pod):
                self._free(pod)
                self.manifests.pop(pod.key, None)
                self.arrival.pop(pod.key, None)
                self.unschedulable.pop(pod.key, None)
            case PodBindFailed(pod=pod):
                self._free(pod)
            case PodPlaced(pod=pod, node=node, decision=decision):
                self.engine.assume(Decision.from_dict(decision))
                self.placed[pod.key] = node
                self.unschedulable.pop(pod.key, None)
            case PodUnschedulable(pod=pod, attempt=attempt):
                self.unschedulable[pod.key] = attempt
            case PodRequeued(pod=pod):
                self.unschedulable.pop(pod.key, None)
            case PodReleased(pod=pod):
                self.freed.pop(pod.key, None)
            case PodRejected(pod=pod):
                self.unschedulable.pop(pod.key, None)
            case _:
                pass

    def _free(self, pod: ObjectRef) -> None:
        """The pod no longer holds its allocation (deleted, or its binding failed): free it now, record it next."""
        node = self.placed.pop(pod.key, None)
        if node is not None:
            self.freed[pod.key] = (node, self.engine.release(pod.namespace, pod.name) or {})

    # -- decide ----------------------------------------------------------------------------------------------

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case ReservationResolved(pod=pod, attempt=attempt):
                return self._place(pod, attempt)
            case PodDeleted(pod=pod) | PodBindFailed(pod=pod):
                return self._release(pod, "deleted" if isinstance(event, PodDeleted) else "bind failed")
            case NodeRegistered() | DevicesReported() | TopologyReported():
                return self._requeue("capacity added")
            case _:
                return []

    def _place(self, pod: ObjectRef, attempt: int) -> list[Emit]:
        manifest = self.manifests.get(pod.key)
        if manifest is None or pod.key in self.placed:
            return []
        stream = stream_id("pod", pod.key)
        decision = self.engine.schedule(manifest)
        record = decision.to_dict()
        if decision.outcome == "Scheduled":
            assert decision.node is not None
            return [Emit(stream_id=stream, event=PodPlaced(pod=pod, attempt=attempt, node=decision.node,
                                                           decision=record))]
        if decision.outcome == "Rejected":
            issues = [FieldIssue(path=str(e.get("path", "")), message=str(e.get("message", "")))
                      for e in record.get("errors", [])]
            return [Emit(stream_id=stream, event=PodRejected(pod=pod, stage=self.name, errors=issues,
                                                             message=decision.message, codes=list(decision.codes)))]
        return [Emit(stream_id=stream, event=PodUnschedulable(pod=pod, attempt=attempt, message=decision.message,
                                                              codes=list(decision.codes), decision=record))]

    def _release(self, pod: ObjectRef, reason: str) -> list[Emit]:
        if pod.key not in self.freed:
            return []
        node, freed = self.freed[pod.key]
        released = Emit(stream_id=stream_id("pod", pod.key),
                        event=PodReleased(pod=pod, node=node, freed=freed, reason=reason))
        return [released, *self._requeue(f"{pod.key} released")]

    def _requeue(self, reason: str) -> list[Emit]:
        """Send back, in queue order, every unschedulable pod that would fit on its own now."""
        if not self.unschedulable:
            return []
        order = sorted(
            (k for k in self.unschedulable if k in self.manifests),
            key=lambda k: (-priority_value(self.manifests[k]), self.arrival.get(k, 0), k),
        )
        out: list[Emit] = []
        for key in order:
            if self.engine.schedule(self.manifests[key]).outcome == "Scheduled":
                namespace, name = key.split("/", 1)
                out.append(Emit(stream_id=stream_id("pod", key), event=PodRequeued(
                    pod=ObjectRef(namespace=namespace, name=name), attempt=self.unschedulable[key] + 1,
                    reason=reason)))
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "engine": self.engine.digest(),
            "placed": dict(sorted(self.placed.items())),
            "unschedulable": dict(sorted(self.unschedulable.items())),
        }
