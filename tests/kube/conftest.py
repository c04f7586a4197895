"""Fixtures for Kubernetes mode against the fake API server (libs/testing/src/allot_testing/fake_kube.py) and a real
PostgreSQL: no cluster, no mocked client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from allot_eventstore.postgres import PostgresEventStore
from allot_testing.fake_kube import FakeKube


@pytest.fixture
async def kube() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        yield server


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresEventStore]:
    events = PostgresEventStore.connect(database_url)
    yield events
    await events.close()


@pytest.fixture
async def client(kube: FakeKube, tmp_path: Any) -> AsyncIterator[Any]:
    from allot_runtime.kube import api_client

    api = await api_client(kube.kubeconfig(tmp_path))
    yield api
    await api.close()


async def _eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool],
    *,
    timeout: float = 10.0,
    what: str = "condition",
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _log_of(
    store: PostgresEventStore, *, producer: str | None = None, types: set[str] | None = None
) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, stream, payload) of every recorded event, in log order."""
    return [
        (r.type, r.stream_id, json.loads(r.payload))
        async for r in store.iterate(producer=producer, types=types)
    ]


class Running:
    """A background task with its own stop event."""

    def __init__(self, run: Callable[[asyncio.Event], Awaitable[None]]) -> None:
        self.stop = asyncio.Event()
        self.closed = False
        self.task = asyncio.create_task(run(self.stop))

    async def close(self) -> None:
        self.stop.set()
        if not self.task.done() or not self.closed:
            self.closed = True
            await asyncio.wait_for(self.task, timeout=10)


@pytest.fixture
def eventually() -> Callable[..., Awaitable[None]]:
    """``await eventually(check, timeout=…, what=…)``: poll a (sync or async) predicate until it holds."""
    return _eventually


async def _settled(read: Callable[[], Awaitable[Any]], pause: float = 0.4) -> Any:
    before = None
    while True:
        await asyncio.sleep(pause)
        now = await read()
        if now == before:
            return now
        before = now


@pytest.fixture
def settled() -> Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]:
    """``await settled(read)``: what the async ``read`` returns once two reads 0.4 s apart agree (the watchers have
    recorded all they will)."""
    return _settled


@pytest.fixture
def log_of() -> Callable[..., Awaitable[list[tuple[str, str, dict[str, Any]]]]]:
    """``await log_of(store, producer=…, types=…)``: (type, stream, payload) of the recorded events, in order."""
    return _log_of


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Callable[[asyncio.Event], Awaitable[None]]], Running]]:
    """``running(coroutine_function_of_stop)`` starts a background task; whatever is still running at the end of the
    test is stopped (and its failure, if any, raised)."""
    started: list[Running] = []

    def start(run: Callable[[asyncio.Event], Awaitable[None]]) -> Running:
        started.append(Running(run))
        return started[-1]

    yield start
    for item in started:
        if not item.task.done() or not item.stop.is_set():
            await item.close()


class KubeBinder:
    """The binder's processor in Kubernetes mode driven over the real log as its runtime drives it, with a worker
    that sees everything the runtime's view shows (bindings, quota patches, every kind of eviction)."""

    def __init__(self, store: Any) -> None:
        from allot_runtime.processor import Host
        from binder.processor import Binder

        self.store = store
        self.host = Host(Binder({"mode": "kubernetes"}), name="binder")
        self.position = 0

    async def feed(self) -> None:
        async for record in self.store.iterate(after=self.position, types=self.host.interests):
            self.position = record.position
            if record.producer != self.host.name:
                news = self.host.step(record)
                if news:
                    await self.store.append(news, producer=self.host.name)

    async def view(self) -> Any:
        from binder.adapters.kube import View

        p = self.host.processor
        return View(
            ready=True,
            requests=p.outstanding(),
            patches=p.quota_patches(),
            evictions=p.evictions.outstanding(),
            pod_evictions=p.evictions.outstanding_pods(),
            quota_evictions=p.evictions.outstanding_quota(),
        )

    def worker(self, client: Any) -> Any:
        from prometheus_client import CollectorRegistry

        from binder.adapters.kube import BinderMetrics, BindWorker

        return BindWorker(
            store=self.store,
            client=client,
            view=self.view,
            backoff=(0.01, 0.05),
            refused_delay=0.05,
            metrics=BinderMetrics.of(CollectorRegistry()),
        )


@pytest.fixture
def kube_binder(store: PostgresEventStore) -> KubeBinder:
    """The binder in Kubernetes mode over the test's log (:class:`KubeBinder`)."""
    return KubeBinder(store)
