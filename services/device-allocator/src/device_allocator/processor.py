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
    GangGroupPlaced,
    GangGroupUnschedulable,
    GangHoldsReleased,
    GangRetryRequested,
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
    QuotaEvicted,
    ReservationGroupResolved,
    ReservationResolved,
    TopologyRemoved,
    TopologyReported,
)
from allot_contracts.kube import priority_value
from allot_gang import GangConfig
from allot_placement import Decision, PlacementConfig, PlacementEngine
from allot_runtime.processor import Emit
from device_allocator.queueing import GangQueue, group_item, pod_item

HELD = "HeldForGang"


class DeviceAllocator:
    name: ClassVar[str] = "device-allocator"
    interests: ClassVar[frozenset[str]] = frozenset(
        {"node.registered", "node.removed", "device.reported", "device.removed", "topology.reported",
         "topology.removed", "pod.submitted", "pod.observed", "pod.deleted", "pod.bind_failed", "quota.evicted",
         "reservation.resolved", "reservation.group_resolved", "gang.holds_released"}
    )

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        settings = dict(config or {})
        queue = settings.pop("queue", {})
        self.config = PlacementConfig.from_dict(settings)
        self.queue = GangQueue(GangConfig.from_dict({"queue": queue}).queue)
        self.group_attempt_at: dict[str, int] = {}
        self.arrived_at: dict[str, int] = {}  # pod -> time it was submitted (µs)
        self.attempted_at: dict[str, int] = {}  # plain pod -> time of its last placement attempt (µs)
        self.engine = PlacementEngine(self.config)
        self.manifests: dict[str, dict[str, Any]] = {}
        self.arrival: dict[str, int] = {}  # pod -> arrival sequence (queue order tie-break)
        self.placed: dict[str, str] = {}  # pod -> node
        self.unschedulable: dict[str, int] = {}  # pod -> last attempt
        self.freed: dict[str, tuple[str, dict[str, Any], str]] = {}  # pod -> (node, allocation, reason) to record
        self.held_by: dict[str, tuple[str, int]] = {}
        self.freed_gang: set[str] = set()  # gang member -> (group, attempt) whose placement it holds
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
                self.arrived_at[pod.key] = at
                self.attempted_at.pop(pod.key, None)
                self._arrivals += 1
                self.arrival[pod.key] = self._arrivals
            case PodObserved(pod=pod, manifest=manifest):
                self.manifests[pod.key] = manifest
                # Accounted even when its allocation annotations cannot be read (then by its requests alone): it
                # runs there, and its resources come back when it goes.
                self.engine.add_bound_pod(manifest)
                node = (manifest.get("spec") or {}).get("nodeName")
                if (manifest.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    self.placed.pop(pod.key, None)  # finished: the engine has released it
                elif node:
                    self.placed[pod.key] = str(node)
            case PodDeleted(pod=pod):
                self._free(pod, "deleted")
                self.queue.forget_member(pod.key)
                self.queue.held.discard(pod.key)
                self.manifests.pop(pod.key, None)
                self.arrival.pop(pod.key, None)
                self.unschedulable.pop(pod.key, None)
            case PodBindFailed(pod=pod):
                self._free(pod, "bind failed")
            case QuotaEvicted(pod=pod, cause=cause):
                self._free(pod, f"evicted ({cause})")
                self.queue.forget_member(pod.key)
                self.queue.held.discard(pod.key)
                self.manifests.pop(pod.key, None)
                self.unschedulable.pop(pod.key, None)
            case GangHoldsReleased(group=group, attempt=attempt, members=members, reason=reason):
                for member in members:
                    if self.held_by.get(member) == (group, attempt):
                        namespace, name = member.split("/", 1)
                        self._free(ObjectRef(namespace=namespace, name=name), f"gang holds released: {reason}")
            case GangGroupPlaced(group=group, attempt=attempt, members=members, decisions=decisions):
                self.queue.recorded(self._group_item(group, members), True, at)
                self.queue.unblock(group)
                for member, decision in sorted(decisions.items()):
                    placed = Decision.from_dict(decision)
                    self.engine.assume(placed)
                    self.placed[member] = str(placed.node)
                    self.held_by[member] = (group, attempt)
                    self.unschedulable.pop(member, None)
            case GangGroupUnschedulable(group=group, members=members, codes=codes) if members:
                item = self._group_item(group, members)
                if HELD in codes:
                    self.queue.recorded(item, None, at)
                else:
                    self.queue.recorded(item, False, at)
                    self.queue.block(item, tuple(members))
                self.group_attempt_at[group] = at
            case PodPlaced(pod=pod, node=node, decision=decision):
                self.queue.recorded(self._pod_item(pod.key), True, at)
                self.queue.held.discard(pod.key)
                self.engine.assume(Decision.from_dict(decision))
                self.placed[pod.key] = node
                self.unschedulable.pop(pod.key, None)
            case PodUnschedulable(pod=pod, attempt=attempt, codes=codes):
                self.unschedulable[pod.key] = attempt
                if pod.key in self.manifests:
                    self.queue.recorded(self._pod_item(pod.key), None if HELD in codes else False, at)
                    self.attempted_at[pod.key] = at
                if HELD in codes:
                    self.queue.held.add(pod.key)
            case PodRequeued(pod=pod):
                self.unschedulable.pop(pod.key, None)
                self.queue.held.discard(pod.key)
            case PodReleased(pod=pod):
                self.freed.pop(pod.key, None)
                self.freed_gang.discard(pod.key)
            case PodRejected(pod=pod):
                self.unschedulable.pop(pod.key, None)
            case _:
                pass

    def _free(self, pod: ObjectRef, reason: str) -> None:
        """The pod no longer holds its allocation (deleted, evicted, binding failed, gang hold released): free it
        now (an input effect), record it as ``pod.released`` in the decision that follows."""
        if self.held_by.pop(pod.key, None) is not None:
            self.freed_gang.add(pod.key)  # a gang member: the gang-coordinator decides what happens next
        node = self.placed.pop(pod.key, None)
        if node is not None:
            self.freed[pod.key] = (node, self.engine.release(pod.namespace, pod.name) or {}, reason)

    def _pod_item(self, key: str) -> Any:
        last = self.attempted_at.get(key, self.arrived_at.get(key, 0))
        return pod_item(key, self.manifests.get(key, {}), self.arrival.get(key, 0), last)

    def _group_item(self, group: str, members: list[str] | tuple[str, ...]) -> Any:
        manifests = [self.manifests[m] for m in members if m in self.manifests]
        arrival = min((self.arrival.get(m, 0) for m in members), default=0)
        arrived = min((self.arrived_at.get(m, 0) for m in members), default=0)
        return group_item(group, manifests, arrival, self.group_attempt_at.get(group, arrived))

    # -- decide ----------------------------------------------------------------------------------------------

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case ReservationResolved(pod=pod, attempt=attempt):
                return self._place(pod, attempt, at)
            case PodBindFailed(pod=pod, attempt=attempt) if (
                pod.key in self.manifests and pod.key in self.freed and pod.key not in self.freed_gang
            ):
                # the binding failed but the pod still exists: free its devices and send it through admission again
                return [*self._release_freed(), Emit(stream_id=stream_id("pod", pod.key), event=PodRequeued(
                    pod=pod, attempt=attempt + 1, reason="binding failed"))]
            case PodDeleted() | PodBindFailed() | QuotaEvicted() | GangHoldsReleased():
                out = self._release_freed()
                if self.queue.held and self.queue.reserving_band() is None:
                    # the gang they were held back for is gone (its members deleted or evicted)
                    requeued = {e.event.pod.key for e in out if isinstance(e.event, PodRequeued)}
                    out += self._release_held("the gang holding capacity is gone", skip=requeued)
                return out
            case ReservationGroupResolved(group=group, attempt=attempt, members=members):
                return self._place_group(group, attempt, members, at)
            case NodeRegistered() | DevicesReported() | TopologyReported():
                return self._requeue("capacity added")
            case _:
                return []

    def _place(self, pod: ObjectRef, attempt: int, at: int) -> list[Emit]:
        manifest = self.manifests.get(pod.key)
        if manifest is None or pod.key in self.placed:
            return []
        stream = stream_id("pod", pod.key)
        step = self.queue.verdict(self._pod_item(pod.key), at)
        if step.verdict == "hold":
            message = f"held back so a waiting gang can gather capacity ({step.reason})"
            return [Emit(stream_id=stream, event=PodUnschedulable(
                pod=pod, attempt=attempt, message=message, codes=[HELD],
                decision={"outcome": "Unschedulable", "pod": pod.key, "message": message, "codes": [HELD]}))]
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

    def _release_freed(self) -> list[Emit]:
        if not self.freed:
            return []
        out = []
        for key, (node, freed, reason) in sorted(self.freed.items()):
            namespace, name = key.split("/", 1)
            out.append(Emit(stream_id=stream_id("pod", key), event=PodReleased(
                pod=ObjectRef(namespace=namespace, name=name), node=node, freed=freed, reason=reason)))
        return [*out, *self._requeue(f"{', '.join(sorted(self.freed))} released")]

    def _place_group(self, group: str, attempt: int, members: list[str], at: int) -> list[Emit]:
        """All or nothing: every member of the gang group gets a placement in one decision, or none does."""
        stream = stream_id("gang", group)
        missing = [m for m in members if m not in self.manifests or m in self.placed]
        if missing:
            return [Emit(stream_id=stream, event=GangGroupUnschedulable(
                group=group, attempt=attempt, failed_pod=missing[0], codes=["MemberUnavailable"],
                message=f"members gone or already placed: {', '.join(missing)}"))]
        item = self._group_item(group, members)
        step = self.queue.verdict(item, at)
        if step.verdict == "hold":
            return [Emit(stream_id=stream, event=GangGroupUnschedulable(
                group=group, attempt=attempt, codes=[HELD], members=list(members),
                message=f"held back so another waiting gang can gather capacity ({step.reason})"))]
        decision = self.engine.schedule_group([self.manifests[m] for m in members])
        record = decision.to_dict()
        if decision.outcome == "Scheduled":
            return [Emit(stream_id=stream, event=GangGroupPlaced(
                group=group, attempt=attempt, members=list(members),
                decisions={d.pod: d.to_dict() for d in decision.members})),
                *self._release_held(f"gang {group} placed")]
        codes = sorted({c for d in decision.members for c in d.codes})
        out = [Emit(stream_id=stream, event=GangGroupUnschedulable(
            group=group, attempt=attempt, message=decision.message, codes=codes, failed_pod=decision.failed_pod,
            decision=record, members=list(members)))]
        if self.queue.reserving_band() is not None and not self.queue.would_still_reserve(item, at):
            out += self._release_held(f"gang {group} stopped holding capacity")
        return out

    def _release_held(self, reason: str, skip: set[str] | frozenset[str] = frozenset()) -> list[Emit]:
        """Pods held back for a reserving gang go back through admission once the reservation ends."""
        out = []
        for key in sorted(self.queue.held - skip):
            if key in self.unschedulable:
                namespace, name = key.split("/", 1)
                out.append(Emit(stream_id=stream_id("pod", key), event=PodRequeued(
                    pod=ObjectRef(namespace=namespace, name=name), attempt=self.unschedulable[key] + 1,
                    reason=reason)))
        return out

    def _requeue(self, reason: str) -> list[Emit]:
        """Send back, in queue order, every unschedulable pod that would fit on its own now, and ask the
        gang-coordinator to retry every waiting gang group that would now fit whole."""
        if not self.unschedulable and not self.queue.blocked:
            return []
        order = sorted(
            (k for k in self.unschedulable if k in self.manifests),
            key=lambda k: (-priority_value(self.manifests[k]), self.arrival.get(k, 0), k),
        )
        out: list[Emit] = []
        band = self.queue.reserving_band()
        for group, members in self.queue.blocked_in_order():
            manifests = [self.manifests[m] for m in members if m in self.manifests]
            if len(manifests) == len(members) and self.engine.schedule_group(manifests).outcome == "Scheduled":
                out.append(Emit(stream_id=stream_id("gang", group), event=GangRetryRequested(group=group,
                                                                                             reason=reason)))
        for key in order:
            if key in self.queue.held and band is not None and self._pod_item(key).band <= band:
                continue  # still held for the reserving gang
            if self.engine.schedule(self.manifests[key]).outcome == "Scheduled":
                namespace, name = key.split("/", 1)
                out.append(Emit(stream_id=stream_id("pod", key), event=PodRequeued(
                    pod=ObjectRef(namespace=namespace, name=name), attempt=self.unschedulable[key] + 1,
                    reason=reason)))
        return out

    def snapshot(self) -> dict[str, Any]:
        return {
            "queue": self.queue.snapshot(),
            "engine": self.engine.digest(),
            "placed": dict(sorted(self.placed.items())),
            "unschedulable": dict(sorted(self.unschedulable.items())),
        }
