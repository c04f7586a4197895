"""A service process whose PostgreSQL stops answering (every connection left open, nothing answered: a hung server or
a network that drops packets) says so: ``/readyz`` turns 503 naming the database within a few read timeouts, the log
holds one line for the outage (no traceback), and once the database answers again the service is ready, catches up,
and every event is decided exactly once, in log order, as without the outage.

The real runtime shell (``service_main``: settings from the environment, schema wait, ownership, NATS, consumer,
HTTP) in its own process, around the echo processor; its database is reached through a fault database_proxy
(:mod:`allot_testing.tcp_proxy`), the relay and the test's own reads go to PostgreSQL directly.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from allot_bus.names import BusNames
from allot_contracts.envelope import NewEvent
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import redact
from allot_testing.builders import an_event
from allot_testing.processes import (
    free_port,
    process_environment,
    ready_as,
    relaying,
    running,
    tail,
    until,
)
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 1.0
SERVICE = (
    "from allot_runtime.entry import service_main\n"
    "from allot_testing.processors import EchoProcessor\n"
    "service_main('echo', EchoProcessor)\n"
)


async def scrape(http: aiohttp.ClientSession, port: int) -> tuple[int, str]:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
        return response.status, await response.text()


def _environment(database_url: str, nats_url: str, names: BusNames, port: int) -> dict[str, str]:
    return process_environment(
        database_url,
        nats_url,
        names,
        port,
        ALLOT_SNAPSHOT_EVERY="0",
        ALLOT_DB_READ_TIMEOUT=str(READ_TIMEOUT_S),
    )


async def test_a_frozen_database_makes_the_service_not_ready_then_it_recovers_and_decides_everything_once(
    database_url: str,
    nats_server_url: str,
    bus_names: dict[str, str],
    database_proxy: TcpProxy,
    tmp_path: Path,
) -> None:
    names, port, log = BusNames(**bus_names), free_port(), tmp_path / "echo.log"
    env = _environment(through(database_url, database_proxy), nats_server_url, names, port)
    store = PostgresEventStore.connect(database_url)
    before, during = [an_event() for _ in range(5)], [an_event() for _ in range(5)]

    async def answers() -> Counter[str | None]:
        return Counter(e.causation_id for e in await store.read(producer="echo", limit=10_000))

    async def answered(events: list[NewEvent]) -> bool:
        found = await answers()
        return all(found[e.event_id] for e in events)

    try:
        async with (
            relaying(store, nats_server_url, names),
            running([sys.executable, "-c", SERVICE], env, log),
            aiohttp.ClientSession() as http,
        ):
            await until("ready", lambda: ready_as(http, port, 200), 20, log)
            await store.append(before, producer="api")
            await until("the first events decided", lambda: answered(before), 10, log)
            try:
                database_proxy.freeze()  # the service's connections stay open; nothing is answered
                await store.append(during, producer="api")  # the relay publishes them; they cannot be decided
                # was: 200 for as long as the database is frozen
                body = await until("/readyz 503", lambda: ready_as(http, port, 503), 6 * READ_TIMEOUT_S, log)
                assert body["ready"] is False
                reason = (  # the database (redacted), the bound and the variable that sets it
                    f"the event log cannot be reached: PostgreSQL at {redact(env['ALLOT_DATABASE_URL'])} "
                    "unavailable: no answer within 1 s (read timeout, from ALLOT_DB_READ_TIMEOUT)"
                )
                assert body["reason"].startswith(reason), body
                # reads keep failing: still not ready, nothing decided; longer than the ownership check's 5 s, which
                # waits for its answer (was: took a check without an answer for a lost lock and stopped the service)
                await asyncio.sleep(7)
                assert await ready_as(http, port, 503) is not None
                status, metrics = await asyncio.wait_for(scrape(http, port), 5)  # metrics answer meanwhile
                assert status == 200 and "allot_consumer_position" in metrics
                assert not await answered(during[:1])
            finally:
                database_proxy.thaw()
            await until("/readyz 200 again", lambda: ready_as(http, port, 200), 15, log)
            await until("the events of the outage decided", lambda: answered(during), 15, log)
        found = await answers()
        assert [found[e.event_id] for e in before + during] == [1] * 10  # each exactly once
        released = await store.read(producer="echo", limit=10_000)
        assert [e.causation_id for e in released] == [e.event_id for e in before + during]  # in log order
    finally:
        await store.close()
    text = tail(log, 100_000)
    assert "Traceback" not in text, text
    noisy = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(noisy) == 1, "\n".join(noisy)  # the outage once (the driver's reconnection attempts: DEBUG)
    assert "working again after" in text  # and its end
