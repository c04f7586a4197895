"""One PodMigrationJob moving forward (upstream's migration controller ``doMigrate``), as decisions.

``advance(job)`` looks at the job, its pod, its reservation and the limits, and returns what to record next;
``Migrations`` applies those records to its scratch copy of the job state as it goes (``Jobs.apply``), so every
decision sees the effect of the ones before it (tokens taken, jobs started).

ReservationFirst: Pending → (arbitration) Running + a Reservation for the pod (``allocateOnce``, owners the pod's
controller — or the pod itself, by name, when it has none — on any node but the pod's) → ReservationScheduled →
evict (rate limits permitting) → the re-created pod is placed in the reservation (ReservationBound) and bound →
Succeeded. EvictDirectly: Pending → Running → evict → Succeeded. Failures: ``Timeout`` (spec.ttl), ``MissingPod``,
``MissingReservation``, ``ReservationExpired``, ``ForbiddenMigratePod`` (arbitration, the reservation landed on the
pod's own node, or another pod took it first), ``FailedEvict``. A job that ends before its reservation was used
removes the reservation.

Eviction in standalone mode is one decision: ``migration.evicted`` with the pod's ``pod.deleted`` and its
re-submission (a new life, without its node and allocation annotations) — recorded in one append, so a crash can
never lose the pod nor leave two lives of it. In Kubernetes mode it is ``migration.eviction_requested``; the binder's
worker calls the Eviction API and records the outcome.
"""

from __future__ import annotations

import copy
import uuid
from fractions import Fraction
from typing import Final

import msgspec

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    MigrationCondition,
    MigrationEvicted,
    MigrationEvictionRequested,
    MigrationFailed,
    MigrationPending,
    MigrationRunning,
    MigrationSucceeded,
    ObjectRef,
    PodDeleted,
    PodSubmitted,
    ReservationAccepted,
    ReservationRemoved,
)
from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_contracts.objects.migration import EVICT_DIRECTLY, RESERVATION_FIRST
from allot_contracts.objects.pod import Pod
from allot_contracts.objects.reservation import (
    LABEL_RESERVATION_ORDER,
    Reservation,
    parse_reservation,
    reserve_pod,
)
from allot_contracts.objects.reservation_pod import ANN_RESERVATION_ALLOCATED
from allot_reservation.arbitration import forbidden, held, max_unavailable
from allot_reservation.book import FAILED as R_FAILED
from allot_reservation.book import PENDING as R_PENDING
from allot_reservation.book import SUCCEEDED as R_SUCCEEDED
from allot_reservation.book import Record
from allot_reservation.config import MigrationConfig, ReservationConfig
from allot_reservation.edits import child, obj, with_node_field
from allot_reservation.jobs import PENDING, RUNNING, Job, Jobs
from allot_reservation.world import PodRecord, World

__all__ = ["Migrations", "accepted_event", "limiters", "next_life", "reservation_manifest", "resubmitted"]

Emit = tuple[str, Event]
LABEL_CREATED_BY: Final = "koordinator.sh/created-by"
CREATOR: Final = "koord-descheduler"
_UID_NS: Final = uuid.UUID("7a0d7c35-3b0e-4d7f-9c1f-5a8f3e2b6d10")
_ALLOCATION_ANNOTATIONS: Final = (
    "scheduling.koordinator.sh/device-allocated",
    "scheduling.koordinator.sh/resource-status",
    ANN_RESERVATION_ALLOCATED,
)


def _ref(name: str) -> ObjectRef:
    return ObjectRef(name=name)


def _pod_ref(key: str) -> ObjectRef:
    namespace, name = key.split("/", 1)
    return ObjectRef(namespace=namespace, name=name)


def accepted_event(
    spec: Reservation, manifest: JsonObject, created_at: int, job: str = ""
) -> ReservationAccepted:
    return ReservationAccepted(
        reservation=_ref(spec.name),
        uid=spec.uid,
        manifest=manifest,
        pod=reserve_pod(spec),
        requests=dict(spec.requests),
        policy=spec.allocate_policy,
        restricted=list(spec.restricted_resources),
        allocate_once=spec.allocate_once,
        order=spec.order,
        created_at=created_at,
        expires_at=spec.expiry(created_at),
        job=job,
    )


def _owners(pod: PodRecord) -> list[JsonValue]:
    """Upstream's ``GenerateReserveResourceOwners``: a pending pod owns it by uid; otherwise the pod's controller.
    A pod without a controller owns it by namespace and name: in standalone mode Allot re-creates it under its name."""
    namespace, name = pod.key.split("/", 1)
    if not pod.node:
        return [{"object": {"uid": pod.uid, "kind": "Pod", "name": name, "namespace": namespace}}]
    ctl = pod.controller
    if ctl is not None:
        controller: JsonObject = {"apiVersion": ctl.api_version, "kind": ctl.kind, "name": ctl.name}
        if ctl.uid:
            controller["uid"] = ctl.uid
        controller["controller"] = True
        controller["namespace"] = namespace
        return [{"controller": controller}]
    return [{"object": {"name": name, "namespace": namespace}}]


def reservation_manifest(job: Job, pod: PodRecord, at: int) -> JsonObject:
    """The Reservation a ReservationFirst job creates (upstream's ``CreateOrUpdateReservationOptions``): the job's
    template, else the pod's metadata and spec; named after the job's uid; ``allocateOnce``; the job's ttl when the
    template sets none; ``reservation-order`` = creation time in ms; the pod's node excluded by node affinity."""
    tmpl: JsonObject = copy.deepcopy(job.spec.reservation_template or {})
    meta = obj(tmpl.get("metadata"))
    spec = obj(tmpl.get("spec"))
    if not spec.get("template"):
        manifest = pod.manifest()  # decoded afresh: its parts are this template's own
        spec["template"] = {
            "metadata": {
                k: v
                for k, v in obj(manifest.get("metadata")).items()
                if k in ("namespace", "labels", "annotations", "name")
            },
            "spec": obj(manifest.get("spec")),
        }
    template = child(spec, "template")
    _drop_allocation_annotations(child(template, "metadata"))
    if not spec.get("owners"):
        spec["owners"] = _owners(pod)
    spec["allocateOnce"] = True
    if spec.get("ttl") is None and spec.get("expires") is None and job.spec.ttl_us:
        spec["ttl"] = f"{job.spec.ttl_us // 1_000_000}s"
    tspec = child(template, "spec")
    tspec.pop("nodeName", None)
    if pod.node:
        template["spec"] = with_node_field(
            tspec, {"key": "metadata.name", "operator": "NotIn", "values": [pod.node]}
        )
    labels = obj(meta.get("labels"))
    labels[LABEL_CREATED_BY] = CREATOR
    labels[LABEL_RESERVATION_ORDER] = str(at // 1000)
    meta["labels"] = labels
    meta["name"] = meta.get("name") or job.uid or f"pmj-{job.name}"
    meta["uid"] = str(uuid.uuid5(_UID_NS, f"reservation/{job.uid or job.name}"))
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": meta,
        "spec": spec,
    }


def _drop_allocation_annotations(meta: JsonObject) -> None:
    """Remove the allocation annotations from an object's metadata (and ``annotations`` when none is left)."""
    annotations = {k: v for k, v in obj(meta.get("annotations")).items() if k not in _ALLOCATION_ANNOTATIONS}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)


def resubmitted(pod: PodRecord, new_uid: str) -> JsonObject:
    """The pod as its controller re-creates it (standalone): a new life, no node, no allocation annotations."""
    manifest = pod.manifest()  # decoded afresh: changed here only
    meta = child(manifest, "metadata")
    meta["uid"] = new_uid
    for field in ("resourceVersion", "creationTimestamp", "deletionTimestamp"):
        meta.pop(field, None)
    _drop_allocation_annotations(meta)
    spec = manifest.get("spec")
    if isinstance(spec, dict):
        spec.pop("nodeName", None)
    manifest.pop("status", None)
    return manifest


def limiters(cfg: MigrationConfig, world: World, job: Job) -> list[tuple[str, Fraction, int]]:
    """The token buckets an eviction for ``job`` takes from: evictions per second, and the object limiters
    (per workload: its max migrating per ``duration``; per namespace: ``maxMigrating`` per ``duration``)."""
    out = [("evict", cfg.evict_qps, cfg.evict_burst)]
    pod = world.pods.get(job.spec.pod.key)
    for kind, limiter in sorted(cfg.limiters.items()):
        if kind == "namespace":
            most = limiter.max_migrating.value if limiter.max_migrating is not None else 0
            key = f"namespace:{job.spec.pod.namespace}"
        else:
            wkey = world.workload_key(pod) if pod is not None else None
            if wkey is None:
                continue
            replicas = len(world.workload_pods(wkey))
            most = max_unavailable(replicas, limiter.max_migrating or cfg.max_per_workload)
            key = f"workload:{wkey}"
        if most > 0:
            out.append((key, Fraction(most * 1_000_000, limiter.duration_us), limiter.burst))
    return out


def next_life(pod: PodRecord, new_uid: str) -> Pod | None:
    """The pod as its re-submission reads: the same pod, not bound, without its allocation."""
    if pod.pod is None:
        return None
    return msgspec.structs.replace(
        pod.pod,
        uid=new_uid,
        node_name="",
        phase="",
        terminating=False,
        start_time=None,
        bound=None,
        reservation=msgspec.structs.replace(pod.pod.reservation, allocated=None),
    )


class Migrations:
    """Decides for the active jobs. ``jobs`` is a scratch copy the decisions are applied to as they are made."""

    def __init__(self, config: ReservationConfig, world: World, jobs: Jobs, now: int) -> None:
        self.cfg = config.migration
        self.mode = config.mode
        self.world = world
        self.jobs = jobs
        self.now = now
        self.out: list[Emit] = []

    # -- recording -----------------------------------------------------------------------------------------------------
    def emit(self, stream: str, event: Event, job: Job | None = None) -> None:
        self.out.append((stream, event))
        evicting = job is not None and isinstance(event, MigrationEvicted | MigrationEvictionRequested)
        self.jobs.apply(event, self.now, limiters(self.cfg, self.world, job) if evicting and job else None)

    def _job_event(self, job: Job, event: Event) -> None:
        self.emit(stream_id("migration", job.name), event, job)

    def condition(
        self, job: Job, kind: str, status: str, reason: str = "", message: str = "", node: str = ""
    ) -> None:
        if job.conditions.get(kind) == (status, reason, message):
            return
        self._job_event(
            job,
            MigrationCondition(
                job=_ref(job.name),
                uid=job.uid,
                condition=kind,
                status=status,
                reason=reason,
                message=message,
                node=node,
            ),
        )

    def fail(self, job: Job, reason: str, message: str) -> None:
        self._job_event(job, MigrationFailed(job=_ref(job.name), uid=job.uid, reason=reason, message=message))
        self.remove_reservation(job)

    def remove_reservation(self, job: Job) -> None:
        """The job's own reservation goes when the job ends before a pod used it."""
        record = self.world.book.get(job.reservation) if job.reservation else None
        if record is None or record.job != job.name or record.ever_allocated or record.phase == R_SUCCEEDED:
            return
        self.emit(
            stream_id("reservation", record.name),
            ReservationRemoved(reservation=_ref(record.name), uid=record.uid, reason="MigrationEnded"),
        )

    # -- limits ---------------------------------------------------------------------------------------------------------
    def throttled_until(self, job: Job) -> int | None:
        """When the limiters allow this job's eviction, if not now."""
        waits = [
            b.ready_at(rate, burst)
            for key, rate, burst in limiters(self.cfg, self.world, job)
            if (b := self.jobs.buckets.get(key)) is not None and b.level(rate, burst, self.now) < 1
        ]
        return max(waits) if waits else None

    # -- the steps -----------------------------------------------------------------------------------------------------
    def advance(self, job: Job) -> None:
        if not job.active:
            return
        timeout = job.timeout_at(self.cfg.default_job_ttl_us)
        if timeout is not None and self.now >= timeout:
            self.fail(job, "Timeout", "Abort job caused by timeout")
            return
        if job.spec.paused:
            if job.phase == PENDING and job.reason != "Paused":
                self._job_event(
                    job,
                    MigrationPending(
                        job=_ref(job.name), uid=job.uid, reason="Paused", message="the job is paused"
                    ),
                )
            return
        if job.phase == PENDING:
            job = self._start(job)
            if job.phase != RUNNING or (job.mode == RESERVATION_FIRST and not job.spec.reservation_ref):
                return
        self._run(job)

    def _missing_pod(self, job: Job) -> None:
        self.fail(job, "MissingPod", f'Abort job caused by missing Pod "{job.spec.pod.key}"')

    def _start(self, job: Job) -> Job:
        pod = self.world.pods.get(job.spec.pod.key)
        if pod is None or (job.spec.pod.uid and pod.uid != job.spec.pod.uid):
            self._missing_pod(job)
            return self.jobs.jobs[job.name]
        why = forbidden(job, pod, self.jobs, self.world, self.cfg, self.mode)
        if why:
            self.fail(
                job,
                "ForbiddenMigratePod",
                f'Pod "{pod.key}" is forbidden to migrate because it does not meet the requirements: {why}',
            )
            return self.jobs.jobs[job.name]
        reason, message = held(job, pod, self.jobs, self.world, self.cfg)
        if reason:
            if job.reason != reason or job.message != message:
                self._job_event(
                    job, MigrationPending(job=_ref(job.name), uid=job.uid, reason=reason, message=message)
                )
            return self.jobs.jobs[job.name]
        mode = job.spec.mode or self.cfg.default_mode
        reservation = job.spec.reservation_ref
        created: tuple[Reservation, JsonObject] | None = None
        if mode == RESERVATION_FIRST and not reservation:
            manifest = reservation_manifest(job, pod, self.now)
            issues: list[FieldIssue] = []
            spec = parse_reservation(manifest, issues, [])
            if spec is None:
                self.fail(
                    job,
                    "FailedCreateReservation",
                    "Failed to create Reservation caused by " + "; ".join(str(i) for i in issues),
                )
                return self.jobs.jobs[job.name]
            created, reservation = (spec, manifest), spec.name
        self._job_event(
            job,
            MigrationRunning(
                job=_ref(job.name),
                uid=job.uid,
                mode=mode,
                pod=_pod_ref(pod.key),
                pod_uid=pod.uid,
                node=pod.node,
                reservation=reservation,
            ),
        )
        job = self.jobs.jobs[job.name]
        if created is not None:
            spec, manifest = created
            self.emit(
                stream_id("reservation", spec.name), accepted_event(spec, manifest, self.now, job=job.name)
            )
            self.condition(
                job, "ReservationCreated", "True", message=f'Successfully create Reservation "{spec.name}"'
            )
        return self.jobs.jobs[job.name]

    def _run(self, job: Job) -> None:
        pod = self.world.pods.get(job.spec.pod.key)
        alive = pod is not None and (pod.uid == job.pod_uid or not job.pod_uid)
        if job.eviction_error:
            self.fail(
                job, "FailedEvict", f'Failed evict Pod "{job.spec.pod.key}" caused by {job.eviction_error}'
            )
            return
        if job.mode == EVICT_DIRECTLY:
            if not job.evicted:
                if not job.eviction_requested:
                    if not alive:
                        self._missing_pod(job)
                        return
                    assert pod is not None
                    self._evict(job, pod)
                job = self.jobs.jobs[job.name]
            if job.evicted:
                self._evicted(job)
                job = self.jobs.jobs[job.name]
                self._job_event(
                    job,
                    MigrationSucceeded(
                        job=_ref(job.name), uid=job.uid, message=f'Pod "{job.spec.pod.key}" has been evicted'
                    ),
                )
            return
        record = self.world.book.get(job.reservation)
        if record is None:
            self.fail(
                job, "MissingReservation", f'Abort job caused by missing Reservation "{job.reservation}"'
            )
            return
        if record.phase == R_FAILED:
            self.fail(job, "ReservationExpired", "Reservation expired")
            return
        if record.phase == R_PENDING:
            scheduled = record.conditions.get("Scheduled")
            if scheduled is not None and scheduled[0] == "False":
                self.condition(job, "ReservationScheduled", "False", "Unschedulable", scheduled[2])
            return
        if not job.evicted and not job.eviction_requested:
            if not alive:
                self._missing_pod(job)
                return
            assert pod is not None
            if not job.source_node:
                self.condition(job, "ReservationScheduled", "True", node=record.node)
                self._pending_pod(self.jobs.jobs[job.name], pod)
                return
            if record.node and record.node == pod.node:
                self.fail(
                    job,
                    "ForbiddenMigratePod",
                    f'Scheduler assignes the Reservation "{record.name}" on the same node as the Pod',
                )
                return
            self.condition(job, "ReservationScheduled", "True", node=record.node)
            job = self.jobs.jobs[job.name]
            if record.ever_allocated or record.phase == R_SUCCEEDED:
                self.fail(job, "ForbiddenMigratePod", "Reservation is already bound by another Pod")
                return
            self._evict(job, pod)
            return
        if not job.evicted:
            return  # Kubernetes mode: waiting for the binder's worker to answer the eviction request
        self._evicted(job)
        self._bound(self.jobs.jobs[job.name], record)

    def _evicted(self, job: Job) -> None:
        if job.conditions.get("Eviction", ("",))[0] != "True":
            self.condition(
                job, "Eviction", "True", "EvictComplete", f'Pod "{job.spec.pod.key}" has been evicted'
            )

    def _pending_pod(self, job: Job, pod: PodRecord) -> None:
        """A pod that is not running yet needs no eviction: the job is done once it is scheduled (upstream's
        ``waitForPendingPodScheduled``); until then it waits."""
        if pod.node:
            self._job_event(
                job,
                MigrationSucceeded(
                    job=_ref(job.name),
                    uid=job.uid,
                    message=f'Assign Pod "{pod.key}" to node "{pod.node}"',
                    pod=_pod_ref(pod.key),
                    node=pod.node,
                ),
            )

    def _bound(self, job: Job, record: Record) -> None:
        owners = sorted(record.owners)
        if not owners:
            self.condition(job, "PodBoundReservation", "False", "WaitForPodBindReservation")
            return
        owner = owners[0]
        self.condition(
            job, "ReservationBound", "True", message=f'Reservation bound by pod "{owner}"', node=record.node
        )
        job = self.jobs.jobs[job.name]
        pod = self.world.pods.get(owner)
        if pod is None or not pod.bound:
            self.condition(
                job, "BoundPodReady", "False", "WaitForBoundPodReady", f"Waiting for Bound Pod {owner} Ready"
            )
            return
        self.condition(job, "BoundPodReady", "True", message=f'Bind pod "{owner}" is ready')
        job = self.jobs.jobs[job.name]
        message = f'Bind Pod "{owner}" in Reservation "{record.name}"'
        self.condition(job, "PodBoundReservation", "True", message=message, node=record.node)
        job = self.jobs.jobs[job.name]
        self._job_event(
            job,
            MigrationSucceeded(
                job=_ref(job.name), uid=job.uid, message=message, pod=_pod_ref(owner), node=record.node
            ),
        )

    def _evict(self, job: Job, pod: PodRecord) -> None:
        if self.throttled_until(job) is not None:
            self.condition(job, "Eviction", "False", "RateLimited", "waiting for the eviction rate limits")
            return
        job = self.jobs.jobs[job.name]
        message = f'Pod "{pod.key}" evicted from node "{pod.node}" by the reason "Migrating"'
        ref = _pod_ref(pod.key)
        if self.mode == "kubernetes":
            self.condition(job, "Eviction", "False", "Evicting", message)
            self._job_event(
                self.jobs.jobs[job.name],
                MigrationEvictionRequested(
                    job=_ref(job.name),
                    uid=job.uid,
                    pod=ref,
                    pod_uid=pod.uid,
                    node=pod.node,
                    delete_options=dict(job.spec.delete_options),
                ),
            )
            return
        new_uid = str(uuid.uuid5(_UID_NS, f"pod/{job.uid or job.name}/{pod.uid}"))
        self.condition(job, "Eviction", "True", "EvictComplete", message)
        self._job_event(
            self.jobs.jobs[job.name],
            MigrationEvicted(
                job=_ref(job.name), uid=job.uid, pod=ref, pod_uid=pod.uid, node=pod.node, new_uid=new_uid
            ),
        )
        stream = stream_id("pod", pod.key)
        self.emit(stream, PodDeleted(pod=ref, uid=pod.uid))
        self.emit(
            stream,
            PodSubmitted(
                pod=ref, uid=new_uid, manifest=resubmitted(pod, new_uid), spec=next_life(pod, new_uid)
            ),
        )
