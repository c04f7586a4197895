"""GangEngine: the pure gang-scheduling state machine the gang-coordinator, the simulator and replay drive.

Responsibility: accept gang declarations (PodGroups, pod annotations), pods as they arrive, the outcomes of whole
group placements, pod lifecycle facts and timer ticks, and answer each with a list of ``Action`` values.

Invariants:
- Pure and deterministic: no IO, no clock, no randomness. Time is data: every input that needs it takes ``now``,
  an ``int`` of microseconds since the Unix epoch (UTC). Timeouts and retries happen only inside ``on_timer(now)``;
  ``next_deadline()`` says when the caller's timer must next deliver a tick. Feeding the same inputs to a fresh
  engine (same configuration) yields the same actions and the same ``digest()``.
- Every tie is broken by a total order on names: groups by group id, gangs by gang id, members by
  ``"namespace/name"``. Attempt numbers come from one engine-wide counter.
- No member is ever admitted (``GroupAdmitted``) unless every gang of its group satisfies its match policy.
- Every hold the engine may have caused (an attempt, a held or admitted member) is answered by exactly the
  ``ReleaseHolds`` that undoes it when the engine gives it up.
- Malformed or conflicting gang input produces ``Rejected`` (never a default, never an exception).

Concurrency model: single-threaded; the shell calls one method at a time per engine, in log order. The state is
private and changed only by these methods; ``snapshot()`` exposes it as JSON builtins and ``from_snapshot``
rebuilds an identical engine.

Rejected alternatives: a frozen state with ``decide``/``evolve`` per input was considered; the inputs here are
facts (pod arrived, group placed, tick), so the engine folds them directly and the shell records the *inputs* as
events — replay re-derives every action by re-feeding them, which is what ``allot replay --verify`` compares.
"""

from __future__ import annotations

import hashlib
import json

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.pod import Pod

from . import _keys as k
from ._core import Core
from ._declare import apply_pod_group, declare_pod, delete_pod_group
from .actions import Action, MemberWaiting, PassThrough, Rejected, ReleaseHolds
from .config import GangConfig
from .predicate import ready
from .queue import QueueItem
from .spec import PodGroupInfo
from .state import (
    ADMITTED,
    BACKOFF,
    BOUND,
    HELD,
    IDLE,
    IN_FLIGHT,
    PENDING,
    WAITING_STATES,
    EngineState,
    Gang,
    Member,
)
from .status import GangStatus, explain_gang, gang_status
from .validate import pod_info

__all__ = ["GangEngine"]

SNAPSHOT_FORMAT = 1


class GangEngine:
    """See the module docstring. Public methods are the engine's inputs (returning actions) and queries."""

    def __init__(self, cfg: GangConfig | None = None) -> None:
        self._core = Core(cfg or GangConfig(), EngineState())

    @property
    def config(self) -> GangConfig:
        return self._core.cfg

    @property
    def _st(self) -> EngineState:
        return self._core.st

    # -- declarations ----------------------------------------------------------------------------------------

    @staticmethod
    def gang_of(pod: Pod) -> str | None:
        """The gang id ``"namespace/name"`` of a gang pod, else None (a plain pod)."""
        return pod.gang.gang_id if pod.gang is not None else None

    def apply_pod_group(self, group: PodGroupInfo) -> list[FieldIssue]:
        """Create or update a PodGroup (read at the door). Call ``settle(now)`` afterwards: members that waited for
        it may be ready. Returns the conflicts with settings already in force (nothing applied then)."""
        return apply_pod_group(self._core, group)

    def delete_pod_group(self, namespace: str, name: str) -> list[Action]:
        """Delete a PodGroup. Its members (if any) wait again until it is re-created; holds of an in-flight attempt
        or of held members are released. Call ``settle(now)`` afterwards."""
        return delete_pod_group(self._core, k.object_key(namespace, name))

    def settle(self, now: int) -> list[Action]:
        """Re-evaluate groups whose inputs changed without a time (``apply_pod_group``, ``delete_pod_group``)."""
        return self._core.settle(now)

    # -- pods ------------------------------------------------------------------------------------------------

    def submit(self, pod: Pod, now: int) -> list[Action]:
        """A pod arrived. Plain pods pass through; gang members wait, complete a group, or pass through (a pod
        whose gang settings conflict with those in force is rejected)."""
        info = pod_info(pod)
        if info.key in self._st.member_gang:
            return []  # already known: submitting twice changes nothing
        if info.gang_id is None:
            return [PassThrough(pod=info.key, gang=None, reason="not-a-gang")]
        errors = declare_pod(self._core, info)
        if errors:
            return [Rejected(pod=info.key, errors=tuple(errors))]
        gang = self._st.gangs[info.gang_id]
        self._st.seq += 1
        member = Member(
            key=info.key,
            gang=gang.id,
            seq=self._st.seq,
            arrived_at=now,
            priority=info.priority,
            sub_priority=info.sub_priority,
        )
        if info.node_name:
            member.state, member.phase = BOUND, info.phase
            gang.once_satisfied = True
        gang.members[info.key] = member
        gang.wait_stopped = False  # a new member: a timed-out gang waits again
        self._st.member_gang[info.key] = gang.id
        group = self._core.group_of(gang)
        if group is not None:
            self._core.mark(group.id)
        out = self._core.settle(now)
        if member.state == PENDING:
            out.append(self._waiting(gang, info.key))
        return out

    def _waiting(self, gang: Gang, key: str) -> MemberWaiting:
        group = self._core.group_of(gang)
        present, minimum = len(gang.members), gang.settings.min_available if gang.settings else 0
        gid = group.id if group is not None else gang.id
        if gang.settings is None or group is None:
            reason = "pod-group-missing"
        elif group.state == IN_FLIGHT:
            reason = "attempt-in-progress"
        elif group.state == BACKOFF:
            reason = "backoff"
        elif not ready(gang):
            reason = "gang-incomplete"
        else:
            reason = "group-incomplete"
        return MemberWaiting(
            gang=gang.id, group=gid, pod=key, present=present, min_available=minimum, reason=reason
        )

    def member_bound(self, namespace: str, name: str, now: int) -> list[Action]:
        """The binder bound the pod. Marks its gang satisfied once (once-satisfied gangs then pass members on)."""
        return self._lifecycle(namespace, name, now, "")

    def member_running(self, namespace: str, name: str, now: int) -> list[Action]:
        return self._lifecycle(namespace, name, now, "Running")

    def member_succeeded(self, namespace: str, name: str, now: int) -> list[Action]:
        return self._lifecycle(namespace, name, now, "Succeeded")

    def member_failed(self, namespace: str, name: str, now: int) -> list[Action]:
        """The pod failed after binding. Status only (Failed phase counts); the gang is not rejected."""
        return self._lifecycle(namespace, name, now, "Failed")

    def _lifecycle(self, namespace: str, name: str, now: int, phase: str) -> list[Action]:
        key = k.object_key(namespace, name)
        gid = self._st.member_gang.get(key)
        if gid is None:
            return []
        gang = self._st.gangs[gid]
        m = gang.members[key]
        m.state = BOUND
        if phase:
            m.phase = phase
        gang.once_satisfied = True
        group = self._core.group_of(gang)
        if group is not None:
            self._core.mark(group.id)
        return self._core.settle(now)

    def member_bind_failed(self, namespace: str, name: str, reason: str, now: int) -> list[Action]:
        """Binding an admitted member failed: its hold is released and it waits again like a new member (a
        satisfied once-satisfied gang then lets it go on alone)."""
        key = k.object_key(namespace, name)
        gid = self._st.member_gang.get(key)
        if gid is None or self._st.gangs[gid].members[key].state != ADMITTED:
            return []
        gang = self._st.gangs[gid]
        group = self._core.group_of(gang)
        out: list[Action] = []
        self._core.release(group.id if group else gid, [key], f"bind failed: {reason}", out)
        self._core.set_state([key], PENDING)
        if group is not None:
            self._core.mark(group.id)
        out.extend(self._core.settle(now))
        if gang.members[key].state == PENDING:
            out.append(self._waiting(gang, key))
        return out

    def member_deleted(self, namespace: str, name: str, now: int) -> list[Action]:
        """The pod is gone. Its holds are released; an annotation gang disappears with its last pod."""
        key = k.object_key(namespace, name)
        gid = self._st.member_gang.pop(key, None)
        if gid is None:
            return []
        gang = self._st.gangs[gid]
        m = gang.members.pop(key)
        group = self._core.group_of(gang)
        out: list[Action] = []
        if m.state in (HELD, ADMITTED):
            out.append(
                ReleaseHolds(
                    group=group.id if group else gid,
                    attempt=m.attempt,
                    members=(key,),
                    reason="member deleted",
                )
            )
        if not gang.members and gang.source != "PodGroup":
            del self._st.gangs[gid]
            if group is not None:
                self._core.prune(group.id, out, "gang deleted")
        if group is not None and group.id in self._st.groups:
            self._core.mark(group.id)
        out.extend(self._core.settle(now))
        return out

    # -- outcomes of group placement -------------------------------------------------------------------------

    def group_placed(self, group_id: str, attempt: int, now: int) -> list[Action]:
        """The device-allocator placed every member of ``attempt``. Answers ``GroupAdmitted`` (bind them), or
        ``ReleaseHolds`` when the attempt was abandoned or the group fell short meanwhile."""
        out: list[Action] = []
        group = self._core.current(group_id, attempt, out)
        if group is not None:
            self._core.placed(group, now, out)
            out.extend(self._core.settle(now))
        return out

    def group_unschedulable(self, group_id: str, attempt: int, reason: str, now: int) -> list[Action]:
        """Quota or placement failed for the whole group: holds are released and the group retries after backoff."""
        out: list[Action] = []
        group = self._core.current(group_id, attempt, out)
        if group is not None:
            self._core.unschedulable(group, reason, now, out)
            out.extend(self._core.settle(now))
        else:  # an abandoned attempt failed after all: its holds were released when it was abandoned
            out = [a for a in out if not isinstance(a, ReleaseHolds)]
        return out

    def wake(self, group_id: str, now: int) -> list[Action]:
        """Capacity that the group may fit in became free: end its backoff early and attempt it now
        (``GroupReady``). A group that is not backing off is left alone (its attempt or its wait goes on)."""
        group = self._st.groups.get(group_id)
        if group is None or group.state != BACKOFF:
            return []
        group.state, group.retry_at = IDLE, None
        self._core.mark(group_id)
        return self._core.settle(now)

    # -- time ------------------------------------------------------------------------------------------------

    def on_timer(self, now: int) -> list[Action]:
        """Deliver time: gang waiting times that elapsed (``GroupTimedOut``) and backoffs that ended (``GroupReady``)."""
        out = self._core.tick(now)
        out.extend(self._core.settle(now))
        return out

    def next_deadline(self) -> int | None:
        """The earliest time at which ``on_timer`` has something to do, or None."""
        return self._core.next_deadline()

    # -- queries ---------------------------------------------------------------------------------------------

    def gangs(self) -> list[str]:
        return sorted(self._st.gangs)

    def groups(self) -> list[str]:
        return sorted(self._st.groups)

    def group_of(self, gang_id: str) -> str | None:
        gang = self._st.gangs.get(gang_id)
        group = self._core.group_of(gang) if gang is not None else None
        return group.id if group is not None else None

    def statuses(self) -> list[GangStatus]:
        """The status of every known gang, in gang-id order (what ``allot get gangs`` lists)."""
        return [self.status(gang_id) for gang_id in self.gangs()]

    def status(self, gang_id: str) -> GangStatus:
        """PodGroup-style status of a gang (raises KeyError for an unknown gang)."""
        gang = self._st.gangs[gang_id]
        return gang_status(gang, self._core.group_of(gang), self._core.deadline(gang))

    def explain(self, gang_id: str) -> str:
        """A few lines on why the gang is where it is (what ``allot explain`` prints)."""
        gang = self._st.gangs.get(gang_id)
        if gang is None:
            return f"gang {gang_id} is not known (no PodGroup and no pod names it)"
        group = self._core.group_of(gang)
        others = [self._st.gangs.get(g) for g in (group.gangs if group else ()) if g != gang_id]
        return explain_gang(
            gang, group, self._core.deadline(gang), others, list(group.gangs) if group else []
        )

    def queue_item(self, group_id: str) -> QueueItem:
        """The group as one item of the device-allocator's queue (see ``allot_gang.queue``)."""
        group = self._st.groups[group_id]
        members = [g.members[key] for g in self._core.gangs_of(group) for key in g.keys(*WAITING_STATES)]
        first = min((m.arrived_at for m in members), default=group.last_attempt_at or 0)
        return QueueItem(
            key="group:" + group_id,
            priority=max((m.priority for m in members), default=0),
            sub_priority=max((m.sub_priority for m in members), default=0),
            last_attempt_at=group.last_attempt_at if group.last_attempt_at is not None else first,
            arrival=min((m.seq for m in members), default=0),
            size=len(members),
            is_gang=True,
            not_before=group.retry_at if group.state == BACKOFF and group.retry_at is not None else 0,
        )

    def snapshot(self) -> JsonObject:
        state = msgspec.json.decode(msgspec.json.encode(self._st))
        return {"format": SNAPSHOT_FORMAT, "config": self.config.to_dict(), "state": state}

    def digest(self) -> str:
        text = json.dumps(self.snapshot(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_snapshot(cls, snapshot: JsonObject) -> GangEngine:
        engine = cls(GangConfig.from_dict(snapshot["config"]))
        engine._core.st = msgspec.convert(snapshot["state"], EngineState)
        return engine
