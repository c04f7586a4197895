"""Gangs: gang-coordinator → quota-manager → reservation-manager → device-allocator → gang-coordinator → binder.
A gang group moves as one unit; every step is one event, so it is placed whole or not at all."""

from __future__ import annotations

from allot_contracts.decisions.placement import Decision, GroupDecision
from allot_contracts.decisions.quota import GroupAdmission
from allot_contracts.events._base import Event, FieldIssue, GroupAttempt, GroupMembers, ObjectRef, PodEvent
from allot_contracts.events.reservations import ReservationMatch

__all__ = [
    "GangGroupAdmitted",
    "GangGroupPlaced",
    "GangGroupReady",
    "GangGroupUnschedulable",
    "GangHoldsReleased",
    "GangMemberWaiting",
    "GangRetryRequested",
    "GangRetryScheduled",
    "GangTimedOut",
    "PodGroupRejected",
    "QuotaGroupAdmitted",
    "QuotaGroupWaiting",
    "ReservationGroupResolved",
]


class GangMemberWaiting(PodEvent, frozen=True, kw_only=True, tag="gang.member_waiting.v1"):
    """A gang member arrived but its gang group cannot be attempted yet (``reason``: gang-incomplete, …)."""

    gang: str
    group: str
    present: int
    min_available: int
    reason: str


class GangGroupReady(Event, frozen=True, kw_only=True, tag="gang.group_ready.v1"):
    """gang-coordinator: attempt ``attempt`` of a gang group; ``members`` are admitted and placed as one unit."""

    group: str
    gangs: list[str]
    members: list[str]
    attempt: int


class QuotaGroupAdmitted(GroupMembers, frozen=True, kw_only=True, tag="quota.group_admitted.v2"):
    """quota-manager charged every member of the attempt (``detail.members``: per-member admission records)."""

    detail: GroupAdmission | None = None


class QuotaGroupWaiting(GroupAttempt, frozen=True, kw_only=True, tag="quota.group_waiting.v2"):
    """Not every member fits its quota: nothing was charged; the gang-coordinator retries the group later
    (``detail.first``: the admission record of the first member that does not fit)."""

    message: str
    detail: GroupAdmission | None = None


class ReservationGroupResolved(GroupMembers, frozen=True, kw_only=True, tag="reservation.group_resolved.v1"):
    """reservation-manager's answer for a gang group: ``matches`` holds the members that may or must use a
    Reservation (member → match); the others use none."""

    reservation: str | None = None
    reason: str = ""
    matches: dict[str, ReservationMatch] = {}


class GangGroupPlaced(GroupMembers, frozen=True, kw_only=True, tag="gang.group_placed.v2"):
    """device-allocator placed every member of the attempt in one decision (``decisions``: member → decision)."""

    decisions: dict[str, Decision]


class GangGroupUnschedulable(GroupAttempt, frozen=True, kw_only=True, tag="gang.group_unschedulable.v2"):
    """No placement for the whole group: nothing was placed. ``message`` explains the first member that does not
    fit; ``decision`` is the engine's group decision (``None`` when no placement was attempted)."""

    message: str
    codes: list[str] = []
    failed_pod: str | None = None
    decision: GroupDecision | None = None
    members: list[str] = []


class GangRetryRequested(Event, frozen=True, kw_only=True, tag="gang.retry_requested.v1"):
    """device-allocator: capacity changed and this waiting gang group would now fit; attempt it without waiting for
    its backoff to end."""

    group: str
    reason: str


class GangGroupAdmitted(GroupMembers, frozen=True, kw_only=True, tag="gang.group_admitted.v1"):
    """gang-coordinator: every gang of the group is satisfied; bind these members now."""


class GangHoldsReleased(GroupMembers, frozen=True, kw_only=True, tag="gang.holds_released.v1"):
    """Compensation: undo the quota charges and placements made for ``attempt`` of ``group`` for ``members``."""

    reason: str


class GangTimedOut(Event, frozen=True, kw_only=True, tag="gang.timed_out.v1"):
    group: str
    gang: str
    released_members: list[str]


class GangRetryScheduled(Event, frozen=True, kw_only=True, tag="gang.retry_scheduled.v1"):
    group: str
    at: int
    attempt: int
    reason: str


class PodGroupRejected(Event, frozen=True, kw_only=True, tag="podgroup.rejected.v1"):
    """gang-coordinator refused a PodGroup object; the gang keeps its previous declaration (if any)."""

    group: ObjectRef
    errors: list[FieldIssue]
    message: str
