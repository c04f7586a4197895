"""The relay process whose PostgreSQL stops answering (connections left open, nothing answered) says so: ``/readyz``
turns 503 naming the database within a few read timeouts, the log holds one line for the outage (no traceback), and
once the database answers again it is ready and publishes what was recorded meanwhile: every event once, in order.

The real ``allot-relay`` process; its database is reached through a fault database_proxy (:mod:`allot_testing.tcp_proxy`),
the test's appends go to PostgreSQL directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from nats.js import JetStreamContext
from nats.js import errors as jserrors

from allot_bus.adapters.nats import connect
from allot_bus.names import HEADER_MSG_ID, BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import redact
from allot_testing.builders import an_event
from allot_testing.processes import free_port, process_environment, ready_as, running, tail, until
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 1.0


@pytest.fixture
async def js(nats_server_url: str, bus_names: dict[str, str]) -> AsyncIterator[JetStreamContext]:
    nc = await connect(nats_server_url, name="test-reader")
    yield nc.jetstream()
    with contextlib.suppress(jserrors.NotFoundError):
        await nc.jetstream().delete_stream(bus_names["stream"])
    await nc.close()


async def scrape(http: aiohttp.ClientSession, port: int) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
        return response.status, await response.text()


async def published(js: JetStreamContext, stream: str) -> list[str]:
    """The event ids in the stream, in stream order."""
    try:
        state = (await js.stream_info(stream)).state
    except jserrors.NotFoundError:
        return []
    ids = []
    for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
        msg = await js.get_msg(stream, seq=seq)
        ids.append((msg.headers or {}).get(HEADER_MSG_ID, ""))
    return ids


async def test_a_frozen_database_makes_the_relay_not_ready_then_it_publishes_everything_once(
    database_url: str,
    nats_server_url: str,
    bus_names: dict[str, str],
    database_proxy: TcpProxy,
    js: JetStreamContext,
    tmp_path: Path,
) -> None:
    names, port, log = BusNames(**bus_names), free_port(), tmp_path / "relay.log"
    env = process_environment(
        through(database_url, database_proxy),
        nats_server_url,
        names,
        port,
        ALLOT_DB_READ_TIMEOUT=str(READ_TIMEOUT_S),
    )
    store = PostgresEventStore.connect(database_url)
    before, during = [an_event() for _ in range(5)], [an_event() for _ in range(5)]

    async def on_the_stream(count: int) -> bool:
        return len(await published(js, names.stream)) >= count

    try:
        async with (
            running([str(Path(sys.executable).parent / "allot-relay")], env, log),
            aiohttp.ClientSession() as http,
        ):
            await until("ready", lambda: ready_as(http, port, 200), 20, log)
            await store.append(before, producer="api")
            await until("the first events published", lambda: on_the_stream(5), 10, log)
            try:
                database_proxy.freeze()  # the relay's connections stay open; nothing is answered
                await store.append(during, producer="api")
                # was: 200 for as long as the database is frozen
                body = await until("/readyz 503", lambda: ready_as(http, port, 503), 6 * READ_TIMEOUT_S, log)
                assert body["ready"] is False
                reason = (  # the database (redacted), the bound and the variable that sets it
                    f"the event log cannot be reached: PostgreSQL at {redact(env['ALLOT_DATABASE_URL'])} "
                    "unavailable: no answer within 1 s (read timeout, from ALLOT_DB_READ_TIMEOUT)"
                )
                assert body["reason"].startswith(reason), body
                await asyncio.sleep(2 * READ_TIMEOUT_S)  # reads keep failing: still not ready
                assert await ready_as(http, port, 503) is not None
                assert len(await published(js, names.stream)) == 5
                # metrics answer meanwhile, from what the relay knows (was: a 500 once the read of the head gave up)
                status, metrics = await asyncio.wait_for(scrape(http, port), 2 * READ_TIMEOUT_S)
                assert status == 200, metrics
                assert "allot_relay_published_position 5.0" in metrics.splitlines()
            finally:
                database_proxy.thaw()
            await until("/readyz 200 again", lambda: ready_as(http, port, 200), 15, log)
            await until("the events of the outage published", lambda: on_the_stream(10), 15, log)
        # once each, in order
        assert await published(js, names.stream) == [e.event_id for e in before + during]
    finally:
        await store.close()
    text = tail(log, 100_000)
    assert "Traceback" not in text, text
    noisy = [
        line
        for line in text.splitlines()
        if (" WARNING " in line or " ERROR " in line) and "ALLOT_ANCHOR_KEY_FILE" not in line
    ]
    assert len(noisy) == 1, "\n".join(noisy)  # the outage once (the driver's reconnection attempts: DEBUG)
    assert "relay: working again after" in text  # and its end
