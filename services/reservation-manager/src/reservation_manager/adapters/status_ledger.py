"""The enactment ledger's outcomes of Reservation status writes (docs/kubernetes.md, "The enactment ledger").

The status reservation-manager writes on a Reservation (``adapters/kube.py``) carries out the decisions on it that
change what it shows (:data:`RESERVATION_STATUS_DECISIONS`). This tails them from the log and, once a write of the
projection at log position ``upto`` was answered, records the outcome of the latest one at or before ``upto`` (older
ones are superseded by it), as producer ``reservation-manager.kube`` with the decision as causation and an id derived
from it: ``reservation.status_enacted`` (also when the status already showed it: nothing to write) or
``reservation.status_enactment_failed`` (a final refusal: 400, 404, 409, 422, with the API server's reason).

A PodMigrationJob's own reservations are never written (they live in the log only), so their decisions wait for
nothing; a Reservation deleted (``reservation.deleted``) or garbage-collected (``reservation.removed``) first
withdraws its decision.

Its garbage collection too: a finished Reservation dropped by ``reservation.removed`` (``GarbageCollected``; not a
job's own) and a PodMigrationJob scavenged by ``migration.removed`` (``GarbageCollected``) are deleted from the API
server, and the answer is recorded as the removal's outcome: ``reservation.deletion_enacted`` /
``migration.deletion_enacted`` (also on 404: already gone) or ``*.deletion_enactment_failed`` (a final refusal: 400,
409 such as a failed uid precondition, 422).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from allot_contracts.envelope import RecordedEvent, stream_id
from allot_contracts.events import (
    Event,
    MigrationDeletionEnacted,
    MigrationDeletionEnactmentFailed,
    ObjectRef,
    ReservationDeletionEnacted,
    ReservationDeletionEnactmentFailed,
    ReservationStatusEnacted,
    ReservationStatusEnactmentFailed,
)
from allot_contracts.events.reservation_enactment import RESERVATION_STATUS_DECISIONS
from allot_runtime.enactment import record_outcome
from allot_runtime.kube.client import ApiError

PRODUCER: Final = "reservation-manager.kube"
GONE: Final = frozenset({"reservation.deleted", "reservation.removed"})
REMOVALS: Final = frozenset({"reservation.removed", "migration.removed"})
# stream kind -> (outcome when deleted, outcome when refused, the field naming the object)
DELETIONS: Final[dict[str, tuple[type[Event], type[Event], str]]] = {
    "reservation": (ReservationDeletionEnacted, ReservationDeletionEnactmentFailed, "reservation"),
    "migration": (MigrationDeletionEnacted, MigrationDeletionEnactmentFailed, "job"),
}
DELETION_OUTCOMES: Final = frozenset(
    cls.__struct_config__.tag.rpartition(".")[0]  # type: ignore[union-attr]
    for outcomes in DELETIONS.values()
    for cls in outcomes[:2]
)


@dataclass
class StatusLedger:
    store: Any
    position: int = 0  # how far the decisions are folded
    latest: dict[str, RecordedEvent] = field(default_factory=dict)  # reservation -> decision not answered yet
    jobs: set[str] = field(default_factory=set)  # reservations of PodMigrationJobs (never written)
    attempts: dict[str, int] = field(default_factory=dict)  # reservation -> calls of its current write
    # stream ("reservation:r1", "migration:j1") -> the removal whose DELETE is not answered yet
    removals: dict[str, RecordedEvent] = field(default_factory=dict)
    delete_attempts: dict[str, int] = field(default_factory=dict)  # stream -> calls of its delete

    async def refresh(self) -> None:
        async for record in self.store.iterate(
            after=self.position, types=RESERVATION_STATUS_DECISIONS | GONE | REMOVALS | DELETION_OUTCOMES
        ):
            self.position = record.position
            name = record.stream_id.partition(":")[2]
            if record.type in REMOVALS and self._collected(record, name):
                self.removals[record.stream_id] = record
            if record.type in DELETION_OUTCOMES:  # answered (before a restart)
                held = self.removals.get(record.stream_id)
                if held is not None and held.event_id == record.causation_id:
                    del self.removals[record.stream_id]
            if record.type == "migration.removed" or record.type in DELETION_OUTCOMES:
                continue
            if record.type in GONE:
                self.latest.pop(name, None)  # withdrawn
                self.jobs.discard(name)
                continue
            if record.type == "reservation.accepted":
                if record.payload_dict().get("job"):
                    self.jobs.add(name)
                else:
                    self.jobs.discard(name)
            if name not in self.jobs:
                self.latest[name] = record

    def due(self, name: str, upto: int) -> RecordedEvent | None:
        """The decision a write of the projection at ``upto`` carries out (None: none waits)."""
        decision = self.latest.get(name)
        return decision if decision is not None and decision.position <= upto else None

    def retried(self, name: str) -> None:
        self.attempts[name] = self.attempts.get(name, 0) + 1

    async def answered(
        self, name: str, upto: int, phase: str, error: ApiError | None, *, unchanged: bool = False
    ) -> None:
        decision = self.due(name, upto)
        if decision is None:
            return
        attempts = self.attempts.pop(name, 0) + (0 if unchanged else 1)
        ref = ObjectRef(name=name)
        event: Event
        if error is None:
            event = ReservationStatusEnacted(
                reservation=ref,
                decision=decision.event_id,
                phase=phase,
                message="the status already showed it: nothing to write" if unchanged else "",
                attempts=max(attempts, 1),
            )
        else:
            event = ReservationStatusEnactmentFailed(
                reservation=ref,
                decision=decision.event_id,
                reason=error.reason or str(error.status),
                message=error.message,
                attempts=max(attempts, 1),
            )
        await record_outcome(
            self.store,
            producer=PRODUCER,
            decision=decision,
            stream=stream_id("reservation", name),
            event=event,
        )
        if self.latest.get(name) is decision:
            del self.latest[name]

    def _collected(self, record: RecordedEvent, name: str) -> bool:
        """Whether a removal garbage-collects an object in the cluster (a job's own reservation is not in it)."""
        if record.type == "reservation.removed" and name in self.jobs:
            return False
        return record.payload_dict().get("reason") == "GarbageCollected"

    def collecting(self, upto: int) -> dict[str, RecordedEvent]:
        """stream -> the garbage collection a projection at ``upto`` shows and no DELETE answered yet."""
        return {stream: r for stream, r in self.removals.items() if r.position <= upto}

    def delete_retried(self, stream: str) -> None:
        self.delete_attempts[stream] = self.delete_attempts.get(stream, 0) + 1

    async def deleted(self, stream: str, uid: str, error: ApiError | None, message: str = "") -> None:
        """Record the outcome of the garbage collection of the object of ``stream`` (``error``: refused for good)."""
        decision = self.removals.pop(stream, None)
        if decision is None:
            return
        attempts = self.delete_attempts.pop(stream, 0) + 1
        kind, _, name = stream.partition(":")
        enacted, failed, subject = DELETIONS[kind]
        fields: dict[str, ObjectRef | str | int] = {
            subject: ObjectRef(name=name),
            "decision": decision.event_id,
            "attempts": attempts,
        }
        if error is None:
            event = enacted(**fields, uid=uid, message=message)
        else:
            event = failed(**fields, reason=error.reason or str(error.status), message=error.message)
        await record_outcome(self.store, producer=PRODUCER, decision=decision, stream=stream, event=event)
