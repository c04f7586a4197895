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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from allot_contracts.envelope import RecordedEvent, stream_id
from allot_contracts.events import (
    Event,
    ObjectRef,
    ReservationStatusEnacted,
    ReservationStatusEnactmentFailed,
)
from allot_contracts.events.reservation_enactment import RESERVATION_STATUS_DECISIONS
from allot_runtime.enactment import record_outcome
from allot_runtime.kube.client import ApiError

PRODUCER: Final = "reservation-manager.kube"
GONE: Final = frozenset({"reservation.deleted", "reservation.removed"})


@dataclass
class StatusLedger:
    store: Any
    position: int = 0  # how far the decisions are folded
    latest: dict[str, RecordedEvent] = field(default_factory=dict)  # reservation -> decision not answered yet
    jobs: set[str] = field(default_factory=set)  # reservations of PodMigrationJobs (never written)
    attempts: dict[str, int] = field(default_factory=dict)  # reservation -> calls of its current write

    async def refresh(self) -> None:
        async for record in self.store.iterate(
            after=self.position, types=RESERVATION_STATUS_DECISIONS | GONE
        ):
            self.position = record.position
            name = record.stream_id.partition(":")[2]
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
