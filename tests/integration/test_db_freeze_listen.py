"""The log's wake-ups (LISTEN on a connection of its own, what the relay waits on between its polls) survive losing
that connection: a session the server closed, or one that stopped answering, is noticed within a check and its
bound and replaced once the server answers; the new session wakes its caller at once (for what was appended while
none listened) and is woken by every append again."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from allot_eventstore.listen import Listener
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_testing.builders import an_event
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

CHECK_S = 0.2


async def woken_by_an_append(listening: Listener, store: PostgresEventStore) -> None:
    """The next append wakes the listener, and its head is the append's."""
    listening.woken.clear()
    head = (await store.append([an_event()], producer="api")).head
    await asyncio.wait_for(listening.woken.wait(), timeout=2)
    assert listening.head == head


async def test_a_listening_session_the_server_closed_is_replaced(
    database_url: str, event_store: PostgresEventStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="allot.listen")
    listener = PostgresEventStore.connect(database_url, read_timeout=1.0)
    async with listener.notifications(check_s=CHECK_S) as listening:
        await woken_by_an_append(listening, event_store)
        listening.woken.clear()
        admin = await asyncpg.connect(plain_url(database_url))
        try:  # the listening session goes (as in a restart of the server); the store's pool reconnects by itself
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        await asyncio.wait_for(listening.woken.wait(), timeout=5)  # was: never woken again
        assert listening.listening
        await woken_by_an_append(listening, event_store)
    assert "not listening for new events" in caplog.text
    assert "listening for new events again after" in caplog.text


async def test_a_listening_session_left_unanswered_is_noticed_in_time_and_replaced(
    database_url: str,
    database_proxy: TcpProxy,
    event_store: PostgresEventStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="allot.listen")
    listener = PostgresEventStore.connect(
        through(database_url, database_proxy), read_timeout=1.0, connect_timeout=1.0
    )
    async with listener.notifications(check_s=CHECK_S) as listening:
        await woken_by_an_append(listening, event_store)
        database_proxy.freeze()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CHECK_S + 1.0 + 2.0  # a check, its bound, and some slack
            while listening.listening:  # was: listening for ever on a session that says nothing
                assert loop.time() < deadline, "the silent session was not noticed"
                await asyncio.sleep(0.05)
            assert "not listening for new events (TimeoutError: no answer within 1 s)" in caplog.text
            listening.woken.clear()
        finally:
            database_proxy.thaw()
        await asyncio.wait_for(listening.woken.wait(), timeout=5)  # a new session listens
        await woken_by_an_append(listening, event_store)
    assert "listening for new events again after" in caplog.text
