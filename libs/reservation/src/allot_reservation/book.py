"""The reservations reservation-manager knows, and their lifecycle (upstream's Reservation controller).

Phases: Pending (accepted, its reserve pod not placed yet, or unschedulable) → Available (placed on a node) →
Succeeded (an ``allocateOnce`` reservation was allocated) or Failed (Expired: ttl / expires passed, or its node is
gone). Finished reservations are removed ``gcDurationSeconds`` after they finished. Owners (``currentOwners``) and
``allocated`` follow the pods placed in the reservation and freed from it.

Everything here changes only through ``apply_*`` calls fed from events (inputs and the manager's own decisions), so a
projection rebuilt from the log, or folded by ``allot get reservations``, is the live one.
"""

from __future__ import annotations

from typing import Final

import msgspec

from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.reservation import Reservation

__all__ = ["AVAILABLE", "FAILED", "PENDING", "SUCCEEDED", "Book", "Record"]

PENDING: Final = "Pending"
AVAILABLE: Final = "Available"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"


class Record(msgspec.Struct, kw_only=True):
    name: str
    uid: str
    spec: Reservation
    manifest: dict[str, object]  # as applied (JSON)
    created_at: int
    expires_at: int | None
    job: str = ""
    phase: str = PENDING
    node: str = ""
    allocatable: dict[str, int] = {}
    owners: dict[str, str] = {}  # pod key -> uid of its life
    allocated_by: dict[str, dict[str, int]] = {}  # pod key -> its requests (masked to allocatable)
    conditions: dict[str, tuple[str, str, str, int]] = {}  # type -> (status, reason, message, at)
    finished_at: int | None = None
    ever_allocated: bool = False

    @property
    def allocated(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for requests in self.allocated_by.values():
            for k, v in requests.items():
                total[k] = total.get(k, 0) + v
        return dict(sorted(total.items()))

    @property
    def matchable(self) -> bool:
        """Upstream: Available on a node, and not an ``allocateOnce`` reservation that has been allocated."""
        return (
            self.phase == AVAILABLE
            and bool(self.node)
            and not (self.spec.allocate_once and self.ever_allocated)
        )

    @property
    def finished(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    def condition(self, kind: str, status: str, reason: str, message: str, at: int) -> None:
        old = self.conditions.get(kind)
        since = old[3] if old is not None and old[0] == status else at
        self.conditions = {**self.conditions, kind: (status, reason, message, since)}

    def status(self) -> JsonObject:
        """The Reservation's ``status`` as upstream writes it (times as µs; the writer formats them)."""
        out: JsonObject = {"phase": self.phase}
        if self.conditions:
            out["conditions"] = [
                {"type": k, "status": s, "reason": r, "message": m, "lastTransitionTime": t}
                for k, (s, r, m, t) in sorted(
                    self.conditions.items(), key=lambda kv: _CONDITION_ORDER.get(kv[0], 9)
                )
            ]
        if self.node:
            out["nodeName"] = self.node
        if self.allocatable:
            out["allocatable"] = dict(self.allocatable)
        if self.allocated_by:
            out["allocated"] = dict(self.allocated)
        if self.owners:
            out["currentOwners"] = [
                {"namespace": k.split("/", 1)[0], "name": k.split("/", 1)[1], "uid": uid}
                for k, uid in sorted(self.owners.items())
            ]
        return out


_CONDITION_ORDER: Final = {"Scheduled": 0, "Ready": 1}


class Book:
    """Reservations by name (names are cluster-scoped)."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.by_pod: dict[str, str] = {}  # pod key -> name of the reservation it is allocated in

    # --- queries ------------------------------------------------------------------------------------------------------
    def get(self, name: str) -> Record | None:
        return self.records.get(name)

    def matchable(self) -> list[Record]:
        return [r for _, r in sorted(self.records.items()) if r.matchable]

    def any_matchable(self) -> bool:
        return any(r.matchable for r in self.records.values())

    def on_node(self, node: str) -> list[Record]:
        return [r for _, r in sorted(self.records.items()) if r.node == node and not r.finished]

    # --- changes ------------------------------------------------------------------------------------------------------
    def accept(self, record: Record) -> None:
        """A reservation accepted (or re-accepted with a changed spec, same life)."""
        old = self.records.get(record.name)
        if old is not None and old.uid == record.uid:
            old.spec, old.manifest, old.expires_at, old.job = (
                record.spec,
                record.manifest,
                record.expires_at,
                record.job,
            )
            return
        if old is not None:
            self.drop(record.name)
        self.records[record.name] = record

    def placed(self, name: str, uid: str, node: str, allocatable: dict[str, int], at: int) -> None:
        r = self._life(name, uid)
        if r is None or r.finished:
            return
        r.phase, r.node, r.allocatable = AVAILABLE, node, dict(allocatable)
        r.condition("Scheduled", "True", "Scheduled", "", at)
        r.condition("Ready", "True", "Available", "", at)

    def unschedulable(self, name: str, uid: str, message: str, at: int) -> None:
        r = self._life(name, uid)
        if r is not None and r.phase == PENDING:
            r.condition("Scheduled", "False", "Unschedulable", message, at)

    def allocate(self, name: str, uid: str, pod: str, pod_uid: str, requests: dict[str, int]) -> None:
        r = self._life(name, uid)
        if r is None:
            return
        self.release(pod)
        keys = r.allocatable or r.spec.requests
        r.owners = {**r.owners, pod: pod_uid}
        r.allocated_by = {**r.allocated_by, pod: {k: v for k, v in requests.items() if k in keys}}
        r.ever_allocated = True
        self.by_pod[pod] = name

    def release(self, pod: str) -> None:
        name = self.by_pod.pop(pod, None)
        r = self.records.get(name) if name is not None else None
        if r is not None:
            r.owners = {k: v for k, v in r.owners.items() if k != pod}
            r.allocated_by = {k: v for k, v in r.allocated_by.items() if k != pod}

    def succeed(self, name: str, uid: str, at: int) -> None:
        r = self._life(name, uid)
        if r is not None and not r.finished:
            r.phase, r.finished_at = SUCCEEDED, at
            r.condition("Ready", "False", "Succeeded", "", at)

    def fail(self, name: str, uid: str, reason: str, message: str, at: int) -> None:
        r = self._life(name, uid)
        if r is not None and not r.finished:
            r.phase, r.finished_at = FAILED, at
            r.condition("Ready", "False", reason, message, at)

    def drop(self, name: str, uid: str = "") -> Record | None:
        r = self.records.get(name)
        if r is None or (uid and r.uid != uid):
            return None
        del self.records[name]
        for pod in list(r.owners):
            self.by_pod.pop(pod, None)
        return r

    def _life(self, name: str, uid: str) -> Record | None:
        r = self.records.get(name)
        return r if r is not None and (not uid or r.uid == uid) else None

    # --- time ---------------------------------------------------------------------------------------------------------
    def deadlines(self, gc_us: int) -> list[int]:
        out = []
        for r in self.records.values():
            if not r.finished and r.expires_at is not None:
                out.append(r.expires_at)
            elif r.finished and r.finished_at is not None:
                out.append(r.finished_at + gc_us)
        return out

    def snapshot(self) -> JsonObject:
        return {
            name: {"uid": r.uid, "job": r.job, "expires_at": r.expires_at, **r.status()}
            for name, r in sorted(self.records.items())
        }
