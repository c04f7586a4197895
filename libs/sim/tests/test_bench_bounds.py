"""The benchmarks read and write the event log as the services and the commands do, each round trip bounded
(``ALLOT_DB_READ_TIMEOUT``): a database that stops answering ends a run in time, saying which database, which bound
and what sets it, where an unbounded store waited for ever (or, for a read behind a lock, for the lock's 10 s)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.urls import plain_url, redact
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

READ = "(read timeout, from ALLOT_DB_READ_TIMEOUT)"


@contextlib.asynccontextmanager
async def locked(database_url: str, table: str) -> AsyncIterator[None]:
    """``table`` locked against every reader while the block runs: a read of it gets no answer (until the lock's own
    timeout, 10 s)."""
    holder = await asyncpg.connect(plain_url(database_url))
    try:
        async with holder.transaction():
            await holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await holder.close()


async def test_a_restart_benchmark_read_left_unanswered_fails_within_the_read_bound(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from allot_sim.bench.restart import _instances

    monkeypatch.setenv("ALLOT_DB_READ_TIMEOUT", "1")
    async with locked(database_url, "events"):
        with pytest.raises(Unavailable) as raised:
            await asyncio.wait_for(_instances(database_url), 8)  # was: the lock's 10 s, then "event log busy"
    assert (
        str(raised.value) == f"PostgreSQL at {redact(database_url)} unavailable: no answer within 1 s {READ}"
    )


async def test_a_timed_service_start_is_bounded_as_the_service_is(database_url: str) -> None:
    """``allot bench restart``'s process per service reads the log under the service's own bound."""
    env = {"ALLOT_DB_READ_TIMEOUT": "1", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "allot_sim.bench.service_start", database_url, "binder", "binder", "0"]
    async with locked(database_url, "checkpoints"):
        done = await asyncio.to_thread(subprocess.run, command, env=env, capture_output=True, timeout=9)
    assert done.returncode != 0
    assert (
        f"PostgreSQL at {redact(database_url)} unavailable: no answer within 1 s {READ}"
        in done.stderr.decode()
    )


async def test_an_append_benchmark_append_left_unanswered_fails_within_the_write_bound(
    database_url: str, database_proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    from allot_sim.bench.append import WORKLOADS, Ours

    monkeypatch.setenv("ALLOT_DB_READ_TIMEOUT", "1")  # an append: 1 s and the lock's 10
    url = through(database_url, database_proxy)
    ours = Ours(10, WORKLOADS["pod.placed"])
    await ours.setup(url)
    appending: asyncio.Future[None] | None = None
    try:
        assert ours.store is not None
        await ours.store.head()  # connected
        database_proxy.freeze()
        appending = asyncio.ensure_future(ours.run(ours.prepare_run(0, 10)))
        # not cancelled when it does not end: that would wait for its rollback's answer
        await asyncio.wait([appending], timeout=20)
        assert appending.done(), "the append waited for ever"  # was
        with pytest.raises(Unavailable) as raised:
            await appending
        assert str(raised.value) == (
            f"PostgreSQL at {redact(url)} unavailable: no answer within 11 s (write timeout, from ALLOT_DB_READ_TIMEOUT)"
        )
    finally:
        database_proxy.thaw()
        if appending is not None:
            with contextlib.suppress(Exception):
                await appending  # answered once thawed
        await ours.close()
