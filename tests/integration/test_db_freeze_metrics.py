"""A service's scrape while its PostgreSQL stops answering: ``/metrics`` answers within the scrape's own bound
(``SCRAPE_QUERY_TIMEOUT_S``), the log families left out, however long the read of the log is given
(``ALLOT_DB_READ_TIMEOUT``, 30 s by default); once the server answers they are back."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.metrics import SCRAPE_QUERY_TIMEOUT_S, Metrics
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration


async def test_a_scrape_answers_in_time_while_the_database_does_not(
    database_url: str, database_proxy: TcpProxy
) -> None:
    store = PostgresEventStore.connect(
        through(database_url, database_proxy), read_timeout=30.0, write_timeout=40.0
    )
    metrics = Metrics("binder", process=False)
    consumer = SimpleNamespace(name="binder", position=0, types=frozenset({"pod.deleted"}), stats=None)
    head = "allot_log_head_position"
    try:
        await metrics.refresh(store, consumer)
        assert metrics.registry.get_sample_value(head, {"service": "binder"}) == 0
        database_proxy.freeze()
        scrape = asyncio.ensure_future(metrics.refresh(store, consumer))
        done, _ = await asyncio.wait([scrape], timeout=SCRAPE_QUERY_TIMEOUT_S + 2)
        assert done, "the scrape waits for the database"  # was: 32 s, the read's own bound and then some
        assert metrics.registry.get_sample_value(head, {"service": "binder"}) is None
        assert b"allot_consumer_position" in metrics.render()
        database_proxy.thaw()
        for _ in range(50):
            await metrics.refresh(store, consumer)
            if metrics.registry.get_sample_value(head, {"service": "binder"}) == 0:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the log families did not come back")
    finally:
        database_proxy.thaw()
        await store.close()
