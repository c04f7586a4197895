"""kube-sync's Reservations and PodMigrationJobs (scheduling.koordinator.sh/v1alpha1, cluster-scoped).

Recorded like the other custom resources: ``reservation.applied`` / ``migration.applied`` when one is created or its
labels, annotations or spec change, ``reservation.deleted`` / ``migration.deleted`` when it goes. Status is not input
(reservation-manager writes it back; docs/reservation.md), so a job cannot be aborted through ``status.phase`` in
Kubernetes mode: delete it instead. reservation-manager validates what is recorded and rejects it with field paths.

The descheduler's own jobs come back on the watch once reservation-manager has created them (Kubernetes mode): they
are recognised by the log (a ``migration.applied`` of producer ``reservation-manager`` of that name, moving the same
pod) and recorded as nothing; what changes on them afterwards (a user's edit of labels, annotations or spec, their
deletion) is input like any other job's.
"""

from __future__ import annotations

from typing import Any

from allot_contracts.envelope import canonical, stream_id
from allot_contracts.events import (
    Event,
    MigrationApplied,
    MigrationDeleted,
    ObjectRef,
    ReservationApplied,
    ReservationDeleted,
)
from allot_contracts.jsonvalue import JsonObject, JsonValue
from allot_runtime.kube import (
    MIGRATION_JOBS,
    RESERVATIONS,
    Kind,
    Known,
    Mirror,
    Resource,
    event_fold,
    meta,
    part,
    spec_fingerprint,
    strip_server_fields,
)

__all__ = ["MIGRATION_KIND", "RESERVATION_KIND", "JobMirror"]

DECIDER = "reservation-manager"  # the descheduler's jobs are its decisions


def _normalize(obj: JsonObject) -> JsonObject:
    return {k: v for k, v in strip_server_fields(obj).items() if k != "status"}


def _cluster_kind(
    resource: Resource, stream_kind: str, applied_cls: type[Event], deleted_cls: type[Event], ref_field: str
) -> Kind:
    """A cluster-scoped custom resource recorded as ``<stream_kind>.applied`` / ``.deleted`` on its own stream,
    the object named by the event's ``ref_field``."""

    def applied(manifest: JsonObject) -> list[tuple[str, Event]]:
        m = meta(manifest)
        ref = ObjectRef(name=str(m.get("name", "")))
        event = applied_cls(**{ref_field: ref, "uid": str(m.get("uid", "")), "manifest": manifest})
        return [(stream_id(stream_kind, ref.name), event)]

    def deleted(key: str, uid: str) -> list[tuple[str, Event]]:
        return [(stream_id(stream_kind, key), deleted_cls(**{ref_field: ObjectRef(name=key), "uid": uid}))]

    return Kind(
        resource=resource,
        types=frozenset({f"{stream_kind}.applied", f"{stream_kind}.deleted"}),
        normalize=_normalize,
        fingerprint=spec_fingerprint,
        applied=applied,
        deleted=deleted,
        fold=event_fold(applied_cls, deleted_cls, ref_field),
    )


RESERVATION_KIND = _cluster_kind(
    RESERVATIONS, "reservation", ReservationApplied, ReservationDeleted, "reservation"
)
MIGRATION_KIND = _cluster_kind(MIGRATION_JOBS, "migration", MigrationApplied, MigrationDeleted, "job")


class JobMirror(Mirror):
    """PodMigrationJobs, without the ones Allot's descheduler created (already in the log as its decisions)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kind=MIGRATION_KIND, **kwargs)
        self.own: dict[str, JsonValue] = {}  # job -> the podRef of the descheduler's migration.applied
        self.own_position = 0

    async def refresh(self) -> None:
        await super().refresh()
        await self._refresh_own()

    async def _refresh_own(self) -> None:
        async for record in self.store.iterate(
            after=self.own_position, types={"migration.applied"}, producer=DECIDER
        ):
            self.own_position = record.position
            payload = record.payload_dict()
            name = str((payload.get("job") or {}).get("name") or "")
            self.own[name] = ((payload.get("manifest") or {}).get("spec") or {}).get("podRef")

    async def upsert(self, obj: JsonObject) -> None:
        key = self.key_of(obj)
        known = self.known.get(key)
        fresh = known is None or not known.alive
        if fresh and key not in self.own:
            await self._refresh_own()  # a job created since the last list: its decision is committed by now
        if fresh and key in self.own and part(obj, "spec").get("podRef") == self.own[key]:
            manifest = self.kind.normalize(obj)
            self.known[key] = Known(
                uid=str(meta(manifest).get("uid", "")),
                fingerprint=canonical(self.kind.fingerprint(manifest)),
            )
            return  # Allot's own job: recorded already, as the descheduler's decision
        await super().upsert(obj)
