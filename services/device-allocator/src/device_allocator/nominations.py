"""device-allocator's outstanding preemptions: nominated nodes, victims still leaving, pods held off nominated nodes.

A job (gang group, or plain pod as a job of one) that preempted (``preemption.decided``) is *nominated*: each member
to its node. Until the nomination ends, a decision for any other pod or gang group of priority up to the job's that
would put something on a nominated node is held back instead (code ``HeldForPreemptor``; requeued when the
nomination ends), as upstream's nominated pods count against every pod of lower or equal priority. Pods of higher
priority ignore the nomination. The job's own attempts while a victim is still leaving may place it if it fits
anyway, and otherwise fail without preempting again (code ``PreemptionInProgress``; upstream: "not eligible due to
terminating pod on the nominated node"); when the last victim is gone, the allocator's requeue wakes the job.

A nomination ends when the job is placed, when a later attempt fails with every victim gone (at placement: it may
preempt again; or at quota: ``quota.waiting`` / ``quota.group_waiting``),
when a member is deleted or rejected, or when a victim's eviction is refused for good (that pod is then no victim
again for the rest of its life).

State changes only in ``evolve``; ``decide`` reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    GangGroupPlaced,
    GangGroupUnschedulable,
    GangRetryRequested,
    ObjectRef,
    PodDeleted,
    PodEvicted,
    PodEvictionEnacted,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    PreemptionDecided,
    PreemptionVictim,
    QuotaEvicted,
    QuotaGroupWaiting,
    QuotaWaiting,
)
from allot_contracts.objects.pod import Pod
from allot_placement import PlacementEngine
from allot_runtime.processor import Emit
from device_allocator.folding import folds_any
from device_allocator.preemption import PlacedPods, Plan, job_priority, may_preempt, search, units
from device_allocator.reservations import Reservations

__all__ = ["HELD_FOR_PREEMPTOR", "PREEMPTING", "Nomination", "Preemptions", "job_id"]

PREEMPTING = "PreemptionInProgress"
HELD_FOR_PREEMPTOR = "HeldForPreemptor"
_KEEP = frozenset({PREEMPTING, HELD_FOR_PREEMPTOR, "HeldForGang"})  # failed attempts that keep a nomination
# the event types ``Preemptions.evolve`` folds (its patterns' classes)
_FOLDED = folds_any(
    PreemptionDecided,
    PodDeleted,
    QuotaEvicted,
    PodRejected,
    PodSubmitted,
    PodObserved,
    PodEvictionEnacted,
    PodPlaced,
    GangGroupPlaced,
    PodUnschedulable,
    GangGroupUnschedulable,
    QuotaWaiting,
    QuotaGroupWaiting,
    PodRequeued,
    GangRetryRequested,
)


def job_id(key: str, gang: bool) -> str:
    """A job's identity: its stream (``gang:<group>`` or ``pod:<namespace/name>``), so a gang group and a pod of the
    same name are two jobs."""
    return stream_id("gang", key) if gang else stream_id("pod", key)


def _ref(key: str) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef(namespace=namespace, name=name)


@dataclass
class Nomination:
    id: str  # job_id
    job: str  # the gang group id, or the pod's namespace/name
    gang: bool
    priority: int
    members: tuple[str, ...]
    nodes: dict[str, str]  # member -> nominated node
    pending: set[str] = field(default_factory=set)  # victims not gone yet


@dataclass(eq=False)
class Preemptions:
    """``pods`` (pod -> as read at the door) and ``placed`` (pod -> the node it holds) are the allocator's own
    projection, read here and never changed."""

    engine: PlacementEngine
    reservations: Reservations
    pods: Mapping[str, Pod]
    placed: PlacedPods
    enabled: bool = True
    jobs: dict[str, Nomination] = field(default_factory=dict, init=False)
    held_pods: set[str] = field(default_factory=set, init=False)  # plain pods held off a nominated node
    held_groups: set[str] = field(default_factory=set, init=False)  # gang groups held off a nominated node
    # pods whose eviction was refused for good: no victim again in this life
    refused: set[str] = field(default_factory=set, init=False)
    # the allocator's count of events evolved, as of the last one evolved here
    step: int = field(default=0, init=False)
    # the step at which a nomination last ended (its held items go again)
    ended_at: int = field(default=-1, init=False)

    @property
    def ended(self) -> bool:
        """Whether a nomination ended with the event just evolved (the trigger being decided)."""
        return self.ended_at == self.step

    # -- evolve ----------------------------------------------------------------------------------------------------
    def evolve(self, event: Event, *, step: int) -> None:
        self.step = step
        if not _FOLDED(event):  # one test instead of a failed pattern per type
            return
        match event:
            case PreemptionDecided(job=job, gang=gang, priority=priority, members=members, nominated=nodes):
                self.jobs[job_id(job, gang)] = Nomination(
                    id=job_id(job, gang),
                    job=job,
                    gang=gang,
                    priority=priority,
                    members=tuple(members),
                    nodes=dict(nodes),
                    pending={v.pod.key for v in event.victims},
                )
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod) | PodRejected(pod=pod):
                self.held_pods.discard(pod.key)
                self.refused.discard(pod.key)
                for nomination in list(self.jobs.values()):
                    nomination.pending.discard(pod.key)
                    if pod.key in nomination.members:
                        self._end(nomination.id)
            case PodSubmitted(pod=pod) | PodObserved(pod=pod):
                self.refused.discard(pod.key)  # a new life of the pod
            case PodEvictionEnacted(pod=pod, evicted=False):
                self.refused.add(pod.key)
                for nomination in list(self.jobs.values()):
                    if pod.key in nomination.pending:
                        self._end(nomination.id)
            case PodPlaced(pod=pod):
                self.held_pods.discard(pod.key)
                self._end(job_id(pod.key, False))
            case GangGroupPlaced(group=group):
                self.held_groups.discard(group)
                self._end(job_id(group, True))
            case PodUnschedulable(pod=pod, codes=codes):
                self._failed(pod.key, False, codes)
            case GangGroupUnschedulable(group=group, codes=codes):
                self._failed(group, True, codes)
            case QuotaWaiting(pod=pod):  # an attempt that failed at quota, before any placement
                self._failed(pod.key, False, ())
            case QuotaGroupWaiting(group=group):
                self._failed(group, True, ())
            case PodRequeued(pod=pod):
                self.held_pods.discard(pod.key)
            case GangRetryRequested(group=group):
                self.held_groups.discard(group)
            case _:
                pass

    def _failed(self, key: str, gang: bool, codes: Iterable[str]) -> None:
        codes = set(codes)
        if HELD_FOR_PREEMPTOR in codes:
            (self.held_groups if gang else self.held_pods).add(key)
        nomination = self.jobs.get(job_id(key, gang))
        if nomination is not None and not nomination.pending and not codes & _KEEP:
            self._end(nomination.id)  # every victim is gone and it still failed: the nomination lapses

    def _end(self, job: str) -> None:
        """``job``: a job_id."""
        if self.jobs.pop(job, None) is not None:
            self.ended_at = self.step

    # -- decide (reads only) ---------------------------------------------------------------------------------------
    def leaving(self, job: str) -> list[str]:
        """The victims of ``job``'s preemption (a job_id) that are not gone yet."""
        nomination = self.jobs.get(job)
        return sorted(nomination.pending) if nomination is not None else []

    def blocked_nodes(self, job: str, priority: int) -> dict[str, str]:
        """Nodes nominated for another job (than the job_id ``job``) of priority at least ``priority``: node -> that
        job's id."""
        out: dict[str, str] = {}
        for key in sorted(self.jobs, reverse=True):  # the first job by key wins a node nominated twice
            nomination = self.jobs[key]
            if key != job and nomination.priority >= priority:
                out.update(dict.fromkeys(nomination.nodes.values(), key))
        return out

    def held_off(self, job: str, priority: int, nodes: Iterable[str]) -> str:
        """Why a decision for ``job`` (a job_id) that would use ``nodes`` is held back, or "" when it may go ahead."""
        blocked = self.blocked_nodes(job, priority)
        node = next((node for node in sorted(set(nodes)) if node in blocked), None)
        if node is None:
            return ""
        nomination = self.jobs[blocked[node]]
        return (
            f"held back: node {node} is nominated for {nomination.job} (priority {nomination.priority}), which "
            "preempted lower-priority pods to fit there"
        )

    def after_failure(self, job: str, gang: bool, attempt: int, members: list[str]) -> tuple[str, list[Emit]]:
        """What preemption does for ``job`` whose attempt found no place: ``(note, events)``. ``note`` (with code
        ``PreemptionInProgress``) when victims of its earlier preemption are still leaving: nothing more is evicted;
        otherwise the events of a new preemption (none when no set of victims lets every member fit)."""
        leaving = self.leaving(job_id(job, gang))
        if leaving:
            return (
                f"preemption: waiting for {len(leaving)} preempted pod(s) to leave: {', '.join(leaving)}",
                [],
            )
        pods = [self.pods[m] for m in members if m in self.pods]
        if not self.enabled or len(pods) != len(members) or not may_preempt(pods):
            return "", []
        priority = job_priority(pods)
        if not self.placed.any_below(priority):
            return "", []  # nothing placed has a lower priority: nothing to preempt
        # what is nominated for a job of at least this priority is out of reach: neither its pods nor its room; nor
        # is a pod whose eviction the API server refused for good
        blocked = self.blocked_nodes(job_id(job, gang), priority)
        candidates = [
            u
            for u in units(self.pods, self.placed, priority, members)
            if not any(self.placed.get(p) in blocked or p in self.refused for p in u.pods)
        ]
        plan = search(self.engine, pods, self.reservations.group_contexts(members), candidates)
        if plan is None or set(plan.nominated.values()) & set(blocked):
            return "", []
        return "", self.decided((job, gang, attempt, priority), plan)

    def decided(self, job: tuple[str, bool, int, int], plan: Plan) -> list[Emit]:
        """The preemption decision of ``job`` (key, gang, attempt, priority) and the evictions it asks for,
        recorded in one append."""
        job_key, gang, attempt, priority = job
        nominated = plan.nominated
        victims = [
            PreemptionVictim(
                pod=_ref(key),
                uid=self.pods[key].uid,
                node=self.placed[key],
                priority=self.pods[key].priority,
                gang=unit.key if unit.kind == "gang" else "",
            )
            for unit in plan.victims
            for key in unit.pods
        ]
        what = f"gang group {job_key}" if gang else job_key
        goes = ", ".join(f"{m} on {node}" for m, node in sorted(nominated.items()))
        evicted = ", ".join(
            f"{v.pod.key} on {v.node}" + (f" (gang {v.gang})" if v.gang else "") for v in victims
        )
        decision = PreemptionDecided(
            job=job_key,
            gang=gang,
            attempt=attempt,
            priority=priority,
            members=sorted(nominated),
            nominated=dict(sorted(nominated.items())),
            victims=victims,
            message=f"{what} (priority {priority}) fits once {len(victims)} lower-priority pod(s) are evicted: "
            f"{evicted}; nominated: {goes}",
        )
        out = [Emit(stream_id=job_id(job_key, gang), event=decision)]
        for victim in victims:
            out.append(
                Emit(
                    stream_id=stream_id("pod", victim.pod.key),
                    event=PodEvicted(
                        pod=victim.pod,
                        uid=victim.uid,
                        node=victim.node,
                        cause="Preempted",
                        message=f"preempted by {what} (priority {priority}) to make room on {victim.node}",
                        detail={"preemptor": job_key, "priority": victim.priority}
                        | ({"gang": victim.gang} if victim.gang else {}),
                    ),
                )
            )
        return out

    def snapshot(self) -> dict[str, object]:
        return {
            "jobs": {
                k: [v.priority, sorted(v.nodes.items()), sorted(v.pending)]
                for k, v in sorted(self.jobs.items())
            },
            "held": [sorted(self.held_pods), sorted(self.held_groups)],
            "refused": sorted(self.refused),
            "ended_at": self.ended_at,
        }
