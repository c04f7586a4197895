"""A service's scrape while its PostgreSQL stops answering: ``/metrics`` answers within the scrape's own bound
(``SCRAPE_QUERY_TIMEOUT_S``), the log families left out, however long the read of the log is given
(``ALLOT_DB_READ_TIMEOUT``, 30 s by default); once the server answers they are back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.metrics import SCRAPE_QUERY_TIMEOUT_S, Metrics
from allot_testing.tcp_proxy import TcpProxy, tcp_proxy, through

pytestmark = pytest.mark.integration


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        yield proxy


async def test_a_scrape_answers_in_time_while_the_database_does_not(
    database_url: str, proxy: TcpProxy
) -> None:
    store = PostgresEventStore.connect(through(database_url, proxy), read_timeout=30.0, write_timeout=40.0)
    metrics = Metrics("binder", process=False)
    consumer = SimpleNamespace(name="binder", position=0, types=frozenset({"pod.deleted"}), stats=None)
    head = "allot_log_head_position"
    try:
        await metrics.refresh(store, consumer)
        assert metrics.registry.get_sample_value(head, {"service": "binder"}) == 0
        proxy.freeze()
        scrape = asyncio.ensure_future(metrics.refresh(store, consumer))
        done, _ = await asyncio.wait([scrape], timeout=SCRAPE_QUERY_TIMEOUT_S + 2)
        assert done, "the scrape waits for the database"  # was: 32 s, the read's own bound and then some
        assert metrics.registry.get_sample_value(head, {"service": "binder"}) is None
        assert b"allot_consumer_position" in metrics.render()
        proxy.thaw()
        for _ in range(50):
            await metrics.refresh(store, consumer)
            if metrics.registry.get_sample_value(head, {"service": "binder"}) == 0:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the log families did not come back")
    finally:
        proxy.thaw()
        await store.close()
