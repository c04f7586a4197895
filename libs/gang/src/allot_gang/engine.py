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
from typing import Any

import msgspec

from . import _keys as k
from ._core import Core
from .actions import Action, MemberWaiting, PassThrough, Rejected, ReleaseHolds
from .config import GangConfig
from .errors import FieldError
from .predicate import ready
from .queue import QueueItem
from .spec import GROUPS, PodInfo, conflicts, settings_from
from .state import (
    ADMITTED,
    BACKOFF,
    BOUND,
    HELD,
    IN_FLIGHT,
    PENDING,
    WAITING_STATES,
    EngineState,
    Gang,
    Member,
)
from .status import explain_gang, gang_status
from .validate import parse_pod, parse_pod_group

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

    def validate_pod(self, manifest: object) -> list[FieldError]:
        """Syntax of the pod's gang input (no state consulted); empty when valid. ``submit`` also checks conflicts
        with settings already in force."""
        info = parse_pod(manifest)
        return info if isinstance(info, list) else []

    def gang_of(self, manifest: object) -> str | None:
        """The gang id ``"namespace/name"`` of a valid gang pod, else None (plain or malformed pod)."""
        info = parse_pod(manifest)
        return None if isinstance(info, list) else info.gang_id

    def apply_pod_group(self, manifest: object) -> list[FieldError]:
        """Create or update a PodGroup. Call ``settle(now)`` afterwards: members that waited for it may be ready."""
        info = parse_pod_group(manifest)
        if isinstance(info, list):
            return info
        gid = info.gang_id
        settings = settings_from(gid, info.explicit, self.config, info.min_resources)
        gang = self._st.gangs.get(gid)
        groups_path = next((e.path for e in info.explicit if e.field == GROUPS), k.ann_path(k.ANN_GROUPS))
        if gang is not None and gang.settings is not None and gang.source == "annotations":
            return [
                FieldError(
                    path="metadata.name",
                    value=info.name,
                    reason=f"gang {gid} is already declared by {gang.declared_by}; a PodGroup cannot "
                    "take over a gang whose pods carry its settings",
                )
            ]
        if (
            gang is not None
            and gang.settings is not None
            and gang.members
            and gang.settings.groups != settings.groups
        ):
            return [
                FieldError(
                    path=groups_path,
                    value=",".join(settings.groups),
                    reason="cannot change while the gang has members",
                )
            ]
        errors = self._group_conflicts(gid, settings.groups, groups_path)
        if errors:
            return errors
        old_group = self._core.group_of(gang) if gang is not None else None
        if gang is None:
            gang = self._st.gangs[gid] = Gang(id=gid)
        gang.settings, gang.source, gang.declared_by = settings, "PodGroup", f"PodGroup {gid}"
        self._core.attach(gang)
        if old_group is not None and old_group.id != k.group_id_of(settings.groups):
            self._core.prune(old_group.id, [], "pod group changed groups")
        return []

    def delete_pod_group(self, namespace: str, name: str) -> list[Action]:
        """Delete a PodGroup. Its members (if any) wait again until it is re-created; holds of an in-flight attempt
        or of held members are released. Call ``settle(now)`` afterwards."""
        gid = k.object_key(namespace, name)
        gang = self._st.gangs.get(gid)
        if gang is None or gang.source != "PodGroup":
            return []
        out: list[Action] = []
        group = self._core.group_of(gang)
        if group is not None:
            if group.state == IN_FLIGHT:
                self._core.abandon(group, out, "pod group deleted")
            held = self._core.members_in(group, HELD)
            self._core.release(group.id, held, "pod group deleted", out)
            self._core.set_state(held, PENDING)
        if gang.members:
            gang.settings, gang.source, gang.declared_by, gang.wait_started_at = None, "", "", None
        else:
            del self._st.gangs[gid]
        if group is not None:
            self._core.mark(group.id)
            self._core.prune(group.id, out, "pod group deleted")
        return out

    def settle(self, now: int) -> list[Action]:
        """Re-evaluate groups whose inputs changed without a time (``apply_pod_group``, ``delete_pod_group``)."""
        return self._core.settle(now)

    # -- pods ------------------------------------------------------------------------------------------------

    def submit(self, manifest: object, now: int) -> list[Action]:
        """A pod arrived. Plain pods pass through; gang members wait, complete a group, or pass through."""
        info = parse_pod(manifest)
        if isinstance(info, list):
            return [Rejected(pod=_guess_key(manifest), errors=tuple(info))]
        if info.key in self._st.member_gang:
            return []  # already known: submitting twice changes nothing
        if info.gang_id is None:
            return [PassThrough(pod=info.key, gang=None, reason="not-a-gang")]
        errors = self._declare(info)
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
        self._st.member_gang[info.key] = gang.id
        group = self._core.group_of(gang)
        if group is not None:
            self._core.mark(group.id)
        out = self._core.settle(now)
        if member.state == PENDING:
            out.append(self._waiting(gang, info.key))
        return out

    def _declare(self, info: PodInfo) -> list[FieldError]:
        assert info.gang_id is not None
        gang = self._st.gangs.get(info.gang_id)
        if not info.declares:
            if gang is None:
                self._st.gangs[info.gang_id] = Gang(id=info.gang_id)
            return []
        if gang is not None and gang.settings is not None:
            return conflicts(info.explicit, gang.settings, gang.id, gang.declared_by)
        settings = settings_from(info.gang_id, info.explicit, self.config)
        path = next((e.path for e in info.explicit if e.field == GROUPS), k.ann_path(k.ANN_GROUPS))
        errors = self._group_conflicts(info.gang_id, settings.groups, path)
        if errors:
            return errors
        if gang is None:
            gang = self._st.gangs[info.gang_id] = Gang(id=info.gang_id)
        gang.settings, gang.source, gang.declared_by = settings, "annotations", f"pod {info.key}"
        self._core.attach(gang)
        return []

    def _group_conflicts(self, gang_id: str, groups: tuple[str, ...], path: str) -> list[FieldError]:
        for other_id in sorted(self._st.gangs):
            other = self._st.gangs[other_id]
            if other_id == gang_id or other.settings is None:
                continue
            if (other_id in groups or gang_id in other.settings.groups) and other.settings.groups != groups:
                return [
                    FieldError(
                        path=path,
                        value="[" + ", ".join(groups) + "]",
                        reason=f"gang {gang_id} would be grouped with [{', '.join(groups)}] but gang {other_id} "
                        f"(declared by {other.declared_by}) is grouped with [{', '.join(other.settings.groups)}]; "
                        "every gang of a gang group must list the same groups",
                    )
                ]
        return []

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
        else:
            out = [
                a for a in out if not isinstance(a, ReleaseHolds)
            ]  # abandoned: its holds were already released
        return out

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
        return sorted(g for g, gang in self._st.gangs.items())

    def groups(self) -> list[str]:
        return sorted(self._st.groups)

    def group_of(self, gang_id: str) -> str | None:
        gang = self._st.gangs.get(gang_id)
        group = self._core.group_of(gang) if gang is not None else None
        return group.id if group is not None else None

    def status(self, gang_id: str) -> dict[str, Any]:
        """PodGroup-style status of a gang (raises KeyError for an unknown gang)."""
        gang = self._st.gangs[gang_id]
        return gang_status(gang, self._core.group_of(gang), self._core.deadline(gang))

    def explain(self, gang_id: str) -> str:
        gang = self._st.gangs.get(gang_id)
        if gang is None:
            return f"gang {gang_id} is not known (no PodGroup and no pod names it)"
        group = self._core.group_of(gang)
        others = [self._st.gangs.get(g) for g in (group.gangs if group else ()) if g != gang_id]
        return explain_gang(
            gang, group, self._core.deadline(gang), others, [g for g in group.gangs] if group else []
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

    def snapshot(self) -> dict[str, Any]:
        state = msgspec.json.decode(msgspec.json.encode(self._st))
        return {"format": SNAPSHOT_FORMAT, "config": self.config.to_dict(), "state": state}

    def digest(self) -> str:
        text = json.dumps(self.snapshot(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_snapshot(cls, snapshot: dict[str, Any]) -> GangEngine:
        engine = cls(GangConfig.from_dict(snapshot["config"]))
        engine._core.st = msgspec.convert(snapshot["state"], EngineState)
        return engine


def _guess_key(manifest: object) -> str:
    meta = manifest.get("metadata") if isinstance(manifest, dict) else None
    if not isinstance(meta, dict):
        return ""
    ns, name = meta.get("namespace") or "default", meta.get("name") or ""
    return k.object_key(str(ns), str(name))
