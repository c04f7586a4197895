"""The ``snapshots`` table (migration 0005): the PostgreSQL side of the snapshot methods of the event store.

A mixin of :class:`~allot_eventstore.postgres.PostgresEventStore` (kept apart so the store's module stays small). A
snapshot is written with its state's SHA-256 computed here, one row per (consumer, position): a newer write at the
same position replaces the row (a snapshot there made by other code, e.g. before an upgrade, would otherwise be
restored and refused on every start); writing prunes the consumer's older rows in the same transaction, so at most
``keep`` stay. A write is bounded as an append is (``write_timeout``, :mod:`allot_eventstore.bounds`): against a server
that stops answering it fails in time with :class:`~allot_eventstore.pg_errors.LogUnavailable`, and the server rolls
back whatever of it had arrived (the rows stay as they were).
"""

from __future__ import annotations

import hashlib
from typing import Any

from allot_eventstore.bounds import Unreachable, bounded
from allot_eventstore.pg_errors import DRIVER_ERRORS
from allot_eventstore.protocol import LAST_POSITION, Snapshot

_INSERT = (
    "INSERT INTO snapshots (consumer, position, format, config_hash, digest, state, state_hash) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (consumer, position) DO UPDATE SET format = EXCLUDED.format, "
    "config_hash = EXCLUDED.config_hash, digest = EXCLUDED.digest, state = EXCLUDED.state, "
    "state_hash = EXCLUDED.state_hash, created_at = now()"
)
_PRUNE = (
    "DELETE FROM snapshots WHERE consumer = $1 AND position NOT IN "
    "(SELECT position FROM snapshots WHERE consumer = $1 ORDER BY position DESC LIMIT $2)"
)
_LATEST = (
    "SELECT consumer, position, format, config_hash, digest, state, state_hash FROM snapshots "
    "WHERE consumer = $1 AND format = $2 AND config_hash = $3 AND position <= $4 ORDER BY position DESC LIMIT 1"
)


def state_hash(state: bytes) -> bytes:
    return hashlib.sha256(state).digest()


class PostgresSnapshots:
    """Snapshot methods over the store's pool (``_connections``), query helper (``_fetch``), append bound
    (``write_timeout``), errors (``_error``) and record of an unanswered round trip (``unreachable``)."""

    write_timeout: float | None
    unreachable: Unreachable

    async def _connections(self) -> Any:  # pragma: no cover - provided by the store
        raise NotImplementedError

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:  # pragma: no cover - provided by the store
        raise NotImplementedError

    def _error(self, exc: BaseException, bound: str) -> Exception:  # pragma: no cover - provided by the store
        raise NotImplementedError

    async def write_snapshot(self, snapshot: Snapshot, *, keep: int) -> None:
        pool = await self._connections()
        try:
            async with bounded(pool, self.write_timeout) as conn, conn.transaction():
                await conn.execute(
                    _INSERT,
                    snapshot.consumer,
                    snapshot.position,
                    snapshot.format,
                    snapshot.config_hash,
                    snapshot.digest,
                    snapshot.state,
                    state_hash(snapshot.state),
                )
                await conn.execute(_PRUNE, snapshot.consumer, max(keep, 1))
        except DRIVER_ERRORS as exc:
            error = self._error(exc, "write")
            self.unreachable.failed(exc, error)
            raise error from exc
        self.unreachable.answered()

    async def latest_snapshot(
        self, consumer: str, *, format: int, config_hash: str, until: int | None = None
    ) -> Snapshot | None:
        limit = until if until is not None else LAST_POSITION
        rows = await self._fetch(_LATEST, consumer, format, config_hash, limit)
        if not rows:
            return None
        row = rows[0]
        return Snapshot(
            consumer=row[0],
            position=int(row[1]),
            format=int(row[2]),
            config_hash=row[3],
            digest=row[4],
            state=bytes(row[5]),
            state_hash=bytes(row[6]),
        )

    async def snapshot_positions(self, consumer: str) -> list[int]:
        rows = await self._fetch(
            "SELECT position FROM snapshots WHERE consumer = $1 ORDER BY position", consumer
        )
        return [int(r[0]) for r in rows]
