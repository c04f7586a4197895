"""``allot apply`` when PostgreSQL goes away: transient failures are retried with backoff, a batch that did land
before the connection broke is not recorded twice, and when the database stays away the command says exactly which
documents were recorded and which were not."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.migrate import migrate
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.errors import UsageError
from allot_intake.manifests import to_input
from allot_stack import apply as apply_cmd
from allot_stack import connect, logtools
from allot_testing.builders import a_pod
from allot_testing.servers import private_postgres

pytestmark = pytest.mark.integration


def _inputs(count: int) -> list:
    return [
        to_input(Document(source="pods.yaml", index=i, body=a_pod(f"p{i:04d}", cpu="1")))
        for i in range(count)
    ]


async def _pod_streams(url: str) -> Counter:
    store = PostgresEventStore.connect(url)
    try:
        return Counter([r.stream_id async for r in store.iterate(types=["pod.submitted"])])
    finally:
        await store.close()


@pytest.fixture
def pg(tmp_path: Path):
    with private_postgres(tmp_path) as server:
        asyncio.run(migrate(server.url))
        yield server


def _restart_in_background(server, after: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (threading.Event().wait(after), server.start()), daemon=True)
    thread.start()
    return thread


async def test_a_restart_mid_apply_is_retried_and_every_document_is_recorded_once(pg, monkeypatch, capsys):
    monkeypatch.setattr(apply_cmd, "CHUNK_EVENTS", 100)
    monkeypatch.setattr(connect, "RETRY_DELAYS", (0.3, 0.6, 1.0, 2.0, 4.0, 8.0))
    real_append = PostgresEventStore.append
    calls = {"n": 0}
    restart: list[threading.Thread] = []

    async def append_then_lose_the_server(self, events, **kwargs):
        result = await real_append(self, events, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:  # the second batch commits, then the server dies before the client hears back
            pg.stop()
            restart.append(_restart_in_background(pg, 1.0))
            raise Unavailable("PostgreSQL unavailable: connection reset by peer")  # as the store reports it
        return result

    monkeypatch.setattr(PostgresEventStore, "append", append_then_lose_the_server)
    try:
        await apply_cmd.record(
            pg.url, _inputs(450), wait=False, wait_each=False, timeout=30, check_existing=False
        )
    finally:
        for thread in restart:
            thread.join(timeout=30)
    streams = await _pod_streams(pg.url)
    assert len(streams) == 450 and set(streams.values()) == {1}, "every pod recorded, none twice"
    assert "retrying in" in capsys.readouterr().err


async def test_when_the_database_stays_away_the_error_says_what_was_recorded(pg, monkeypatch):
    monkeypatch.setattr(apply_cmd, "CHUNK_EVENTS", 100)
    monkeypatch.setattr(connect, "RETRY_DELAYS", (0.1, 0.1))
    real_append = PostgresEventStore.append
    calls = {"n": 0}

    async def append_until_the_server_is_gone(self, events, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            pg.stop()
        return await real_append(self, events, **kwargs)

    monkeypatch.setattr(PostgresEventStore, "append", append_until_the_server_is_gone)
    with pytest.raises(UsageError) as failure:
        await apply_cmd.record(
            pg.url, _inputs(450), wait=False, wait_each=False, timeout=30, check_existing=False
        )
    message = str(failure.value)
    assert "the event log is unavailable" in message
    assert "recorded: pods.yaml documents 1-200" in message
    assert "pods.yaml documents 201-450" in message  # not recorded, or unknown when nobody can be asked
    assert "Traceback" not in message


class _BrokenPool:
    """A pool whose every query fails with one driver error (what a connection lost mid-query raises)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def fetch(self, *_: object, **__: object) -> list[object]:
        raise self.exc

    @contextlib.asynccontextmanager
    async def acquire(self, timeout: float | None = None) -> AsyncIterator[_BrokenPool]:
        yield self  # a connection of it fails as the pool does

    async def close(self) -> None:
        return None

    def terminate(self) -> None:
        return None


TRANSIENT_DRIVER_ERRORS = [
    asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.InterfaceError("cannot perform operation: connection is closed"),
    ConnectionResetError("connection reset by peer"),
    TimeoutError(),
]


@pytest.mark.parametrize("driver_error", TRANSIENT_DRIVER_ERRORS, ids=lambda e: type(e).__name__)
async def test_every_transient_driver_error_reaches_apply_as_unavailable(driver_error):
    store = PostgresEventStore("postgresql://postgres@127.0.0.1:1/none")
    store._pool = _BrokenPool(driver_error)  # type: ignore[assignment]
    with pytest.raises(Unavailable):
        await store.head()


async def test_a_restart_while_apply_waits_is_retried_and_the_end_says_what_was_recorded(
    pg, monkeypatch, capsys
):
    """The database restarts while apply waits for the services: the wait is retried, the command ends normally and
    says that every document was recorded (no traceback, no exit 1)."""
    monkeypatch.setattr(connect, "RETRY_DELAYS", (0.3, 0.6, 1.0, 2.0, 4.0, 8.0))
    calls = {"n": 0}
    restart: list[threading.Thread] = []

    async def services_idle_after_a_restart(store):
        calls["n"] += 1
        if calls["n"] == 1:  # the server goes away under the waiting command, and comes back a second later
            pg.stop()
            restart.append(_restart_in_background(pg, 1.0))
        await store.checkpoints()  # a real query over the pool's (now dead) connection
        return {}

    monkeypatch.setattr(logtools, "pending_work", services_idle_after_a_restart)
    try:
        await apply_cmd.record(
            pg.url, _inputs(30), wait=True, wait_each=False, timeout=30, check_existing=False
        )
    finally:
        for thread in restart:
            thread.join(timeout=30)
    err = capsys.readouterr().err
    assert "retrying in" in err
    assert "recorded: pods.yaml documents 1-30" in err
    assert len(await _pod_streams(pg.url)) == 30


async def test_when_the_database_stays_away_during_the_wait_the_error_says_everything_was_recorded(
    pg, monkeypatch
):
    monkeypatch.setattr(connect, "RETRY_DELAYS", (0.1, 0.1))

    async def database_gone(store):
        pg.stop()
        await store.checkpoints()
        return {}

    monkeypatch.setattr(logtools, "pending_work", database_gone)
    with pytest.raises(UsageError) as failure:
        await apply_cmd.record(
            pg.url, _inputs(30), wait=True, wait_each=False, timeout=30, check_existing=False
        )
    message = str(failure.value)
    assert "recorded: pods.yaml documents 1-30" in message
    assert "waiting for the services" in message
