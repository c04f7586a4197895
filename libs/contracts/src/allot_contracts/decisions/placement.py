"""Placement decisions: what the placement engine concluded for a pod (or a gang), as exact, JSON-able values, as
the ``pod.placed``, ``pod.unschedulable``, ``pod.released`` and ``gang.group_*`` events carry them.

Responsibility: the ``Decision`` and ``GroupDecision`` value types and their lossless ``to_dict`` / ``from_dict``
(JSON builtins only — no floats — so replay can compare recorded and re-derived decisions field by field).

Fields of ``Decision``:
- ``pod`` ("ns/name"), ``outcome`` (``Scheduled`` | ``Unschedulable`` | ``Rejected``), ``node``;
- ``annotations``: the output annotations Koordinator writes (``device-allocated``, ``resource-status`` and, when a
  cpuset was bound for a pod without a bind policy, ``resource-spec``), values as JSON objects;
- ``message``: kube-scheduler style summary (Unschedulable) or the field errors (Rejected); ``codes``: sorted stable
  reason codes; ``node_reasons``: reasons of the first infeasible nodes by name (bounded by config);
- ``scores``: top-k nodes with their score components; ``allocation``: what ``assume`` applies;
- ``policy`` and ``config_version``: which configuration decided; ``nodes_total``: N of "0/N nodes".
- ``reservation``: the Reservation the pod was placed in (``{name, uid}``; also the ``reservation-allocated``
  annotation), ``None`` otherwise.
"""

from __future__ import annotations

from typing import Any, Self

import msgspec

from allot_contracts.jsonvalue import JsonObject

__all__ = ["VF", "Allocation", "Decision", "DeviceAlloc", "Freed", "GroupDecision", "NodeScore", "NumaAlloc"]


class _Record(msgspec.Struct, frozen=True, kw_only=True):
    """A decision record's JSON form (builtins only) and back (validated on the way in)."""

    def to_dict(self) -> JsonObject:
        out: JsonObject = msgspec.json.decode(msgspec.json.encode(self))
        return out

    @classmethod
    def from_dict(cls, d: JsonObject) -> Self:
        return msgspec.convert(d, cls)


class VF(msgspec.Struct, frozen=True, kw_only=True):
    bus_id: str = msgspec.field(name="busID")
    minor: int | None = None


class DeviceAlloc(msgspec.Struct, frozen=True, kw_only=True):
    minor: int
    resources: dict[str, int]
    vfs: tuple[VF, ...] = ()


class NumaAlloc(msgspec.Struct, frozen=True, kw_only=True):
    node: int
    resources: dict[str, int]


class Allocation(_Record, frozen=True, kw_only=True):
    """Everything ``assume`` needs to re-apply a placement exactly (canonical integers, JSON-able)."""

    node: str
    requests: dict[str, int]
    devices: dict[str, tuple[DeviceAlloc, ...]] = msgspec.field(default_factory=dict)
    cpuset: tuple[int, ...] = ()
    cpu_exclusive: str = ""
    numa: tuple[NumaAlloc, ...] = ()

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted(z.node for z in self.numa))


class Freed(msgspec.Struct, frozen=True, kw_only=True):
    """What a released pod gave back: its node and the allocation it held (``None``: it held nothing known)."""

    pod: str
    node: str
    allocation: Allocation | None = None


class NodeScore(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    score: int
    components: dict[str, int]


class Decision(_Record, frozen=True, kw_only=True):
    pod: str
    outcome: str
    node: str | None = None
    annotations: dict[str, Any] = msgspec.field(default_factory=dict)
    message: str = ""
    codes: list[str] = msgspec.field(default_factory=list)
    node_reasons: dict[str, list[str]] = msgspec.field(default_factory=dict)
    scores: list[NodeScore] = msgspec.field(default_factory=list)
    allocation: Allocation | None = None
    policy: str = ""
    config_version: str = ""
    nodes_total: int = 0
    reservation: dict[str, str] | None = None  # the Reservation the pod was placed in ({name, uid})


class GroupDecision(_Record, frozen=True, kw_only=True):
    """All-or-nothing placement of a gang: every member Scheduled, or none (with the first failure explained)."""

    outcome: str
    members: list[Decision]
    message: str = ""
    failed_pod: str | None = None
