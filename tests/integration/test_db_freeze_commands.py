"""The commands that open the event log themselves (``allot migrate``, and ``replay``, ``get``, ``log``, ``what-if``
and the like through :func:`allot_stack.connect.bounded_store`) against a PostgreSQL that takes the connection and
then stops answering: each is bounded as a service is (``ALLOT_DB_READ_TIMEOUT``) and ends saying what got no
answer, instead of waiting for ever; a migration that rightly waits long (for the lock another one holds) is not cut
short."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncpg
import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.migrate import MIGRATION_LOCK_KEY
from allot_eventstore.protocol import EventStore
from allot_eventstore.urls import plain_url, redact
from allot_stack.connect import on_log
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

ALLOT = str(Path(sys.executable).parent / "allot")


async def test_a_read_of_a_command_left_unanswered_fails_in_time(
    database_url: str, database_proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOT_DB_READ_TIMEOUT", "1")

    async def frozen_after_the_first_read(store: EventStore) -> object:
        await store.head()  # connected, and answered
        database_proxy.freeze()
        return await store.read(limit=10)

    with pytest.raises(Unavailable) as raised:
        await asyncio.wait_for(on_log(frozen_after_the_first_read, through(database_url, database_proxy)), 20)
    where = redact(through(database_url, database_proxy))
    assert str(raised.value) == (
        f"PostgreSQL at {where} unavailable: no answer within 1 s (read timeout, from ALLOT_DB_READ_TIMEOUT)"
    )


async def test_allot_migrate_waits_for_the_lock_but_not_for_a_database_that_stopped_answering(
    empty_database_url: str, database_proxy: TcpProxy
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {
        "ALLOT_DATABASE_URL": through(empty_database_url, database_proxy),
        "ALLOT_DB_READ_TIMEOUT": "1",
    }
    holder = await asyncpg.connect(plain_url(empty_database_url))  # another migration, as far as it can tell
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        process = await asyncio.create_subprocess_exec(
            ALLOT, "migrate", env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            for _ in range(200):  # until it waits for the lock
                waiting = await holder.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())"
                )
                if waiting:
                    break
                await asyncio.sleep(0.1)
            assert waiting, "the migration never waited for the lock"
            await asyncio.sleep(3)  # three times its read timeout: a wait for the lock is not a silent server
            assert process.returncode is None
            database_proxy.freeze()
            out, err = await asyncio.wait_for(process.communicate(), 20)  # was: waits for ever
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        await holder.close()
    assert process.returncode == 1, err.decode()
    assert err.decode() == (
        f"allot: error: migrating the database schema: PostgreSQL at {redact(env['ALLOT_DATABASE_URL'])} "
        "unavailable: no answer within 1 s (read timeout, from ALLOT_DB_READ_TIMEOUT) "
        "(check ALLOT_DATABASE_URL, or start the dev stack with `allot up`)\n"
    )
    assert out == b""
