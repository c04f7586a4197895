"""The event store port: what every backend (PostgreSQL, in-memory) provides.

Semantics (checked by the contract suite in ``allot_testing.contracts.store``, run against every backend):
- ``append`` writes a batch atomically: every event or none. Positions are dense and assigned in commit order, so a
  tailing reader never sees position *n+1* before *n*. Events whose id is already recorded are skipped (idempotent
  append). A stale ``expected_version`` raises ``ConcurrencyConflict`` and writes nothing.
- With ``checkpoint=(consumer, position)`` the consumer's checkpoint moves to ``position`` in the same transaction;
  if it is already at or past it, ``AlreadyProcessed`` is raised and nothing is written (exactly-once effect).
- With ``fence=(name, term)`` (or a store created with one) the append is refused with ``Fenced`` and writes
  nothing when a newer term of ``name`` is recorded (``advance_fence``); the check and the write are atomic.
- ``read`` returns events in position order; ``types`` filters by event type name (``"pod.placed"``).
- ``outputs(producer)`` streams what ``producer`` recorded in answer to other events (``causation_id`` set), in
  position order, each with the position of the event that caused it. A consumer appends the outputs of a trigger
  together with its checkpoint, and a checkpoint only moves forward, so the outputs of an earlier trigger never come
  after those of a later one: replay pairs triggers with their outputs by walking both streams once.
- ``write_snapshot`` stores a consumer's projection at a position (a second write at the same position is a
  no-op) and keeps only the newest ``keep`` of that consumer; ``latest_snapshot`` returns the newest of a given
  format and configuration hash at or before a position. A snapshot is never a source of truth: what reads one checks
  it (``allot_runtime.snapshots``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Protocol, TypeVar

import msgspec

from allot_contracts.envelope import NewEvent, RecordedEvent

T = TypeVar("T")
# After every position the log can hold (positions are PostgreSQL bigints): ``until`` for the whole log in a query.
LAST_POSITION = 2**63 - 1
# how long an append waits for the log's append lock (PostgreSQL's lock_timeout on a store's connections), in ms
LOCK_TIMEOUT_MS = 10_000


class Checkpoint(msgspec.Struct, frozen=True):
    consumer: str
    position: int


class Fence(msgspec.Struct, frozen=True):
    """A leadership term of the decider ``name``: appends made under it are refused once a newer term is recorded
    (``advance_fence``). Written to every appended event's metadata as ``fence: "<name>/<term>"``."""

    name: str
    term: int

    @property
    def token(self) -> str:
        return f"{self.name}/{self.term}"


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    positions: list[int]
    skipped: list[str] = []
    head: int = 0


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A consumer's projection at its checkpoint ``position``: ``state`` encoded in ``format``
    (``allot_runtime.statecodec``) under the configuration hashed ``config_hash``, whose ``Host.digest()`` was
    ``digest``; ``state_hash`` is the SHA-256 of ``state`` as written."""

    consumer: str
    position: int
    format: int
    config_hash: str
    digest: str
    state: bytes
    state_hash: bytes


class EventStore(Protocol):
    """The port. A backend subclasses it to inherit ``iterate`` (pages of its ``read``)."""

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        producer: str,
        checkpoint: Checkpoint | None = None,
        fence: Fence | None = None,
    ) -> AppendResult: ...

    async def advance_fence(self, fence: Fence, *, holder: str) -> tuple[int, str]:
        """Record ``fence.term`` as the current term of ``fence.name`` unless a newer one is recorded; returns the
        current (term, holder) afterwards. Serialised with appends: an append under an older term that commits
        after this returns is impossible."""
        ...

    async def read(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        types: Collection[str] | None = None,
        producer: str | None = None,
        limit: int = 1000,
    ) -> list[RecordedEvent]: ...

    async def iterate(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        types: Collection[str] | None = None,
        producer: str | None = None,
        page: int = 5000,
    ) -> AsyncIterator[RecordedEvent]:
        """What ``read`` selects, all of it in position order, read ``page`` events at a time (so an event appended
        while the reader is on an earlier page is included when ``until`` allows)."""
        cursor = after
        while True:
            batch = await self.read(after=cursor, until=until, types=types, producer=producer, limit=page)
            for record in batch:
                yield record
            if len(batch) < page:
                return
            cursor = batch[-1].position

    async def pages(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        types: Collection[str] | None = None,
        page: int = 5000,
    ) -> AsyncIterator[list[RecordedEvent]]:
        """What ``iterate`` yields, as lists of up to ``page`` events, the next one read while the caller works on
        the one it was given (the database and the reader work at the same time): for a range already recorded
        (``until`` at or before the head), as replay reads it; a reader following the tail uses ``iterate``."""

        def page_after(last: RecordedEvent | None) -> Awaitable[list[RecordedEvent]]:
            return self.read(
                after=after if last is None else last.position, until=until, types=types, limit=page
            )

        async with contextlib.aclosing(read_ahead(page_after, page)) as batches:
            async for batch in batches:
                yield batch

    def outputs(
        self, producer: str, *, after: int = 0, page: int = 5000
    ) -> AsyncIterator[tuple[int, RecordedEvent]]:
        """``(position of the cause, output)`` for every event ``producer`` recorded at a position after ``after``;
        the cause's position is 0 when the event names no cause or one that is not in the log."""
        ...

    async def read_stream(self, stream_id: str) -> list[RecordedEvent]: ...

    async def latest_types(self, stream_ids: Collection[str], types: Collection[str]) -> dict[str, str]:
        """For each stream that has events of ``types``, the type of its latest such event (one query)."""
        ...

    async def holds_any(self, types: Collection[str], *, until: int | None = None) -> bool:
        """Whether the log up to ``until`` holds an event of any of ``types`` (one query, a lookup per type)."""
        ...

    async def newest(
        self, types: Collection[str], *, limit: int, until: int | None = None
    ) -> list[RecordedEvent]:
        """The ``limit`` newest events of ``types`` up to ``until``, in position order (one query, an index walk back
        per type: however old the newest of a type is, the log in between is not read)."""
        ...

    async def recorded_ids(self, event_ids: Collection[str]) -> set[str]:
        """The subset of ``event_ids`` already in the log."""
        ...

    async def hashes(self, positions: Collection[int]) -> dict[int, bytes]:
        """The hash of each of ``positions`` that is in the log (one query): what a consumer checks the messages it
        was delivered against before acting on them."""
        ...

    async def positions_of(self, event_ids: Collection[str]) -> dict[str, int]:
        """The position of each of ``event_ids`` that is in the log (strings that are not event ids are absent)."""
        ...

    async def head(self) -> tuple[int, bytes]: ...

    async def get_checkpoint(self, consumer: str) -> int: ...

    async def advance_checkpoint(self, consumer: str, position: int) -> None: ...

    async def checkpoints(self) -> dict[str, int]: ...

    async def producers(self) -> list[str]: ...

    async def write_snapshot(self, snapshot: Snapshot, *, keep: int) -> None:
        """Store ``snapshot`` (replacing one of the same consumer and position) and delete all but the newest
        ``keep`` of its consumer."""
        ...

    async def latest_snapshot(
        self, consumer: str, *, format: int, config_hash: str, until: int | None = None
    ) -> Snapshot | None:
        """The newest snapshot of ``consumer`` in ``format`` under ``config_hash`` at or before ``until``."""
        ...

    async def snapshot_positions(self, consumer: str) -> list[int]:
        """The positions of ``consumer``'s stored snapshots, oldest first."""
        ...

    async def close(self) -> None: ...


async def read_ahead(
    read: Callable[[T | None], Awaitable[list[T]]], page: int
) -> AsyncGenerator[list[T], None]:
    """The pages ``read(last)`` gives (``last``: the last item of the page before, None for the first) until one
    holds fewer than ``page``, each next page read while the caller works on the one it was given (the database
    and the reader work at the same time); a caller that stops early cancels the page read ahead. Empty pages are
    not yielded."""
    batch = await read(None)
    while len(batch) == page:
        ahead = asyncio.ensure_future(read(batch[-1]))
        try:
            yield batch
        except BaseException:  # the caller stopped early: the page read ahead is not wanted
            ahead.cancel()
            raise
        batch = await ahead
    if batch:
        yield batch
