"""device-allocator's decisions: where each pod runs, on which devices and CPUs (Filter / Score / Reserve).

Consumes the cluster (``node.registered``/``node.removed``, ``device.reported``/``device.removed``,
``topology.reported``/``topology.removed``), pods (``pod.submitted`` for the pods as read at the door, ``pod.observed`` for pods
already bound with allocation annotations, ``pod.deleted``, ``pod.bind_failed``) and the trigger
``reservation.resolved`` (a pod admitted by quota and cleared by reservation-manager).

Emits ``pod.placed`` (the placement engine's full decision: node, devices, cpuset, output annotations, scores),
``pod.unschedulable`` (Kubernetes-style summary, reason codes, per-node reasons), ``pod.rejected`` (an invalid
request: never retried), ``pod.released`` (a deleted or unbindable pod's allocation freed), ``pod.requeued``
(an unschedulable pod that would now fit after capacity changed goes back through admission), and for a job (gang
group, or plain pod) that fits nowhere, ``preemption.decided`` with a ``pod.evicted`` per victim (job-level
preemption: device_allocator.preemption chooses the victims, device_allocator.nominations keeps the nominated nodes
until the job is placed; ``pod.eviction_enacted`` refusing an eviction ends it).

Invariants: a pod holds at most one allocation; an allocation exists only between ``pod.placed`` and
``pod.released``; decisions read only the projection (engine state) and the trigger's time, so replay re-derives
them; unschedulable pods are retried in queue order (priority desc, then arrival) only when a retry can succeed.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from allot_contracts.envelope import stream_id
from allot_contracts.errors import InvalidInput
from allot_contracts.events import (
    DevicesReported,
    Event,
    FieldIssue,
    GangGroupPlaced,
    GangGroupUnschedulable,
    GangHoldsReleased,
    GangRetryRequested,
    NodeMetricRemoved,
    NodeMetricReported,
    NodeRegistered,
    ObjectRef,
    PodBindFailed,
    PodDeleted,
    PodEvictionEnacted,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    QuotaEvicted,
    QuotaGroupWaiting,
    QuotaWaiting,
    ReservationAccepted,
    ReservationDeleted,
    ReservationFailed,
    ReservationGroupResolved,
    ReservationRemoved,
    ReservationResolved,
    ReservationSucceeded,
    TopologyReported,
    type_of,
)
from allot_contracts.events.cluster import INVENTORY_TYPES
from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.issues import checked_bool
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.sharing import Parts
from allot_gang import GangConfig
from allot_placement import ConfigError, Decision, PlacementConfig, PlacementEngine
from allot_placement.decision import Freed
from allot_runtime.processor import Emit
from device_allocator.folding import DECIDES, GROUP_FOLDS, OUTCOME_FOLDS, POD_FOLDS
from device_allocator.inventory import fold_inventory
from device_allocator.nodes import TYPES as NODE_SIDE_TYPES
from device_allocator.nodes import NodeSide, assigned_pod, pod_facts, scheduled_at
from device_allocator.nominations import HELD_FOR_PREEMPTOR, PREEMPTING, Preemptions, job_id
from device_allocator.preemption import PlacedPods
from device_allocator.queueing import HELD, GangQueue, group_item, pod_item
from device_allocator.requeueing import Requeueing, requeued_in
from device_allocator.reservations import INTERESTS as RESERVATION_TYPES
from device_allocator.reservations import Reservations

FINISHED = frozenset({"Succeeded", "Failed"})
# what a new NodeMetric can change: only pods held back by a node's load are tried again on one
LOAD_CODES = frozenset({"UsageExceedThreshold", "AggregatedUsageExceedThreshold"})


class DeviceAllocator(Requeueing):
    name: ClassVar[str] = "device-allocator"
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            *INVENTORY_TYPES,
            *POD_LIFE_TYPES,
            "pod.bind_failed",
            "pod.eviction_enacted",
            "quota.evicted",
            "quota.waiting",  # an attempt failed at quota: a nomination whose victims are gone ends
            "quota.group_waiting",
            "reservation.resolved",
            "reservation.group_resolved",
            "gang.holds_released",
            *NODE_SIDE_TYPES,
            *RESERVATION_TYPES,
        }
    )

    # left out of a snapshot, fresh on restore: the engine's memos and its count of evaluations (the memos decide it)
    snapshot_fresh: ClassVar[frozenset[str]] = frozenset(
        {*(f"engine.{m}" for m in PlacementEngine.MEMOS), "engine.stats"}
    )

    def __init__(self, config: JsonObject | None = None) -> None:
        settings = dict(config or {})
        queue = settings.pop("queue", {})
        node_side = settings.pop("nodeSide", None)
        issues: list[FieldIssue] = []
        preemption = checked_bool(settings.pop("preemption", None), "preemption", issues)
        if issues:
            raise ConfigError(issues)
        self.config = PlacementConfig.from_dict(settings)
        self.queue = GangQueue(GangConfig.from_dict({"queue": queue}).queue)
        self.group_attempt_at: dict[str, int] = {}
        self.arrived_at: dict[str, int] = {}  # pod -> time it was submitted (µs)
        self.attempted_at: dict[str, int] = {}  # plain pod -> time of its last placement attempt (µs)
        self.engine = PlacementEngine(self.config)
        self.parts = Parts()  # what the pods, nodes and devices kept here repeat, held once
        self.nodes = NodeSide(
            self.engine, node_side, self.name, self.parts
        )  # heartbeats, overcommit, metrics
        self.reservations = Reservations(self.engine)  # reserve pods, holds, pods' reservation contexts
        self.pods: dict[str, Pod] = {}  # pods as read at the door, their repeated parts held once (``parts``)
        self.arrival: dict[str, int] = {}  # pod -> arrival sequence (queue order tie-break)
        self.placed = PlacedPods(self.pods)  # pod -> node
        self.unschedulable: dict[str, int] = {}  # pod -> last attempt
        # pod -> reason codes of its last pod.unschedulable (the metrics and the requeue hints read them)
        self.unschedulable_codes: dict[str, tuple[str, ...]] = {}
        self.unschedulable_message: dict[str, str] = {}  # pod -> the message of its last pod.unschedulable
        # owed output (docs/adr/0012-processor-contract.md): allocations freed by an input, recorded as pod.released
        # by the decision that follows and settled when it is evolved. pod -> (node, what it held, reason)
        self.freed: dict[str, tuple[str, Freed | None, str]] = {}
        # gang member -> (group, attempt) whose placement it holds
        self.held_by: dict[str, tuple[str, int]] = {}
        # the gang members among ``freed``: the gang-coordinator decides next
        self.freed_gang: set[str] = set()
        self._arrivals = 0
        self._steps = 0  # events evolved so far: orders reservation placements against pods' attempts
        # pod -> the step at which its current attempt entered the queue
        self.attempt_began: dict[str, int] = {}
        self.group_failed_step: dict[str, int] = {}  # gang group -> the step of its last failed attempt
        # job-level preemption: outstanding nominations, pods held off nominated nodes
        self.preemptions = Preemptions(
            self.engine, self.reservations, self.pods, self.placed, enabled=preemption is not False
        )

    # -- evolve ----------------------------------------------------------------------------------------------

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if not own and type_of(event) not in self.interests:
            return  # not an input of ours: nothing to fold (not even the passing of time)
        self.engine.advance(at)  # NodeMetrics expire as time passes
        self._steps += 1
        if own:
            self.nodes.apply_own(event)
        else:
            self.nodes.evolve(event, at, self._pod_facts)
        self.reservations.evolve(event, self._steps)
        self.preemptions.evolve(event, step=self._steps)
        if fold_inventory(self.engine, event, self.parts):
            return
        for fold in (self._evolve_pod, self._evolve_group, self._evolve_outcome):
            if fold(event, at):
                break  # the one fold that knows the event's type has folded it

    def _evolve_pod(self, event: Event, at: int) -> bool:
        """Fold a pod arriving, observed bound or gone; False for other events."""
        if not POD_FOLDS(event):  # one test instead of a failed pattern per type
            return False
        match event:
            case PodSubmitted(pod=pod, spec=spec) if spec is not None:
                self.pods[pod.key] = self.parts.pod(spec)
                self.arrived_at[pod.key] = at
                self.attempted_at.pop(pod.key, None)
                self.attempt_began[pod.key] = self._steps
                self._arrivals += 1
                self.arrival[pod.key] = self._arrivals
            case PodObserved(pod=pod, spec=spec, manifest=manifest) if spec is not None and spec.node_name:
                spec = self.parts.pod(spec)
                self.pods[pod.key] = spec
                self.engine.add_bound_pod(spec)
                node = spec.node_name
                if spec.phase in ("Succeeded", "Failed"):
                    self.placed.pop(pod.key, None)  # finished: the engine has released it
                else:
                    self.placed[pod.key] = str(node)
                    state = self.engine.node_state(str(node))
                    bound = state.pods.get(pod.key) if state is not None else None
                    self._track(pod.key, str(node), bound, scheduled_at(manifest, at))
            case PodDeleted(pod=pod):
                self._free(pod, "deleted")
                self._forget(pod.key)
                self.arrival.pop(pod.key, None)
                self.attempt_began.pop(pod.key, None)
            case PodBindFailed(pod=pod):
                self._free(pod, "bind failed")
            case QuotaEvicted(pod=pod, cause=cause):
                self._free(pod, f"evicted ({cause})")
                self._forget(pod.key)
            case _:
                return False
        return True

    def _forget(self, key: str) -> None:
        """Drop a pod that is gone from the queue and from what is known of its attempts."""
        self.queue.forget_member(key)
        self.queue.held.discard(key)
        self.pods.pop(key, None)
        self.unschedulable.pop(key, None)
        self.unschedulable_codes.pop(key, None)
        self.unschedulable_message.pop(key, None)

    def _evolve_group(self, event: Event, at: int) -> bool:
        """Fold a gang group's placement, refusal or released holds; False for other events."""
        if not GROUP_FOLDS(event):
            return False
        match event:
            case GangHoldsReleased(group=group, attempt=attempt, members=members, reason=reason):
                for member in members:
                    if self.held_by.get(member) == (group, attempt):
                        namespace, name = member.split("/", 1)
                        self._free(
                            ObjectRef(namespace=namespace, name=name), f"gang holds released: {reason}"
                        )
            case GangGroupPlaced(group=group, attempt=attempt, members=members, decisions=decisions):
                self.queue.recorded(self._group_item(group, members), True, at)
                self.queue.unblock(group)
                for member, placed in sorted(decisions.items()):
                    self.engine.assume(placed)
                    self._track(member, str(placed.node), placed.allocation, at)
                    self.placed[member] = str(placed.node)
                    self.held_by[member] = (group, attempt)
                    self.unschedulable.pop(member, None)
            case GangGroupUnschedulable(group=group, members=members, codes=codes) if members:
                item = self._group_item(group, members)
                if HELD in codes or HELD_FOR_PREEMPTOR in codes:
                    self.queue.recorded(item, None, at)
                else:
                    self.queue.recorded(item, False, at)
                    self.queue.block(item, tuple(members))
                self.group_attempt_at[group] = at
                self.group_failed_step[group] = self._steps
            case _:
                return False
        return True

    def _evolve_outcome(self, event: Event, at: int) -> bool:
        """Fold a decision about one pod (placed, unschedulable, requeued, released, rejected); False for
        other events."""
        if not OUTCOME_FOLDS(event):
            return False
        match event:
            case PodPlaced(pod=pod, node=node, decision=placed):
                self.queue.recorded(self._pod_item(pod.key), True, at)
                self.queue.held.discard(pod.key)
                self.engine.assume(placed)
                self._track(pod.key, node, placed.allocation, at)
                self.placed[pod.key] = node
                self.unschedulable.pop(pod.key, None)
            case PodUnschedulable(pod=pod, attempt=attempt, codes=codes, message=message):
                self.unschedulable[pod.key] = attempt
                self.unschedulable_codes[pod.key] = tuple(codes)
                self.unschedulable_message[pod.key] = message
                if pod.key in self.pods:
                    held = HELD in codes or HELD_FOR_PREEMPTOR in codes
                    self.queue.recorded(self._pod_item(pod.key), None if held else False, at)
                    self.attempted_at[pod.key] = at
                if HELD in codes:
                    self.queue.held.add(pod.key)
            case PodRequeued(pod=pod):
                self.attempt_began[pod.key] = self._steps
                self.unschedulable.pop(pod.key, None)
                self.queue.held.discard(pod.key)
            case PodReleased(pod=pod):
                self.freed.pop(pod.key, None)
                self.freed_gang.discard(pod.key)
            case PodRejected(pod=pod):
                self.unschedulable.pop(pod.key, None)
            case _:
                return False
        return True

    def _track(self, key: str, node: str, allocation: Any, at: int) -> None:
        """Load-aware scheduling estimates the pods assigned since a node's last NodeMetric: it is told each one."""
        pod = self.pods.get(key)
        if pod is not None and allocation is not None:
            self.engine.track_assigned(node, assigned_pod(key, pod, allocation.requests, at))

    def _pod_facts(self, node: str) -> list[Any]:
        """The pods placed on ``node`` as the overcommit calculation reads them."""
        state = self.engine.node_state(node)
        if state is None:
            return []
        return [
            pod_facts(key, self.pods.get(key), alloc.requests, alloc.numa_nodes)
            for key, alloc in sorted(state.pods.items())
        ]

    def next_deadline(self) -> int | None:
        return self.nodes.next_deadline()

    def _free(self, pod: ObjectRef, reason: str) -> None:
        """The pod no longer holds its allocation (deleted, evicted, binding failed, gang hold released): free it
        now (an input effect), record it as ``pod.released`` in the decision that follows."""
        if self.held_by.pop(pod.key, None) is not None:
            self.freed_gang.add(pod.key)  # a gang member: the gang-coordinator decides what happens next
        node = self.placed.pop(pod.key, None)
        if node is not None:
            self.freed[pod.key] = (node, self.engine.release(pod.namespace, pod.name), reason)

    def _pod_item(self, key: str) -> Any:
        last = self.attempted_at.get(key, self.arrived_at.get(key, 0))
        return pod_item(key, self.pods.get(key), self.arrival.get(key, 0), last)

    def _group_item(self, group: str, members: list[str] | tuple[str, ...]) -> Any:
        pods = [self.pods[m] for m in members if m in self.pods]
        arrival = min((self.arrival.get(m, 0) for m in members), default=0)
        arrived = min((self.arrived_at.get(m, 0) for m in members), default=0)
        return group_item(group, pods, arrival, self.group_attempt_at.get(group, arrived))

    # -- decide ----------------------------------------------------------------------------------------------

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        if self.nodes.owed:  # node-side decisions the input led to
            if isinstance(event, NodeRegistered | TopologyReported):
                return [*self.nodes.owed, *self._requeue("capacity added", refresh=True)]
            return [*self.nodes.owed, *(self._requeue(self.nodes.requeue) if self.nodes.requeue else [])]
        if not DECIDES(event):  # most events: one test instead of a failed pattern per type
            return []
        match event:
            case ReservationResolved(pod=pod, attempt=attempt):
                return self._place(pod, attempt, at)
            case PodBindFailed(pod=pod, attempt=attempt) if (
                pod.key in self.pods and pod.key in self.freed and pod.key not in self.freed_gang
            ):
                # the binding failed but the pod still exists: free its devices and send it through admission again
                return [
                    *self._release_freed(),
                    Emit(
                        stream_id=stream_id("pod", pod.key),
                        event=PodRequeued(pod=pod, attempt=attempt + 1, reason="binding failed"),
                    ),
                ]
            case PodDeleted() | PodBindFailed() | QuotaEvicted() | GangHoldsReleased():
                out = self._release_freed()
                if self.queue.held and self.queue.reserving_band() is None:
                    # the gang they were held back for is gone (its members deleted or evicted)
                    out += self._release_held("the gang holding capacity is gone", skip=requeued_in(out))
                if self.preemptions.ended:
                    out += self._release_nominated("a preemption's nomination ended", out)
                return out
            case PodEvictionEnacted() | QuotaWaiting() | QuotaGroupWaiting() if self.preemptions.ended:
                # a victim stays, or the job's attempt failed at quota: its nominated nodes are free again
                return self._release_nominated("a preemption's nomination ended", [])
            case ReservationGroupResolved(group=group, attempt=attempt, members=members):
                return self._place_group(group, attempt, members, at)
            case ReservationAccepted(reservation=ref):
                placed = self.reservations.place(ref.name)
                return [*placed, *self._requeue_owners(placed)]
            case ReservationDeleted() | ReservationFailed() | ReservationRemoved() | ReservationSucceeded():
                return [*self.reservations.released(), *self._requeue("a reservation ended")]
            case NodeRegistered() | DevicesReported() | TopologyReported():
                return self._requeue("capacity added", refresh=True)
            case PodObserved(pod=pod, spec=spec) if spec is not None and spec.phase in FINISHED:
                return self._requeue(f"{pod.key} finished")
            case NodeMetricReported(name=name) | NodeMetricRemoved(name=name):
                return self._requeue(f"node {name} load changed", codes=LOAD_CODES)
            case _:
                return []

    def _place(self, pod: ObjectRef, attempt: int, at: int) -> list[Emit]:
        spec = self.pods.get(pod.key)
        if spec is None or pod.key in self.placed:
            return []
        stream = stream_id("pod", pod.key)
        step = self.queue.verdict(self._pod_item(pod.key), at)
        if step.verdict == "hold":
            message = f"held back so a waiting gang can gather capacity ({step.reason})"
            return [self._held_pod(pod, attempt, message, HELD)]
        decision = self.engine.schedule(spec, reservations=self.reservations.contexts.get(pod.key))
        if decision.outcome == "Scheduled":
            assert decision.node is not None
            held = self.preemptions.held_off(job_id(pod.key, False), spec.priority, [decision.node])
            if held:
                return [self._held_pod(pod, attempt, held, HELD_FOR_PREEMPTOR)]
            return [
                Emit(
                    stream_id=stream,
                    event=PodPlaced(pod=pod, attempt=attempt, node=decision.node, decision=decision),
                ),
                *self._nomination_done(job_id(pod.key, False), []),
            ]
        if decision.outcome == "Rejected":
            issues = [FieldIssue(path="", message=decision.message, code=code) for code in decision.codes[:1]]
            return [
                Emit(
                    stream_id=stream,
                    event=PodRejected(
                        pod=pod,
                        stage=self.name,
                        errors=issues,
                        message=decision.message,
                        codes=list(decision.codes),
                    ),
                )
            ]
        became = self.reservations.available_since(self.attempt_began.get(pod.key, 0))
        if became and self.reservations.may_use_any(pod.key, spec, became):
            # its reservations were resolved before these became available: the next attempt sees them
            # (kube-scheduler requeues a pod whose hinted event came during its scheduling cycle the same way)
            reason = f"reservation {', '.join(became)} became available during its attempt"
            failed = PodUnschedulable(
                pod=pod,
                attempt=attempt,
                message=decision.message,
                codes=list(decision.codes),
                decision=decision,
            )
            requeued = PodRequeued(pod=pod, attempt=attempt + 1, reason=reason)
            return [Emit(stream_id=stream, event=failed), Emit(stream_id=stream, event=requeued)]
        evictions = self.reservations.preempt(pod, spec, self.pods)  # reservation preemption (§5.7)
        note, preempted = ("", []) if evictions else self._preemption(pod.key, False, attempt, [pod.key])
        codes = [*decision.codes, PREEMPTING] if note else list(decision.codes)
        message = f"{decision.message}; {note}" if note else decision.message
        return [
            Emit(
                stream_id=stream,
                event=PodUnschedulable(
                    pod=pod, attempt=attempt, message=message, codes=codes, decision=decision
                ),
            ),
            *evictions,
            *preempted,
        ]

    def _stale_group(self, group: str, members: list[str]) -> list[Emit]:
        """A gang group whose members' reservations were resolved before one they may use became available is
        retried at once, after this failure is recorded (the plain pod's rule in ``_place``)."""
        began = max([self.group_failed_step.get(group, 0), *(self.attempt_began.get(m, 0) for m in members)])
        became = self.reservations.available_since(began)
        if not became or not any(self.reservations.may_use_any(m, self.pods[m], became) for m in members):
            return []
        reason = f"reservation {', '.join(became)} became available during its attempt"
        return [
            Emit(stream_id=stream_id("gang", group), event=GangRetryRequested(group=group, reason=reason))
        ]

    def _held_pod(self, pod: ObjectRef, attempt: int, message: str, code: str) -> Emit:
        return Emit(
            stream_id=stream_id("pod", pod.key),
            event=PodUnschedulable(
                pod=pod,
                attempt=attempt,
                message=message,
                codes=[code],
                decision=Decision(pod=pod.key, outcome="Unschedulable", message=message, codes=[code]),
            ),
        )

    def _held_group(self, group: str, attempt: int, members: list[str], message: str, code: str) -> Emit:
        return Emit(
            stream_id=stream_id("gang", group),
            event=GangGroupUnschedulable(
                group=group, attempt=attempt, codes=[code], members=list(members), message=message
            ),
        )

    def _preemption(self, job: str, gang: bool, attempt: int, members: list[str]) -> tuple[str, list[Emit]]:
        """Job-level preemption after a failed attempt (device_allocator.nominations): a note for the decision
        while earlier victims are leaving, or a new preemption's events; a nomination that lapses frees the pods
        held off its nodes."""
        lapsed = job_id(job, gang) in self.preemptions.jobs and not self.preemptions.leaving(
            job_id(job, gang)
        )
        note, out = self.preemptions.after_failure(job, gang, attempt, members)
        return note, [
            *out,
            *(self._release_nominated(f"the nomination of {job} lapsed", out) if lapsed else []),
        ]

    def _release_freed(self) -> list[Emit]:
        if not self.freed:
            return []
        out = []
        for key, (node, freed, reason) in sorted(self.freed.items()):
            namespace, name = key.split("/", 1)
            out.append(
                Emit(
                    stream_id=stream_id("pod", key),
                    event=PodReleased(
                        pod=ObjectRef(namespace=namespace, name=name), node=node, freed=freed, reason=reason
                    ),
                )
            )
        return [*out, *self._requeue(f"{', '.join(sorted(self.freed))} released")]

    def _place_group(self, group: str, attempt: int, members: list[str], at: int) -> list[Emit]:
        """All or nothing: every member of the gang group gets a placement in one decision, or none does."""
        if (
            not members
        ):  # not what the gang coordinator and reservation-manager record: refused, dead-lettered
            raise InvalidInput([("members", "a gang group to place has at least one member")], subject=group)
        stream = stream_id("gang", group)
        missing = [m for m in members if m not in self.pods or m in self.placed]
        if missing:
            return [
                Emit(
                    stream_id=stream,
                    event=GangGroupUnschedulable(
                        group=group,
                        attempt=attempt,
                        failed_pod=missing[0],
                        codes=["MemberUnavailable"],
                        message=f"members gone or already placed: {', '.join(missing)}",
                    ),
                )
            ]
        item = self._group_item(group, members)
        step = self.queue.verdict(item, at)
        if step.verdict == "hold":
            message = f"held back so another waiting gang can gather capacity ({step.reason})"
            return [self._held_group(group, attempt, members, message, HELD)]
        decision = self.engine.schedule_group(
            [self.pods[m] for m in members], self.reservations.group_contexts(members)
        )
        if decision.outcome == "Scheduled":
            nodes = [str(d.node) for d in decision.members]
            priority = min(self.pods[m].priority for m in members)
            held = self.preemptions.held_off(job_id(group, True), priority, nodes)
            if held:
                return [self._held_group(group, attempt, members, held, HELD_FOR_PREEMPTOR)]
            released = self._release_held(f"gang {group} placed")
            return [
                Emit(
                    stream_id=stream,
                    event=GangGroupPlaced(
                        group=group,
                        attempt=attempt,
                        members=list(members),
                        decisions={d.pod: d for d in decision.members},
                    ),
                ),
                *released,
                *self._nomination_done(job_id(group, True), released),
            ]
        codes = sorted({c for d in decision.members for c in d.codes})
        stale = self._stale_group(group, members)
        note, preempted = ("", stale) if stale else self._preemption(group, True, attempt, list(members))
        out = [
            Emit(
                stream_id=stream,
                event=GangGroupUnschedulable(
                    group=group,
                    attempt=attempt,
                    message=f"{decision.message}; {note}" if note else decision.message,
                    codes=[*codes, PREEMPTING] if note else codes,
                    failed_pod=decision.failed_pod,
                    decision=decision,
                    members=list(members),
                ),
            ),
            *preempted,
        ]
        if self.queue.reserving_band() is not None and not self.queue.would_still_reserve(item, at):
            out += self._release_held(f"gang {group} stopped holding capacity")
        return out

    def snapshot(self) -> dict[str, object]:
        return {
            "queue": self.queue.snapshot(),
            "engine": self.engine.digest(),
            "placed": dict(sorted(self.placed.items())),
            "unschedulable": dict(sorted(self.unschedulable.items())),
            "nodes": self.nodes.snapshot(),
            "reservations": self.reservations.snapshot(),
            "preemptions": self.preemptions.snapshot(),
            "steps": self._steps,
            "pods": sorted(self.pods),
            "arrival": dict(sorted(self.arrival.items())),
            "arrived_at": dict(sorted(self.arrived_at.items())),
            "attempted_at": dict(sorted(self.attempted_at.items())),
            "attempt_began": dict(sorted(self.attempt_began.items())),
            "group_attempt_at": dict(sorted(self.group_attempt_at.items())),
            "group_failed_step": dict(sorted(self.group_failed_step.items())),
            "held_by": {k: list(v) for k, v in sorted(self.held_by.items())},
            "unschedulable_codes": {k: list(v) for k, v in sorted(self.unschedulable_codes.items())},
            "unschedulable_message": dict(sorted(self.unschedulable_message.items())),
            "owed_releases": {k: msgspec.to_builtins(v) for k, v in sorted(self.freed.items())},
            "owed_gang_releases": sorted(self.freed_gang),
        }
