"""One append's rows, planned before they are written: which events are new, the stream version and log position of
each, and the rows themselves with the hash chain (the PostgreSQL store writes them; see :mod:`allot_eventstore.postgres`).
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from allot_contracts.envelope import NewEvent, RecordedEvent, prepare
from allot_contracts.errors import ConcurrencyConflict
from allot_eventstore.clock import to_datetime
from allot_eventstore.protocol import Fence


class Stale(Exception):
    """An optimistic append found the stream versions it read before the lock possibly out of date."""


def drop_recorded(events: Sequence[NewEvent], recorded: Container[str]) -> tuple[list[NewEvent], list[str]]:
    """The events still to write (the first of each id) and the ids skipped as already recorded or repeated."""
    fresh: list[NewEvent] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for new in events:
        if new.event_id in recorded or new.event_id in seen:
            skipped.append(new.event_id)
            continue
        seen.add(new.event_id)
        fresh.append(new)
    return fresh, skipped


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """The rows of one append: each event with its stream version and log position, and the streams it moves."""

    planned: list[tuple[NewEvent, int]]
    positions: list[int]
    versions: dict[str, int]
    existed: frozenset[str]
    head: int

    def finish(self) -> tuple[list[str], list[int], list[str], list[int], int]:
        """The arguments of the finishing statement: created streams and versions, advanced ones, the new head."""
        touched = sorted({new.stream_id for new, _ in self.planned})
        created = [s for s in touched if s not in self.existed]
        advanced = [s for s in touched if s in self.existed]
        return (
            created,
            [self.versions[s] for s in created],
            advanced,
            [self.versions[s] for s in advanced],
            self.head,
        )


def plan_versions(
    fresh: list[NewEvent], versions: dict[str, int], position: int, *, careful: bool
) -> AppendPlan:
    """Give each event the next version of its stream and the next log position, checking expected versions."""
    existed = frozenset(versions)
    planned: list[tuple[NewEvent, int]] = []
    positions: list[int] = []
    for new in fresh:
        current = versions.get(new.stream_id, 0)
        if new.expected_version is not None and new.expected_version != current:
            if not careful:
                raise Stale  # the versions may have moved since they were read: read them under the lock
            raise ConcurrencyConflict(
                f"stream {new.stream_id}: expected version {new.expected_version}, current is {current}"
            )
        current += 1
        versions[new.stream_id] = current
        position += 1
        planned.append((new, current))
        positions.append(position)
    return AppendPlan(planned=planned, positions=positions, versions=versions, existed=existed, head=position)


def records(plan: AppendPlan, *, producer: str, now: int, prev_hash: bytes) -> Iterator[RecordedEvent]:
    """The planned events as the log records them, each hashed onto the one before (the first onto ``prev_hash``)."""
    prev = prev_hash
    for (new, version), at in zip(plan.planned, plan.positions):
        record = prepare(
            new,
            position=at,
            stream_version=version,
            producer=producer,
            recorded_at=now,
            prev_hash=prev,
        )
        prev = record.hash
        yield record


def event_rows(
    plan: AppendPlan, *, producer: str, now: int, fence: Fence | None, chain: list[bytes]
) -> Iterator[tuple[Any, ...]]:
    """The events table's rows, in COPY order, each hashed onto the previous one (``chain[0]``, the head's hash);
    the last hash is appended to ``chain`` once every row was made."""
    recorded_at = to_datetime(now)
    stamp = fence.token if fence is not None else None
    stamp_only = json.dumps({"fence": stamp}) if stamp is not None else "{}"

    def metadata_json(metadata: dict[str, str]) -> str:
        if stamp is None:
            return json.dumps(metadata) if metadata else "{}"
        return json.dumps({**metadata, "fence": stamp}) if metadata else stamp_only

    prev = chain[0]
    for record in records(plan, producer=producer, now=now, prev_hash=prev):
        prev = record.hash
        yield event_row(record, recorded_at=recorded_at, metadata=metadata_json(record.metadata))
    chain.append(prev)


def event_row(record: RecordedEvent, *, recorded_at: datetime, metadata: str) -> tuple[Any, ...]:
    """A recorded event as a row of the events table, in COPY order (``EVENT_COLUMNS``): ``recorded_at`` is its
    recorded time as a datetime and ``metadata`` its metadata as JSON text."""
    return (
        record.position,
        record.event_id,
        record.stream_id,
        record.stream_version,
        record.type,
        record.schema_version,
        record.causation_id,
        record.correlation_id,
        record.producer,
        recorded_at,
        record.payload.decode(),
        record.hash,
        metadata,
    )
