"""The event store over a PostgreSQL that stops answering mid-append (the statement sent, its answer never coming
back): the append fails within its bound (``write_timeout``) instead of hanging, records nothing (the server rolls
back the transaction whose connection was closed), and the same append made again once the server answers records
every event once. The store says why the log cannot be reached until a round trip is answered again (readiness)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url, redact
from allot_testing.builders import an_event
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration


async def test_an_append_whose_answer_never_comes_fails_in_time_records_nothing_and_can_be_made_again(
    database_url: str, database_proxy: TcpProxy, event_store: PostgresEventStore
) -> None:
    store = PostgresEventStore.connect(
        through(database_url, database_proxy), read_timeout=1.0, write_timeout=1.0
    )
    events = [an_event() for _ in range(3)]
    holder = await asyncpg.connect(plain_url(database_url))
    try:
        await store.head()  # the pool is open
        async with holder.transaction():
            # the append waits for this lock
            await holder.execute("SELECT 1 FROM log_head WHERE id = 1 FOR UPDATE")
            appending = asyncio.create_task(store.append(events, producer="api"))
            await asyncio.sleep(0.3)
            database_proxy.freeze()  # whatever the server answers from now on is not delivered
        # the lock is released: the server goes on with the append, its answers stay in the frozen network
        with pytest.raises(Unavailable) as raised:
            await asyncio.wait_for(appending, 10)  # was: waits for ever
        where = f"PostgreSQL at {redact(store.url)}"  # the database, its password hidden
        assert str(raised.value) == f"{where} unavailable: no answer within 1 s (write timeout)"
        assert store.unreachable.reason == str(raised.value)
        with pytest.raises(Unavailable) as raised:
            await asyncio.wait_for(store.head(), 10)  # a read fails in time too
        assert str(raised.value) == f"{where} unavailable: no answer within 1 s (read timeout)"
        assert not await event_store.recorded_ids([e.event_id for e in events])  # all or nothing: nothing
        database_proxy.thaw()
        await store.append(events, producer="api")  # the same append again
        assert store.unreachable.reason is None
        recorded = await event_store.read(producer="api", limit=100)
        assert [e.event_id for e in recorded] == [e.event_id for e in events]  # each once
    finally:
        await holder.close()
        await store.close()
