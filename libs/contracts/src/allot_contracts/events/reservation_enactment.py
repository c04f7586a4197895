"""The enactment ledger's outcomes for Reservation status (Kubernetes mode): the status reservation-manager writes on
``reservations/{name}/status`` (phase, conditions, node, allocatable/allocated, owners), as the decisions on the
Reservation lead to it.

Recorded by reservation-manager's Kubernetes worker (producer ``reservation-manager.kube``) for the latest status
decision of the Reservation at or before the log position of the projection the write came from (earlier ones are
superseded by it), with that decision's event id as causation and in ``decision`` and an event id derived from it
(the pattern of :mod:`allot_contracts.events.enactment`). ``attempts`` counts the calls it took.
"""

from __future__ import annotations

from typing import Final

from allot_contracts.events._base import ReservationEnactment, ReservationEnactmentFailed

# The decisions that change what a Reservation's status shows (reservation-manager: accepted, succeeded, failed;
# device-allocator: placed, unschedulable). The worker that writes and the ledger that judges read this one set.
RESERVATION_STATUS_DECISIONS: Final = frozenset(
    {
        "reservation.accepted",
        "reservation.placed",
        "reservation.unschedulable",
        "reservation.succeeded",
        "reservation.failed",
    }
)


class ReservationStatusEnacted(
    ReservationEnactment, frozen=True, kw_only=True, tag="reservation.status_enacted.v1"
):
    """The status a Reservation's decision leads to (``phase``) was written on ``reservations/{name}/status``, or
    was there already (``message`` says so: nothing to write)."""

    phase: str = ""
    message: str = ""
    attempts: int = 1


class ReservationStatusEnactmentFailed(
    ReservationEnactmentFailed, frozen=True, kw_only=True, tag="reservation.status_enactment_failed.v1"
):
    """That status patch was refused for good (``NotFound``: no such Reservation in the cluster, e.g. one applied
    with ``allot apply``; ``Invalid``, ``Forbidden``)."""


class ReservationDeletionEnacted(
    ReservationEnactment, frozen=True, kw_only=True, tag="reservation.deletion_enacted.v1"
):
    """The Reservation a ``reservation.removed`` (``GarbageCollected``) dropped was deleted from the API server
    (``DELETE reservations/{name}`` with a uid precondition), or was gone already (``message`` says so: 404)."""

    uid: str = ""
    message: str = ""
    attempts: int = 1


class ReservationDeletionEnactmentFailed(
    ReservationEnactmentFailed, frozen=True, kw_only=True, tag="reservation.deletion_enactment_failed.v1"
):
    """That delete was refused for good (``Conflict``: the uid precondition failed, another object of that name;
    ``Invalid``, ``BadRequest``)."""


__all__ = [
    "ReservationDeletionEnacted",
    "ReservationDeletionEnactmentFailed",
    "ReservationStatusEnacted",
    "ReservationStatusEnactmentFailed",
]
