"""The usage page under load: a report folds the log page by page (its memory does not grow with the window), the
same report asked for at once is computed once, and a report beyond the computations allowed at once is answered 503
with ``Retry-After`` rather than started. Over in-memory logs (no servers)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from allot_stack.usage_window import fold_window, window_at
from allot_testing import demo
from allot_ui.model import UiModel
from allot_ui.server import make_app
from allot_ui.usage import Reports
from allot_views.usage import USAGE_TYPES

H = 3_600_000_000  # one hour in µs
GIB = 1 << 30


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return demo.demo_store(tmp_path_factory.mktemp("usage-limits"))


def placed_and_released(hours: int) -> Any:
    """One pod placed on two GPUs for an hour, then released, ``hours`` times over."""
    from allot_contracts.decisions.placement import Allocation, Decision, DeviceAlloc
    from allot_contracts.envelope import NewEvent, stream_id
    from allot_contracts.events import ObjectRef, PodPlaced, PodReleased, PodSubmitted
    from allot_eventstore.memory import InMemoryEventStore

    now = [1_767_225_600_000_000]
    store = InMemoryEventStore(clock=lambda: now[0])
    ref = ObjectRef(namespace="team", name="p")
    device = DeviceAlloc(
        minor=0, resources={"koordinator.sh/gpu-core": 200, "koordinator.sh/gpu-memory": GIB}
    )
    alloc = Allocation(node="n1", requests={"cpu": 1000}, devices={"gpu": (device,)})
    decision = Decision(pod=ref.key, outcome="Scheduled", node="n1", allocation=alloc)
    ids = iter(range(1 << 30))

    def record(*events: Any) -> None:
        news = [
            NewEvent(stream_id=stream_id("pod", ref.key), event=e, event_id=f"e{next(ids)}") for e in events
        ]
        store.append_sync(news, producer="api")

    record(PodSubmitted(pod=ref, uid="u", manifest={}))
    for _ in range(hours):
        record(PodPlaced(pod=ref, attempt=1, node="n1", decision=decision))
        now[0] += H
        record(PodReleased(pod=ref, node="n1"))
    return store


async def _peak_while_folding(store: Any) -> tuple[int, Any]:
    window = await window_at(store, "100000h", None)
    tracemalloc.start()
    try:
        rows = await fold_window(store, window, "namespace")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, rows


async def test_a_reports_memory_does_not_grow_with_its_window() -> None:
    short, long = placed_and_released(1_000), placed_and_released(10_000)  # 2,001 and 20,001 events
    short_peak, short_rows = await _peak_while_folding(short)
    long_peak, long_rows = await _peak_while_folding(long)
    assert [(r.key, r.gpu_hours) for r in short_rows] == [("team", 2_000)]
    assert [(r.key, r.gpu_hours) for r in long_rows] == [("team", 20_000)]
    # ten times the events, about the same memory: one page at a time (held all at once, it was ten times as much)
    assert long_peak < 2 * short_peak, (short_peak, long_peak)


class _Gated:
    """The store, whose reads for usage reports (``iterate`` of the usage types) are counted and wait until ``gate``
    is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.folds = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def iterate(self, **kwargs: Any) -> AsyncIterator[Any]:
        if kwargs.get("types") == USAGE_TYPES:
            self.folds += 1
            await self.gate.wait()
        async for record in self.inner.iterate(**kwargs):
            yield record


async def test_the_same_report_is_computed_once_and_one_too_many_is_a_503(store: Any) -> None:
    gated = _Gated(store)
    async with TestClient(TestServer(make_app(UiModel(gated), reports=Reports(most=2)))) as client:
        first = asyncio.create_task(client.get("/usage?since=1d"))
        same = asyncio.create_task(client.get("/usage?since=24h"))  # the same window, written another way
        other = asyncio.create_task(client.get("/usage?since=2d"))
        for _ in range(400):
            if gated.folds == 2:
                break
            await asyncio.sleep(0.01)
        busy = await client.get("/usage?since=3d")
        assert (
            busy.status == 503
        )  # was: a third computation (and a fourth for `same`), each holding its window
        assert busy.headers["Retry-After"] == "5"
        assert (await busy.json())["message"] == (
            "2 usage reports are being computed (at most 2 at once); try again in 5 s"
        )
        gated.gate.set()
        answers = await asyncio.gather(first, same, other)
        assert [a.status for a in answers] == [200, 200, 200]
        assert gated.folds == 2  # `same` waited for the first one's computation
        assert (await client.get("/usage?since=1d&by=quota")).status == 200  # computed before: kept
        assert gated.folds == 2
        assert (await client.get("/usage?since=3d")).status == 200  # a slot is free again
        assert gated.folds == 3
