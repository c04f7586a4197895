"""Reservations and PodMigrationJobs: inputs, reservation-manager's and device-allocator's decisions.

A Reservation's path: ``reservation.applied`` (input) → reservation-manager ``reservation.accepted`` (or
``reservation.rejected``) → device-allocator ``reservation.placed`` (phase Available; its resources are held on the
node) or ``reservation.unschedulable`` (stays Pending, retried when capacity changes) → owner pods are resolved to it
(``reservation.resolved`` with a :class:`ReservationMatch`) and placed in it (``pod.placed`` whose decision names the
reservation) → ``reservation.succeeded`` (allocateOnce), ``reservation.failed`` (Expired, NodeNotFound) or
``reservation.removed`` (garbage collected, a migration's reservation cleaned up); the device-allocator records
``reservation.released`` when it frees what was held.

A PodMigrationJob's path: ``migration.applied`` → ``migration.pending`` (arbitration: limits and rate limits) →
``migration.running`` → ``migration.condition`` (ReservationCreated, ReservationScheduled, Eviction,
PodBoundReservation, …) → ``migration.evicted`` (standalone: recorded with the pod's deletion and its re-submission in
one append; Kubernetes: after ``migration.eviction_requested`` the binder's worker calls the Eviction API) →
``migration.succeeded`` / ``migration.failed`` / ``migration.aborted``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from allot_contracts.events._base import Event, FieldIssue, MigrationEvent, ObjectRef, ReservationEvent

__all__ = [
    "MigrationAborted",
    "MigrationApplied",
    "MigrationCondition",
    "MigrationDeleted",
    "MigrationEvicted",
    "MigrationEvictionFailed",
    "MigrationEvictionRequested",
    "MigrationFailed",
    "MigrationPending",
    "MigrationRejected",
    "MigrationRemoved",
    "MigrationRunning",
    "MigrationSucceeded",
    "ReservationAccepted",
    "ReservationApplied",
    "ReservationCandidate",
    "ReservationDeleted",
    "ReservationFailed",
    "ReservationMatch",
    "ReservationPlaced",
    "ReservationRejected",
    "ReservationReleased",
    "ReservationRemoved",
    "ReservationSucceeded",
    "ReservationUnschedulable",
]


class ReservationCandidate(msgspec.Struct, frozen=True, kw_only=True):
    """A reservation a pod matched (§5.3): its node, and its ``reservation-order`` (0 = none)."""

    name: str
    uid: str = ""
    node: str
    order: int = 0


class ReservationMatch(msgspec.Struct, frozen=True, kw_only=True):
    """What reservation-manager found for a pod: the reservations it may use, whether using one is required (the pod
    has a ``reservation-affinity``), whether it ignores reservations (``reservation-ignored``), the reservation its
    affinity names, and why reservations whose owners matched were not usable (name → reason)."""

    candidates: list[ReservationCandidate] = []
    required: bool = False
    ignored: bool = False
    name: str = ""
    unmatched: dict[str, str] = {}


# --- inputs ----------------------------------------------------------------------------------------------------------


class ReservationApplied(ReservationEvent, frozen=True, kw_only=True, tag="reservation.applied.v1"):
    """A ``Reservation`` (scheduling.koordinator.sh/v1alpha1, cluster-scoped) was applied."""

    manifest: dict[str, Any]


class ReservationDeleted(ReservationEvent, frozen=True, kw_only=True, tag="reservation.deleted.v1"):
    pass


class MigrationApplied(MigrationEvent, frozen=True, kw_only=True, tag="migration.applied.v1"):
    """A ``PodMigrationJob`` (scheduling.koordinator.sh/v1alpha1, cluster-scoped) was applied."""

    manifest: dict[str, Any]


class MigrationDeleted(MigrationEvent, frozen=True, kw_only=True, tag="migration.deleted.v1"):
    pass


# --- reservation-manager: reservations -------------------------------------------------------------------------------


class ReservationAccepted(Event, frozen=True, kw_only=True, tag="reservation.accepted.v1"):
    """reservation-manager admitted a Reservation (or re-admitted it after an update): ``manifest`` is the Reservation
    as admitted (built by reservation-manager for a PodMigrationJob's), ``pod`` is the reserve pod the
    device-allocator schedules (once per life), ``requests`` what it reserves (canonical integers), ``policy`` its
    allocate policy with ``restricted`` resources, ``expires_at`` when it expires (µs, ``None`` = never). ``job``: the
    PodMigrationJob that created it, if any."""

    reservation: ObjectRef
    uid: str
    manifest: dict[str, Any]
    pod: dict[str, Any]
    requests: dict[str, int]
    policy: str = ""
    restricted: list[str] = []
    allocate_once: bool = True
    order: int = 0
    created_at: int = 0
    expires_at: int | None = None
    job: str = ""


class ReservationRejected(ReservationEvent, frozen=True, kw_only=True, tag="reservation.rejected.v1"):
    """The Reservation cannot be admitted (``errors`` with field paths). Never retried until it is applied again."""

    errors: list[FieldIssue]
    message: str


class ReservationSucceeded(ReservationEvent, frozen=True, kw_only=True, tag="reservation.succeeded.v1"):
    """An ``allocateOnce`` Reservation was allocated by ``owner`` (a pod key): phase Succeeded, no longer matchable."""

    node: str
    owner: str


class ReservationFailed(ReservationEvent, frozen=True, kw_only=True, tag="reservation.failed.v1"):
    """Phase Failed: ``reason`` ``Expired`` (ttl or expires passed) or ``NodeNotFound`` (its node is gone)."""

    node: str = ""
    reason: str
    message: str


class ReservationRemoved(ReservationEvent, frozen=True, kw_only=True, tag="reservation.removed.v1"):
    """reservation-manager dropped a Reservation: ``GarbageCollected`` (finished longer than the GC period) or
    ``MigrationEnded`` (the reservation of a PodMigrationJob that failed, was aborted or deleted)."""

    reason: str


# --- device-allocator: reserve pods ----------------------------------------------------------------------------------


class ReservationPlaced(ReservationEvent, frozen=True, kw_only=True, tag="reservation.placed.v1"):
    """device-allocator scheduled the reserve pod: phase Available on ``node``; ``decision`` is the placement
    engine's decision (devices, cpuset, NUMA) — what the node holds for the reservation's owners."""

    node: str
    decision: dict[str, Any]


class ReservationUnschedulable(
    ReservationEvent, frozen=True, kw_only=True, tag="reservation.unschedulable.v1"
):
    """No node can hold the reservation now (condition Scheduled=False, reason Unschedulable); it stays Pending and
    is retried when capacity changes."""

    message: str
    codes: list[str]
    decision: dict[str, Any] = {}


class ReservationReleased(ReservationEvent, frozen=True, kw_only=True, tag="reservation.released.v1"):
    """What a reservation held on its node was freed (deleted, succeeded, failed, removed)."""

    node: str
    freed: dict[str, Any] = {}
    reason: str


# --- reservation-manager: PodMigrationJobs ---------------------------------------------------------------------------


class MigrationRejected(MigrationEvent, frozen=True, kw_only=True, tag="migration.rejected.v1"):
    """The job cannot be admitted (phase Failed, ``errors`` with field paths)."""

    errors: list[FieldIssue]
    message: str


class MigrationPending(MigrationEvent, frozen=True, kw_only=True, tag="migration.pending.v1"):
    """The job waits (phase Pending): paused, or held by arbitration (``reason``: the limit that holds it)."""

    reason: str
    message: str


class MigrationRunning(MigrationEvent, frozen=True, kw_only=True, tag="migration.running.v1"):
    """The job passed arbitration (phase Running): migrating ``pod`` (life ``pod_uid``) away from ``node``."""

    mode: str
    pod: ObjectRef
    pod_uid: str = ""
    node: str = ""
    reservation: str = ""


class MigrationCondition(MigrationEvent, frozen=True, kw_only=True, tag="migration.condition.v1"):
    """A condition of the job changed (upstream's types: ReservationCreated, ReservationScheduled, Eviction,
    PodBoundReservation, BoundPodReady)."""

    condition: str
    status: str
    reason: str = ""
    message: str = ""
    node: str = ""


class MigrationEvictionRequested(
    MigrationEvent, frozen=True, kw_only=True, tag="migration.eviction_requested.v1"
):
    """Kubernetes mode: evict ``pod`` (this life) through the Eviction API. The binder's worker answers with
    ``migration.evicted`` or ``migration.eviction_failed``."""

    pod: ObjectRef
    pod_uid: str
    node: str = ""
    delete_options: dict[str, Any] = {}


class MigrationEvicted(MigrationEvent, frozen=True, kw_only=True, tag="migration.evicted.v1"):
    """The pod was evicted. Standalone: recorded together with its ``pod.deleted`` and its re-submission (a new life,
    ``new_uid``) in one append, so the pod is never lost nor held twice. Kubernetes: recorded by ``binder.kube`` after
    the Eviction API accepted it (the workload's controller re-creates the pod)."""

    pod: ObjectRef
    pod_uid: str = ""
    node: str = ""
    new_uid: str = ""
    mode: str = "standalone"


class MigrationEvictionFailed(MigrationEvent, frozen=True, kw_only=True, tag="migration.eviction_failed.v1"):
    """Kubernetes mode: the Eviction API refused the eviction for good (``message`` is the API server's)."""

    pod: ObjectRef
    message: str


class MigrationSucceeded(MigrationEvent, frozen=True, kw_only=True, tag="migration.succeeded.v1"):
    message: str
    pod: ObjectRef | None = None
    node: str = ""


class MigrationFailed(MigrationEvent, frozen=True, kw_only=True, tag="migration.failed.v1"):
    """Phase Failed; ``reason`` in upstream's words: Timeout, MissingPod, MissingReservation, ReservationExpired,
    ForbiddenMigratePod, Unschedulable, FailedEvict."""

    reason: str
    message: str


class MigrationAborted(MigrationEvent, frozen=True, kw_only=True, tag="migration.aborted.v1"):
    """Phase Aborted: the user aborted the job (``status.phase: Aborted`` applied)."""

    message: str


class MigrationRemoved(MigrationEvent, frozen=True, kw_only=True, tag="migration.removed.v1"):
    """The job was garbage-collected (its ttl + 5 minutes, or 30 minutes, after creation)."""

    reason: str
