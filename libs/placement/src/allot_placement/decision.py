"""Decisions: what the engine concluded for a pod (or a gang), as exact, JSON-able values.

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
"""

from __future__ import annotations

from typing import Any

import msgspec

from allot_placement.state import Allocation

__all__ = ["Decision", "GroupDecision", "NodeScore"]


class NodeScore(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    score: int
    components: dict[str, int]


class Decision(msgspec.Struct, frozen=True, kw_only=True):
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

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Decision:
        return msgspec.convert(d, cls)


class GroupDecision(msgspec.Struct, frozen=True, kw_only=True):
    """All-or-nothing placement of a gang: every member Scheduled, or none (with the first failure explained)."""

    outcome: str
    members: list[Decision]
    message: str = ""
    failed_pod: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(self))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupDecision:
        return msgspec.convert(d, cls)
