"""The event log on PostgreSQL (SQLAlchemy Core + asyncpg).

Responsibility: append batches of events atomically with dense, commit-ordered positions and a hash chain; record
consumer checkpoints in the same transaction; read the log back in order.

Concurrency model (docs/adr/0001-event-log-ordering.md): every append transaction first locks the single
``log_head`` row (``SELECT … FOR UPDATE``, bounded by ``lock_timeout``). The lock is held until commit, so positions
are assigned in commit order: a transaction holding position *n* blocks every later writer until it commits or rolls
back, and a tailing reader can never observe *n+1* without *n*. The same lock gives each event the previous event's
hash. Rejected alternatives: reading behind the oldest in-flight transaction (``pg_snapshot_xmin``) keeps writers
parallel but makes positions sparse and the hash chain impossible to build at write time; a high-water mark with gap
detection has shipped data-loss bugs in mature stores.

Hot path: one transaction per batch, the same few round trips whatever its size: ``SET LOCAL lock_timeout`` →
advance the consumer checkpoint (if any) → lock the head → one query for the already-recorded ids and the streams'
versions (skip those ids, check expected versions) → COPY the rows, hashing them while they stream → one statement
that inserts new streams, advances known ones, moves the head and calls ``pg_notify('allot_events', head)`` so the
relay wakes at once.
Driver exceptions are translated into :mod:`allot_contracts.errors` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from allot_contracts.envelope import NewEvent, RecordedEvent, prepare
from allot_contracts.errors import AlreadyProcessed, ConcurrencyConflict, PermanentError, Unavailable
from allot_eventstore.clock import Clock, from_datetime, system_clock, to_datetime
from allot_eventstore.protocol import AppendResult, Checkpoint
from allot_eventstore.urls import async_url, plain_url

NOTIFY_CHANNEL = "allot_events"

EVENT_COLUMNS = (  # the events table, in COPY order
    "position",
    "event_id",
    "stream_id",
    "stream_version",
    "type",
    "schema_version",
    "causation_id",
    "correlation_id",
    "producer",
    "recorded_at",
    "payload",
    "hash",
    "metadata",
)
_SELECT = (
    "SELECT position, event_id::text, stream_id, stream_version, type, schema_version, causation_id::text, "
    "correlation_id::text, producer, recorded_at, payload::text, hash, metadata::text FROM events"
)
_ADVANCE_CHECKPOINT = (
    "INSERT INTO checkpoints (consumer, position, updated_at) VALUES ($1, $2, now()) "
    "ON CONFLICT (consumer) DO UPDATE SET position = EXCLUDED.position, updated_at = now() "
    "WHERE checkpoints.position < EXCLUDED.position RETURNING position"
)
_LOCK_HEAD = "SELECT position, hash FROM log_head WHERE id = 1 FOR UPDATE"
_KNOWN = (
    "SELECT ARRAY(SELECT event_id::text FROM events WHERE event_id = ANY($1::uuid[])), s.ids, s.versions "
    "FROM (SELECT array_agg(stream_id) AS ids, array_agg(version) AS versions FROM streams "
    "WHERE stream_id = ANY($2::text[])) AS s"
)
# Stream versions, the head and the wake-up call in one statement (every data-modifying CTE runs exactly once; the
# notification is delivered at commit). Streams are only written under the head lock, so the versions read after
# taking it are current: new streams are inserted, known ones advanced (no ON CONFLICT needed).
_FINISH = (
    "WITH created AS ("
    "INSERT INTO streams (stream_id, version) SELECT * FROM unnest($1::text[], $2::integer[])), "
    "advanced AS ("
    "UPDATE streams SET version = u.version FROM unnest($3::text[], $4::integer[]) AS u(stream_id, version) "
    "WHERE streams.stream_id = u.stream_id), "
    "moved AS (UPDATE log_head SET position = $5::bigint, hash = $6::bytea WHERE id = 1) "
    f"SELECT pg_notify('{NOTIFY_CHANNEL}', $5::bigint::text)"
)


def _row_to_record(row: Any) -> RecordedEvent:
    metadata = row[12]
    return RecordedEvent(
        position=row[0],
        event_id=row[1],
        stream_id=row[2],
        stream_version=row[3],
        type=row[4],
        schema_version=row[5],
        causation_id=row[6],
        correlation_id=row[7],
        producer=row[8],
        recorded_at=from_datetime(row[9]),
        payload=row[10].encode(),
        hash=bytes(row[11]),
        metadata=json.loads(metadata) if metadata and metadata != "{}" else {},
    )


# canceled or timed-out statement, serialization failure, deadlock, operator intervention / shutdown
_RETRYABLE_SQLSTATES = frozenset({"57014", "40001", "40P01", "57P01", "57P02", "57P03", "55P03", "53300"})


def _translate(exc: BaseException) -> Exception:
    """Map a driver error to ours (cause chained by the caller)."""
    orig = getattr(exc, "orig", None)
    cause = getattr(orig, "__cause__", None) or orig or exc
    if isinstance(cause, asyncpg.exceptions.LockNotAvailableError):
        return Unavailable("event log busy: timed out waiting for the append lock", delay=0.5)
    if getattr(cause, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return Unavailable(f"PostgreSQL asked to retry ({cause.sqlstate}): {cause}", delay=0.5)
    if isinstance(cause, asyncpg.exceptions.UniqueViolationError):
        return ConcurrencyConflict(f"concurrent append to the same stream version: {cause}")
    if isinstance(cause, asyncpg.exceptions.UntranslatableCharacterError | asyncpg.exceptions.DataError):
        return PermanentError(f"event payload rejected by PostgreSQL: {cause}")
    if isinstance(cause, OSError | asyncpg.exceptions.PostgresConnectionError | ConnectionError):
        return Unavailable(f"PostgreSQL unavailable: {cause}")
    if isinstance(exc, OperationalError):
        return Unavailable(f"PostgreSQL error: {cause}")
    if isinstance(cause, asyncpg.exceptions.InterfaceError):
        return Unavailable(f"PostgreSQL connection problem: {cause}")
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


class PostgresEventStore:
    """An :class:`~allot_eventstore.protocol.EventStore` on PostgreSQL. Create with :meth:`connect`."""

    def __init__(
        self, engine: AsyncEngine, *, url: str = "", clock: Clock = system_clock, lock_timeout_ms: int = 10_000
    ) -> None:
        self.engine = engine
        self.url = url
        self._clock = clock
        self._lock_timeout_ms = lock_timeout_ms

    @classmethod
    def connect(
        cls, url: str, *, clock: Clock = system_clock, pool_size: int = 5, lock_timeout_ms: int = 10_000
    ) -> PostgresEventStore:
        engine = create_async_engine(async_url(url), pool_size=pool_size, max_overflow=5, pool_pre_ping=True)
        return cls(engine, url=url, clock=clock, lock_timeout_ms=lock_timeout_ms)

    async def close(self) -> None:
        await self.engine.dispose()

    @contextlib.asynccontextmanager
    async def notifications(self) -> AsyncIterator[asyncio.Event]:
        """An event that is set whenever an append commits (LISTEN on a dedicated connection). Clear it yourself."""
        try:
            conn = await asyncpg.connect(plain_url(self.url), timeout=10)
        except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
            raise Unavailable(f"cannot LISTEN for new events: {exc}") from exc
        woken = asyncio.Event()
        await conn.add_listener(NOTIFY_CHANNEL, lambda *_: woken.set())
        try:
            yield woken
        finally:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    # -- writing -------------------------------------------------------------------------------------------------

    async def append(
        self, events: Sequence[NewEvent], *, producer: str, checkpoint: Checkpoint | None = None
    ) -> AppendResult:
        if not events and checkpoint is None:
            return AppendResult(positions=[], head=(await self.head())[0])
        try:
            async with self.engine.begin() as conn:
                return await self._append(conn, events, producer=producer, checkpoint=checkpoint)
        except (AlreadyProcessed, ConcurrencyConflict, PermanentError, Unavailable):
            raise
        except (DBAPIError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise _translate(exc) from exc

    async def _append(
        self, conn: AsyncConnection, events: Sequence[NewEvent], *, producer: str, checkpoint: Checkpoint | None
    ) -> AppendResult:
        # The first statement goes through SQLAlchemy so that its transaction is open; the rest use the same
        # asyncpg connection directly (inside that transaction), one round trip each.
        await conn.execute(text(f"SET LOCAL lock_timeout = {int(self._lock_timeout_ms)}"))
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        if not raw.is_in_transaction():
            raise RuntimeError("event store append outside a transaction")
        if (
            checkpoint is not None
            and await raw.fetchval(_ADVANCE_CHECKPOINT, checkpoint.consumer, checkpoint.position) is None
        ):
            raise AlreadyProcessed(
                f"consumer {checkpoint.consumer} is already at or past position {checkpoint.position}"
            )
        if not events:
            head = await raw.fetchval("SELECT position FROM log_head WHERE id = 1")
            return AppendResult(positions=[], head=int(head))
        head_row = await raw.fetchrow(_LOCK_HEAD)  # serialises appenders until commit (see the module docstring)
        position, head_hash = int(head_row[0]), bytes(head_row[1])

        # Read after the lock (a new snapshot): ids already recorded, current versions of the batch's streams.
        known = await raw.fetchrow(_KNOWN, [e.event_id for e in events], sorted({e.stream_id for e in events}))
        existing = set(known[0])
        fresh: list[NewEvent] = []
        skipped: list[str] = []
        for new in events:
            if new.event_id in existing:
                skipped.append(new.event_id)
                continue
            existing.add(new.event_id)
            fresh.append(new)
        if not fresh:
            return AppendResult(positions=[], skipped=skipped, head=position)

        versions: dict[str, int] = dict(zip(known[1] or (), known[2] or ()))
        existed = set(versions)
        planned: list[tuple[NewEvent, int]] = []
        positions: list[int] = []
        for new in fresh:
            current = versions.get(new.stream_id, 0)
            if new.expected_version is not None and new.expected_version != current:
                raise ConcurrencyConflict(
                    f"stream {new.stream_id}: expected version {new.expected_version}, current is {current}"
                )
            current += 1
            versions[new.stream_id] = current
            position += 1
            planned.append((new, current))
            positions.append(position)

        # Rows are built (canonical payload, chain hash) while COPY streams them: asyncpg sends every ~512 kB, so
        # PostgreSQL parses and indexes one part of the batch while the next is being hashed here.
        now = self._clock()
        recorded_at = to_datetime(now)
        chain = [head_hash]

        def rows() -> Iterator[tuple[Any, ...]]:
            prev = head_hash
            for (new, version), at in zip(planned, positions):
                record = prepare(
                    new, position=at, stream_version=version, producer=producer, recorded_at=now, prev_hash=prev
                )
                prev = record.hash
                yield (
                    at,
                    record.event_id,
                    record.stream_id,
                    version,
                    record.type,
                    record.schema_version,
                    record.causation_id,
                    record.correlation_id,
                    producer,
                    recorded_at,
                    record.payload.decode(),
                    prev,
                    json.dumps(record.metadata) if record.metadata else "{}",
                )
            chain.append(prev)

        await raw.copy_records_to_table("events", records=rows(), columns=EVENT_COLUMNS)
        if len(chain) != 2:
            raise RuntimeError("COPY ended before every event was written")
        touched = sorted({new.stream_id for new in fresh})
        created = [s for s in touched if s not in existed]
        advanced = [s for s in touched if s in existed]
        await raw.execute(
            _FINISH, created, [versions[s] for s in created], advanced, [versions[s] for s in advanced], position,
            chain[1],
        )
        return AppendResult(positions=positions, skipped=skipped, head=position)

    # -- reading -------------------------------------------------------------------------------------------------

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            async with self.engine.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                assert raw is not None
                return list(await raw.fetch(sql, *args))
        except (DBAPIError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise _translate(exc) from exc

    @staticmethod
    def _where(
        after: int, until: int | None, types: Collection[str] | None, producer: str | None
    ) -> tuple[str, list[Any]]:
        clauses = ["position > $1"]
        args: list[Any] = [after]
        if until is not None:
            args.append(until)
            clauses.append(f"position <= ${len(args)}")
        if types is not None:
            args.append(sorted(types))
            clauses.append(f"type = ANY(${len(args)}::text[])")
        if producer is not None:
            args.append(producer)
            clauses.append(f"producer = ${len(args)}")
        return " WHERE " + " AND ".join(clauses), args

    async def read(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        types: Collection[str] | None = None,
        producer: str | None = None,
        limit: int = 1000,
    ) -> list[RecordedEvent]:
        where, args = self._where(after, until, types, producer)
        args.append(limit)
        rows = await self._fetch(f"{_SELECT}{where} ORDER BY position LIMIT ${len(args)}", *args)
        return [_row_to_record(r) for r in rows]

    async def iterate(
        self,
        *,
        after: int = 0,
        until: int | None = None,
        types: Collection[str] | None = None,
        producer: str | None = None,
        page: int = 5000,
    ) -> AsyncIterator[RecordedEvent]:
        cursor = after
        while True:
            batch = await self.read(after=cursor, until=until, types=types, producer=producer, limit=page)
            for record in batch:
                yield record
            if len(batch) < page:
                return
            cursor = batch[-1].position

    async def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        rows = await self._fetch(f"{_SELECT} WHERE stream_id = $1 ORDER BY stream_version", stream_id)
        return [_row_to_record(r) for r in rows]

    async def head(self) -> tuple[int, bytes]:
        rows = await self._fetch("SELECT position, hash FROM log_head WHERE id = 1")
        return int(rows[0][0]), bytes(rows[0][1])

    async def get_checkpoint(self, consumer: str) -> int:
        rows = await self._fetch("SELECT position FROM checkpoints WHERE consumer = $1", consumer)
        return int(rows[0][0]) if rows else 0

    async def advance_checkpoint(self, consumer: str, position: int) -> None:
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    text(
                        "INSERT INTO checkpoints (consumer, position, updated_at) VALUES (:c, :p, now()) "
                        "ON CONFLICT (consumer) DO UPDATE SET position = EXCLUDED.position, updated_at = now() "
                        "WHERE checkpoints.position < EXCLUDED.position"
                    ),
                    {"c": consumer, "p": position},
                )
        except (DBAPIError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise _translate(exc) from exc

    async def producers(self) -> list[str]:
        """Every producer that appended to the log (services, their instances, timers, api)."""
        rows = await self._fetch(
            "WITH RECURSIVE p AS (SELECT min(producer) AS v FROM events UNION ALL "
            "SELECT (SELECT min(producer) FROM events WHERE producer > p.v) FROM p WHERE p.v IS NOT NULL) "
            "SELECT v FROM p WHERE v IS NOT NULL"
        )
        return [r[0] for r in rows]

    async def checkpoints(self) -> dict[str, int]:
        rows = await self._fetch("SELECT consumer, position FROM checkpoints ORDER BY consumer")
        return {r[0]: int(r[1]) for r in rows}
