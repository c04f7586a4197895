"""Signed checkpoints on PostgreSQL (table ``log_checkpoints``, migration 0004) and the relay's sealer.

:class:`Sealer` is the relay's hook (``Relay(on_published=...)``): after each round of publishing, the relay passes the
position it has published through; when the :class:`~allot_eventstore.anchor.CheckpointPolicy` says a checkpoint is
due (every N events or T seconds, the time read from an injected clock), the sealer reads that event's chain hash,
signs it and records the checkpoint. It never stops the relay: a failure to seal is logged and retried on the next
round. :func:`anchor_check` streams the checkpoints for :func:`~allot_eventstore.verify.verify_chain`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import KW_ONLY, dataclass, field

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from allot_contracts.errors import ControlPlaneError, SchemaMismatch
from allot_eventstore.anchor import AnchorCheck, CheckpointPolicy, SignedCheckpoint, key_id, sign_checkpoint
from allot_eventstore.clock import Clock, system_clock
from allot_eventstore.postgres import PostgresEventStore

log = logging.getLogger("allot.relay.anchor")

_COLUMNS = "position, key_id, hash, signed_at, signature"


def _checkpoint(row: tuple[int, str, bytes, int, bytes]) -> SignedCheckpoint:
    return SignedCheckpoint(
        position=int(row[0]),
        key_id=str(row[1]),
        hash=bytes(row[2]),
        signed_at=int(row[3]),
        signature=bytes(row[4]),
    )


class PostgresCheckpoints:
    """The ``log_checkpoints`` table, through the event store's connection pool."""

    def __init__(self, store: PostgresEventStore) -> None:
        self._store = store

    async def record(self, checkpoint: SignedCheckpoint) -> None:
        """Record ``checkpoint``; one already recorded at that position with that key is kept as it is."""
        await self._store._fetch(
            f"INSERT INTO log_checkpoints ({_COLUMNS}) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (position, key_id) DO NOTHING",
            checkpoint.position,
            checkpoint.key_id,
            checkpoint.hash,
            checkpoint.signed_at,
            checkpoint.signature,
        )

    async def latest(self, key: str | None = None) -> SignedCheckpoint | None:
        """The newest checkpoint (of key ``key`` if given)."""
        where, args = ("WHERE key_id = $1 ", [key]) if key is not None else ("", [])
        rows = await self._store._fetch(
            f"SELECT {_COLUMNS} FROM log_checkpoints {where}ORDER BY position DESC, key_id LIMIT 1", *args
        )
        return _checkpoint(rows[0]) if rows else None

    async def exists(self) -> bool:
        rows = await self._store._fetch("SELECT to_regclass('log_checkpoints') IS NOT NULL")
        return bool(rows[0][0])

    async def count(self) -> int:
        rows = await self._store._fetch("SELECT count(*) FROM log_checkpoints")
        return int(rows[0][0])

    async def iterate(self, *, page: int = 1000) -> AsyncIterator[SignedCheckpoint]:
        """Every checkpoint in (position, key id) order, ``page`` rows at a time."""
        position, key = -1, ""
        while True:
            rows = await self._store._fetch(
                f"SELECT {_COLUMNS} FROM log_checkpoints WHERE (position, key_id) > ($1, $2) "
                "ORDER BY position, key_id LIMIT $3",
                position,
                key,
                page,
            )
            for row in rows:
                yield _checkpoint(row)
            if len(rows) < page:
                return
            position, key = int(rows[-1][0]), str(rows[-1][1])


async def anchor_check(store: PostgresEventStore, keys: Mapping[str, Ed25519PublicKey]) -> AnchorCheck:
    """An :class:`AnchorCheck` over ``store``'s checkpoints (counted only, when no key is configured);
    :class:`SchemaMismatch` when the database predates them."""
    checkpoints = PostgresCheckpoints(store)
    if not await checkpoints.exists():
        raise SchemaMismatch(
            "the event log has no log_checkpoints table (its schema is older than this version): run `allot migrate`"
        )
    if not keys:
        return AnchorCheck(None, keys, unchecked=await checkpoints.count())
    return AnchorCheck(checkpoints.iterate(), keys)


@dataclass(eq=False)
class Sealer:
    """Signs a checkpoint of the published head when the policy says one is due (see the module docstring)."""

    store: PostgresEventStore
    checkpoints: PostgresCheckpoints
    key: Ed25519PrivateKey
    policy: CheckpointPolicy
    _: KW_ONLY
    clock: Clock = system_clock
    last: SignedCheckpoint | None = field(default=None, init=False)
    sealed: int = field(default=0, init=False)  # checkpoints this sealer recorded
    _loaded: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.key_id = key_id(self.key.public_key())

    async def __call__(self, position: int) -> None:
        try:
            await self.seal(position)
        except (ControlPlaneError, OSError) as exc:
            log.warning(
                "could not seal the log at position %d (retried on the next round): %s", position, exc
            )

    async def seal(self, position: int) -> SignedCheckpoint | None:
        """Sign and record a checkpoint at ``position`` if one is due; returns it (None when not due)."""
        if not self._loaded:
            self.last = await self.checkpoints.latest(self.key_id)
            self._loaded = True
        now = self.clock()
        if not self.policy.due(self.last, position, now):
            return None
        records = await self.store.read(after=position - 1, limit=1)
        if not records or records[0].position != position:
            return None
        checkpoint = sign_checkpoint(self.key, position=position, hash=records[0].hash, signed_at=now)
        await self.checkpoints.record(checkpoint)
        self.last = checkpoint
        self.sealed += 1
        log.info("sealed the log at position %d (key %s)", position, self.key_id)
        return checkpoint
