"""The event log on PostgreSQL (asyncpg; the schema is Alembic's, on SQLAlchemy Core).

Responsibility: append batches of events atomically with dense, commit-ordered positions and a hash chain; record
consumer checkpoints in the same transaction; read the log back in order.

Concurrency model (docs/adr/0001-event-log-ordering.md): every append transaction locks the single ``log_head`` row
(``SELECT … FOR UPDATE``, bounded by ``lock_timeout``). The lock is held until commit, so positions are assigned in
commit order: a transaction holding position *n* blocks every later writer until it commits or rolls back, and a
tailing reader can never observe *n+1* without *n*. The same lock gives each event the previous event's hash.
Rejected alternatives: reading behind the oldest in-flight transaction (``pg_snapshot_xmin``) keeps writers
parallel but makes positions sparse and the hash chain impossible to build at write time; a high-water mark with gap
detection has shipped data-loss bugs in mature stores.

Hot path: one transaction per batch and five round trips whatever its size, three of them under the head lock:
``BEGIN`` → advance the consumer checkpoint (if any) and lock the head in one statement → the already-recorded ids
and the streams' versions (read after the lock: a new snapshot) → one statement that inserts the rows (hashed here
first), inserts new streams, advances known ones, moves the head and calls ``pg_notify('allot_events', head)`` so
the relay wakes at once → ``COMMIT``. The store talks to PostgreSQL through its own asyncpg pool whose connections
carry ``lock_timeout`` and are returned without a reset query: SQLAlchemy's pool (a ping per checkout, its own
transaction wrapper, a rollback on return) cost six more round trips per append, more than the append itself.
Driver exceptions are translated into :mod:`allot_contracts.errors` here and nowhere else.

Timeouts: a connection must be made within ``connect_timeout`` seconds (10 by default). Reads (every ``_fetch``) may
be given ``read_timeout`` seconds each and appends ``write_timeout`` seconds each (:mod:`allot_eventstore.bounds`), so
a server that stops answering with its connections left open makes them fail (:class:`Unavailable`, "no answer within
N s", naming the database by its redacted URL, the bound and what set it: ``timeouts_from``) instead of hanging their
caller; None (the default) waits as long as the server takes. The services, the relay, the commands
(``ALLOT_DB_READ_TIMEOUT``) and the web view set them (docs/limits.md). An append whose COMMIT went unanswered says
it may have been recorded (:func:`in_doubt`). :attr:`PostgresEventStore.unreachable` says why the log could not be
reached, from a round trip left unanswered until the next answered one (readiness; a refused append was answered).

While PostgreSQL cannot be reached, asyncpg retries the pool's standing connection and logs each failed attempt with
a traceback: :data:`~allot_eventstore.pg_errors.RECONNECTS` makes that one DEBUG line per outage (the caller's warns).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Collection, Sequence
from typing import Any

import asyncpg

from allot_contracts.envelope import NewEvent, RecordedEvent
from allot_contracts.errors import AlreadyProcessed, ConcurrencyConflict, Fenced, PermanentError, Unavailable
from allot_eventstore.append_plan import AppendPlan, Stale, drop_recorded, event_rows, plan_versions
from allot_eventstore.bounds import Unreachable, bounded, is_unreachable
from allot_eventstore.clock import Clock, system_clock
from allot_eventstore.listen import CHECK_S, Listener
from allot_eventstore.pg_codecs import codecs
from allot_eventstore.pg_errors import CONNECT_TIMEOUT_S, DRIVER_ERRORS, in_doubt, translate
from allot_eventstore.protocol import (
    LAST_POSITION,
    LOCK_TIMEOUT_MS,
    AppendResult,
    Checkpoint,
    EventStore,
    Fence,
    read_ahead,
)
from allot_eventstore.snapshots import PostgresSnapshots
from allot_eventstore.urls import plain_url

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
# Columns as the store's connections read them (:func:`_codecs`): ``recorded_at`` as µs since the epoch, ``payload``
# as the bytes stored (no conversion to a string and back).
_COLUMNS = (
    "position, event_id::text, stream_id, stream_version, type, schema_version, causation_id::text, "
    "correlation_id::text, producer, recorded_at, payload, hash, metadata::text"
)
_SELECT = f"SELECT {_COLUMNS} FROM events"
_ADVANCE_CHECKPOINT = (
    "INSERT INTO checkpoints (consumer, position, updated_at) VALUES ($1, $2, now()) "
    "ON CONFLICT (consumer) DO UPDATE SET position = EXCLUDED.position, updated_at = now() "
    "WHERE checkpoints.position < EXCLUDED.position RETURNING position"
)
_LOCK_HEAD = "SELECT position, hash FROM log_head WHERE id = 1 FOR UPDATE"
# The checkpoint moves and the head is locked in one round trip; ``moved`` is NULL when the consumer is already at
# or past the position (a duplicate delivery: the caller rolls back).
_ADVANCE_AND_LOCK = (
    "WITH moved AS (" + _ADVANCE_CHECKPOINT + ") "
    "SELECT h.position, h.hash, (SELECT position FROM moved) FROM log_head h WHERE h.id = 1 FOR UPDATE"
)
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
# The same, with the rows themselves, for small batches: one round trip instead of COPY's own plus the one above.
_INSERT_AND_FINISH = (
    "WITH inserted AS (INSERT INTO events (" + ", ".join(EVENT_COLUMNS) + ") SELECT * FROM unnest("
    "$7::bigint[], $8::uuid[], $9::text[], $10::integer[], $11::text[], $12::smallint[], $13::uuid[], $14::uuid[], "
    "$15::text[], $16::timestamptz[], $17::json[], $18::bytea[], $19::jsonb[])), " + _FINISH[len("WITH ") :]
)
# Fenced appends (a leader elected with a term): the same last statement also reads the fence's current term. It runs
# after the head lock was taken by an earlier statement, so it sees every term recorded before; ``advance_fence``
# takes the head lock too, so no newer term can be recorded between this read and the commit.
_FENCE_TERM = "(SELECT term FROM fences WHERE name = ${n})"
_FINISH_FENCED = _FINISH + ", " + _FENCE_TERM.format(n=7)
_INSERT_AND_FINISH_FENCED = _INSERT_AND_FINISH + ", " + _FENCE_TERM.format(n=20)
_ADVANCE_FENCE = (
    "INSERT INTO fences (name, term, holder, updated_at) VALUES ($1, $2, $3, now()) "
    "ON CONFLICT (name) DO UPDATE SET term = EXCLUDED.term, holder = EXCLUDED.holder, updated_at = now() "
    "WHERE fences.term < EXCLUDED.term"
)
# Every read of the log is a page in position order (``LIMIT``), an index lookup or an append: none gains from a
# parallel plan, and PostgreSQL's planner picks one for a page of a producer's outputs (the join to their causes): each
# page then starts two worker processes and merges their rows. Measured on the 317k-event log of ``allot bench
# replay``: 6.0–7.5 CPU-s of PostgreSQL per ``replay --verify`` with them, 3.4–4.2 without (docs/benchmarks/replay.md).
_PARALLEL_WORKERS = "0"
# A producer's outputs with the position of their cause, in position order (the producer index, then one lookup of
# the cause by its unique id per output).
_OUTPUTS = (
    "SELECT o.position, o.event_id::text, o.stream_id, o.stream_version, o.type, o.schema_version, "
    "o.causation_id::text, o.correlation_id::text, o.producer, o.recorded_at, o.payload, o.hash, "
    "o.metadata::text, COALESCE(t.position, 0) FROM events o LEFT JOIN events t ON t.event_id = o.causation_id "
    "WHERE o.producer = $1 AND o.position > $2 ORDER BY o.position LIMIT $3"
)
# Whether any of the types has an event up to a position: one lookup in the index by type per type (asked of a single
# ``type = ANY`` with the position, PostgreSQL's generic plan walks the log in position order when there is none).
_HOLDS_ANY = (
    "SELECT EXISTS (SELECT 1 FROM unnest($1::text[]) t "
    "WHERE EXISTS (SELECT 1 FROM events e WHERE e.type = t AND e.position <= $2))"
)
# The newest events of some types: per type, the (type, position) index walked back from a position, then the newest
# of all of them (asked as one ``type = ANY`` ordered by position, the plan walks the log back instead).
_NEWEST = (
    f"SELECT n.* FROM unnest($1::text[]) t CROSS JOIN LATERAL (SELECT {_COLUMNS} FROM events e "
    "WHERE e.type = t AND e.position <= $2 ORDER BY e.position DESC LIMIT $3) n ORDER BY n.position DESC LIMIT $3"
)
_HASH_RANGE = "SELECT position, hash FROM events WHERE position BETWEEN $1 AND $2"
_HASH_LOOKUP = "SELECT position, hash FROM events WHERE position = ANY($1::bigint[])"
RANGE_READ_FACTOR, RANGE_READ_SLACK = 4, 64  # read a range when it holds at most ~4 rows per wanted one
COPY_FROM = 64  # batches of at least this many new events are written with COPY (faster per row)


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
        recorded_at=row[9],
        payload=row[10],
        hash=bytes(row[11]),
        metadata=json.loads(metadata) if metadata and metadata != "{}" else {},
    )


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _already_processed(checkpoint: Checkpoint) -> AlreadyProcessed:
    return AlreadyProcessed(
        f"consumer {checkpoint.consumer} is already at or past position {checkpoint.position}"
    )


async def _lock_head(conn: Any, checkpoint: Checkpoint | None) -> Any:
    """Lock the head row (serialising appenders until commit, module docstring), moving the checkpoint in the same
    round trip when there is one; returns the head's position and hash."""
    if checkpoint is None:
        return await conn.fetchrow(_LOCK_HEAD)
    head_row = await conn.fetchrow(_ADVANCE_AND_LOCK, checkpoint.consumer, checkpoint.position)
    if head_row[2] is None:
        raise _already_processed(checkpoint)
    return head_row


async def _no_reset(_: Any) -> None:
    """Connections go back to the pool as they are: the store leaves no session state behind (every transaction is
    committed or rolled back before release), so the default reset query would be a wasted round trip."""


class PostgresEventStore(PostgresSnapshots, EventStore):
    """An :class:`~allot_eventstore.protocol.EventStore` on PostgreSQL. Create with :meth:`connect`; the connection
    pool opens on first use."""

    def __init__(
        self,
        url: str,
        *,
        clock: Clock = system_clock,
        pool_size: int = 5,
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        fence: Fence | None = None,
        read_timeout: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        write_timeout: float | None = None,
        timeouts_from: str | None = None,
    ) -> None:
        self.url = url
        self.fence = fence  # every append is made under it (unless one names another): see advance_fence
        self._clock = clock
        self._pool_size = pool_size
        self._lock_timeout_ms = lock_timeout_ms
        # seconds per read and per append, from taking a connection to the last answer (module docstring); None: no
        # bound. timeouts_from: what set them (ALLOT_DB_READ_TIMEOUT), named in the error of one that runs out
        self.read_timeout, self.write_timeout = read_timeout, write_timeout
        self.connect_timeout, self.timeouts_from = connect_timeout, timeouts_from
        self.unreachable = Unreachable()
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        clock: Clock = system_clock,
        pool_size: int = 5,
        lock_timeout_ms: int = LOCK_TIMEOUT_MS,
        fence: Fence | None = None,
        read_timeout: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        write_timeout: float | None = None,
        timeouts_from: str | None = None,
    ) -> PostgresEventStore:
        plain_url(url)  # refuse a URL that is not PostgreSQL's now, not on first use
        return cls(
            url,
            clock=clock,
            pool_size=pool_size,
            lock_timeout_ms=lock_timeout_ms,
            fence=fence,
            read_timeout=read_timeout,
            connect_timeout=connect_timeout,
            write_timeout=write_timeout,
            timeouts_from=timeouts_from,
        )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pool.close(), timeout=5)
            pool.terminate()

    async def _connections(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._opening:
                if self._pool is None:
                    try:
                        self._pool = await asyncpg.create_pool(
                            plain_url(self.url),
                            min_size=1,
                            max_size=self._pool_size,
                            timeout=self.connect_timeout,
                            reset=_no_reset,
                            init=codecs,
                            server_settings={
                                "lock_timeout": str(int(self._lock_timeout_ms)),
                                "max_parallel_workers_per_gather": _PARALLEL_WORKERS,
                            },
                        )
                    except DRIVER_ERRORS as exc:
                        error = self._error(exc, "connect")
                        self.unreachable.failed(exc, error)
                        raise error from exc
        return self._pool

    def notifications(self, *, check_s: float = CHECK_S) -> Listener:
        """LISTEN for appends on a connection of its own (``async with``): :attr:`Listener.woken` is set whenever one
        commits (clear it yourself), :attr:`Listener.head` is the newest head seen. The connection is checked every
        ``check_s`` seconds, each check given ``read_timeout``, and replaced when it is lost
        (:mod:`allot_eventstore.listen`)."""
        return Listener(
            plain_url(self.url),
            NOTIFY_CHANNEL,
            check_s=check_s,
            answer_s=self.read_timeout,
            connect_timeout=self.connect_timeout,
        )

    # -- writing -------------------------------------------------------------------------------------------------

    async def append(
        self,
        events: Sequence[NewEvent],
        *,
        producer: str,
        checkpoint: Checkpoint | None = None,
        fence: Fence | None = None,
    ) -> AppendResult:
        if not events and checkpoint is None:
            return AppendResult(positions=[], head=(await self.head())[0])
        fence = fence or self.fence
        pool = await self._connections()
        for careful in (False, True):
            committing = False  # the rows are written: what fails from here on is the COMMIT
            try:
                async with bounded(pool, self.write_timeout) as conn, conn.transaction():
                    result = await self._append(
                        conn, events, producer=producer, checkpoint=checkpoint, careful=careful, fence=fence
                    )
                    committing = True
                self.unreachable.answered()
                return result
            except Stale:
                continue
            except (AlreadyProcessed, ConcurrencyConflict, Fenced):
                self.unreachable.answered()  # refused by a server that answered
                raise
            except (PermanentError, Unavailable):
                raise
            except asyncpg.exceptions.UniqueViolationError as exc:
                if careful:
                    self.unreachable.answered()
                    raise translate(exc) from exc
            except DRIVER_ERRORS as exc:
                error = self._error(exc, "write")
                self.unreachable.failed(exc, error)
                raise in_doubt(error) if committing and is_unreachable(exc) else error from exc
        raise AssertionError("unreachable: the careful attempt returns or raises")

    async def _append(
        self,
        conn: Any,
        events: Sequence[NewEvent],
        *,
        producer: str,
        checkpoint: Checkpoint | None,
        careful: bool,
        fence: Fence | None = None,
    ) -> AppendResult:
        """One attempt. Optimistic (``careful=False``): the recorded ids and stream versions are read before the head
        lock, so the lock is held for two round trips (insert, commit) rather than three; a writer that touched one
        of the streams in between makes the insert fail on a unique key (or a version check fail), and the append is
        made again carefully: lock first, then read."""
        if not events:
            return await self._move_checkpoint(conn, checkpoint, fence)
        known_args = ([e.event_id for e in events], sorted({e.stream_id for e in events}))
        known = None if careful else await conn.fetchrow(_KNOWN, *known_args)
        head_row = await _lock_head(conn, checkpoint)
        position, head_hash = int(head_row[0]), bytes(head_row[1])
        if known is None:
            # Read after the lock (a new snapshot): ids already recorded, current versions of the batch's streams.
            known = await conn.fetchrow(_KNOWN, *known_args)
        fresh, skipped = drop_recorded(events, set(known[0]))
        if not fresh:
            if fence is not None and checkpoint is not None:
                await self._check_fence(conn, fence)  # the checkpoint moved under the term
            return AppendResult(positions=[], skipped=skipped, head=position)
        plan = plan_versions(fresh, dict(zip(known[1] or (), known[2] or ())), position, careful=careful)
        await self._write(conn, plan, producer=producer, head_hash=head_hash, fence=fence)
        return AppendResult(positions=plan.positions, skipped=skipped, head=plan.head)

    async def _move_checkpoint(
        self, conn: Any, checkpoint: Checkpoint | None, fence: Fence | None
    ) -> AppendResult:
        """An append of no events: only the checkpoint moves (under the fence's term, when there is one)."""
        if fence is not None:  # rare (a checkpoint alone, under a term): lock, then check, then move
            await conn.fetchrow(_LOCK_HEAD)
            await self._check_fence(conn, fence)
        if (
            checkpoint is not None
            and await conn.fetchval(_ADVANCE_CHECKPOINT, checkpoint.consumer, checkpoint.position) is None
        ):
            raise _already_processed(checkpoint)
        return AppendResult(positions=[], head=int(await conn.fetchval("SELECT position FROM log_head")))

    async def _write(
        self, conn: Any, plan: AppendPlan, *, producer: str, head_hash: bytes, fence: Fence | None
    ) -> None:
        """Insert the planned rows (hashed on the way), then advance the streams and the head in the same statement
        (small batches) or right after COPY (large ones); under a fence, refuse when a newer term was recorded."""
        now = self._clock()
        chain = [head_hash]
        rows = event_rows(plan, producer=producer, now=now, fence=fence, chain=chain)
        finish = plan.finish()
        if len(plan.planned) >= COPY_FROM:
            # Rows are built (canonical payload, chain hash) while COPY streams them: asyncpg sends every ~512 kB,
            # so PostgreSQL parses and indexes one part of the batch while the next is being hashed here.
            await conn.copy_records_to_table("events", records=rows, columns=EVENT_COLUMNS)
            if len(chain) != 2:
                raise RuntimeError("COPY ended before every event was written")
            if fence is None:
                await conn.execute(_FINISH, *finish, chain[1])
            else:
                self._fenced(fence, await conn.fetchrow(_FINISH_FENCED, *finish, chain[1], fence.name))
        else:
            columns = [list(column) for column in zip(*rows)]
            if fence is None:
                await conn.execute(_INSERT_AND_FINISH, *finish, chain[1], *columns)
            else:
                row = await conn.fetchrow(_INSERT_AND_FINISH_FENCED, *finish, chain[1], *columns, fence.name)
                self._fenced(fence, row)

    @staticmethod
    def _fenced(fence: Fence, row: Any) -> None:
        """Raise :class:`Fenced` (the transaction then rolls back) when the finishing statement read a newer term."""
        current = row[1]
        if current is not None and int(current) > fence.term:
            raise Fenced(fence.name, fence.term, int(current))

    async def _check_fence(self, conn: Any, fence: Fence) -> None:
        current = await conn.fetchval("SELECT term FROM fences WHERE name = $1", fence.name)
        if current is not None and int(current) > fence.term:
            raise Fenced(fence.name, fence.term, int(current))

    async def advance_fence(self, fence: Fence, *, holder: str) -> tuple[int, str]:
        """Record ``fence.term`` as the current term of ``fence.name`` (unless a newer one is) under the head lock, so
        that every append under an older term either committed before this returns or is refused after."""
        pool = await self._connections()
        try:
            async with bounded(pool, self.write_timeout) as conn, conn.transaction():
                await conn.fetchrow(_LOCK_HEAD)
                await conn.execute(_ADVANCE_FENCE, fence.name, fence.term, holder)
                row = await conn.fetchrow("SELECT term, holder FROM fences WHERE name = $1", fence.name)
                return int(row[0]), str(row[1])
        except DRIVER_ERRORS as exc:
            raise self._error(exc, "write") from exc

    # -- reading -------------------------------------------------------------------------------------------------

    def _error(self, exc: BaseException, bound: str, *, reading: bool = False) -> Exception:
        """``exc`` as :func:`translate` says it, naming this database and, for a ``bound`` (``read``, ``write``,
        ``connect``) that ran out, its seconds and what set them (:attr:`timeouts_from`)."""
        seconds = {"read": self.read_timeout, "write": self.write_timeout}.get(bound, self.connect_timeout)
        set_by = f", from {self.timeouts_from}" if self.timeouts_from and bound != "connect" else ""
        return translate(
            exc, reading=reading, timeout=seconds, url=self.url, bound=f"{bound} timeout{set_by}"
        )

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        pool = await self._connections()
        try:
            async with bounded(pool, self.read_timeout) as conn:  # closed under a read left unanswered
                rows = list(await conn.fetch(sql, *args))
        except DRIVER_ERRORS as exc:
            error = self._error(exc, "read", reading=True)
            self.unreachable.failed(exc, error)
            raise error from exc
        self.unreachable.answered()
        return rows

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

    async def outputs(
        self, producer: str, *, after: int = 0, page: int = 5000
    ) -> AsyncIterator[tuple[int, RecordedEvent]]:
        # the next page is read while the caller works through this one (outputs are read to the end, by replay)
        def page_after(last: Any) -> Awaitable[list[Any]]:
            return self._fetch(_OUTPUTS, producer, after if last is None else last[0], page)

        async with contextlib.aclosing(read_ahead(page_after, page)) as pages:
            async for rows in pages:
                for row in rows:
                    yield row[13], _row_to_record(row)

    async def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        rows = await self._fetch(f"{_SELECT} WHERE stream_id = $1 ORDER BY stream_version", stream_id)
        return [_row_to_record(r) for r in rows]

    async def latest_types(self, stream_ids: Collection[str], types: Collection[str]) -> dict[str, str]:
        rows = await self._fetch(
            "SELECT DISTINCT ON (stream_id) stream_id, type FROM events "
            "WHERE stream_id = ANY($1::text[]) AND type = ANY($2::text[]) ORDER BY stream_id, stream_version DESC",
            sorted(set(stream_ids)),
            sorted(set(types)),
        )
        return {r[0]: r[1] for r in rows}

    async def holds_any(self, types: Collection[str], *, until: int | None = None) -> bool:
        rows = await self._fetch(_HOLDS_ANY, sorted(set(types)), LAST_POSITION if until is None else until)
        return bool(rows[0][0])

    async def newest(
        self, types: Collection[str], *, limit: int, until: int | None = None
    ) -> list[RecordedEvent]:
        if limit <= 0 or not types:
            return []
        rows = await self._fetch(
            _NEWEST, sorted(set(types)), LAST_POSITION if until is None else until, limit
        )
        return [_row_to_record(r) for r in reversed(rows)]

    async def recorded_ids(self, event_ids: Collection[str]) -> set[str]:
        rows = await self._fetch(
            "SELECT event_id::text FROM events WHERE event_id = ANY($1::uuid[])", sorted(set(event_ids))
        )
        return {r[0] for r in rows}

    async def hashes(self, positions: Collection[int]) -> dict[int, bytes]:
        """Positions close together (a consumer's batch: its events and the ones before them) are read as one range
        of the primary key, several times cheaper for PostgreSQL than a lookup per position; scattered ones by
        lookup, so a claim far from the rest never makes it read the log in between."""
        wanted = sorted({p for p in positions if p > 0})
        if not wanted:
            return {}
        if wanted[-1] - wanted[0] < RANGE_READ_FACTOR * len(wanted) + RANGE_READ_SLACK:
            rows = await self._fetch(_HASH_RANGE, wanted[0], wanted[-1])
        else:
            rows = await self._fetch(_HASH_LOOKUP, wanted)
        present = set(wanted)
        return {int(r[0]): bytes(r[1]) for r in rows if r[0] in present}

    async def positions_of(self, event_ids: Collection[str]) -> dict[str, int]:
        valid = sorted({event_id for event_id in event_ids if _is_uuid(event_id)})
        if not valid:
            return {}
        rows = await self._fetch(
            "SELECT event_id::text, position FROM events WHERE event_id = ANY($1::uuid[])", valid
        )
        return {r[0]: int(r[1]) for r in rows}

    async def head(self) -> tuple[int, bytes]:
        rows = await self._fetch("SELECT position, hash FROM log_head WHERE id = 1")
        return int(rows[0][0]), bytes(rows[0][1])

    async def get_checkpoint(self, consumer: str) -> int:
        rows = await self._fetch("SELECT position FROM checkpoints WHERE consumer = $1", consumer)
        return int(rows[0][0]) if rows else 0

    async def advance_checkpoint(self, consumer: str, position: int) -> None:
        await self._fetch(_ADVANCE_CHECKPOINT, consumer, position)

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
