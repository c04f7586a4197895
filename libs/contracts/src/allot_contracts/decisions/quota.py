"""Quota decisions: the records the quota engine returns and the quota-manager's events carry; frozen, JSON-builtin
fields only.

Quantities are Kubernetes quantity strings in maps with sorted keys (``{"cpu": "1500m", "memory": "8Gi"}``); no
floats anywhere, so a replayed decision compares equal field by field.

    AdmitDecision    quota admission of one pod (PreFilter): admitted or why not, with the numbers
    UsageChange      a Reserve/Unreserve/removal applied to the accounting, with borrow/return facts
    VictimsDecision  intra-quota preemption on one node (PostFilter)
    Eviction         one pod the over-use revoke gives back
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from allot_contracts.jsonvalue import JsonObject

__all__ = ["AdmitDecision", "Eviction", "GroupAdmission", "ReturnedCharge", "UsageChange", "VictimsDecision"]

Status = Literal["Success", "Unschedulable", "UnschedulableAndUnresolvable"]


class _Record(msgspec.Struct, frozen=True, kw_only=True):
    def to_dict(self) -> JsonObject:
        out: JsonObject = msgspec.to_builtins(self)
        return out


class AdmitDecision(_Record, frozen=True, kw_only=True):
    pod: str
    quota: str
    admitted: bool
    status: Status
    reason: str  # Admitted | NoQuota | InsufficientQuota | InsufficientNonPreemptibleQuota | ...
    message: str
    waiting: bool  # True: the pod stays pending and is retried when quota frees (not a failure)
    tree: str = ""
    request: dict[str, str] = {}  # the pod's request, masked to the quota's max keys
    used: dict[str, str] = {}
    runtime: dict[str, str] = {}
    limit: dict[str, str] = {}  # runtime, or max when runtime quota is disabled
    min: dict[str, str] = {}
    max: dict[str, str] = {}
    exceed_dimensions: list[str] = []
    non_preemptible: bool = False
    topology: list[str] = []  # quotaNameTopo of a failed parent check
    borrow: list[dict[str, Any]] = []  # facts if the pod is assigned now (see allot_quota.borrow)
    priority: int = 0


class UsageChange(_Record, frozen=True, kw_only=True):
    pod: str
    quota: str
    action: Literal["pending", "updated", "assigned", "unassigned", "removed", "noop"]
    changed: bool
    request: dict[str, str] = {}
    used: dict[str, str] = {}  # the quota's used after the change
    runtime: dict[str, str] = {}  # the quota's runtime after the change
    borrow: list[dict[str, Any]] = []
    returned: list[dict[str, Any]] = []


class VictimsDecision(_Record, frozen=True, kw_only=True, tag="victims"):
    preemptor: str
    quota: str
    eligible: bool
    helpful: bool  # victims free enough for the preemptor (node fit and quota)
    reason: str
    message: str
    victims: list[str] = []  # pod keys, least important first, never repeated
    candidates: list[str] = []  # most important first (reprieve order)
    reprieved: list[str] = []
    used_limit: dict[str, str] = {}
    used: dict[str, str] = {}
    request: dict[str, str] = {}


class Eviction(_Record, frozen=True, kw_only=True, tag="overuse"):
    pod: str
    quota: str
    cause: str  # OverUseRevoke
    message: str
    priority: int
    runtime: dict[str, str]
    used: dict[str, str]  # the quota's used before the revoke
    request: dict[str, str]  # the evicted pod's request
    over_since: int
    now: int
    delay_seconds: int


class GroupAdmission(_Record, frozen=True, kw_only=True):
    """A gang group's quota admission: every member's record when all fit, else the first member that does not."""

    members: dict[str, AdmitDecision] = {}
    first: AdmitDecision | None = None  # checked with the members offered before it counted
    # the quota's use before any member is counted (what a raise is measured from); None in records made before it
    # was kept, whose ``first`` was checked with no member counted
    used_before: dict[str, str] | None = None


class ReturnedCharge(_Record, frozen=True, kw_only=True):
    """What went back to whom when a pod's charge was returned (the reverse of its borrow facts)."""

    returned: list[dict[str, Any]] = []
    runtime: dict[str, str] = {}
