"""What ``allot explain pod`` says about the pod's migrations: every PodMigrationJob that named the pod, how it
ended, and — for the descheduler's jobs — why the descheduler asked for it (its round, the hot node's thresholds,
the node it counted room on), from the log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from allot_contracts.envelope import RecordedEvent
from allot_eventstore.protocol import EventStore

__all__ = ["migration_lines", "pod_migrations"]

ANN_TRIGGER: Final = "koordinator.sh/evict-trigger"
ANN_REASON: Final = "koordinator.sh/evict-reason"
ANN_ROUND: Final = "descheduler.allot.dev/round"
ENDINGS: Final = {
    "migration.succeeded": "Succeeded",
    "migration.failed": "Failed",
    "migration.aborted": "Aborted",
    "migration.rejected": "Rejected",
}


def _object(value: object) -> Mapping[str, object]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _pod_of(payload: Mapping[str, object]) -> str:
    ref = _object(_object(_object(payload.get("manifest")).get("spec")).get("podRef"))
    return f"{ref.get('namespace')}/{ref.get('name')}"


@dataclass
class _Job:
    """One PodMigrationJob of the pod, as its events tell it."""

    manifest: Mapping[str, object]
    producer: str
    outcome: str = "Pending"
    message: str = ""
    mode: str = ""
    evicted: str = ""


async def pod_migrations(store: EventStore, key: str) -> list[RecordedEvent]:
    """The events of every PodMigrationJob whose podRef is the pod, in log order."""
    names: list[str] = []
    async for record in store.iterate(types={"migration.applied"}):
        name = record.payload_dict()["job"]["name"]
        if _pod_of(record.payload_dict()) == key and name not in names:
            names.append(name)
    records: list[RecordedEvent] = []
    for name in names:
        records += await store.read_stream(f"migration:{name}")
    return sorted(records, key=lambda r: r.position)


def migration_lines(key: str, records: list[RecordedEvent]) -> list[str]:
    jobs: dict[str, _Job] = {}
    for record in records:
        p = record.payload_dict()
        name = p["job"]["name"]
        if record.type == "migration.applied":
            if _pod_of(p) != key:
                continue
            jobs[name] = _Job(manifest=_object(p["manifest"]), producer=record.producer)
        elif name not in jobs:
            continue
        elif record.type in ENDINGS:
            jobs[name].outcome = ENDINGS[record.type]
            jobs[name].message = str(p.get("message") or p.get("reason") or "")
        elif record.type == "migration.running":
            jobs[name].outcome = "Running"
            jobs[name].mode = str(p.get("mode") or "")
        elif record.type == "migration.evicted":
            jobs[name].evicted = str(p.get("node") or "")
    if not jobs:
        return []
    lines = ["migrations:"]
    for name, job in jobs.items():
        annotations = _object(_object(job.manifest.get("metadata")).get("annotations"))
        mode = job.mode or _object(job.manifest.get("spec")).get("mode") or "default mode"
        ending = f": {job.message}" if job.message else ""
        lines.append(f"  PodMigrationJob {name} ({mode}): {job.outcome}{ending}")
        if annotations.get(ANN_TRIGGER):
            profile, _, number = str(annotations.get(ANN_ROUND, "")).partition("/")
            where = f" (profile {profile}, round {number})" if number else ""
            lines.append(f"    asked for by the descheduler's {annotations[ANN_TRIGGER]}{where}")
            if annotations.get(ANN_REASON):
                lines.append(f"    why: {annotations[ANN_REASON]}")
        else:
            lines.append(f"    applied by {job.producer}")
        if job.evicted:
            lines.append(f"    evicted from node {job.evicted}")
    return lines
