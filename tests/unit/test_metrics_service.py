"""The metrics every service exposes: scheduler families only where a service schedules, process and GC collectors,
lag behind the log read at scrape time, the consumer's counters, and collectors that fail without failing a
scrape."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import pytest

from allot_bus.consumer import ConsumerStats
from allot_contracts.events import NodeRemoved, PodDeleted
from allot_eventstore.clock import ManualClock
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime import metrics as metrics_module
from allot_runtime.metrics import Metrics, ProjectionCollector
from allot_testing.builders import an_event, ref


@dataclass
class Consumer:
    """What the metrics read of a durable consumer: its name, position, types of interest and counters."""

    name: str
    types: frozenset[str]
    position: int = 0
    stats: ConsumerStats = field(default_factory=ConsumerStats)


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def family_names(metrics: Metrics) -> set[str]:
    return {family.name for family in metrics.registry.collect()}


def test_scheduler_families_only_in_the_service_that_schedules():
    scheduler = Metrics("device-allocator", scheduler=True)
    assert scheduler.scheduler is not None
    scheduler.scheduler.schedule_attempts.labels("scheduled", "default").inc()
    assert (
        sample(scheduler, "allot_scheduler_schedule_attempts_total", result="scheduled", profile="default")
        == 1
    )
    other = Metrics("quota-manager")
    assert other.scheduler is None
    assert not {name for name in family_names(other) if name.startswith("allot_scheduler_")}
    assert not [line for line in other.render().decode().splitlines() if "allot_scheduler_" in line]


def test_process_and_gc_collectors_are_on_the_service_registry():
    names = family_names(Metrics("binder"))
    assert {
        "process_resident_memory_bytes",
        "process_cpu_seconds",
        "python_gc_collections",
        "python_info",
    } <= names


async def test_lag_behind_the_log_is_read_at_scrape_time():
    clock = ManualClock(1_000_000_000)
    store = InMemoryEventStore(clock=clock)
    metrics = Metrics("binder", process=False)
    consumer = Consumer("binder", frozenset({"pod.deleted"}))
    await metrics.refresh(store, consumer)
    assert sample(metrics, "allot_log_head_position", service="binder") == 0
    assert sample(metrics, "allot_consumer_lag_events", service="binder") == 0
    # an event of no interest to the service: the head moves, the service is not behind
    await store.append([an_event(event=NodeRemoved(name="n1"))], producer="test")
    await metrics.refresh(store, consumer)
    assert sample(metrics, "allot_log_head_position", service="binder") == 1
    assert sample(metrics, "allot_log_appended_events_total", service="binder") == 1
    assert sample(metrics, "allot_consumer_lag_events", service="binder") == 0
    assert sample(metrics, "allot_consumer_lag_seconds", service="binder") == 0
    # two events of interest: it is behind by the positions up to the head, since the first one was recorded
    await store.append([an_event(event=PodDeleted(pod=ref("a")))], producer="test")
    await store.append([an_event(event=PodDeleted(pod=ref("b")))], producer="test")
    consumer.position = 1
    await metrics.refresh(store, consumer)
    assert sample(metrics, "allot_consumer_lag_events", service="binder") == 2
    assert sample(metrics, "allot_consumer_lag_seconds", service="binder") > 0
    consumer.position = 3
    await metrics.refresh(store, consumer)
    assert sample(metrics, "allot_consumer_lag_events", service="binder") == 0
    assert sample(metrics, "allot_consumer_lag_seconds", service="binder") == 0


async def test_a_log_that_cannot_be_read_leaves_the_log_families_out():
    class Away(InMemoryEventStore):
        async def head(self) -> tuple[int, bytes]:
            raise ConnectionRefusedError("database away")

    metrics = Metrics("binder", process=False)
    consumer = Consumer("binder", frozenset({"pod.deleted"}))
    await metrics.refresh(InMemoryEventStore(), consumer)
    assert sample(metrics, "allot_log_head_position", service="binder") == 0
    await metrics.refresh(Away(), consumer)
    assert sample(metrics, "allot_log_head_position", service="binder") is None, "absent, not stale"
    assert b"allot_consumer_batches_total" in metrics.render(), "the scrape still answers"


class Silent(InMemoryEventStore):
    """A log whose server stopped answering: a read ends only at its own bound (here: once ``answered`` is set), and
    cancelling it waits for that too, as cancelling a pooled read of a silent PostgreSQL does."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = asyncio.Event()
        self.reads = 0

    async def head(self) -> tuple[int, bytes]:
        self.reads += 1
        while not self.answered.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.answered.wait()
        return await super().head()


async def test_a_read_left_unanswered_never_holds_a_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "SCRAPE_QUERY_TIMEOUT_S", 0.1)
    store, metrics = Silent(), Metrics("binder", process=False)
    consumer = Consumer("binder", frozenset({"pod.deleted"}))
    try:
        scrape = asyncio.ensure_future(metrics.refresh(store, consumer))
        done, _ = await asyncio.wait([scrape], timeout=2)
        assert done, "the scrape waits for the read"  # was: for as long as the read takes to give up
        assert sample(metrics, "allot_log_head_position", service="binder") is None, "absent, not stale"
        await metrics.refresh(store, consumer)  # the read still goes on: waited for again, not made twice
        assert store.reads == 1
        store.answered.set()
        await asyncio.sleep(0)
        await metrics.refresh(store, consumer)
        assert sample(metrics, "allot_log_head_position", service="binder") == 0
    finally:
        store.answered.set()


async def test_consumer_counters_come_from_the_consumer():
    metrics = Metrics("gang-coordinator", process=False)
    assert sample(metrics, "allot_dead_letters_total", service="gang-coordinator") is None
    stats = ConsumerStats(
        batches=7,
        duplicates=2,
        dead_lettered=1,
        transient_failures=3,
        gaps_detected=1,
        refused={"not_in_log": 4, "replayed": 1},
    )
    consumer = Consumer("gang-coordinator", frozenset(), stats=stats)
    await metrics.refresh(None, consumer)
    refused = "allot_bus_messages_refused_total"
    assert sample(metrics, refused, service="gang-coordinator", reason="not_in_log") == 4
    assert sample(metrics, refused, service="gang-coordinator", reason="replayed") == 1
    assert sample(metrics, "allot_consumer_batches_total", service="gang-coordinator") == 7
    assert sample(metrics, "allot_consumer_duplicates_total", service="gang-coordinator") == 2
    assert sample(metrics, "allot_dead_letters_total", service="gang-coordinator") == 1
    assert sample(metrics, "allot_consumer_transient_failures_total", service="gang-coordinator") == 3
    assert sample(metrics, "allot_consumer_gaps_detected_total", service="gang-coordinator") == 1


def test_a_failing_projection_collector_does_not_fail_the_scrape(caplog: pytest.LogCaptureFixture):
    metrics = Metrics("quota-manager", process=False)

    def broken(processor: object) -> list[object]:
        raise KeyError("quota")

    metrics.add(
        lambda source: ProjectionCollector(source, broken, [("allot_quota_used", "gauge", "help")]),
        lambda: object(),
    )
    text = metrics.render().decode()
    assert "allot_events_consumed_total" in text or "allot_consumer_batches_total" in text
    assert "allot_quota_used" not in text
    assert "a projection collector failed" in caplog.text
