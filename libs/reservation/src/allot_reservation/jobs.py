"""PodMigrationJobs as reservation-manager knows them, and the token buckets that pace evictions.

A job's record changes only through ``apply`` of its events (the input ``migration.applied`` / ``migration.deleted``
and the manager's own ``migration.*`` decisions), so what the live service, a rebuild and ``allot get migrations``
see is the same. Records are frozen: deciding works on a copy of the state (``copy``) and applies its own outputs to
it as it goes, with the very same ``apply``, so several jobs moving in one decision see each other's effects.

Token buckets (upstream's ``rate.Limiter``): ``tokens`` refill at ``rate`` per second up to ``burst``; an eviction
takes one. Time is the recorded time of events; tokens are exact fractions, so replay computes the same waits.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Final

import msgspec

from allot_contracts.events import (
    Event,
    MigrationAborted,
    MigrationApplied,
    MigrationCondition,
    MigrationDeleted,
    MigrationEvicted,
    MigrationEvictionFailed,
    MigrationEvictionRequested,
    MigrationFailed,
    MigrationPending,
    MigrationRejected,
    MigrationRemoved,
    MigrationRunning,
    MigrationSucceeded,
)
from allot_contracts.jsonvalue import JsonObject
from allot_contracts.objects.migration import PodMigrationJob, parse_migration_job

__all__ = ["ABORTED", "FAILED", "PENDING", "RUNNING", "SUCCEEDED", "Bucket", "Job", "Jobs"]

PENDING: Final = "Pending"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
ABORTED: Final = "Aborted"
FINISHED: Final = frozenset({SUCCEEDED, FAILED, ABORTED})
_SCAVENGE_US: Final = 30 * 60 * 1_000_000
_SCAVENGE_MARGIN_US: Final = 5 * 60 * 1_000_000


class Job(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    uid: str
    spec: PodMigrationJob
    created_at: int
    phase: str = PENDING
    reason: str = ""
    message: str = ""
    conditions: dict[str, tuple[str, str, str]] = {}  # type -> (status, reason, message)
    mode: str = ""
    pod_uid: str = ""
    source_node: str = ""
    reservation: str = ""
    target_node: str = ""
    eviction_requested: bool = False
    evicted: bool = False
    eviction_error: str = ""
    new_uid: str = ""
    finished_at: int | None = None
    deleted: bool = False

    @property
    def active(self) -> bool:
        return self.phase not in FINISHED and not self.deleted

    def timeout_at(self, default_ttl_us: int) -> int | None:
        """When the job fails with Timeout: its ``spec.ttl`` after its creation, else the configured default."""
        ttl = self.spec.ttl_us or default_ttl_us
        return self.created_at + ttl if ttl else None

    @property
    def scavenge_at(self) -> int:
        """Upstream's scavenger deletes a job ttl + 5 minutes after its creation, or 30 minutes without a ttl."""
        ttl = self.spec.ttl_us
        return self.created_at + (ttl + _SCAVENGE_MARGIN_US if ttl else _SCAVENGE_US)

    def status(self) -> JsonObject:
        out: JsonObject = {"phase": self.phase}
        latest = next(reversed(self.conditions), None) if self.conditions else None
        if latest is not None and self.phase in (PENDING, RUNNING):
            out["status"] = latest
        elif self.phase == SUCCEEDED:
            out["status"] = "Complete"
        if self.reason:
            out["reason"] = self.reason
        if self.message:
            out["message"] = self.message
        if self.conditions:
            out["conditions"] = [
                {"type": k, "status": s, "reason": r, "message": m}
                for k, (s, r, m) in self.conditions.items()
            ]
        if self.target_node:
            out["nodeName"] = self.target_node
        out["podRef"] = {
            "namespace": self.spec.pod.namespace,
            "name": self.spec.pod.name,
            "uid": self.pod_uid,
        }
        return out


class Bucket(msgspec.Struct, frozen=True):
    tokens: Fraction
    at: int

    def level(self, rate: Fraction, burst: int, now: int) -> Fraction:
        return min(Fraction(burst), self.tokens + rate * Fraction(max(now - self.at, 0), 1_000_000))

    def ready_at(self, rate: Fraction, burst: int) -> int:
        """When the bucket holds one token again (µs, rounded up)."""
        missing = 1 - self.tokens
        if missing <= 0:
            return self.at
        wait = missing * 1_000_000 / rate
        return self.at + -(-wait.numerator // wait.denominator)


class Jobs:
    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.rejected: dict[str, str] = {}  # job name -> why it was refused
        self.buckets: dict[str, Bucket] = {}

    def copy(self) -> Jobs:
        out = Jobs()
        out.jobs, out.rejected, out.buckets = dict(self.jobs), dict(self.rejected), dict(self.buckets)
        return out

    def active(self) -> list[Job]:
        return [j for _, j in sorted(self.jobs.items()) if j.active]

    def bucket(self, key: str, burst: int) -> Bucket:
        return self.buckets.get(key) or Bucket(Fraction(burst), 0)

    def take(self, keys: list[tuple[str, Fraction, int]], at: int) -> None:
        for key, rate, burst in keys:
            level = self.bucket(key, burst).level(rate, burst, at) if key in self.buckets else Fraction(burst)
            self.buckets[key] = Bucket(level - 1, at)

    def replace(self, job: Job, **changes: Any) -> Job:
        new = msgspec.structs.replace(job, **changes)
        self.jobs[job.name] = new
        return new

    def condition(self, job: Job, kind: str, status: str, reason: str, message: str) -> Job:
        conditions = {k: v for k, v in job.conditions.items() if k != kind}
        conditions[kind] = (status, reason, message)
        return self.replace(job, conditions=conditions)

    def apply(self, event: Event, at: int, buckets: list[tuple[str, Fraction, int]] | None = None) -> None:
        """Apply a job event. ``buckets``: the limiters an eviction of this job takes a token from."""
        match event:
            case MigrationApplied(job=ref, uid=uid, manifest=manifest):
                spec = parse_migration_job(manifest, [], [])
                if spec is None:
                    return
                self.rejected.pop(ref.name, None)
                old = self.jobs.get(ref.name)
                if old is not None and (old.uid == uid or not uid):
                    self.jobs[ref.name] = msgspec.structs.replace(old, spec=spec)
                else:
                    created = spec.created_us if spec.created_us is not None else at
                    self.jobs[ref.name] = Job(name=ref.name, uid=uid, spec=spec, created_at=created)
            case MigrationRejected(job=ref, message=message):
                self.jobs.pop(ref.name, None)
                self.rejected[ref.name] = message
            case MigrationDeleted(job=ref):
                job = self.jobs.get(ref.name)
                if job is not None:
                    self.jobs[ref.name] = msgspec.structs.replace(job, deleted=True)
                self.rejected.pop(ref.name, None)
            case MigrationPending(job=ref, reason=reason, message=message):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(job, reason=reason, message=message)
            case MigrationRunning(job=ref, mode=mode, pod_uid=pod_uid, node=node, reservation=reservation):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(
                        job,
                        phase=RUNNING,
                        reason="",
                        message="",
                        mode=mode,
                        pod_uid=pod_uid,
                        source_node=node,
                        reservation=reservation,
                    )
            case MigrationCondition(
                job=ref, condition=kind, status=status, reason=reason, message=message, node=node
            ):
                if (job := self.jobs.get(ref.name)) is not None:
                    job = self.condition(job, kind, status, reason, message)
                    if kind == "ReservationScheduled" and status == "True":
                        self.replace(job, target_node=node)
            case MigrationEvictionRequested(job=ref):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(job, eviction_requested=True)
                    self.take(buckets or [], at)
            case MigrationEvicted(job=ref, new_uid=new_uid):
                if (job := self.jobs.get(ref.name)) is not None:
                    if not job.eviction_requested:
                        self.take(buckets or [], at)
                    self.replace(job, evicted=True, eviction_requested=True, new_uid=new_uid)
            case MigrationEvictionFailed(job=ref, message=message):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(job, eviction_error=message or "eviction refused")
            case MigrationSucceeded(job=ref, message=message, node=node):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(
                        job,
                        phase=SUCCEEDED,
                        reason="",
                        message=message,
                        finished_at=at,
                        target_node=node or job.target_node,
                    )
            case MigrationFailed(job=ref, reason=reason, message=message):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(job, phase=FAILED, reason=reason, message=message, finished_at=at)
            case MigrationAborted(job=ref, message=message):
                if (job := self.jobs.get(ref.name)) is not None:
                    self.replace(job, phase=ABORTED, reason="Aborted", message=message, finished_at=at)
            case MigrationRemoved(job=ref):
                self.jobs.pop(ref.name, None)
            case _:
                pass

    def snapshot(self) -> JsonObject:
        return {
            "jobs": {name: {"uid": j.uid, **j.status()} for name, j in sorted(self.jobs.items())},
            "rejected": dict(sorted(self.rejected.items())),
            "buckets": {k: [str(b.tokens), b.at] for k, b in sorted(self.buckets.items())},
        }
