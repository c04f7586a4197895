"""Actions: what the engine tells its caller to do, as JSON-ready values.

Responsibility: the closed set of outcomes of every engine input. Each is a frozen msgspec Struct tagged with its
class name in the ``type`` field; ``to_dict()`` gives JSON builtins (strings, ints, bools, lists, dicts — never
floats) so the shell can store actions in events and replay can compare them field by field; ``action_from_dict``
reads them back.

JSON shapes (times are integer microseconds since the Unix epoch, pods and gangs are ``"namespace/name"``,
lists are in the documented deterministic order):

- ``{"type": "PassThrough", "pod", "gang": str|null, "reason": "not-a-gang"|"gang-satisfied"}``
- ``{"type": "MemberWaiting", "gang", "group", "pod", "present", "minAvailable", "reason"}`` with reason one of
  ``gang-incomplete``, ``group-incomplete``, ``pod-group-missing``, ``attempt-in-progress``, ``backoff``
- ``{"type": "GroupReady", "group", "gangs": [..], "members": [..], "attempt"}`` — members sorted by gang id,
  then pod key
- ``{"type": "GroupAdmitted", "group", "attempt", "members": [..]}`` — bind these; the group is satisfied
- ``{"type": "GroupRetryAt", "group", "at", "attempt", "reason"}``
- ``{"type": "GroupTimedOut", "group", "gang", "releasedMembers": [..]}``
- ``{"type": "ReleaseHolds", "group", "attempt", "members": [..], "reason"}`` — compensation: release the quota
  and placement holds made for these members *by that attempt* (idempotent on the caller's side; holds of other
  attempts of the same members are not affected)
- ``{"type": "Rejected", "pod", "errors": [{"path", "reason", "value"}]}`` — never scheduled, never retried
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonvalue import JsonObject

__all__ = [
    "Action",
    "GroupAdmitted",
    "GroupReady",
    "GroupRetryAt",
    "GroupTimedOut",
    "MemberWaiting",
    "PassThrough",
    "Rejected",
    "ReleaseHolds",
    "action_from_dict",
]


class _Action(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", rename="camel"):
    def to_dict(self) -> JsonObject:
        out = msgspec.json.decode(msgspec.json.encode(self))
        assert isinstance(out, dict)
        return out


class PassThrough(_Action, frozen=True, tag="PassThrough"):
    """The pod goes on alone: a plain pod, or a member of a once-satisfied gang that is already satisfied."""

    pod: str
    gang: str | None = None
    reason: str = "not-a-gang"


class MemberWaiting(_Action, frozen=True, tag="MemberWaiting"):
    """The pod is held back: its gang group cannot be attempted yet (``reason``)."""

    gang: str
    group: str
    pod: str
    present: int
    min_available: int
    reason: str


class GroupReady(_Action, frozen=True, tag="GroupReady"):
    """The whole gang group may now be admitted by quota and placed as one unit (attempt ``attempt``).

    ``members`` are the members to place, sorted by gang id then pod key. Members of the group that already hold
    a placement (NonStrict ``held``) are not listed again.
    """

    group: str
    gangs: tuple[str, ...]
    members: tuple[str, ...]
    attempt: int


class _GroupMembers(_Action, frozen=True):
    """The fields of an action on the ``members`` of one ``attempt`` of a gang ``group``."""

    group: str
    attempt: int
    members: tuple[str, ...]


class GroupAdmitted(_GroupMembers, frozen=True, tag="GroupAdmitted"):
    """Answer to ``group_placed``: the group is satisfied; every listed member may be bound now."""


class GroupRetryAt(_Action, frozen=True, tag="GroupRetryAt"):
    """The group will be offered again (a new ``GroupReady``) by the first ``on_timer(now)`` with ``now >= at``."""

    group: str
    at: int
    attempt: int
    reason: str


class GroupTimedOut(_Action, frozen=True, tag="GroupTimedOut"):
    """Gang ``gang`` reached its waiting time before its group was admitted; ``released_members`` (every member of
    the group not yet admitted) go back to waiting and the wait starts again."""

    group: str
    gang: str
    released_members: tuple[str, ...]


class ReleaseHolds(_GroupMembers, frozen=True, tag="ReleaseHolds"):
    """Compensation: release the quota or placement holds made for ``members`` by ``attempt`` (if any exist)."""

    reason: str


class Rejected(_Action, frozen=True, tag="Rejected"):
    """Malformed or conflicting gang input: the pod is never scheduled and never retried."""

    pod: str
    errors: tuple[FieldIssue, ...]


Action = (
    PassThrough
    | MemberWaiting
    | GroupReady
    | GroupAdmitted
    | GroupRetryAt
    | GroupTimedOut
    | ReleaseHolds
    | Rejected
)


def action_from_dict(d: Mapping[str, object]) -> Action:
    """Read an action back from its ``to_dict()`` form (for replay comparison)."""
    action: Action = msgspec.convert(d, Action)  # type: ignore[arg-type]
    return action
