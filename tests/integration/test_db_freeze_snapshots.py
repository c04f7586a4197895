"""A snapshot written to a PostgreSQL that stops answering mid-write (the statement arrived, its answer never comes
back): the write fails within the append bound (``write_timeout``) with the error an append gets, leaves the
snapshots as they were (the server rolls the transaction back), and a running service only logs it; its next
snapshot is written once the server answers. Both ways a service writes one: in process and from a forked child."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from allot_eventstore.pg_errors import LogUnavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import Snapshot
from allot_eventstore.urls import plain_url, redact
from allot_runtime import forked
from allot_runtime.processor import Host
from allot_runtime.snapshots import Snapshots
from allot_testing.processors import EchoProcessor
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

BOUND_S = 1.0
NO_ANSWER = "PostgreSQL at {url} unavailable: no answer within 1 s (write timeout)"  # the database, redacted


def made(position: int) -> Snapshot:
    state = f"state at {position}".encode()
    return Snapshot(
        consumer="echo", position=position, format=1, config_hash="h", digest="d", state=state, state_hash=b""
    )


@contextlib.asynccontextmanager
async def frozen_mid_write(database_url: str, database_proxy: TcpProxy) -> AsyncIterator[None]:
    """While the block runs, the snapshots table is locked; once a write waits for that lock (its statement has
    reached the server), the network freezes and the lock is released: the server goes on with the write, and its
    answers stay in the frozen network. Thawed on the way out."""
    holder = await asyncpg.connect(plain_url(database_url))
    try:
        async with holder.transaction():
            await holder.execute("LOCK TABLE snapshots IN SHARE ROW EXCLUSIVE MODE")
            yield
            deadline = time.monotonic() + 10
            while not await waiting_for_the_lock(holder):
                assert time.monotonic() < deadline, "no snapshot write reached the server"
                await asyncio.sleep(0.05)
            database_proxy.freeze()
    finally:
        await holder.close()


async def in_time(task: asyncio.Future[object]) -> None:
    """Wait for ``task`` (not cancelled when it does not end: cancelling a write waits for its rollback's answer)."""
    done, _ = await asyncio.wait([task], timeout=10)
    assert done, "no outcome within 10 s"


async def waiting_for_the_lock(conn: asyncpg.Connection) -> bool:
    # afresh: pg_stat_activity is otherwise read once per transaction
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE 'INSERT INTO snapshots%'"
        )
    )


async def test_a_snapshot_write_whose_answer_never_comes_fails_in_time_and_changes_nothing(
    database_url: str, database_proxy: TcpProxy, event_store: PostgresEventStore
) -> None:
    store = PostgresEventStore.connect(
        through(database_url, database_proxy),
        read_timeout=BOUND_S,
        write_timeout=BOUND_S,
        connect_timeout=BOUND_S,
    )
    try:
        await store.write_snapshot(made(10), keep=1)
        async with frozen_mid_write(database_url, database_proxy):
            writing = asyncio.create_task(store.write_snapshot(made(20), keep=1))
        await in_time(writing)  # was: waits for ever
        with pytest.raises(LogUnavailable) as raised:
            await writing
        assert str(raised.value) == NO_ANSWER.format(url=redact(store.url))
        assert store.unreachable.reason == str(raised.value)
        assert await event_store.snapshot_positions("echo") == [10]  # neither written nor pruned
        database_proxy.thaw()
        await store.write_snapshot(made(20), keep=1)
        assert store.unreachable.reason is None
        assert await event_store.snapshot_positions("echo") == [20]
    finally:
        database_proxy.thaw()
        await store.close()


@pytest.mark.parametrize(
    "fork",
    [
        pytest.param(False, id="in-process"),
        pytest.param(
            True,
            id="forked-child",
            marks=pytest.mark.skipif(
                not forked.AVAILABLE,
                reason="a forked snapshot child needs os.fork, which this platform lacks",
            ),
        ),
    ],
)
async def test_a_running_service_logs_a_snapshot_it_cannot_write_and_writes_the_next(
    database_url: str,
    database_proxy: TcpProxy,
    event_store: PostgresEventStore,
    caplog: pytest.LogCaptureFixture,
    fork: bool,
) -> None:
    caplog.set_level(logging.INFO, logger="allot.snapshots")
    store = PostgresEventStore.connect(
        through(database_url, database_proxy),
        read_timeout=BOUND_S,
        write_timeout=BOUND_S,
        connect_timeout=BOUND_S,
    )
    host = Host(EchoProcessor(), name="echo")
    host.position = 10
    snapshots = Snapshots(store, every=10, keep=2, config_hash="h", fork=fork)
    try:
        await store.snapshot_positions("echo")  # the service's pool is open
        async with frozen_mid_write(database_url, database_proxy):
            snapshots.start(host)
        assert snapshots.writing is not None
        await in_time(snapshots.writing)  # was: waits for ever (and so does the service's stop)
        assert not await snapshots.writing
        assert "at position 10" in caplog.text and NO_ANSWER.format(url=redact(store.url)) in caplog.text
        assert await event_store.snapshot_positions("echo") == []
        database_proxy.thaw()
        host.position = 20
        snapshots.start(host)
        assert await asyncio.wait_for(snapshots.writing, 10)
        assert await event_store.snapshot_positions("echo") == [20]
    finally:
        database_proxy.thaw()
        await store.close()
