"""The engine's state as plain values: members, gangs, gang groups, and what a snapshot holds.

Responsibility: the data the engine keeps between inputs, as msgspec Structs that round-trip through JSON
builtins (``snapshot``/``restore``), plus the small counting helpers that read it.

Member states (``Member.state``):

    pending ──GroupReady──▶ attempting ──group_placed──▶ admitted ──member_bound──▶ bound
       ▲                        │  (unschedulable / timeout)                          ▲
       └────────────────────────┘                                                     │
    pending ──(once-satisfied gang already satisfied)──▶ passed ──member_bound────────┘
    attempting ──group_placed, group still short (NonStrict)──▶ held ──(next admission)──▶ admitted

- ``pending``: present, waiting for its gang group; holds nothing.
- ``attempting``: part of the in-flight attempt ``Group.attempt``; quota/placement may be held for it.
- ``held``: placed, but the group fell short before admission (a member vanished during placement) and the gang
  is NonStrict, so the placement is kept while the gang waits for replacements. Holds resources.
- ``admitted``: placed and admitted with its group; the binder may bind it. Holds resources until bound.
- ``passed``: went on alone (its once-satisfied gang was already satisfied); scheduled like a plain pod.
- ``bound``: bound to a node; ``phase`` then tracks Running/Succeeded/Failed for the PodGroup status.

Invariants: every map is keyed by a string id and iterated in sorted order by the engine; the state holds no
object that JSON cannot carry (no floats, no sets), so ``snapshot`` is canonical and ``digest`` is stable.
"""

from __future__ import annotations

from typing import Final

import msgspec

from .spec import GangSettings

__all__ = ["AbandonedAttempt", "EngineState", "Gang", "Group", "Member"]

PENDING: Final = "pending"
ATTEMPTING: Final = "attempting"
HELD: Final = "held"
ADMITTED: Final = "admitted"
PASSED: Final = "passed"
BOUND: Final = "bound"

# Members that still wait for their gang group (the gang's timer runs while any exists).
WAITING_STATES: Final = (PENDING, ATTEMPTING, HELD)
# Members for which quota or placement may be held by this engine's decisions.
HOLDING_STATES: Final = (ATTEMPTING, HELD, ADMITTED)

# Group states.
IDLE: Final = "idle"
IN_FLIGHT: Final = "attempting"
BACKOFF: Final = "backoff"


class Member(msgspec.Struct, kw_only=True):
    key: str
    gang: str
    seq: int
    arrived_at: int
    priority: int = 0
    sub_priority: int = 0
    state: str = PENDING
    attempt: int = 0
    phase: str = ""


class Gang(msgspec.Struct, kw_only=True):
    id: str
    settings: GangSettings | None = None
    source: str = ""  # "annotations", "PodGroup", or "" while waiting for a PodGroup
    declared_by: str = ""
    members: dict[str, Member] = msgspec.field(default_factory=dict)
    once_satisfied: bool = False
    wait_started_at: int | None = None
    # timed out: the timer restarts with the group's next attempt or a new member, not at once
    wait_stopped: bool = False
    schedule_start_at: int | None = None
    timeouts: int = 0

    def count(self, *states: str) -> int:
        return sum(1 for m in self.members.values() if m.state in states)

    def keys(self, *states: str) -> list[str]:
        return sorted(key for key, m in self.members.items() if m.state in states)

    def phase_count(self, phase: str) -> int:
        return sum(1 for m in self.members.values() if m.state == BOUND and m.phase == phase)


class Group(msgspec.Struct, kw_only=True):
    id: str
    gangs: tuple[str, ...]
    state: str = IDLE
    attempt: int = 0
    attempt_members: tuple[str, ...] = ()
    failures: int = 0
    retry_at: int | None = None
    last_attempt_at: int | None = None
    last_outcome: str = ""
    attempts: int = 0
    timeouts: int = 0


class AbandonedAttempt(msgspec.Struct, kw_only=True):
    """An attempt given up (timeout, gang deleted) before its outcome arrived; kept so that a late
    ``group_placed`` for it can be answered with the exact members whose holds must be released."""

    group_id: str
    members: tuple[str, ...]


class EngineState(msgspec.Struct, kw_only=True):
    gangs: dict[str, Gang] = msgspec.field(default_factory=dict)
    groups: dict[str, Group] = msgspec.field(default_factory=dict)
    member_gang: dict[str, str] = msgspec.field(default_factory=dict)  # pod key -> gang id
    abandoned: dict[str, AbandonedAttempt] = msgspec.field(default_factory=dict)  # str(attempt) -> attempt
    dirty: list[str] = msgspec.field(default_factory=list)  # group ids to re-evaluate, sorted
    seq: int = 0
    last_attempt: int = 0
