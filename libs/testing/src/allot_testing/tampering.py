"""What an attacker who holds the database can do to the log, for the tests that must catch it."""

from __future__ import annotations

import asyncpg

from allot_contracts.envelope import GENESIS_HASH
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url


async def rewrite_with_recomputed_hashes(
    url: str, position: int, change: str = "producer = 'someone-else'", *values: object
) -> None:
    """Edit the event at ``position`` (``change``: the SET clause, its parameters ``values`` from ``$2``; by
    default its producer), then recompute every hash from it to the head and the head itself, with the append-only
    trigger switched off for the length of the rewrite: the chain is intact again, only a signed checkpoint or an
    outside copy can tell."""
    store = PostgresEventStore.connect(url)
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute(f"UPDATE events SET {change} WHERE position = $1", position, *values)
        prev = GENESIS_HASH
        if position > 1:
            prev = (await store.read(after=position - 2, limit=1))[0].hash
        async for record in store.iterate(after=position - 1):
            prev = record.expected_hash(prev)
            await conn.execute("UPDATE events SET hash = $1 WHERE position = $2", prev, record.position)
        await conn.execute("UPDATE log_head SET hash = $1 WHERE id = 1", prev)
        await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()
        await store.close()
