"""The web view over a real PostgreSQL that misbehaves: a server that stops answering with its connections left open
makes pages answer 503 ("no answer within N s", naming the database) and ``/readyz`` not ready, instead of hanging
them; a server that goes away is one DEBUG line of the driver's, not a traceback per reconnection attempt (the view's
reader warns of the outage); a value PostgreSQL cannot store, given to a read, is refused without claiming anything
was written."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from aiohttp.test_utils import TestClient, TestServer

from allot_contracts.errors import PermanentError, Unavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import redact
from allot_testing.tcp_proxy import TcpProxy, tcp_proxy
from allot_ui.model import UiModel
from allot_ui.server import make_app


def _through(url: str, proxy: TcpProxy) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        yield proxy


async def _until(check: Any, tries: int = 200) -> Any:
    for _ in range(tries):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("the condition never held")


async def test_a_database_that_stops_answering_is_a_503_and_not_ready_then_ready_again(
    database_url: str, proxy: TcpProxy
) -> None:
    store = PostgresEventStore.connect(_through(database_url, proxy), read_timeout=0.5, connect_timeout=0.5)
    try:
        async with TestClient(TestServer(make_app(UiModel(store), poll=0.05))) as client:
            assert (await client.get("/pods/default/nobody")).status == 404  # read from the log: no such pod
            assert (await client.get("/readyz")).status == 200
            proxy.freeze()  # connections stay open; nothing is answered
            response = await asyncio.wait_for(client.get("/pods/default/nobody"), 30)  # was: no answer, ever
            assert response.status == 503
            assert (await response.json())["message"] == (
                f"the event log cannot be read right now: PostgreSQL at {redact(store.url)} unavailable: no answer "
                "within 0.5 s (read timeout)"
            )

            async def not_ready() -> Any:
                answer = await client.get("/readyz")
                return await answer.json() if answer.status == 503 else None

            body = await _until(not_ready)  # the background reader's reads time out too
            assert body["ready"] is False
            assert body["reason"].startswith(
                f"the event log cannot be read: PostgreSQL at {redact(store.url)} unavailable: no answer"
            )
            proxy.thaw()

            async def ready() -> bool:
                return (await client.get("/readyz")).status == 200

            await _until(ready)
            assert (await client.get("/pods/default/nobody")).status == 404
    finally:
        await store.close()


async def test_a_connection_that_times_out_says_so(database_url: str, proxy: TcpProxy) -> None:
    proxy.freeze()  # the port accepts connections and never answers
    store = PostgresEventStore.connect(_through(database_url, proxy), connect_timeout=0.5)
    try:
        with pytest.raises(Unavailable) as raised:
            await store.head()
        assert str(raised.value) == (  # was: empty
            f"PostgreSQL at {redact(store.url)} unavailable: no answer within 0.5 s (connect timeout)"
        )
    finally:
        await store.close()


async def test_an_outage_is_one_log_line_not_a_traceback_per_reconnection(
    database_url: str, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncpg")
    store = PostgresEventStore.connect(_through(database_url, proxy), connect_timeout=2)

    async def attempts(at_least: int) -> None:
        async def made() -> bool:
            return proxy.refused >= at_least

        await _until(made, tries=600)

    try:
        await store.head()
        proxy.refuse()  # the server goes away: asyncpg keeps trying to restore the pool's connection
        with pytest.raises(Unavailable):
            await store.head()
        await attempts(
            3
        )  # this read's, then asyncpg's (two or more): each of its attempts was logged with a traceback
        records = [r for r in caplog.records if r.name.startswith("asyncpg")]
        assert len(records) == 1, [r.getMessage() for r in records]
        assert records[0].exc_info is None
        # the outage is warned of by what it stops (the view's reader), not by the driver besides
        assert records[0].levelno == logging.DEBUG
        assert records[0].getMessage().startswith("PostgreSQL cannot be reached (PostgreSQL unavailable:")
    finally:
        await store.close()


async def test_a_value_postgresql_cannot_take_in_a_read_is_refused_without_claiming_a_write(
    event_store: PostgresEventStore,
) -> None:
    with pytest.raises(PermanentError) as raised:
        await event_store.read_stream("pod:default/x\x00")
    assert str(raised.value).startswith(
        "PostgreSQL refused a value the read was given (nothing was written): "
    )
    assert "payload" not in str(raised.value)  # was: "event payload rejected by PostgreSQL"
    async with TestClient(TestServer(make_app(UiModel(event_store)))) as client:
        response = await client.get("/pods/default/x%00")
        assert response.status == 400  # refused before any query (was: 500)
        assert (await response.json())["message"].startswith("path.name: 'x\\x00' is not a valid pod name")
