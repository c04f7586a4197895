"""A leader elected with a Lease whose PostgreSQL stops answering as it records its term (the statement arrived, its
answer never comes back): recording the term fails within the append bound (``ALLOT_DB_READ_TIMEOUT`` plus the lock's
10 s), the candidate says so and records the same term again, and it leads under it once the server answers. For a service and for kube-sync,
each as its process builds its leader's store, against the fake API server and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url, redact
from allot_testing.fake_kube import FAST_LEASE, FakeKube
from allot_testing.processes import free_port
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration

# the database (its URL redacted), the append's bound and the variable it is from
NO_ANSWER = (
    "cannot take the lease yet (PostgreSQL at {url} unavailable: no answer within 11 s (write timeout, from "
)
NO_ANSWER += "ALLOT_DB_READ_TIMEOUT))"


class Lines(logging.Handler):
    """The lease's log lines (on its own logger: a process's logging set-up replaces the root's handlers)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.asynccontextmanager
async def frozen_mid_term(database_url: str, database_proxy: TcpProxy) -> AsyncIterator[None]:
    """While the block runs the log's head is locked; once the recording of a term waits for it (its statement has
    reached the server), the network freezes and the lock is released: the server goes on, its answers stay in the
    frozen network."""
    holder = await asyncpg.connect(plain_url(database_url))
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM log_head WHERE id = 1 FOR UPDATE")
            yield
            for _ in range(200):
                await holder.execute("SELECT pg_stat_clear_snapshot()")  # pg_stat_activity afresh
                if await holder.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'SELECT position, hash FROM log_head%'"
                ):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the term was not recorded")
            database_proxy.freeze()
    finally:
        await holder.close()


async def _service(stop: asyncio.Event) -> None:
    from allot_runtime.service import _lease_leadership
    from allot_runtime.settings import load

    leadership = await _lease_leadership(load("binder"), "binder", stop)
    if leadership is not None:
        await leadership.client.close()
        await leadership.store.close()


async def _kube_sync(stop: asyncio.Event) -> None:
    from allot_kube_sync.process import run_kube_sync

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        await run_kube_sync(stop=stop)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize(
    ("decider", "run"),
    [pytest.param("binder", _service, id="service"), pytest.param("kube-sync", _kube_sync, id="kube-sync")],
)
async def test_a_term_whose_record_gets_no_answer_is_given_up_in_time_and_recorded_again(
    kube: FakeKube,
    tmp_path: Path,
    database_url: str,
    store: PostgresEventStore,
    database_proxy: TcpProxy,
    monkeypatch: pytest.MonkeyPatch,
    decider: str,
    run: Callable[[asyncio.Event], Awaitable[None]],
) -> None:
    for name, value in {
        "ALLOT_DATABASE_URL": through(database_url, database_proxy),
        "ALLOT_DB_READ_TIMEOUT": "1",  # an append: 11 s
        "ALLOT_KUBECONFIG": kube.kubeconfig(tmp_path),
        "ALLOT_HTTP_HOST": "127.0.0.1",
        "ALLOT_HTTP_PORT": str(free_port()),
        **FAST_LEASE,
        "ALLOT_LOG_FORMAT": "text",
    }.items():
        monkeypatch.setenv(name, value)
    lines = Lines()
    logging.getLogger("allot.lease").addHandler(lines)
    no_answer = NO_ANSWER.format(url=redact(through(database_url, database_proxy)))
    stop = asyncio.Event()
    running: asyncio.Task[Any] | None = None

    async def elected() -> list[Any]:
        return [
            r async for r in store.iterate(types={"leader.elected"}) if r.stream_id == f"leader:{decider}"
        ]

    try:
        async with frozen_mid_term(database_url, database_proxy):
            running = asyncio.create_task(run(stop))
        for _ in range(200):  # was: waited for ever for the answer
            if any(no_answer in line for line in lines.lines):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("\n".join(lines.lines))
        database_proxy.thaw()
        for _ in range(200):
            if await elected():
                break
            await asyncio.sleep(0.1)
        # the same term, recorded again while the lease is still this candidate's (was: 2, taken a lease later)
        assert [json.loads(r.payload)["term"] for r in await elected()] == [1]
    finally:
        database_proxy.thaw()
        stop.set()
        logging.getLogger("allot.lease").removeHandler(lines)
        if running is not None:
            await asyncio.wait_for(running, timeout=30)
