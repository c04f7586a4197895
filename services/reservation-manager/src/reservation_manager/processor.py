"""reservation-manager's decisions: which Reservation, if any, an admitted pod must use.

Consumes ``quota.admitted`` (and ``quota.group_admitted`` for gang groups); emits ``reservation.resolved`` with ``reservation: null`` when no Reservation applies
(Reservation objects are accepted by ``allot apply`` and recorded as ``object.ignored`` until reservation matching
ships), so the pod goes on to placement.
"""

from __future__ import annotations

from typing import Any, ClassVar

from allot_contracts.envelope import stream_id
from allot_contracts.events import (
    Event,
    QuotaAdmitted,
    QuotaGroupAdmitted,
    ReservationGroupResolved,
    ReservationResolved,
)
from allot_runtime.processor import Emit


class ReservationManager:
    name: ClassVar[str] = "reservation-manager"
    interests: ClassVar[frozenset[str]] = frozenset({"quota.admitted", "quota.group_admitted"})

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.resolved = 0

    def evolve(self, event: Event, *, at: int, own: bool) -> None:
        if isinstance(event, ReservationResolved | ReservationGroupResolved):
            self.resolved += 1

    def decide(self, event: Event, *, at: int) -> list[Emit]:
        match event:
            case QuotaAdmitted(pod=pod, attempt=attempt):
                return [Emit(stream_id=stream_id("pod", pod.key),
                             event=ReservationResolved(pod=pod, attempt=attempt, reservation=None,
                                                       reason="no reservation applies"))]
            case QuotaGroupAdmitted(group=group, attempt=attempt, members=members):
                return [Emit(stream_id=stream_id("gang", group),
                             event=ReservationGroupResolved(group=group, attempt=attempt, members=list(members),
                                                            reservation=None, reason="no reservation applies"))]
            case _:
                return []

    def snapshot(self) -> dict[str, Any]:
        return {"resolved": self.resolved}
