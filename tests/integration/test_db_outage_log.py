"""A database that goes away (every connection closed, each new one refused) and comes back is one outage in the
log: one warning as it begins, said by what it stops (here as a service's consumer says it), and one line as it ends,
however many reads failed and however often asyncpg tried to restore its pool's connection meanwhile. asyncpg's own
attempts are one DEBUG line (they were a second warning)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from allot_bus.outage import Outage
from allot_contracts.errors import Unavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration


async def test_an_outage_of_the_database_is_one_warning_as_it_begins_and_one_info_as_it_ends(
    database_url: str, database_proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # as a service logs by default (ALLOT_LOG_LEVEL)
    caplog.set_level(
        logging.DEBUG, logger="asyncpg.pool"
    )  # to see that the driver did try, and at what level
    store = PostgresEventStore.connect(
        through(database_url, database_proxy), read_timeout=1.0, connect_timeout=1.0
    )
    outage = Outage("echo", logging.getLogger("allot.consumer"))  # the consumer's, around each step

    async def step() -> bool:
        try:
            await store.head()
        except Unavailable as exc:
            outage.failed("the event log is unreachable", exc, retry_in=0.1)
            return False
        outage.over()
        return True

    def driver_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "asyncpg.pool"]

    try:
        assert await step()
        database_proxy.refuse()
        for _ in range(
            150
        ):  # until asyncpg has tried to restore its connection (its first retry is after 1 s)
            assert not await step()
            if driver_lines():
                break
            await asyncio.sleep(0.1)
        assert driver_lines(), "asyncpg never tried to restore its pool's connection"
        database_proxy.thaw()
        for _ in range(100):
            if await step():
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the database never answered again")
    finally:
        await store.close()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert [level for level, _ in said] == [logging.WARNING, logging.INFO], said  # was: two warnings
    assert said[0][1].startswith("echo: the event log is unreachable (LogUnavailable: PostgreSQL at ")
    assert said[1][1].startswith("echo: working again after ")
    assert [r.levelno for r in driver_lines()] == [logging.DEBUG]  # once for the outage, not per attempt
