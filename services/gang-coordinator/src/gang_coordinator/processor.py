"""gang-coordinator's decisions: the gate every pod passes first (PreEnqueue / Permit), on ``allot_gang``.

Consumes pods (``pod.submitted``, ``pod.deleted``, ``pod.bound``, ``pod.bind_failed``, ``quota.evicted``), PodGroups
(``podgroup.applied``/``podgroup.deleted``), the outcomes of group attempts (``quota.group_waiting``,
``gang.group_placed``, ``gang.group_unschedulable``) and its own ``timer.fired``.

Emits, per action of the gang engine: ``pod.enqueued`` (a member of a satisfied once-satisfied gang goes on alone; a
plain pod needs no decision here, quota admission takes it straight from ``pod.submitted``), ``gang.member_waiting``, ``gang.group_ready`` (attempt a whole gang group), ``gang.group_admitted``
(every gang satisfied: bind), ``gang.holds_released`` (compensation: undo an attempt's charges and placements),
``gang.timed_out``, ``gang.retry_scheduled`` and ``pod.rejected`` (malformed gang input: never retried).

The engine folds each input directly (it is a state machine over facts) and answers it with actions. Those answers
are owed output (docs/adr/0012-processor-contract.md): ``evolve`` of an input feeds it to the engine and keeps the
answers in the projection (``owed``, in the snapshot); ``decide`` reads them and turns each into its event; evolving
that event, one of our own decisions, settles the answer. Rebuilding and replay feed the same inputs, get the same
answers and settle them with the recorded decisions. Time: the engine takes ``at`` (µs) of each input; timeouts and
retries fire on recorded timer events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import msgspec

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    GangGroupAdmitted,
    GangGroupPlaced,
    GangGroupReady,
    GangGroupUnschedulable,
    GangHoldsReleased,
    GangMemberWaiting,
    GangRetryRequested,
    GangRetryScheduled,
    GangTimedOut,
    ObjectRef,
    PodBindFailed,
    PodBound,
    PodDeleted,
    PodEnqueued,
    PodGroupApplied,
    PodGroupDeleted,
    PodGroupRejected,
    PodObserved,
    PodRejected,
    PodSubmitted,
    QuotaEvicted,
    QuotaGroupWaiting,
    TimerFired,
    tag_of,
    type_of,
)
from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.issues import format_issues
from allot_contracts.jsonvalue import JsonObject
from allot_gang import GangConfig, GangEngine, actions, goes_alone
from allot_runtime.processor import Emit

Answer = (
    actions.Action | PodGroupRejected | PodRejected
)  # what one input is answered with: an engine action or a rejection


def _on_gang(group: str, event: Event) -> list[Emit]:
    """The one event an action of a gang group records, on the group's stream."""
    return [Emit(stream_id=stream_id("gang", group), event=event)]


def _ref(key: str) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef(namespace=namespace, name=name)


class GangCoordinator:
    name: ClassVar[str] = "gang-coordinator"
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            *POD_LIFE_TYPES,
            "pod.bound",
            "pod.bind_failed",
            "quota.evicted",
            "podgroup.applied",
            "podgroup.deleted",
            "quota.group_waiting",
            "gang.group_placed",
            "gang.group_unschedulable",
            "gang.retry_requested",
            "timer.fired",
        }
    )

    def __init__(self, config: JsonObject | None = None) -> None:
        self.engine = GangEngine(GangConfig.from_dict(config or {}))
        # owed output: the answers to the last input that our decisions have not recorded yet, in order
        self.owed: list[Answer] = []

    # -- evolve: feed the input to the engine, settle the answers recorded -----------------------------------

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if own:
            self._settle(event)
        elif type_of(event) in self.interests:
            self.owed = [answer for answer in self._feed(event, at) if self._emit(answer)]

    def _settle(self, event: Event) -> None:
        """One of our decisions is recorded: the first owed answer it records (each answer is one event, recorded
        in order) is owed no more."""
        tag = tag_of(event)
        for index, answer in enumerate(self.owed):
            if any(tag_of(emit.event) == tag for emit in self._emit(answer)):
                del self.owed[index]
                return

    def _feed(self, event: Event, at: int) -> Sequence[Answer]:
        g = self.engine
        match event:
            case PodSubmitted(pod=pod, spec=spec, issues=issues):
                if spec is None:
                    # Refused at the door (a pod recorded from a Kubernetes watch): rejected here, the first hop.
                    return [
                        PodRejected(
                            pod=pod,
                            stage="admission",
                            message="invalid pod: " + format_issues(issues),
                            errors=list(issues),
                            codes=sorted({e.code for e in issues}),
                        )
                    ]
                if goes_alone(spec):
                    return []  # the gate lets it through as it arrives: quota admission takes it from pod.submitted
                return g.submit(spec, at)
            case PodObserved(spec=spec) if spec is not None:
                # A member already running (recorded from the cluster) counts towards its gang's minimum.
                return g.submit(spec, at) if g.gang_of(spec) is not None else []
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod):
                return g.member_deleted(pod.namespace, pod.name, at)
            case PodBound(pod=pod):
                return g.member_bound(pod.namespace, pod.name, at)
            case PodBindFailed(pod=pod, message=message):
                return g.member_bind_failed(pod.namespace, pod.name, message, at)
            case PodGroupApplied(group=ref, spec=group, issues=issues):
                errors = g.apply_pod_group(group) if group is not None else list(issues)
                if errors:
                    message = "invalid PodGroup: " + "; ".join(f"{e.path}: {e.message}" for e in errors)
                    return [PodGroupRejected(group=ref, errors=list(errors), message=message)]
                return g.settle(at)
            case PodGroupDeleted(group=ref):
                return [*g.delete_pod_group(ref.namespace, ref.name), *g.settle(at)]
            case GangGroupPlaced(group=group, attempt=attempt):
                return g.group_placed(group, attempt, at)
            case GangGroupUnschedulable(group=group, attempt=attempt, message=message):
                return g.group_unschedulable(group, attempt, message, at)
            case QuotaGroupWaiting(group=group, attempt=attempt, message=message):
                return g.group_unschedulable(group, attempt, message, at)
            case GangRetryRequested(group=group):
                return g.wake(group, at)
            case TimerFired(service=service) if service == self.name:
                return g.on_timer(at)
            case _:
                return []

    # -- decide: the actions as events -----------------------------------------------------------------------

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        return [emit for answer in self.owed for emit in self._emit(answer)]

    def _emit(self, action: Answer) -> list[Emit]:
        match action:
            case PodGroupRejected(group=group):
                return [Emit(stream_id=stream_id("podgroup", group.key), event=action)]
            case PodRejected(pod=pod):
                return [Emit(stream_id=stream_id("pod", pod.key), event=action)]
            case actions.PassThrough(pod=pod):
                return [Emit(stream_id=stream_id("pod", pod), event=PodEnqueued(pod=_ref(pod), attempt=1))]
            case actions.MemberWaiting(
                gang=gang, group=group, pod=pod, present=present, min_available=minimum, reason=reason
            ):
                return [
                    Emit(
                        stream_id=stream_id("pod", pod),
                        event=GangMemberWaiting(
                            pod=_ref(pod),
                            gang=gang,
                            group=group,
                            present=present,
                            min_available=minimum,
                            reason=reason,
                        ),
                    )
                ]
            case actions.GroupReady(group=group, gangs=gangs, members=members, attempt=attempt):
                return _on_gang(
                    group,
                    GangGroupReady(group=group, gangs=list(gangs), members=list(members), attempt=attempt),
                )
            case actions.GroupAdmitted(group=group, attempt=attempt, members=members):
                return _on_gang(group, GangGroupAdmitted(group=group, attempt=attempt, members=list(members)))
            case actions.ReleaseHolds(group=group, attempt=attempt, members=members, reason=reason):
                return _on_gang(
                    group,
                    GangHoldsReleased(group=group, attempt=attempt, members=list(members), reason=reason),
                )
            case actions.GroupTimedOut(group=group, gang=gang, released_members=released):
                return _on_gang(group, GangTimedOut(group=group, gang=gang, released_members=list(released)))
            case actions.GroupRetryAt(group=group, at=when, attempt=attempt, reason=reason):
                return _on_gang(
                    group, GangRetryScheduled(group=group, at=when, attempt=attempt, reason=reason)
                )
            case actions.Rejected(pod=pod, errors=errors):
                issues = list(errors)
                message = "invalid gang declaration: " + "; ".join(f"{i.path}: {i.message}" for i in issues)
                return [
                    Emit(
                        stream_id=stream_id("pod", pod),
                        event=PodRejected(
                            pod=_ref(pod),
                            stage=self.name,
                            errors=issues,
                            message=message,
                            codes=["InvalidGang"],
                        ),
                    )
                ]
            case _:
                return []

    def next_deadline(self) -> int | None:
        return self.engine.next_deadline()

    def snapshot(self) -> dict[str, object]:
        return {"engine": self.engine.digest(), "owed": msgspec.to_builtins(self.owed)}
