"""PodGroup status and explanations, computed from the engine state (what ``allot get gangs`` and
``allot explain`` show).

Responsibility: the PodGroup phase of a gang (``phase``, a pure function of counts, table-tested), the status
dictionary (``gang_status``) and the one-paragraph explanation (``explain_gang``).

Phases, checked in this order (the first that holds wins):

    no members present, or no settings yet ........................ Pending
    succeeded >= min ............................................... Finished
    failed > 0 and failed + running + succeeded >= min ............. Failed
    scheduled >= min and running + succeeded >= min ................ Running
    scheduled >= min ............................................... Scheduled
    an attempt to place the group has started ...................... Scheduling   (scheduleStartTime is set)
    present >= min ................................................. PreScheduling
    otherwise ...................................................... Pending

``scheduled`` counts bound members (whatever their pod phase); ``running``, ``succeeded`` and ``failed`` count bound
members in that pod phase. Phases are derived from the state on every read, so a phase can never be left stale.
All values are JSON builtins; times are given both as RFC 3339 text and as integer microseconds.
"""

from __future__ import annotations

from typing import TypedDict

from allot_contracts.quantity import format_quantity

from ._keys import format_duration, format_time
from .state import ADMITTED, ATTEMPTING, BACKOFF, BOUND, HELD, IN_FLIGHT, PASSED, PENDING, Gang, Group

__all__ = ["GangStatus", "GroupStatus", "MemberCounts", "explain_gang", "gang_status", "phase"]


def phase(
    *,
    present: int,
    min_member: int,
    scheduled: int,
    running: int,
    succeeded: int,
    failed: int,
    attempted: bool,
) -> str:
    """The PodGroup phase for these counts (see the module docstring)."""
    if present == 0 or min_member <= 0:
        return "Pending"
    if succeeded >= min_member:
        return "Finished"
    if failed > 0 and failed + running + succeeded >= min_member:
        return "Failed"
    if scheduled >= min_member and running + succeeded >= min_member:
        return "Running"
    if scheduled >= min_member:
        return "Scheduled"
    if attempted:
        return "Scheduling"
    if present >= min_member:
        return "PreScheduling"
    return "Pending"


class MemberCounts(TypedDict):
    """A gang's members by state."""

    present: int
    pending: int
    attempting: int
    held: int
    admitted: int
    passed: int
    bound: int


class GroupStatus(TypedDict):
    """The gang group a gang is scheduled with, and its attempts."""

    id: str
    gangs: list[str]
    state: str
    attempt: int
    attempts: int
    failures: int
    timeouts: int
    retryAt: str | None
    retryAtUs: int | None
    lastAttemptAt: str | None
    lastAttemptAtUs: int | None
    lastOutcome: str


class GangStatus(TypedDict):
    """A gang's PodGroup-style status (times as RFC 3339 text and as µs)."""

    gang: str
    phase: str
    source: str
    declaredBy: str
    minMember: int
    totalNumber: int
    mode: str
    matchPolicy: str
    waitingTimeUs: int
    minResources: dict[str, str]
    members: MemberCounts
    scheduled: int
    running: int
    succeeded: int
    failed: int
    onceSatisfied: bool
    scheduleStartTime: str | None
    scheduleStartTimeUs: int | None
    waitingSince: str | None
    waitingSinceUs: int | None
    deadline: str | None
    deadlineUs: int | None
    timeouts: int
    group: GroupStatus | None


def _counts(gang: Gang) -> MemberCounts:
    return {
        "present": len(gang.members),
        "pending": gang.count(PENDING),
        "attempting": gang.count(ATTEMPTING),
        "held": gang.count(HELD),
        "admitted": gang.count(ADMITTED),
        "passed": gang.count(PASSED),
        "bound": gang.count(BOUND),
    }


def gang_status(gang: Gang, group: Group | None, deadline: int | None) -> GangStatus:
    s = gang.settings
    counts = _counts(gang)
    running, succeeded, failed = (gang.phase_count(p) for p in ("Running", "Succeeded", "Failed"))
    minimum = s.min_available if s is not None else 0
    out: GangStatus = {
        "gang": gang.id,
        "phase": phase(
            present=counts["present"],
            min_member=minimum,
            scheduled=counts["bound"],
            running=running,
            succeeded=succeeded,
            failed=failed,
            attempted=gang.schedule_start_at is not None,
        ),
        "source": gang.source or "missing-pod-group",
        "declaredBy": gang.declared_by,
        "minMember": minimum,
        "totalNumber": s.total_number if s is not None else 0,
        "mode": s.mode if s is not None else "",
        "matchPolicy": s.match_policy if s is not None else "",
        "waitingTimeUs": s.wait_us if s is not None else 0,
        "minResources": {r: format_quantity(r, v) for r, v in sorted(s.min_resources.items())} if s else {},
        "members": counts,
        "scheduled": counts["bound"],
        "running": running,
        "succeeded": succeeded,
        "failed": failed,
        "onceSatisfied": gang.once_satisfied,
        "scheduleStartTime": format_time(gang.schedule_start_at),
        "scheduleStartTimeUs": gang.schedule_start_at,
        "waitingSince": format_time(gang.wait_started_at),
        "waitingSinceUs": gang.wait_started_at,
        "deadline": format_time(deadline),
        "deadlineUs": deadline,
        "timeouts": gang.timeouts,
        "group": None,
    }
    if group is not None:
        out["group"] = {
            "id": group.id,
            "gangs": list(group.gangs),
            "state": group.state,
            "attempt": group.attempt,
            "attempts": group.attempts,
            "failures": group.failures,
            "timeouts": group.timeouts,
            "retryAt": format_time(group.retry_at),
            "retryAtUs": group.retry_at,
            "lastAttemptAt": format_time(group.last_attempt_at),
            "lastAttemptAtUs": group.last_attempt_at,
            "lastOutcome": group.last_outcome,
        }
    return out


def _presence(gang: Gang) -> str:
    s = gang.settings
    if s is None:
        return (
            f"{len(gang.members)} members present, waiting for PodGroup {gang.id} (no pod sets min-available)"
        )
    total = f", total-number {s.total_number}" if s.total_number != s.min_available else ""
    n = len(gang.members)
    shown = f"{n}/{s.min_available}" if n < s.min_available else f"{n}"
    noun = "member" if shown == "1" else "members"
    return f"{shown} {noun} present (min-available {s.min_available}{total})"


def explain_gang(
    gang: Gang, group: Group | None, deadline: int | None, others: list[Gang | None], group_gangs: list[str]
) -> str:
    """A few sentences: presence, settings, waiting time and deadline, the rest of the group, the last attempt."""
    status = gang_status(gang, group, deadline)
    lines = [f"gang {gang.id} [{status['phase']}]: {_presence(gang)}"]
    s = gang.settings
    if s is not None:
        lines.append(
            f"  {s.mode}, {s.match_policy}, waiting-time {format_duration(s.wait_us)}; "
            f"declared by {gang.declared_by}"
        )
    c = status["members"]
    lines.append(
        f"  members: {c['pending']} waiting, {c['attempting']} being placed, {c['held']} holding a "
        f"placement, {c['admitted']} admitted, {c['passed']} passed on alone, {c['bound']} bound"
    )
    if gang.wait_started_at is not None:
        until = f"; times out at {format_time(deadline)}" if deadline is not None else ""
        lines.append(f"  waiting since {format_time(gang.wait_started_at)}{until}")
    if group is not None and len(group.gangs) > 1:
        parts = []
        for gid, other in zip([g for g in group_gangs if g != gang.id], others):
            parts.append(f"{gid} not seen yet" if other is None else f"{gid} {_presence(other)}")
        lines.append(f"  gang group {group.id}: " + "; ".join(parts))
    if group is not None:
        if group.state == IN_FLIGHT:
            lines.append(f"  attempt #{group.attempt} in progress ({len(group.attempt_members)} members)")
        elif group.state == BACKOFF:
            lines.append(
                f"  last attempt #{group.attempt} failed: {group.last_outcome}; "
                f"retry at {format_time(group.retry_at)}"
            )
        elif group.last_outcome:
            lines.append(f"  last attempt #{group.attempt}: {group.last_outcome}")
    if gang.timeouts:
        lines.append(f"  timed out {gang.timeouts} time(s)")
    return "\n".join(lines)
