"""device-allocator's part in reservations: reserve pods placed and held, pods placed in reservations, holds freed.

- ``reservation.accepted`` (reservation-manager): schedule the reserve pod through the placement engine (a reserve
  pod of an allocate policy that conflicts with a node's reservations cannot go there) → ``reservation.placed`` (the
  node holds what it got, :meth:`PlacementEngine.reserve`) or ``reservation.unschedulable`` (retried in arrival order
  whenever capacity changes). A re-accepted reservation (same life) keeps its place; its policy follows the spec.
- ``reservation.resolved``: the reservations a pod may use (:class:`allot_placement.reserved.ReservationContext`),
  kept for its placement and for deciding whether a requeue can succeed.
- ``reservation.succeeded`` / ``failed`` / ``removed`` / ``deleted``: what the reservation still held goes back to
  the node (``reservation.released``), and pods waiting for capacity are requeued.

State changes only in ``evolve``; ``decide`` reads (trial placements of several reserve pods in one decision are
undone before it returns).
"""

from __future__ import annotations

import msgspec

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    ObjectRef,
    PodDeleted,
    PodEvicted,
    ReservationAccepted,
    ReservationDeleted,
    ReservationFailed,
    ReservationGroupResolved,
    ReservationMatch,
    ReservationPlaced,
    ReservationReleased,
    ReservationRemoved,
    ReservationResolved,
    ReservationSucceeded,
    ReservationUnschedulable,
)
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.pod import Pod, parse_pod
from allot_contracts.objects.reservation import ReservationOwner, parse_reservation
from allot_placement import Decision, PlacementEngine
from allot_placement.reservations import Hold
from allot_placement.reserved import ReservationContext
from allot_placement.reserved import victims_on as reserved_victims
from allot_reservation.facts import facts_from_pod
from allot_reservation.match import owners_match
from allot_runtime.processor import Emit
from device_allocator.folding import folds_any

__all__ = ["INTERESTS", "Reservations", "context_of", "preemption"]

INTERESTS = frozenset(
    {
        "reservation.accepted",
        "reservation.deleted",
        "reservation.succeeded",
        "reservation.failed",
        "reservation.removed",
    }
)

# the event types ``Reservations.evolve`` folds (its patterns' classes)
_FOLDED = folds_any(
    ReservationAccepted,
    ReservationPlaced,
    ReservationUnschedulable,
    ReservationDeleted,
    ReservationFailed,
    ReservationRemoved,
    ReservationSucceeded,
    ReservationReleased,
    ReservationResolved,
    ReservationGroupResolved,
    PodDeleted,
)


def context_of(match: ReservationMatch | None) -> ReservationContext | None:
    if match is None:
        return None
    return ReservationContext(
        candidates=tuple(c.name for c in match.candidates),
        required=match.required,
        ignored=match.ignored,
        name=match.name,
    )


class Pending(msgspec.Struct, frozen=True, kw_only=True):
    uid: str
    pod: Pod | None
    issues: list[FieldIssue]
    policy: str
    restricted: tuple[str, ...]
    allocate_once: bool
    order: int
    arrival: int


class Reservations:
    def __init__(self, engine: PlacementEngine) -> None:
        self.engine = engine
        self.pending: dict[str, Pending] = {}  # accepted, not placed yet
        self.tried: set[str] = set()  # pending reservations found unschedulable (retried on capacity changes)
        self.freed: dict[str, tuple[str, str, JsonObject, str]] = {}  # name -> (uid, node, freed, reason)
        self.contexts: dict[str, ReservationContext] = {}  # pod -> its latest resolution
        self.owners: dict[str, tuple[ReservationOwner, ...]] = {}  # reservation -> its spec.owners
        self.placed_at: dict[str, int] = {}  # available reservation -> the step at which it was placed
        self._arrivals = 0

    # -- evolve ----------------------------------------------------------------------------------------------------
    def evolve(self, event: Event, step: int = 0) -> None:
        """``step``: the processor's count of events evolved so far (orders placements against pods' attempts)."""
        if not _FOLDED(event):  # most events: one test instead of a failed pattern per type
            return
        match event:
            case ReservationAccepted(reservation=ref, uid=uid, pod=manifest):
                admitted = parse_reservation(event.manifest, [], [])
                self.owners[ref.name] = tuple(admitted.owners) if admitted is not None else ()
                hold = self.engine.holds.get(ref.name)
                if hold is not None and hold.uid == uid:
                    self.engine.update_hold(
                        msgspec.structs.replace(
                            hold,
                            policy=event.policy,
                            restricted=tuple(event.restricted),
                            allocate_once=event.allocate_once,
                            order=event.order,
                        )
                    )
                    return
                if hold is not None:
                    self._free(ref.name, "replaced by a new life")
                issues: list[FieldIssue] = []
                pod = parse_pod(manifest, issues, [])
                self._arrivals += 1
                self.pending[ref.name] = Pending(
                    uid=uid,
                    pod=pod,
                    issues=issues,
                    policy=event.policy,
                    restricted=tuple(event.restricted),
                    allocate_once=event.allocate_once,
                    order=event.order,
                    arrival=self._arrivals,
                )
                self.tried.discard(ref.name)
            case ReservationPlaced(reservation=ref, uid=uid, node=node, decision=decision):
                pending = self.pending.pop(ref.name, None)
                self.tried.discard(ref.name)
                if pending is not None:
                    self.engine.reserve(self._hold(ref.name, pending, node, decision))
                    self.placed_at[ref.name] = step
            case ReservationUnschedulable(reservation=ref):
                self.tried.add(ref.name)
            case (
                ReservationDeleted(reservation=ref)
                | ReservationFailed(reservation=ref)
                | ReservationRemoved(reservation=ref)
                | ReservationSucceeded(reservation=ref)
            ):
                self.pending.pop(ref.name, None)
                self.tried.discard(ref.name)
                self.owners.pop(ref.name, None)
                self.placed_at.pop(ref.name, None)
                self._free(ref.name, type(event).__name__.removeprefix("Reservation").lower())
            case ReservationReleased(reservation=ref):
                self.freed.pop(ref.name, None)
            case ReservationResolved(pod=pod, match=match):
                ctx = context_of(match)
                if ctx is None:
                    self.contexts.pop(pod.key, None)
                else:
                    self.contexts[pod.key] = ctx
            case ReservationGroupResolved(members=members, matches=matches):
                for member in members:
                    ctx = context_of(matches.get(member))
                    if ctx is None:
                        self.contexts.pop(member, None)
                    else:
                        self.contexts[member] = ctx
            case PodDeleted(pod=pod):
                self.contexts.pop(pod.key, None)
            case _:
                pass

    def _hold(self, name: str, pending: Pending, node: str, decision: JsonObject) -> Hold:
        placed = Decision.from_dict(decision)
        assert placed.allocation is not None
        return Hold(
            name=name,
            uid=pending.uid,
            node=node,
            allocation=placed.allocation,
            policy=pending.policy,
            restricted=pending.restricted,
            allocate_once=pending.allocate_once,
            order=pending.order,
        )

    def _free(self, name: str, reason: str) -> None:
        hold = self.engine.holds.get(name)
        freed = self.engine.unreserve(name)
        if hold is not None:
            self.freed[name] = (hold.uid, hold.node, freed or {}, reason)

    # -- decide ----------------------------------------------------------------------------------------------------
    def place(self, name: str) -> list[Emit]:
        """Schedule an accepted reservation's reserve pod now."""
        pending = self.pending.get(name)
        if pending is None:
            return []
        return [self._decide(name, pending)]

    def _decide(self, name: str, pending: Pending) -> Emit:
        ref = ObjectRef(name=name)
        stream = stream_id("reservation", name)
        if pending.pod is None:
            message = "invalid reserve pod: " + "; ".join(str(i) for i in pending.issues)
            return Emit(
                stream_id=stream,
                event=ReservationUnschedulable(
                    reservation=ref, uid=pending.uid, message=message, codes=["InvalidReservePod"]
                ),
            )
        decision = self.engine.schedule(pending.pod, reserve_policy=pending.policy)
        if decision.outcome == "Scheduled" and decision.node is not None:
            return Emit(
                stream_id=stream,
                event=ReservationPlaced(
                    reservation=ref, uid=pending.uid, node=decision.node, decision=decision.to_dict()
                ),
            )
        return Emit(
            stream_id=stream,
            event=ReservationUnschedulable(
                reservation=ref,
                uid=pending.uid,
                message=decision.message,
                codes=list(decision.codes),
                decision=decision.to_dict(),
            ),
        )

    def released(self) -> list[Emit]:
        return [
            Emit(
                stream_id=stream_id("reservation", name),
                event=ReservationReleased(
                    reservation=ObjectRef(name=name), uid=uid, node=node, freed=freed, reason=reason
                ),
            )
            for name, (uid, node, freed, reason) in sorted(self.freed.items())
        ]

    def retry(self) -> list[Emit]:
        """Reserve pods that were unschedulable and fit now, in arrival order; each placement counts for the next
        (tried on the engine and undone before returning: the recorded decisions apply them for real)."""
        out: list[Emit] = []
        trial: list[str] = []
        try:
            for name in sorted(self.tried, key=lambda k: self.pending[k].arrival if k in self.pending else 0):
                pending = self.pending.get(name)
                if pending is None or pending.pod is None:
                    continue
                emit = self._decide(name, pending)
                if isinstance(emit.event, ReservationPlaced):
                    out.append(emit)
                    self.engine.reserve(self._hold(name, pending, emit.event.node, emit.event.decision))
                    trial.append(name)
        finally:
            for name in trial:
                self.engine.unreserve(name)
        return out

    def may_use(self, placed: list[Emit], waiting: list[str], pods: dict[str, Pod]) -> list[str]:
        """Unschedulable pods (``waiting``, in queue order) that would fit in a reservation just placed (``placed``,
        this decision's ``reservation.placed``): the queueing hint of a Reservation becoming available, as upstream
        requeues unschedulable pods on it. The trial holds are undone before returning."""
        new = [e.event for e in placed if isinstance(e.event, ReservationPlaced)]
        if not new or not waiting:
            return []
        trial: list[str] = []
        try:
            for event in new:
                pending = self.pending.get(event.reservation.name)
                if pending is not None and event.reservation.name not in self.engine.holds:
                    self.engine.reserve(
                        self._hold(event.reservation.name, pending, event.node, event.decision)
                    )
                    trial.append(event.reservation.name)
            return [key for key in waiting if self._would_use(key, pods[key], trial)]
        finally:
            for name in trial:
                self.engine.unreserve(name)

    def may_use_any(self, key: str, pod: Pod, names: list[str]) -> bool:
        """Whether ``pod`` may use one of the available reservations ``names`` (fit aside)."""
        return any(self._may_use(key, pod, name) for name in names)

    def available_since(self, step: int) -> list[str]:
        """The reservations placed after ``step`` that are still available."""
        return sorted(name for name, at in self.placed_at.items() if at > step and name in self.engine.holds)

    def _may_use(self, key: str, pod: Pod, name: str) -> bool:
        """The reservation ``name`` is one ``pod`` may use: its reservation affinity asks for it, the pod matches its
        owners, or the pod ignores reservations (it may then use what they hold unallocated). reservation-manager
        decides on the pod's next attempt whether it really matches."""
        ctx = self.contexts.get(key)
        if ctx is not None and ctx.required:
            return not ctx.name or ctx.name == name
        return pod.reservation.ignored or owners_match(self.owners.get(name, ()), facts_from_pod(pod))

    def _would_use(self, key: str, pod: Pod, names: list[str]) -> bool:
        """Whether ``pod`` would fit in one of the available reservations ``names`` that it may use. A pod that may
        use none gains nothing from a new reservation (the reserve pod took the room it would use)."""
        ctx = self.contexts.get(key)
        required = ctx is not None and ctx.required
        ignored = pod.reservation.ignored
        for name in names:
            if not self._may_use(key, pod, name):
                continue
            wants = ReservationContext(
                candidates=(name,),
                required=required or not ignored,
                ignored=ignored,
                name=name if required else "",
            )
            if self.engine.schedule(pod, reservations=wants).outcome == "Scheduled":
                return True
        return False

    def group_contexts(self, members: list[str] | tuple[str, ...]) -> dict[str, ReservationContext]:
        return {m: self.contexts[m] for m in members if m in self.contexts}

    def preempt(self, ref: ObjectRef, pod: Pod, pods: dict[str, Pod]) -> list[Emit]:
        """A pod that matched reservations and fits nowhere: evict lower-priority pods where that makes room
        (``pod.evicted``, cause ``Preempted``; the binder deletes them, their release requeues the pod)."""
        ctx = self.contexts.get(ref.key)
        if ctx is None or getattr(pod, "preemption_never", False):
            return []
        plan = preemption(self.engine, pod, ctx, pods)
        if plan is None:
            return []
        node, victims = plan
        return [
            Emit(
                stream_id=stream_id("pod", victim),
                event=PodEvicted(
                    pod=ObjectRef(namespace=victim.split("/", 1)[0], name=victim.split("/", 1)[1]),
                    uid=pods[victim].uid,
                    node=node,
                    cause="Preempted",
                    message=f"preempted by {ref.key} (priority {pod.priority}) to use its reservation on {node}",
                    detail={"preemptor": ref.key, "priority": pods[victim].priority},
                ),
            )
            for victim in victims
        ]

    def snapshot(self) -> dict[str, object]:
        return {
            "pending": sorted(self.pending),
            "tried": sorted(self.tried),
            "owed_releases": {name: list(freed) for name, freed in sorted(self.freed.items())},
            "holds": {
                name: [h.uid, h.node, sorted(h.owners)] for name, h in sorted(self.engine.holds.items())
            },
        }


def preemption(
    engine: PlacementEngine, pod: Pod, ctx: ReservationContext, pods: dict[str, Pod]
) -> tuple[str, list[str]] | None:
    """Reservation preemption (upstream's Reservation PostFilter): on the nodes of the reservations the pod matched,
    lower-priority pods that may be preempted (not labelled ``disable-preemptible``) — pods placed in those
    reservations and other pods of the node alike — are evicted so the pod fits. The node chosen evicts the least:
    lowest highest victim priority, then fewest victims, then name. ``None``: no eviction would make it fit."""
    spec, _ = engine._spec(pod)  # noqa: SLF001 - the engine's reading of the pod
    if spec is None or ctx.ignored:
        return None
    nodes = sorted({h.node for n in ctx.candidates if (h := engine.holds.get(n)) is not None})
    best: tuple[tuple[int, int, str], str, list[str]] | None = None
    for node in nodes:
        state = engine.node_state(node)
        if state is None:
            continue
        candidates = sorted(
            (other.priority, key)
            for key in state.pods
            if (other := pods.get(key)) is not None
            and key != pod.key
            and other.priority < pod.priority
            and other.reservation.preemptible
        )
        if not candidates:
            continue
        victims = reserved_victims(engine, spec, ctx, node, candidates)
        if not victims:
            continue
        rank = (max(pods[v].priority for v in victims), len(victims), node)
        if best is None or rank < best[0]:
            best = (rank, node, victims)
    return (best[1], best[2]) if best is not None else None
