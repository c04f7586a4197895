"""In-memory event store: the simulator's log and the fake for unit tests of pure logic.

Same semantics as the PostgreSQL store (both pass ``allot_testing.contracts.store``); same hashing, so a log written
here verifies exactly like one written to PostgreSQL. Not durable, single process, not the default anywhere else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence

import msgspec

from allot_contracts.envelope import GENESIS_HASH, NewEvent, RecordedEvent
from allot_contracts.errors import AlreadyProcessed, Fenced
from allot_eventstore.append_plan import drop_recorded, plan_versions, records
from allot_eventstore.clock import Clock, system_clock
from allot_eventstore.protocol import AppendResult, Checkpoint, EventStore, Fence, Snapshot
from allot_eventstore.snapshots import state_hash


def _stamped(new: NewEvent, fence: Fence) -> NewEvent:
    return msgspec.structs.replace(new, metadata={**new.metadata, "fence": fence.token})


class InMemoryEventStore(EventStore):
    def __init__(self, *, clock: Clock = system_clock, fence: Fence | None = None) -> None:
        self._clock = clock
        self.fence = fence  # every append is made under it (unless one names another)
        self.events: list[RecordedEvent] = []
        self._ids: dict[str, int] = {}
        self._versions: dict[str, int] = {}
        self._checkpoints: dict[str, int] = {}
        self._by_stream: dict[str, list[int]] = {}
        self.fences: dict[str, tuple[int, str]] = {}  # name -> (term, holder)
        self.snapshots: dict[str, dict[int, Snapshot]] = {}  # consumer -> position -> snapshot

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        producer: str,
        checkpoint: Checkpoint | None = None,
        fence: Fence | None = None,
    ) -> AppendResult:
        return self.append_sync(events, producer=producer, checkpoint=checkpoint, fence=fence)

    async def advance_fence(self, fence: Fence, *, holder: str) -> tuple[int, str]:
        current = self.fences.get(fence.name)
        if current is None or current[0] < fence.term:
            self.fences[fence.name] = (fence.term, holder)
        return self.fences[fence.name]

    def append_sync(
        self,
        events: Sequence[NewEvent],
        *,
        producer: str,
        checkpoint: Checkpoint | None = None,
        fence: Fence | None = None,
    ) -> AppendResult:
        fence = fence or self.fence
        if fence is not None:
            current = self.fences.get(fence.name, (0, ""))[0]
            if current > fence.term:
                raise Fenced(fence.name, fence.term, current)
            events = [_stamped(new, fence) for new in events]
        if checkpoint is not None and self._checkpoints.get(checkpoint.consumer, 0) >= checkpoint.position:
            raise AlreadyProcessed(
                f"consumer {checkpoint.consumer} is already at or past {checkpoint.position}"
            )
        fresh, skipped = drop_recorded(events, self._ids)
        streams = {new.stream_id for new in fresh}
        versions = {s: self._versions[s] for s in streams if s in self._versions}
        plan = plan_versions(fresh, versions, len(self.events), careful=True)
        # Everything checked: now write (the batch is atomic because nothing above mutated state).
        prev = self.events[-1].hash if self.events else GENESIS_HASH
        for record in records(plan, producer=producer, now=self._clock(), prev_hash=prev):
            self.events.append(record)
            self._ids[record.event_id] = record.position
            self._by_stream.setdefault(record.stream_id, []).append(record.position)
        self._versions.update(plan.versions)
        if checkpoint is not None:
            self._checkpoints[checkpoint.consumer] = checkpoint.position
        return AppendResult(positions=plan.positions, skipped=skipped, head=len(self.events))

    def _select(
        self,
        *,
        after: int,
        until: int | None,
        types: Collection[str] | None,
        producer: str | None,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        start = max(after, 0)  # positions are dense: list index = position - 1
        stop = len(self.events) if until is None else min(until, len(self.events))
        wanted = None if types is None else frozenset(types)
        out: list[RecordedEvent] = []
        for index in range(start, stop):
            if limit is not None and len(out) >= limit:
                break
            record = self.events[index]
            if wanted is not None and record.type not in wanted:
                continue
            if producer is not None and record.producer != producer:
                continue
            out.append(record)
        return out

    async def read(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        types: Collection[str] | None = None,
        producer: str | None = None,
        limit: int = 1000,
    ) -> list[RecordedEvent]:
        return self._select(after=after, until=until, types=types, producer=producer, limit=limit)

    async def outputs(
        self, producer: str, *, after: int = 0, page: int = 5000
    ) -> AsyncIterator[tuple[int, RecordedEvent]]:
        # from the records themselves, not the append index: tests build logs by adding records directly
        positions = {record.event_id: record.position for record in self.events}
        for record in self._select(after=after, until=None, types=None, producer=producer):
            yield positions.get(record.causation_id or "", 0), record

    async def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        return [self.events[p - 1] for p in self._by_stream.get(stream_id, [])]

    async def latest_types(self, stream_ids: Collection[str], types: Collection[str]) -> dict[str, str]:
        wanted = frozenset(types)
        out: dict[str, str] = {}
        for stream in stream_ids:
            for position in reversed(self._by_stream.get(stream, [])):
                if self.events[position - 1].type in wanted:
                    out[stream] = self.events[position - 1].type
                    break
        return out

    async def holds_any(self, types: Collection[str], *, until: int | None = None) -> bool:
        wanted = frozenset(types)
        return any(e.type in wanted for e in self.events[:until])

    async def newest(
        self, types: Collection[str], *, limit: int, until: int | None = None
    ) -> list[RecordedEvent]:
        wanted = frozenset(types)
        found = [e for e in self.events[:until] if e.type in wanted]
        return found[-limit:] if limit > 0 else []

    async def recorded_ids(self, event_ids: Collection[str]) -> set[str]:
        return {event_id for event_id in event_ids if event_id in self._ids}

    async def hashes(self, positions: Collection[int]) -> dict[int, bytes]:
        count = len(self.events)
        return {p: self.events[p - 1].hash for p in positions if 0 < p <= count}

    async def positions_of(self, event_ids: Collection[str]) -> dict[str, int]:
        return {event_id: self._ids[event_id] for event_id in event_ids if event_id in self._ids}

    async def head(self) -> tuple[int, bytes]:
        return len(self.events), (self.events[-1].hash if self.events else GENESIS_HASH)

    async def get_checkpoint(self, consumer: str) -> int:
        return self._checkpoints.get(consumer, 0)

    async def advance_checkpoint(self, consumer: str, position: int) -> None:
        if position > self._checkpoints.get(consumer, 0):
            self._checkpoints[consumer] = position

    async def checkpoints(self) -> dict[str, int]:
        return dict(sorted(self._checkpoints.items()))

    async def producers(self) -> list[str]:
        return sorted({e.producer for e in self.events})

    async def write_snapshot(self, snapshot: Snapshot, *, keep: int) -> None:
        kept = self.snapshots.setdefault(snapshot.consumer, {})
        kept[snapshot.position] = msgspec.structs.replace(snapshot, state_hash=state_hash(snapshot.state))
        for position in sorted(kept)[: -max(keep, 1)]:
            del kept[position]

    async def latest_snapshot(
        self, consumer: str, *, format: int, config_hash: str, until: int | None = None
    ) -> Snapshot | None:
        usable = [
            s
            for s in self.snapshots.get(consumer, {}).values()
            if s.format == format and s.config_hash == config_hash and (until is None or s.position <= until)
        ]
        return max(usable, key=lambda s: s.position, default=None)

    async def snapshot_positions(self, consumer: str) -> list[int]:
        return sorted(self.snapshots.get(consumer, {}))

    async def close(self) -> None:
        return None
