"""reservation-manager's engine: Reservations (lifecycle, owner matching) and PodMigrationJobs, as a pure state
machine over events.

``apply(event, at)`` folds any event of interest into the state — an input, or one of the manager's own decisions;
``decide(event, at)`` returns the decisions an input calls for, as ``(stream, event)`` pairs, without changing the
state (moving jobs are decided on a scratch copy). ``at`` is the trigger's recorded time, the only clock.

Decisions:
- ``reservation.applied`` → ``reservation.accepted`` (new life or changed spec) or ``reservation.rejected``;
- ``quota.admitted`` / ``quota.group_admitted`` → ``reservation.resolved`` / ``reservation.group_resolved`` with the
  reservations each pod may use (:mod:`allot_reservation.match`), or ``pod.rejected`` (malformed reservation
  annotations);
- ``pod.placed`` / ``gang.group_placed`` into an ``allocateOnce`` reservation → ``reservation.succeeded``;
- ``node.removed`` → ``reservation.failed`` (Expired) for its reservations; timers → ``reservation.failed`` (Expired)
  at ttl / expires, ``reservation.removed`` (GarbageCollected) a GC period after a reservation finished;
- PodMigrationJobs (:mod:`allot_reservation.migrate`) on their own inputs, on what happens to their pods and
  reservations, and on timers.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any, Final

import msgspec

from allot_contracts import kube
from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    FieldIssue,
    GangGroupPlaced,
    MigrationAborted,
    MigrationApplied,
    MigrationDeleted,
    MigrationEvicted,
    MigrationEvictionRequested,
    MigrationRejected,
    MigrationRemoved,
    NodeRegistered,
    NodeRemoved,
    ObjectRef,
    PodBindFailed,
    PodBound,
    PodDeleted,
    PodObserved,
    PodPlaced,
    PodRejected,
    PodReleased,
    PodSubmitted,
    QuotaAdmitted,
    QuotaEvicted,
    QuotaGroupAdmitted,
    ReservationAccepted,
    ReservationApplied,
    ReservationCandidate,
    ReservationDeleted,
    ReservationFailed,
    ReservationGroupResolved,
    ReservationMatch,
    ReservationPlaced,
    ReservationRejected,
    ReservationRemoved,
    ReservationResolved,
    ReservationSucceeded,
    ReservationUnschedulable,
    TimerFired,
)
from allot_contracts.issues import format_issues
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.migration import parse_migration_job
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.requests import pod_requests
from allot_contracts.objects.reservation import Reservation, parse_reservation
from allot_contracts.objects.reservation_pod import parse_pod_reservation
from allot_reservation.arbitration import order
from allot_reservation.book import Record
from allot_reservation.config import ReservationConfig
from allot_reservation.jobs import PENDING, RUNNING, Jobs
from allot_reservation.match import match_reservation
from allot_reservation.migrate import Migrations, accepted_event, limiters
from allot_reservation.world import World

__all__ = ["INTERESTS", "NAME", "ReservationEngine"]

NAME: Final = "reservation-manager"
INTERESTS: Final = frozenset(
    {
        "reservation.applied",
        "reservation.deleted",
        "reservation.placed",
        "reservation.unschedulable",
        "migration.applied",
        "migration.deleted",
        "migration.evicted",
        "migration.eviction_failed",
        "quota.admitted",
        "quota.group_admitted",
        "pod.submitted",
        "pod.observed",
        "pod.deleted",
        "pod.placed",
        "pod.bound",
        "pod.bind_failed",
        "pod.released",
        "quota.evicted",
        "gang.group_placed",
        "node.registered",
        "node.removed",
        "timer.fired",
    }
)
Emit = tuple[str, Event]
_NONE: Final = "no reservation applies"
_UID_NS: Final = uuid.UUID("3f0c2b9e-8d41-4a57-b6e2-1c9d7e5a4f30")  # uids of Reservations applied without one


def _ref(name: str) -> ObjectRef:
    return ObjectRef(name=name)


def _pod_ref(key: str) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef(namespace=namespace, name=name)


def _field(decision: Any, name: str) -> Any:
    """A field of a placement decision, whether the event carries it typed or as JSON."""
    return decision.get(name) if isinstance(decision, dict) else getattr(decision, name, None)


def _requests_of(decision: Any) -> dict[str, int]:
    requests = _field(_field(decision, "allocation") or {}, "requests")
    return {str(k): int(v) for k, v in requests.items()} if isinstance(requests, dict) else {}


def _allocated_in(decision: Any) -> tuple[str, str] | None:
    got = _field(decision, "reservation")
    if isinstance(got, dict) and isinstance(got.get("name"), str):
        return got["name"], str(got.get("uid") or "")
    return None


class ReservationEngine:
    def __init__(self, config: ReservationConfig | None = None) -> None:
        self.config = config or ReservationConfig()
        self.world = World()
        self.jobs = Jobs()
        self.rejected: dict[str, str] = {}  # reservation name -> why it was refused

    @property
    def book(self) -> Any:
        return self.world.book

    # === apply ========================================================================================================
    def apply(self, event: Event, at: int) -> None:
        world, book = self.world, self.world.book
        # the most frequent first: every case is an isinstance check, and the event types are unrelated classes
        match event:
            case PodSubmitted(pod=pod, uid=uid, manifest=manifest, spec=typed):
                book.release(pod.key)
                world.known(pod.key, uid, manifest, pod=typed)
            case PodObserved(pod=pod, uid=uid, manifest=manifest, spec=typed):
                book.release(pod.key)
                if typed is not None:
                    node, done = typed.node_name, typed.phase in ("Succeeded", "Failed")
                else:
                    node = str(kube.spec_of(manifest).get("nodeName") or "")
                    done = kube.status_of(manifest).get("phase") in ("Succeeded", "Failed")
                world.known(pod.key, uid, manifest, node=node, bound=bool(node), pod=typed)
                if node and not done:
                    self._observed_in_reservation(pod.key, uid, manifest, typed)
            case QuotaAdmitted():
                pass  # read by decide: nothing to fold (the most frequent input, so tested early)
            case ReservationResolved():
                pass  # our own answer to it: nothing to fold either
            case PodPlaced(pod=pod, node=node, decision=decision):
                self._placed(pod.key, node, decision)
            case PodBound(pod=pod, node=node):
                if (rec := world.pods.get(pod.key)) is not None:
                    rec.node, rec.bound = sys.intern(node), True  # one string per node, not per pod
            case PodDeleted(pod=pod) | QuotaEvicted(pod=pod):
                world.forget(pod.key)
                book.release(pod.key)
            case GangGroupPlaced(decisions=decisions):
                for member, decision in sorted(decisions.items()):
                    self._placed(member, str(_field(decision, "node") or ""), decision)
            case PodBindFailed(pod=pod) | PodReleased(pod=pod):
                if (rec := world.pods.get(pod.key)) is not None:
                    rec.node, rec.bound, rec.reservation = "", False, ""
                book.release(pod.key)
            case NodeRegistered(name=name, node=node):
                world.nodes[name] = dict(node.labels)  # as the door read them
            case NodeRemoved(name=name):
                world.nodes.pop(name, None)
            case ReservationDeleted(reservation=ref, uid=uid):
                book.drop(ref.name, uid)
                self.rejected.pop(ref.name, None)
            case ReservationAccepted():
                self._accepted(event)
            case ReservationRejected(reservation=ref, message=message):
                self.rejected[ref.name] = message
            case ReservationPlaced(reservation=ref, uid=uid, node=node):
                record = book.get(ref.name)
                book.placed(ref.name, uid, node, record.spec.requests if record is not None else {}, at)
            case ReservationUnschedulable(reservation=ref, uid=uid, message=message):
                book.unschedulable(ref.name, uid, message, at)
            case ReservationSucceeded(reservation=ref, uid=uid):
                book.succeed(ref.name, uid, at)
            case ReservationFailed(reservation=ref, uid=uid, reason=reason, message=message):
                book.fail(ref.name, uid, reason, message, at)
            case ReservationRemoved(reservation=ref, uid=uid):
                book.drop(ref.name, uid)
            case MigrationEvicted(job=ref) | MigrationEvictionRequested(job=ref):
                job = self.jobs.jobs.get(ref.name)
                self.jobs.apply(
                    event, at, limiters(self.config.migration, world, job) if job is not None else []
                )
            case _:
                self.jobs.apply(event, at)

    def _accepted(self, event: ReservationAccepted) -> None:
        spec = parse_reservation(event.manifest, [], [])
        if spec is None:
            return
        self.rejected.pop(spec.name, None)
        self.world.book.accept(
            Record(
                name=spec.name,
                uid=event.uid,
                spec=spec,
                manifest=event.manifest,
                created_at=event.created_at,
                expires_at=event.expires_at,
                job=event.job,
            )
        )

    def _placed(self, key: str, node: str, decision: Any) -> None:
        rec = self.world.pods.get(key)
        if rec is None:
            return
        rec.node = sys.intern(node)
        got = _allocated_in(decision)
        rec.reservation = got[0] if got else ""
        if got is not None:
            self.world.book.allocate(got[0], got[1], key, rec.uid, _requests_of(decision))

    def _observed_in_reservation(self, key: str, uid: str, manifest: JsonObject, typed: Pod | None) -> None:
        if typed is not None:
            allocated, requests = typed.reservation.allocated, dict(typed.requests)
        else:
            meta = kube.meta(manifest)
            annotations, labels = meta.get("annotations"), meta.get("labels")
            allocated = parse_pod_reservation(
                annotations if isinstance(annotations, dict) else {},
                labels if isinstance(labels, dict) else {},
                [],
            ).allocated
            spec = manifest.get("spec")
            requests = pod_requests(spec, []) if allocated and isinstance(spec, dict) else {}
        if allocated is None:
            return
        name, r_uid = allocated
        self.world.book.allocate(name, r_uid, key, uid, requests)
        if (rec := self.world.pods.get(key)) is not None:
            rec.reservation = name

    # === decide =======================================================================================================
    def decide(self, event: Event, at: int) -> list[Emit]:
        match event:
            case QuotaAdmitted(pod=pod, attempt=attempt):
                return [self._resolve(pod, attempt)]
            case (
                PodSubmitted()
                | PodObserved()
                | NodeRegistered()
                | ReservationAccepted()
                | ReservationRejected()
            ):
                return []
            case PodBound() | PodDeleted() | PodReleased():
                return self._jobs(at)  # the most frequent inputs next: tested early
            case QuotaGroupAdmitted(group=group, attempt=attempt, members=members):
                return self._resolve_group(group, attempt, members)
            case ReservationApplied():
                return self._reservation_applied(event, at)
            case PodPlaced(pod=pod, decision=decision):
                return self._succeeded([(pod.key, decision)]) + self._jobs(at)
            case GangGroupPlaced(decisions=decisions):
                return self._succeeded(sorted(decisions.items())) + self._jobs(at)
            case NodeRemoved(name=name):
                return self._node_gone(name) + self._jobs(at)
            case MigrationApplied():
                return self._job_applied(event, at)
            case MigrationDeleted(job=ref):
                return self._job_deleted(ref.name, at)
            case TimerFired(service=service) if service == NAME:
                return self._timer(at)
            case TimerFired():
                return []
            case _:
                return self._jobs(at)

    # --- resolution (pod path) ----------------------------------------------------------------------------------------
    def _match(self, key: str) -> tuple[ReservationMatch | None, list[FieldIssue]]:
        rec = self.world.pods.get(key)
        if rec is None:
            return None, []
        book = self.world.book
        if not book.any_matchable() and not rec.affinity_stated:
            return None, []
        facts, issues = rec.facts()
        if issues:
            return None, issues
        candidates: list[ReservationCandidate] = []
        unmatched: dict[str, str] = {}
        for r in book.matchable():
            ok, why = match_reservation(r.spec, r.node, self.world.nodes.get(r.node, {}), facts)
            if ok:
                candidates.append(
                    ReservationCandidate(name=r.name, uid=r.uid, node=r.node, order=r.spec.order)
                )
            elif why:
                unmatched[r.name] = why
        spec = facts.spec
        required = spec.affinity is not None
        if not candidates and not required and not unmatched:
            return None, []
        return (
            ReservationMatch(
                candidates=candidates,
                required=required,
                ignored=spec.ignored,
                name=spec.affinity.name if spec.affinity is not None else "",
                unmatched=unmatched,
            ),
            [],
        )

    @staticmethod
    def _reason(match: ReservationMatch | None) -> str:
        if match is None:
            return _NONE
        if match.ignored:
            return "reservation-ignored: may use what every reservation on a node holds"
        if match.candidates:
            return f"{len(match.candidates)} reservation(s) match: " + ", ".join(
                c.name for c in match.candidates
            )
        if match.required:
            return "node(s) no reservations match reservation affinity"
        return _NONE

    def _resolve(self, pod: ObjectRef, attempt: int) -> Emit:
        match, issues = self._match(pod.key)
        stream = stream_id("pod", pod.key)
        if issues:
            return (
                stream,
                PodRejected(
                    pod=pod,
                    stage=NAME,
                    errors=issues,
                    message="invalid reservation annotations: " + format_issues(issues),
                    codes=sorted({i.code for i in issues}),
                ),
            )
        return (
            stream,
            ReservationResolved(
                pod=pod,
                attempt=attempt,
                reservation=(match.name or None) if match is not None else None,
                reason=self._reason(match),
                match=match,
            ),
        )

    def _resolve_group(self, group: str, attempt: int, members: list[str]) -> list[Emit]:
        matches: dict[str, ReservationMatch] = {}
        for member in members:
            match, issues = self._match(member)
            if issues:
                # the whole group goes on without this member's reservation preferences; its admission already
                # refused malformed annotations at the door, so this only happens for pods from a watch
                continue
            if match is not None:
                matches[member] = match
        reason = f"{len(matches)} member(s) may use reservations" if matches else _NONE
        return [
            (
                stream_id("gang", group),
                ReservationGroupResolved(
                    group=group, attempt=attempt, members=list(members), reason=reason, matches=matches
                ),
            )
        ]

    # --- reservations -------------------------------------------------------------------------------------------------
    def _reservation_applied(self, event: ReservationApplied, at: int) -> list[Emit]:
        ref = event.reservation
        stream = stream_id("reservation", ref.name)
        issues: list[FieldIssue] = []
        spec = parse_reservation(event.manifest, issues, [])
        if spec is None:
            return [
                (
                    stream,
                    ReservationRejected(
                        reservation=ref,
                        uid=event.uid,
                        errors=issues,
                        message="invalid Reservation: " + format_issues(issues),
                    ),
                )
            ]
        old = self.world.book.get(ref.name)
        # applied without a uid (allot apply): derived from the name, so the simulator and a live stack agree
        uid = event.uid or (
            old.uid if old is not None else str(uuid.uuid5(_UID_NS, f"reservation/{ref.name}"))
        )
        spec = _with_uid(spec, uid)
        if old is not None and old.uid == spec.uid:
            if old.manifest == event.manifest:
                return []
            created = old.created_at
        else:
            created = spec.created_us if spec.created_us is not None else at
        return [(stream, accepted_event(spec, event.manifest, created))]

    def _succeeded(self, placed: list[tuple[str, Any]]) -> list[Emit]:
        out: list[Emit] = []
        for key, decision in placed:
            got = _allocated_in(decision)
            record = self.world.book.get(got[0]) if got is not None else None
            if record is None or record.finished or not record.spec.allocate_once:
                continue
            out.append(
                (
                    stream_id("reservation", record.name),
                    ReservationSucceeded(
                        reservation=_ref(record.name), uid=record.uid, node=record.node, owner=key
                    ),
                )
            )
        return out

    def _node_gone(self, node: str) -> list[Emit]:
        return [
            (
                stream_id("reservation", r.name),
                ReservationFailed(
                    reservation=_ref(r.name),
                    uid=r.uid,
                    node=node,
                    reason="Expired",
                    message=f"the reservation's node {node} is gone",
                ),
            )
            for r in self.world.book.on_node(node)
        ]

    def _timer(self, at: int) -> list[Emit]:
        out: list[Emit] = []
        gc = self.config.gc_us
        for name, r in sorted(self.world.book.records.items()):
            if not r.finished and r.expires_at is not None and r.expires_at <= at:
                out.append(
                    (
                        stream_id("reservation", name),
                        ReservationFailed(
                            reservation=_ref(name),
                            uid=r.uid,
                            node=r.node,
                            reason="Expired",
                            message="Reservation expired",
                        ),
                    )
                )
            elif r.finished and r.finished_at is not None and r.finished_at + gc <= at:
                out.append(
                    (
                        stream_id("reservation", name),
                        ReservationRemoved(reservation=_ref(name), uid=r.uid, reason="GarbageCollected"),
                    )
                )
        return out + self._jobs(at, scavenge=True)

    # --- jobs ---------------------------------------------------------------------------------------------------------
    def _job_applied(self, event: MigrationApplied, at: int) -> list[Emit]:
        ref = event.job
        issues: list[FieldIssue] = []
        spec = parse_migration_job(event.manifest, issues, [])
        if spec is None:
            return [
                (
                    stream_id("migration", ref.name),
                    MigrationRejected(
                        job=ref,
                        uid=event.uid,
                        errors=issues,
                        message="invalid PodMigrationJob: " + format_issues(issues),
                    ),
                )
            ]
        job = self.jobs.jobs.get(ref.name)
        if job is not None and job.active and spec.aborted:
            scratch = self.jobs.copy()
            moves = Migrations(self.config, self.world, scratch, at)
            moves.emit(
                stream_id("migration", ref.name),
                MigrationAborted(job=ref, uid=job.uid, message="the job was aborted"),
                job,
            )
            moves.remove_reservation(job)
            return moves.out
        return self._jobs(at)

    def _job_deleted(self, name: str, at: int) -> list[Emit]:
        job = self.jobs.jobs.get(name)
        if job is None:
            return self._jobs(at)
        scratch = self.jobs.copy()
        moves = Migrations(self.config, self.world, scratch, at)
        moves.remove_reservation(job)
        moves.emit(
            stream_id("migration", name), MigrationRemoved(job=_ref(name), uid=job.uid, reason="Deleted"), job
        )
        return moves.out + self._jobs(at, start=scratch)

    def _jobs(self, at: int, *, scavenge: bool = False, start: Jobs | None = None) -> list[Emit]:
        """Move every active job as far as it can go now: running jobs first (by name), then pending ones in
        arbitration order."""
        if not self.jobs.jobs:
            return []
        scratch = start.copy() if start is not None else self.jobs.copy()
        moves = Migrations(self.config, self.world, scratch, at)
        running = [j for j in scratch.active() if j.phase == RUNNING]
        for job in running:
            moves.advance(scratch.jobs[job.name])
        pending = order([j for j in scratch.active() if j.phase == PENDING], self.world)
        for job in pending:
            moves.advance(scratch.jobs[job.name])
        if scavenge:
            for name, job in sorted(scratch.jobs.items()):
                if job.scavenge_at <= at:
                    if job.active:
                        moves.remove_reservation(job)
                    moves.emit(
                        stream_id("migration", name),
                        MigrationRemoved(job=_ref(name), uid=job.uid, reason="GarbageCollected"),
                        job,
                    )
        return moves.out

    # === time and views ===============================================================================================
    def next_deadline(self) -> int | None:
        times = self.world.book.deadlines(self.config.gc_us)
        cfg = self.config.migration
        for job in self.jobs.jobs.values():
            times.append(job.scavenge_at)
            if not job.active:
                continue
            timeout = job.timeout_at(cfg.default_job_ttl_us)
            if timeout is not None:
                times.append(timeout)
            if (
                job.conditions.get("Eviction", ("", "", ""))[1] == "RateLimited"
                and not job.eviction_requested
            ):
                waits = [
                    b.ready_at(rate, burst)
                    for key, rate, burst in limiters(cfg, self.world, job)
                    if (b := self.jobs.buckets.get(key)) is not None and b.tokens < 1
                ]
                if waits:
                    times.append(max(waits))
        return min(times) if times else None

    def snapshot(self) -> JsonObject:
        return {
            "reservations": self.world.book.snapshot(),
            "rejected": dict(sorted(self.rejected.items())),
            "migrations": self.jobs.snapshot(),
            "pods": {k: [p.uid, p.node, p.bound, p.reservation] for k, p in sorted(self.world.pods.items())},
            "nodes": [*sorted(self.world.nodes)],
        }


def _with_uid(spec: Reservation, uid: str) -> Reservation:
    return msgspec.structs.replace(spec, uid=uid) if uid and spec.uid != uid else spec
