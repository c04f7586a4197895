"""Gang-group mechanics shared by the engine's inputs: settle, attempts, outcomes, timeouts, holds.

Responsibility: every transition of a gang group (see ``state`` for member states):

- ``settle(now)``: for every dirty group, in group-id order: pass through pending members of satisfied
  once-satisfied gangs, restart or stop each gang's wait timer, and — when the group is idle and every gang in it
  is ``ready`` — start a new attempt (``GroupReady``).
- ``placed`` / ``unschedulable``: the outcome of an attempt (Strict vs NonStrict differ here).
- ``time_out``: a gang's waiting time elapsed before its group was admitted.
- ``abandon``: an in-flight attempt is given up (timeout, PodGroup deleted, gang gone); its members' holds are
  released now and a late ``group_placed`` for it is answered with another ``ReleaseHolds``.

Strict versus NonStrict for a whole-group placement (a group is NonStrict only if every gang in it is):
- failed attempt: both release the attempt's holds and back off; Strict also releases members held from earlier
  attempts, NonStrict keeps them.
- placement succeeded but the group fell short (a member vanished while it was being placed): Strict releases
  every placed member and starts over; NonStrict keeps the placed members ``held`` and waits for replacements
  until the timeout — the analogue of upstream's "other members keep waiting at Permit".
- timeout: both release every hold of the group (upstream NonStrict pods time out individually, but they share
  the gang's waiting time), report ``GroupTimedOut``, and retry after backoff when the group could be attempted;
  the wait restarts with the group's next attempt or a new member (each timeout answers one wait, so a long
  clock advance fires a timeout per attempt, not one per waiting time).

Determinism: groups, gangs and members are visited in sorted-id order; attempt numbers come from one
engine-wide counter, so an attempt id is never reused even when a gang is deleted and declared again.
"""

from __future__ import annotations

import bisect

from ._keys import NON_STRICT, ONCE_SATISFIED, format_duration, group_id_of
from .actions import Action, GroupAdmitted, GroupReady, GroupRetryAt, GroupTimedOut, PassThrough, ReleaseHolds
from .config import GangConfig
from .predicate import ready, satisfied_after_placement
from .state import (
    ADMITTED,
    ATTEMPTING,
    BACKOFF,
    HELD,
    IDLE,
    IN_FLIGHT,
    PASSED,
    PENDING,
    WAITING_STATES,
    AbandonedAttempt,
    EngineState,
    Gang,
    Group,
)


class Core:
    """State plus configuration, and the group transitions the engine's inputs share."""

    def __init__(self, cfg: GangConfig, state: EngineState) -> None:
        self.cfg = cfg
        self.st = state

    # -- lookups ---------------------------------------------------------------------------------------------

    def group_of(self, gang: Gang) -> Group | None:
        if gang.settings is None:
            return None
        return self.st.groups.get(group_id_of(gang.settings.groups))

    def gangs_of(self, group: Group) -> list[Gang]:
        """The initialized gangs of ``group`` that exist, in gang-id order."""
        out = []
        for gid in group.gangs:
            gang = self.st.gangs.get(gid)
            if (
                gang is not None
                and gang.settings is not None
                and group_id_of(gang.settings.groups) == group.id
            ):
                out.append(gang)
        return out

    def complete(self, group: Group) -> bool:
        return len(self.gangs_of(group)) == len(group.gangs)

    def strict(self, group: Group) -> bool:
        gangs = self.gangs_of(group)
        return not gangs or any(g.settings is not None and g.settings.mode != NON_STRICT for g in gangs)

    def members_in(self, group: Group, *states: str) -> list[str]:
        return sorted(key for gang in self.gangs_of(group) for key in gang.keys(*states))

    def set_state(self, keys: list[str] | tuple[str, ...], state: str, attempt: int | None = None) -> None:
        """Move members to ``state``; ``attempt`` None keeps each member's attempt (pending clears it)."""
        for key in keys:
            gid = self.st.member_gang.get(key)
            if gid is not None:
                m = self.st.gangs[gid].members[key]
                m.state = state
                m.attempt = 0 if state == PENDING else (m.attempt if attempt is None else attempt)

    def release(self, group_id: str, keys: list[str], reason: str, out: list[Action]) -> None:
        """``ReleaseHolds`` for members holding placements (held/admitted): one action per attempt that placed
        them, in attempt order, so the caller releases exactly the holds of that attempt."""
        by_attempt: dict[int, list[str]] = {}
        for key in keys:
            gid = self.st.member_gang.get(key)
            if gid is not None:
                by_attempt.setdefault(self.st.gangs[gid].members[key].attempt, []).append(key)
        for attempt in sorted(by_attempt):
            out.append(
                ReleaseHolds(
                    group=group_id, attempt=attempt, members=tuple(sorted(by_attempt[attempt])), reason=reason
                )
            )

    def mark(self, group_id: str) -> None:
        i = bisect.bisect_left(self.st.dirty, group_id)
        if i == len(self.st.dirty) or self.st.dirty[i] != group_id:
            self.st.dirty.insert(i, group_id)

    def attach(self, gang: Gang) -> None:
        assert gang.settings is not None
        gid = group_id_of(gang.settings.groups)
        if gid not in self.st.groups:
            self.st.groups[gid] = Group(id=gid, gangs=tuple(sorted(gang.settings.groups)))
        self.mark(gid)

    def prune(self, group_id: str, out: list[Action], reason: str) -> None:
        """Drop ``group_id`` when no initialized gang belongs to it any more."""
        group = self.st.groups.get(group_id)
        if group is not None and not self.gangs_of(group):
            self.abandon(group, out, reason)
            del self.st.groups[group_id]

    # -- settle ----------------------------------------------------------------------------------------------

    def settle(self, now: int) -> list[Action]:
        out: list[Action] = []
        while self.st.dirty:
            gid = self.st.dirty.pop(0)
            group = self.st.groups.get(gid)
            if group is not None:
                self._settle_group(group, now, out)
        return out

    def _settle_group(self, group: Group, now: int, out: list[Action]) -> None:
        gangs = self.gangs_of(group)
        for gang in gangs:
            assert gang.settings is not None
            if gang.settings.match_policy == ONCE_SATISFIED and gang.once_satisfied:
                for key in gang.keys(PENDING):
                    gang.members[key].state = PASSED
                    out.append(PassThrough(pod=key, gang=gang.id, reason="gang-satisfied"))
                held = gang.keys(HELD)
                if held:
                    attempt = max(gang.members[key].attempt for key in held)
                    self.set_state(held, ADMITTED)
                    out.append(GroupAdmitted(group=group.id, attempt=attempt, members=tuple(held)))
        for gang in gangs:
            self.refresh_wait(gang, now)
        if group.state != IDLE or len(gangs) != len(group.gangs) or not all(ready(g) for g in gangs):
            return
        members = [key for gang in gangs for key in gang.keys(PENDING)]
        if not members:
            return
        self.st.last_attempt += 1
        attempt = self.st.last_attempt
        self.set_state(members, ATTEMPTING, attempt)
        group.state, group.attempt, group.attempt_members = IN_FLIGHT, attempt, tuple(members)
        group.attempts += 1
        group.last_attempt_at = now
        for gang in gangs:
            if gang.schedule_start_at is None:
                gang.schedule_start_at = now
            gang.wait_stopped = False  # a new attempt: a timed-out gang waits again from now
            self.refresh_wait(gang, now)
        out.append(GroupReady(group=group.id, gangs=group.gangs, members=tuple(members), attempt=attempt))

    @staticmethod
    def refresh_wait(gang: Gang, now: int) -> None:
        if not gang.count(*WAITING_STATES):
            gang.wait_started_at, gang.wait_stopped = None, False
        elif gang.wait_started_at is None and not gang.wait_stopped:
            gang.wait_started_at = now

    # -- outcomes --------------------------------------------------------------------------------------------

    def abandon(self, group: Group, out: list[Action], reason: str) -> None:
        """Give up the in-flight attempt of ``group``: release its holds now and remember it."""
        if group.state != IN_FLIGHT:
            return
        self.st.abandoned[str(group.attempt)] = AbandonedAttempt(
            group_id=group.id, members=group.attempt_members
        )
        self.set_state([k for k in group.attempt_members if self._attempting(k, group.attempt)], PENDING)
        out.append(
            ReleaseHolds(group=group.id, attempt=group.attempt, members=group.attempt_members, reason=reason)
        )
        group.state, group.attempt_members = IDLE, ()
        self.mark(group.id)

    def _attempting(self, key: str, attempt: int) -> bool:
        gid = self.st.member_gang.get(key)
        if gid is None:
            return False
        m = self.st.gangs[gid].members[key]
        return m.state == ATTEMPTING and m.attempt == attempt

    def current(self, group_id: str, attempt: int, out: list[Action]) -> Group | None:
        """The group if ``attempt`` is its in-flight attempt; answers a late outcome of an abandoned attempt."""
        abandoned = self.st.abandoned.pop(str(attempt), None)
        if abandoned is not None:
            out.append(
                ReleaseHolds(
                    group=abandoned.group_id,
                    attempt=attempt,
                    members=abandoned.members,
                    reason="stale-attempt",
                )
            )
            return None
        group = self.st.groups.get(group_id)
        if group is None or group.state != IN_FLIGHT or group.attempt != attempt:
            return None  # a duplicate or unknown outcome: already handled, nothing to do
        return group

    def placed(self, group: Group, now: int, out: list[Action]) -> None:
        attempt = group.attempt
        gone = [k for k in group.attempt_members if not self._attempting(k, attempt)]
        if gone:
            out.append(
                ReleaseHolds(
                    group=group.id,
                    attempt=attempt,
                    members=tuple(gone),
                    reason="member deleted during placement",
                )
            )
        gangs = self.gangs_of(group)
        ok = len(gangs) == len(group.gangs) and all(satisfied_after_placement(g) for g in gangs)
        placed = self.members_in(group, ATTEMPTING)
        held = self.members_in(group, HELD)
        group.state, group.attempt_members = IDLE, ()
        if ok:
            self.set_state(placed, ADMITTED, attempt)
            self.set_state(held, ADMITTED)  # held members keep the attempt that placed them
            group.failures, group.last_outcome = 0, "admitted"
            out.append(GroupAdmitted(group=group.id, attempt=attempt, members=tuple(sorted(placed + held))))
        elif self.strict(group):
            short = "group short of min-available after placement"
            if placed:
                out.append(ReleaseHolds(group=group.id, attempt=attempt, members=tuple(placed), reason=short))
            self.release(group.id, held, short, out)
            self.set_state(placed + held, PENDING)
            group.last_outcome = "placed but short of min-available (a member left); released and retrying"
        else:
            self.set_state(placed, HELD, attempt)
            group.last_outcome = (
                "placed but short of min-available (a member left); holding placements (NonStrict)"
            )
        self.mark(group.id)

    def unschedulable(self, group: Group, reason: str, now: int, out: list[Action]) -> None:
        attempt = group.attempt
        members = group.attempt_members
        self.set_state([k for k in members if self._attempting(k, attempt)], PENDING)
        out.append(ReleaseHolds(group=group.id, attempt=attempt, members=members, reason=reason))
        if self.strict(group):
            held = self.members_in(group, HELD)
            self.release(group.id, held, reason, out)
            self.set_state(held, PENDING)
        group.attempt_members = ()
        group.last_outcome = reason
        group.last_attempt_at = now
        self.back_off(group, now, attempt, reason, out)

    def back_off(self, group: Group, now: int, attempt: int, reason: str, out: list[Action]) -> None:
        group.failures += 1
        group.state = BACKOFF
        group.retry_at = now + self.cfg.backoff_us(group.failures)
        out.append(GroupRetryAt(group=group.id, at=group.retry_at, attempt=attempt, reason=reason))
        self.mark(group.id)

    # -- time ------------------------------------------------------------------------------------------------

    def deadline(self, gang: Gang) -> int | None:
        if gang.wait_started_at is None or gang.settings is None:
            return None
        return gang.wait_started_at + gang.settings.wait_us

    def time_out(self, group: Group, culprit: Gang, now: int, out: list[Action]) -> None:
        assert culprit.settings is not None
        self.abandon(group, out, "timeout")
        self.release(group.id, self.members_in(group, HELD), "timeout", out)
        released = self.members_in(group, *WAITING_STATES)
        self.set_state(released, PENDING)
        out.append(GroupTimedOut(group=group.id, gang=culprit.id, released_members=tuple(released)))
        group.timeouts += 1
        culprit.timeouts += 1
        group.attempt_members = ()
        group.last_outcome = (
            f"timed out: gang {culprit.id} waited {format_duration(culprit.settings.wait_us)}"
        )
        gangs = self.gangs_of(group)
        for gang in gangs:
            # One timeout per wait: the next wait starts with the group's next attempt or a new member. Restarted
            # at once, a gang that could not be attempted (short of members, or backing off) timed out again
            # every waiting time: once per nanosecond of a long AdvanceClock for a waiting time of 1ns, each
            # timeout pushing the group's retry further away.
            gang.wait_started_at, gang.wait_stopped = None, bool(gang.count(*WAITING_STATES))
        group.state, group.retry_at = IDLE, None
        if released and len(gangs) == len(group.gangs) and all(ready(g) for g in gangs):
            self.back_off(group, now, group.attempt, "timeout", out)
        self.mark(group.id)

    def tick(self, now: int) -> list[Action]:
        out: list[Action] = []
        for gid in sorted(self.st.groups):
            group = self.st.groups[gid]
            due = sorted(
                (d, g.id) for g in self.gangs_of(group) if (d := self.deadline(g)) is not None and d <= now
            )
            if due:
                self.time_out(group, self.st.gangs[due[0][1]], now, out)
            elif group.state == BACKOFF and group.retry_at is not None and group.retry_at <= now:
                group.state, group.retry_at = IDLE, None
                self.mark(gid)
        return out

    def next_deadline(self) -> int | None:
        times = [d for g in self.st.gangs.values() if (d := self.deadline(g)) is not None]
        times += [
            g.retry_at for g in self.st.groups.values() if g.state == BACKOFF and g.retry_at is not None
        ]
        return min(times) if times else None
