"""kube-sync's Reservations and PodMigrationJobs (scheduling.koordinator.sh/v1alpha1, cluster-scoped).

Recorded like the other custom resources: ``reservation.applied`` / ``migration.applied`` when one is created or its
labels, annotations or spec change, ``reservation.deleted`` / ``migration.deleted`` when it goes. Status is not input
(reservation-manager writes it back; docs/reservation.md), so a job cannot be aborted through ``status.phase`` in
Kubernetes mode: delete it instead. reservation-manager validates what is recorded and rejects it with field paths.
"""

from __future__ import annotations

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    MigrationApplied,
    MigrationDeleted,
    ObjectRef,
    ReservationApplied,
    ReservationDeleted,
)
from allot_runtime.kube import (
    MIGRATION_JOBS,
    RESERVATIONS,
    Kind,
    Obj,
    meta,
    spec_fingerprint,
    strip_server_fields,
)

__all__ = ["MIGRATION_KIND", "RESERVATION_KIND"]


def _normalize(obj: Obj) -> Obj:
    return {k: v for k, v in strip_server_fields(obj).items() if k != "status"}


def _reservation_applied(manifest: Obj) -> list[tuple[str, Event]]:
    m = meta(manifest)
    ref = ObjectRef(name=str(m.get("name", "")))
    return [
        (
            stream_id("reservation", ref.name),
            ReservationApplied(reservation=ref, uid=str(m.get("uid", "")), manifest=manifest),
        )
    ]


def _reservation_deleted(key: str, uid: str) -> list[tuple[str, Event]]:
    return [(stream_id("reservation", key), ReservationDeleted(reservation=ObjectRef(name=key), uid=uid))]


def _reservation_fold(event: Event) -> tuple[str, Obj | None] | None:
    if isinstance(event, ReservationApplied):
        return event.reservation.key, event.manifest
    if isinstance(event, ReservationDeleted):
        return event.reservation.key, None
    return None


def _job_applied(manifest: Obj) -> list[tuple[str, Event]]:
    m = meta(manifest)
    ref = ObjectRef(name=str(m.get("name", "")))
    return [
        (
            stream_id("migration", ref.name),
            MigrationApplied(job=ref, uid=str(m.get("uid", "")), manifest=manifest),
        )
    ]


def _job_deleted(key: str, uid: str) -> list[tuple[str, Event]]:
    return [(stream_id("migration", key), MigrationDeleted(job=ObjectRef(name=key), uid=uid))]


def _job_fold(event: Event) -> tuple[str, Obj | None] | None:
    if isinstance(event, MigrationApplied):
        return event.job.key, event.manifest
    if isinstance(event, MigrationDeleted):
        return event.job.key, None
    return None


RESERVATION_KIND = Kind(
    resource=RESERVATIONS,
    types=frozenset({"reservation.applied", "reservation.deleted"}),
    normalize=_normalize,
    fingerprint=spec_fingerprint,
    applied=_reservation_applied,
    deleted=_reservation_deleted,
    fold=_reservation_fold,
)
MIGRATION_KIND = Kind(
    resource=MIGRATION_JOBS,
    types=frozenset({"migration.applied", "migration.deleted"}),
    normalize=_normalize,
    fingerprint=spec_fingerprint,
    applied=_job_applied,
    deleted=_job_deleted,
    fold=_job_fold,
)
