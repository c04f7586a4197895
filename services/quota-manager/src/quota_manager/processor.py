"""quota-manager's decisions: hierarchical elastic quota (``allot_quota``) on every pod's path.

Consumes quota objects (``quota.applied``/``quota.deleted``), capacity (``node.registered``/``node.removed``: the
root's total), pods (``pod.submitted``: pending request; ``pod.observed``: already running, charged),
admission requests (``pod.submitted`` of a plain pod, which the gang gate lets through as it arrives;
``pod.enqueued`` of a gang member going on alone; ``pod.requeued``), charges coming back (``pod.unschedulable``,
``pod.rejected``, ``pod.deleted``, ``pod.released``) and its own ``timer.fired``.

Emits ``quota.admitted`` (charged; ``detail`` is the engine's admission record with the borrow facts: which quota
lent how much, under which runtime), ``quota.waiting`` (the upstream message with runtime, used and request; the pod
waits and is admitted when quota frees), ``quota.released`` (``detail.returned``: the reverse facts),
``quota.evicted`` (intra-quota preemption of less important pods, or over-use revoke after ``delayEvictTime``), and
``quota.registered``/``quota.rejected``/``quota.removed``, and ``quota.reclaim_blocked`` when Kubernetes refused one
of its evictions for good (``quota.eviction_enactment_failed``: the pod runs on, charged again; ``reclaim.py``).

Input effects are applied in ``evolve`` (an object applied, a pod gone) and the decision records them and admits
whoever fits afterwards, so one event can free quota and admit waiting pods atomically. What the decision records of
them (a charge returned, a quota object's outcome) is owed output in the projection (``owed_releases``,
``owed_outcomes``), settled when the decision recording it is evolved (docs/adr/0012-processor-contract.md). Time: the engine counts
seconds; ``at`` (µs) of each trigger is passed down, and the over-use revoke delay is driven by recorded timer events.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from allot_contracts.decisions.quota import GroupAdmission, ReturnedCharge
from allot_contracts.envelope import stream_id
from allot_contracts.errors import InvalidInput
from allot_contracts.events import (
    Event,
    GangGroupPlaced,
    GangGroupReady,
    GangHoldsReleased,
    NodeRegistered,
    NodeRemoved,
    ObjectRef,
    PodBindFailed,
    PodDeleted,
    PodEnqueued,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodRequeued,
    PodSubmitted,
    PodUnschedulable,
    QuotaAdmitted,
    QuotaApplied,
    QuotaDeleted,
    QuotaEvicted,
    QuotaGroupAdmitted,
    QuotaGroupWaiting,
    QuotaProfileApplied,
    QuotaProfileDeleted,
    QuotaProfileRegistered,
    QuotaProfileRejected,
    QuotaProfileRemoved,
    QuotaReclaimBlocked,
    QuotaRegistered,
    QuotaRejected,
    QuotaReleased,
    QuotaRemoved,
    QuotaStatusSynced,
    QuotaWaiting,
    TimerFired,
    type_of,
)
from allot_contracts.events.enactment import QuotaEvictionEnacted, QuotaEvictionEnactmentFailed
from allot_contracts.events.inputs import POD_LIFE_TYPES
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.kube import priority_value
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.sharing import Parts
from allot_gang import goes_alone
from allot_quota import QuotaConfig, QuotaEngine
from allot_quota.decisions import AdmitDecision, UsageChange
from allot_runtime.processor import Emit
from quota_manager.follows import OBJECT_EVENTS, TREE_UNCHANGED
from quota_manager.outcomes import profile_outcome, quota_outcome
from quota_manager.reclaim import Reclaims
from quota_manager.support import after, fits_node, object_ref, why_waiting

# Our default differs from upstream in one place: over-use revoke is on, so lenders get their quota back.
DEFAULTS: dict[str, bool] = {"monitorAllQuotas": True}
STATUS_SYNC_INTERVAL_US = (
    1_000_000  # quota status (ElasticQuota status and annotations) is synced at most once a second
)


class QuotaManager:
    name: ClassVar[str] = "quota-manager"
    interests: ClassVar[frozenset[str]] = frozenset(
        {
            "quota.applied",
            "quota.deleted",
            "quotaprofile.applied",
            "quotaprofile.deleted",
            "node.registered",
            "node.removed",
            *POD_LIFE_TYPES,
            "pod.enqueued",
            "pod.requeued",
            "pod.unschedulable",
            "pod.rejected",
            "pod.released",
            "pod.bind_failed",
            "pod.placed",
            "gang.group_placed",
            "gang.group_ready",
            "gang.holds_released",
            "quota.eviction_enacted",
            "quota.eviction_enactment_failed",
            "timer.fired",
        }
    )

    def __init__(self, config: JsonObject | None = None) -> None:
        self.config = QuotaConfig.from_dict({**DEFAULTS, **(config or {})})
        self.engine = QuotaEngine(self.config)
        self.waiting: dict[str, int] = {}  # pod -> attempt, pods whose admission failed for quota
        self.waiting_why: dict[
            str, str
        ] = {}  # pod -> why it waits, as last recorded (see support.why_waiting)
        # pod -> reason code of its last quota.waiting (read by the metrics only)
        self.waiting_reasons: dict[str, str] = {}
        self.charged: set[str] = set()
        self.pods: dict[str, Pod] = {}  # pods as read at the door, their repeated parts held once (``parts``)
        self.parts = Parts()
        self.group_charges: dict[str, tuple[str, int]] = {}  # member -> (group, attempt) that charged it
        self.node_of: dict[
            str, str
        ] = {}  # pod -> node it is placed on (preemption looks for room node by node)
        self.published: dict[str, JsonObject] = {}  # quota key -> status patch last synced
        self.status_dirty_since: int | None = None
        self.status_synced_at = (
            0  # time (µs) of the last quota.status_synced: status is written back at most once a
        )
        # STATUS_SYNC_INTERVAL_US, so a busy cluster's admissions do not each cost a sync of the whole tree
        self.last_timer = -1  # due time of the last timer.fired consumed: a deadline fires once (ADR 0006)
        # owed output (docs/adr/0012-processor-contract.md): what an input did that our decision records, settled
        # when that decision is evolved. pod -> (reason, change) of a charge returned, recorded as quota.released;
        self.owed_releases: dict[str, tuple[str, UsageChange]] = {}
        # quota (or "profile:<key>") -> ("applied"|"removed", errors), recorded as quota(profile).registered/...
        self.owed_outcomes: dict[str, tuple[str, list[Any]]] = {}
        self.reclaims = Reclaims()  # evictions Kubernetes may still refuse (quota_manager.reclaim)

    # -- evolve ----------------------------------------------------------------------------------------------

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if not own and type_of(event) not in self.interests:
            return  # not an input of ours: nothing to fold (not even the passing of time)
        if type(event) in OBJECT_EVENTS:  # most events are a pod's
            self._fold_objects(event)
        self._fold_pods(event)
        self._track_status(event, at)

    def _fold_objects(self, event: Event) -> None:
        """ElasticQuotas, quota profiles and nodes: the engine's configuration, and the outcome owed for each."""
        match event:
            case QuotaApplied(quota=ref, spec=spec, issues=issues):
                if spec is not None and (spec.namespace, spec.name) != (ref.namespace, ref.name):
                    # not what the door records (a forged or damaged event): refused, dead-lettered
                    raise InvalidInput(
                        [("spec.name", f"is {spec.namespace}/{spec.name}, the event is about {ref.key}")],
                        subject="quota.applied",
                    )
                errors = self.engine.apply_quota(spec) if spec is not None else list(issues)
                self.owed_outcomes[ref.key] = ("applied", errors)
            case QuotaDeleted(quota=ref):
                errors = self.engine.delete_quota(ref.namespace, ref.name)
                self.owed_outcomes[ref.key] = ("removed", errors)
            case QuotaRegistered(quota=ref) | QuotaRejected(quota=ref) | QuotaRemoved(quota=ref):
                self.owed_outcomes.pop(ref.key, None)
            case QuotaProfileApplied(profile=ref, spec=profile, issues=issues):
                errors = self.engine.apply_profile(profile) if profile is not None else list(issues)
                self.owed_outcomes[f"profile:{ref.key}"] = ("applied", errors)
            case QuotaProfileDeleted(profile=ref):
                self.owed_outcomes[f"profile:{ref.key}"] = (
                    "removed",
                    self.engine.delete_profile(ref.namespace, ref.name),
                )
            case (
                QuotaProfileRegistered(profile=ref)
                | QuotaProfileRejected(profile=ref)
                | QuotaProfileRemoved(profile=ref)
            ):
                self.owed_outcomes.pop(f"profile:{ref.key}", None)
            case NodeRegistered(node=node):
                self.engine.upsert_node(node)
            case NodeRemoved(name=name):
                self.engine.delete_node(name)
            case _:
                pass

    def _fold_pods(self, event: Event) -> None:
        """Pods and the quota decisions about them: pending, charged, waiting, released, evicted."""
        # the most frequent first: every case is an isinstance check, and the event types are unrelated classes
        match event:
            case PodSubmitted(pod=pod, spec=spec) if spec is not None:
                key, spec = pod.key, self.parts.pod(spec)
                self.reclaims.gone(key)
                self.pods[key] = spec
                self.engine.add_pending(spec, numbers=False)
            case PodObserved(pod=pod, spec=spec) if spec is not None:
                spec = self.parts.pod(spec)
                self.reclaims.gone(pod.key)
                self.pods[pod.key] = spec
                self.engine.assign(spec, numbers=False)
                self.charged.add(pod.key)
                if spec.node_name:
                    self.node_of[pod.key] = spec.node_name
            case PodPlaced(pod=pod, node=node):
                self.node_of[pod.key] = node
            case QuotaAdmitted(pod=pod):
                key = pod.key
                self._not_waiting(key)
                if self.engine.quota_of_pod(key) is not None:  # else no quota governs it: nothing to charge
                    self.engine.assign(key, numbers=False)
                    self.charged.add(key)
            case QuotaReleased(pod=pod):
                self.owed_releases.pop(pod.key, None)
            case PodReleased(pod=pod):
                self.node_of.pop(pod.key, None)
            case PodDeleted(pod=pod):
                key = pod.key
                self.reclaims.gone(key)
                self._uncharge(key, "deleted", remove=True)
                self.pods.pop(key, None)
                self.waiting_reasons.pop(key, None)
                self.node_of.pop(key, None)
            case GangGroupPlaced(decisions=decisions):
                for member, decision in decisions.items():
                    self.node_of[member] = decision.node or ""
            case PodUnschedulable(pod=pod):
                self._uncharge(pod.key, "unschedulable", remove=False)
            case PodBindFailed(pod=pod) if self.group_charges.get(pod.key) is None:
                self._uncharge(pod.key, "binding failed", remove=False)  # it is requeued and admitted again
            case PodRejected(pod=pod):
                self._uncharge(pod.key, "rejected", remove=True)
            case QuotaWaiting(pod=pod, attempt=attempt, message=message, detail=detail):
                self.waiting[pod.key] = attempt
                self.waiting_why[pod.key] = why_waiting(detail, message)
                self.waiting_reasons[pod.key] = detail.reason if detail is not None else "InsufficientQuota"
            case QuotaGroupAdmitted(group=group, attempt=attempt, members=members):
                for member in members:
                    self._not_waiting(member)
                    if self.engine.quota_of_pod(member) is None:
                        continue  # no quota governs it: nothing to charge
                    self.engine.assign(member, numbers=False)
                    self.charged.add(member)
                    self.group_charges[member] = (group, attempt)
            case GangHoldsReleased(group=group, attempt=attempt, members=members, reason=reason):
                for member in members:
                    if self.group_charges.get(member) == (group, attempt):
                        self._uncharge(member, f"gang holds released: {reason}", remove=False)
            case QuotaEvicted(pod=pod, quota=quota, cause=cause):
                self.reclaims.evicted(pod.key, self.pods.get(pod.key), self.node_of.get(pod.key, ""), cause)
                self.engine.remove_pod(pod.key, numbers=False)
                self.engine.restart_overuse(quota)
                self.pods.pop(pod.key, None)
                self.charged.discard(pod.key)
                self._not_waiting(pod.key)
                self.group_charges.pop(pod.key, None)
                self.node_of.pop(pod.key, None)
            case QuotaEvictionEnacted(pod=pod):
                self.reclaims.enacted(pod.key)
            case QuotaEvictionEnactmentFailed(pod=pod):
                self._charge_again(event)
            case QuotaReclaimBlocked(pod=pod):
                self.reclaims.settled(pod)
            case _:
                pass

    def _track_status(self, event: Event, at: int) -> None:
        """Overuse timing, and when the quota status is due to be published again."""
        kind = type(event)  # event types are final classes: compared by identity
        if kind not in TREE_UNCHANGED:
            self.engine.observe_overuse(at // 1_000_000)
        if kind is QuotaStatusSynced:
            assert isinstance(event, QuotaStatusSynced)
            self.published.update(event.patches)
            self.status_dirty_since = None
            self.status_synced_at = at
        elif kind is TimerFired:
            assert isinstance(event, TimerFired)
            if event.service == self.name:
                self.last_timer = max(self.last_timer, event.due)
                if self._status_due(at) and not self._status_patches():
                    self.status_dirty_since = None  # nothing to publish after all
        elif self.status_dirty_since is None:
            self.status_dirty_since = at

    def _charge_again(self, event: QuotaEvictionEnactmentFailed) -> None:
        """Kubernetes refused the eviction for good: the pod runs on, charged as before (quota_manager.reclaim)."""
        held = self.reclaims.refused(event)
        if held is None:
            return
        key = event.pod.key
        self.pods[key] = held.spec
        self.engine.assign(held.spec, numbers=False)
        self.charged.add(key)
        if held.node:
            self.node_of[key] = held.node
        row = next((r for r in self.engine.tree_view() if r["name"] == event.quota), None)
        self.reclaims.owe(event, held, dict(row["used"]) if row is not None else {})

    def _not_waiting(self, key: str) -> None:
        self.waiting.pop(key, None)
        self.waiting_why.pop(key, None)

    def _uncharge(self, key: str, reason: str, *, remove: bool) -> None:
        self._not_waiting(key)
        self.group_charges.pop(key, None)
        was_charged = key in self.charged
        self.charged.discard(key)
        change = (self.engine.remove_pod if remove else self.engine.unassign)(key, numbers=was_charged)
        if was_charged:
            self.owed_releases[key] = (reason, change)

    # -- decide ----------------------------------------------------------------------------------------------

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        out = [*self._decide(event, at), *self._revoke(at)]
        if isinstance(event, TimerFired) and event.service == self.name:
            out += self._sync_status(at)
        return out

    def _status_due(self, at: int) -> bool:
        return self.status_dirty_since is not None and at >= self.status_synced_at + STATUS_SYNC_INTERVAL_US

    def _sync_status(self, at: int) -> list[Emit]:
        """The status upstream writes on ElasticQuota objects, for every quota whose status changed."""
        if not self._status_due(at):
            return []
        return [
            Emit(
                stream_id=stream_id("quota", "status"),
                event=QuotaStatusSynced(patches=self._status_patches()),
            )
        ]

    def _status_patches(self) -> dict[str, JsonObject]:
        patches: dict[str, JsonObject] = {}
        for row in self.engine.tree_view():
            key = f"{row['namespace']}/{row['name']}"
            patch = self.engine.status_patch(row["name"])
            if self.published.get(key) != patch:
                patches[key] = patch
        return patches

    def _decide(self, event: Event, at: int) -> list[Emit]:
        match event:
            case QuotaEvictionEnactmentFailed(pod=pod) if pod.key in self.reclaims.owed:
                return [Emit(stream_id=stream_id("pod", pod.key), event=self.reclaims.owed[pod.key])]
            case PodSubmitted(pod=pod, spec=spec) if goes_alone(spec):
                return self._admit(
                    pod, 1
                )  # a plain pod: the gang gate has nothing to decide, admission is next
            case PodEnqueued(pod=pod, attempt=attempt) | PodRequeued(pod=pod, attempt=attempt):
                return self._admit(pod, attempt)
            case (
                PodUnschedulable(pod=pod)
                | PodRejected(pod=pod)
                | PodDeleted(pod=pod)
                | PodBindFailed(pod=pod)
            ):
                return [*self._released(pod.key), *self._admit_waiting()]
            case PodReleased() | NodeRegistered() | NodeRemoved():
                return self._admit_waiting()
            case GangGroupReady(group=group, members=members, attempt=attempt):
                return self._admit_group(group, attempt, members)
            case GangHoldsReleased(members=members):
                return [*(e for m in members for e in self._released(m)), *self._admit_waiting()]
            case QuotaApplied(quota=ref) | QuotaDeleted(quota=ref):
                return [*quota_outcome(self.owed_outcomes, self.engine, ref), *self._admit_waiting()]
            case QuotaProfileApplied(profile=ref) | QuotaProfileDeleted(profile=ref):
                return [*profile_outcome(self.owed_outcomes, self.engine, ref, event), *self._admit_waiting()]
            case _:
                return []

    def _admission(self, decision: AdmitDecision, attempt: int) -> Event:
        pod = object_ref(decision.pod)
        if decision.admitted:
            return QuotaAdmitted(
                pod=pod,
                attempt=attempt,
                quota=decision.quota,
                request=decision.request,
                used=after(decision),
                limit=decision.limit,
                detail=decision,
            )
        return QuotaWaiting(
            pod=pod,
            attempt=attempt,
            quota=decision.quota,
            message=decision.message,
            detail=decision,
        )

    def _admit(self, pod: ObjectRef, attempt: int) -> list[Emit]:
        key = pod.key
        if key in self.charged:
            return []
        if self.engine.quota_of_pod(key) is None:
            # No quota governs the pod (DisableDefaultQuota, and no quota for its namespace or label): admitted
            # without being charged anywhere, as upstream's PreFilter lets it through.
            spec = self.pods.get(key)
            if spec is None:
                return []
            return [
                Emit(
                    stream_id=stream_id("pod", key),
                    event=self._admission(self.engine.admit(spec), attempt),
                )
            ]
        decision = self.engine.admit(key)
        out = [Emit(stream_id=stream_id("pod", key), event=self._admission(decision, attempt))]
        if not decision.admitted and decision.waiting:
            out.extend(self._preempt(pod, attempt, decision))
        return out

    def _admit_group(self, group: str, attempt: int, members: list[str]) -> list[Emit]:
        """A gang group is admitted as a unit: every member fits (each counted before the next) or none is charged."""
        stream = stream_id("gang", group)

        def waiting(message: str, detail: GroupAdmission | None = None) -> list[Emit]:
            event = QuotaGroupWaiting(group=group, attempt=attempt, message=message, detail=detail)
            return [Emit(stream_id=stream, event=event)]

        unknown = [m for m in members if m not in self.pods]
        if unknown:
            return waiting(f"members not known to quota: {', '.join(unknown)}")
        governed = [
            m for m in members if self.engine.quota_of_pod(m) is not None
        ]  # the others: no quota applies
        admitted, refused = self.engine.offer_waiting(pods=governed)
        if len(admitted) == len(governed):
            return [
                Emit(
                    stream_id=stream,
                    event=QuotaGroupAdmitted(
                        group=group,
                        attempt=attempt,
                        members=list(members),
                        detail=GroupAdmission(members={d.pod: d for d in admitted}),
                    ),
                )
            ]
        ok = {d.pod for d in admitted}
        # the first member that does not fit, checked as the group check saw it: the members before it counted
        alone = self.engine.admit(next(m for m in governed if m not in ok))
        why = refused[0] if refused else alone
        first = why.pod
        return waiting(
            f"quota cannot admit the whole group ({len(ok)}/{len(members)} members fit); {first}: {why.message}",
            GroupAdmission(first=why, used_before=dict(alone.used)),
        )

    def _preempt(self, pod: ObjectRef, attempt: int, decision: AdmitDecision) -> list[Emit]:
        """Intra-quota preemption, node by node as upstream's PostFilter does: on each node where a less important,
        preemptible pod of the same quota runs, the fewest such pods whose removal lets the preemptor fit the node
        (its resources against the node's allocatable) and the quota; the node needing the fewest victims wins.
        Nothing is evicted when no node would have room: evicting would not let the pod run. (The device-allocator
        still places the preemptor, with the full device and topology check.)"""
        nodes = sorted(
            {
                self.node_of[k]
                for k in self.charged
                if k in self.node_of and self.engine.quota_of_pod(k) == decision.quota
            }
        )
        pods_on: dict[str, list[Pod]] = {}
        for key, node in sorted(self.node_of.items()):
            if key in self.pods and key not in self.reclaims.blocked:  # a refused victim is not chosen again
                pods_on.setdefault(node, []).append(self.pods[key])
        best: tuple[tuple[int, str], Any] | None = None
        for node in nodes:
            allocatable = self.engine.node_allocatable(node)
            if allocatable is None:
                continue
            fits = fits_node(self.pods.get(pod.key), allocatable)
            choice = self.engine.preemption_victims(pod.key, pods_on.get(node, []), fits)
            if choice.eligible and choice.helpful and choice.victims:
                rank = (len(choice.victims), node)
                if best is None or rank < best[0]:
                    best = (rank, choice)
        if best is None:
            return []
        choice = best[1]
        after = self.engine.waiting_admissions(pods=[pod.key], released=[*choice.victims])
        if not after:
            return []
        out = [
            Emit(
                stream_id=stream_id("pod", victim),
                event=QuotaEvicted(
                    pod=object_ref(victim),
                    quota=decision.quota,
                    cause="Preempted",
                    message=f"preempted by {pod.key} (priority {decision.priority}) in quota {decision.quota}: "
                    f"{choice.message}",
                    detail=choice,
                ),
            )
            for victim in choice.victims
        ]
        out.append(Emit(stream_id=stream_id("pod", pod.key), event=self._admission(after[0], attempt)))
        return out

    def _released(self, key: str) -> list[Emit]:
        if key not in self.owed_releases:
            return []
        reason, change = self.owed_releases[key]
        return [
            Emit(
                stream_id=stream_id("pod", key),
                event=QuotaReleased(
                    pod=object_ref(key),
                    quota=change.quota,
                    request=change.request,
                    used=change.used,
                    reason=reason,
                    detail=ReturnedCharge(returned=change.returned, runtime=change.runtime),
                ),
            )
        ]

    def _admit_waiting(self) -> list[Emit]:
        """Offer the waiting pods again: those that fit now are admitted, and those that still do not are recorded
        again when why they wait changed (another check, other dimensions, another limit), as upstream's scheduler
        rewrites a pending pod's condition at each retry, so "why is my pod pending?" never reads a stale limit. A
        change of used alone is not recorded again: every release would otherwise re-record every waiting pod."""
        if not self.waiting:
            return []
        admitted, refused = self.engine.offer_waiting(pods=list(self.waiting))
        changed = [d for d in refused if why_waiting(d, d.message) != self.waiting_why.get(d.pod)]
        return [
            Emit(stream_id=stream_id("pod", d.pod), event=self._admission(d, self.waiting[d.pod]))
            for d in (*admitted, *changed)
        ]

    def _revoke(self, at: int) -> list[Emit]:
        """Over-use revoke: due whenever the recorded time has passed a quota's delay (a timer event or any input)."""
        deadline = self.engine.revoke_deadline()
        if deadline is None or at // 1_000_000 < deadline:
            return []
        evictions = self.engine.overuse_revoke(at // 1_000_000, dry_run=True, spare=self.reclaims.blocked)
        return [
            Emit(
                stream_id=stream_id("pod", e.pod),
                event=QuotaEvicted(
                    pod=object_ref(e.pod), quota=e.quota, cause=e.cause, message=e.message, detail=e
                ),
            )
            for e in evictions
        ]

    def next_deadline(self) -> int | None:
        """The over-use revoke delay, or, when quota status changed and is not yet synced, a second after the last
        sync (at once if that is past). A revoke deadline
        that already fired is not asked for again: one that found nothing to evict waits for the next input (every
        input re-checks revokes), instead of firing in a loop."""
        times: list[int] = []
        seconds = self.engine.revoke_deadline()
        if seconds is not None and seconds * 1_000_000 > self.last_timer:
            times.append(seconds * 1_000_000)
        if self.status_dirty_since is not None:
            times.append(max(self.status_dirty_since, self.status_synced_at + STATUS_SYNC_INTERVAL_US))
        return min(times) if times else None

    def snapshot(self) -> dict[str, object]:
        return {
            "published": self.published,
            "engine": self.engine.digest(),
            "waiting": dict(sorted(self.waiting.items())),
            "waiting_why": dict(sorted(self.waiting_why.items())),
            "charged": sorted(self.charged),
            "status_dirty_since": self.status_dirty_since,
            "status_synced_at": self.status_synced_at,
            "node_of": dict(sorted(self.node_of.items())),
            "group_charges": {k: list(v) for k, v in sorted(self.group_charges.items())},
            "last_timer": self.last_timer,
            "pods": sorted(self.pods),
            "owed_releases": msgspec.to_builtins(dict(sorted(self.owed_releases.items()))),
            "owed_outcomes": msgspec.to_builtins(dict(sorted(self.owed_outcomes.items()))),
            "reclaims": self.reclaims.digest(),
        }


__all__ = ["QuotaManager", "priority_value"]
