"""The subscribe client against a PostgreSQL that takes the connection and then stops answering: each read of the
log is bounded (``read_timeout``, ``ALLOT_DB_READ_TIMEOUT`` as a service reads it), so a subscription says what got
no answer and retries instead of waiting for ever."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import pytest

from allot_client import AllotClient
from allot_eventstore.protocol import EventStore
from allot_testing.builders import an_event
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration


async def test_a_subscription_whose_database_stops_answering_says_so_in_time_and_goes_on_after(
    event_store: EventStore, database_url: str, database_proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """A subscription outlives an outage (it retries, as through a NATS restart); bounded, it notices one within its
    read bound and says so, where it waited silently for ever, and delivers what was recorded meanwhile after."""
    caplog.set_level(logging.WARNING, logger="allot.client")
    async with AllotClient(database_url=through(database_url, database_proxy), read_timeout=1) as client:
        subscription = client.follow(types=["pod.deleted"], idle=0.05)
        got: list[int] = []

        async def collect() -> None:
            async for delivery in subscription:
                got.append(delivery.record.position)

        task = asyncio.create_task(collect())
        try:
            await event_store.append([an_event()], producer="api")
            await _until(lambda: got == [1])
            database_proxy.freeze()
            await event_store.append([an_event()], producer="api")  # directly, not through the frozen proxy
            await _until(lambda: "no answer within 1 s" in caplog.text)  # was: nothing, for ever
            assert "subscription at position 1: the event log unavailable (LogUnavailable" in caplog.text
            database_proxy.thaw()
            await _until(lambda: got == [1, 2])
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await subscription.close()


async def _until(done: Callable[[], bool], seconds: float = 30) -> None:
    for _ in range(round(seconds / 0.05)):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not reached in time")


@pytest.mark.parametrize(
    ("text", "seconds"), [("", 30.0), ("5", 5.0), ("0.5", 0.5), ("0", None), (" 12 ", 12.0)]
)
def test_the_read_bound_is_read_from_the_environment_as_a_service_reads_it(
    text: str, seconds: float | None
) -> None:
    env = {"ALLOT_DATABASE_URL": "postgresql://localhost/allot", "ALLOT_DB_READ_TIMEOUT": text}
    assert AllotClient.from_env(env).read_timeout == seconds


@pytest.mark.parametrize("text", ["soon", "-1", "nan", "inf"])
def test_a_read_bound_that_is_not_seconds_is_refused_naming_the_variable(text: str) -> None:
    env = {"ALLOT_DATABASE_URL": "postgresql://localhost/allot", "ALLOT_DB_READ_TIMEOUT": text}
    with pytest.raises(
        ValueError, match=r"ALLOT_DB_READ_TIMEOUT: must be a number of seconds \(0: no bound\)"
    ):
        AllotClient.from_env(env)
