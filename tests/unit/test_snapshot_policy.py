"""When a running service snapshots its projection: an interval after the last once idle, at once after the batch
that completes two intervals (so no more than two intervals separate two snapshots, the longest tail a restart after
a crash folds, under any load), never without a recorded configuration; a failed write is logged and tried again."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest

from allot_contracts.errors import InvalidInput
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.processor import Host
from allot_runtime.settings import load
from allot_runtime.snapshots import IDLE_S, OVERDUE, Snapshots, restore
from allot_testing.processors import EchoProcessor


def a_host(position: int) -> Host:
    host = Host(EchoProcessor(), name="echo")
    host.processor.seen.append(f"pod-{position}")
    host.position = position
    return host


async def test_an_overdue_snapshot_is_taken_after_the_batch_and_a_due_one_waits_for_idleness() -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=10, keep=2, config_hash="h")
    snapshots.after_batch(a_host(9), consistent=True)  # not due
    snapshots.after_batch(a_host(19), consistent=True)  # due (an interval), not overdue: not now
    assert snapshots.writing is None
    snapshots.after_batch(a_host(20), consistent=False)  # a projection being rebuilt is never snapshot
    assert snapshots.writing is None
    snapshots.after_batch(a_host(20), consistent=True)  # two intervals: now, however busy the consumer
    assert snapshots.writing is not None
    await snapshots.writing
    assert await store.snapshot_positions("echo") == [20]
    snapshots.since = 50

    host, last = a_host(61), time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.create_task(snapshots.loop(asyncio.Lock(), lambda: (host, True, last), stop))
    await asyncio.sleep(IDLE_S * 4)
    stop.set()
    await loop
    assert await store.snapshot_positions("echo") == [20, 61]
    restored, position, _ = await restore(
        lambda: Host(EchoProcessor(), name="echo"), store, config_hash="h", until=70
    )
    assert position == 61 and restored.processor.seen == ["pod-61"] and restored.digest() == host.digest()


async def test_under_a_sustained_burst_no_more_than_two_intervals_separate_two_snapshots() -> None:
    """The consumer is never idle: every snapshot is taken after a batch, at most ``OVERDUE × every`` positions after
    the previous one (docs/adr/0011: the tail a restart folds after a crash is at most two intervals), whatever the
    batch size."""
    bound = OVERDUE
    for every, batch in ((10, 1), (10, 3), (20_000, 100), (20_000, 4_999), (7, 7)):
        store = InMemoryEventStore()
        snapshots = Snapshots(store, every=every, keep=1_000, config_hash="h")
        positions = range(batch, 12 * bound * every + 1, batch)
        for position in positions:
            snapshots.after_batch(a_host(position), consistent=True)
            if snapshots.writing is not None:
                await snapshots.writing
        taken = await store.snapshot_positions("echo")
        gaps = [b - a for a, b in zip([0, *taken], taken, strict=False)]
        assert max(gaps) <= bound * every + batch - 1, (every, batch, gaps)
        assert positions[-1] - taken[-1] < bound * every, (
            "the tail after the last snapshot is under two intervals"
        )
        assert min(gaps) >= bound * every, "a burst is not paused before two intervals are complete"


async def test_a_failed_write_is_logged_and_retried_an_interval_later(caplog) -> None:
    class Failing(InMemoryEventStore):
        async def write_snapshot(self, snapshot, *, keep):  # type: ignore[no-untyped-def]
            raise OSError("disk full")

    snapshots = Snapshots(Failing(), every=10, keep=2, config_hash="h")
    snapshots.start(a_host(10))
    assert snapshots.writing is not None
    await snapshots.writing
    assert "could not write its snapshot at position 10: disk full" in caplog.text
    assert not snapshots.due(19) and snapshots.due(20), "tried again an interval later once idle"
    assert not snapshots.overdue(29) and snapshots.overdue(30), "or after the batch completing two intervals"


def test_no_recorded_configuration_no_snapshots() -> None:
    assert Snapshots(InMemoryEventStore(), every=10, keep=2, config_hash=None).every == 0


async def test_a_snapshot_of_another_configuration_is_not_restored(caplog) -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=10, keep=2, config_hash="old")
    snapshots.start(a_host(10))
    assert snapshots.writing is not None
    await snapshots.writing
    caplog.set_level(logging.INFO)
    host, position, _ = await restore(
        lambda: Host(EchoProcessor(), name="echo"), store, config_hash="new", until=10
    )
    assert position == 0 and host.processor.seen == []


def test_the_snapshot_settings_are_read_and_checked() -> None:
    base = {"ALLOT_DATABASE_URL": "postgresql://x@h/db"}
    assert (load("binder", base).snapshot_every, load("binder", base).snapshot_keep) == (20_000, 2)
    read = load("binder", {**base, "ALLOT_SNAPSHOT_EVERY": "500", "ALLOT_SNAPSHOT_KEEP": "3"})
    assert (read.snapshot_every, read.snapshot_keep) == (500, 3)
    with pytest.raises(InvalidInput, match="ALLOT_SNAPSHOT_EVERY"):
        load("binder", {**base, "ALLOT_SNAPSHOT_EVERY": "-1"})
    with pytest.raises(InvalidInput, match="ALLOT_SNAPSHOT_KEEP"):
        load("binder", {**base, "ALLOT_SNAPSHOT_KEEP": "0"})


async def test_a_graceful_stop_snapshots_only_a_consistent_projection_that_moved_and_within_the_timeout(
    caplog,
) -> None:
    store = InMemoryEventStore()
    snapshots = Snapshots(store, every=1000, keep=2, config_hash="h")
    snapshots.since = 40  # restored from (or last snapshot at) 40
    assert await snapshots.on_stop(a_host(40), consistent=True, timeout=5) is None  # nothing new
    assert await snapshots.on_stop(a_host(45), consistent=False, timeout=5) is None  # being rebuilt
    disabled = Snapshots(store, every=0, keep=2, config_hash="h")
    assert await disabled.on_stop(a_host(45), consistent=True, timeout=5) is None
    assert await store.snapshot_positions("echo") == []

    taken = await snapshots.on_stop(a_host(45), consistent=True, timeout=5)  # not due (every 1000): taken
    assert taken is not None and taken.position == 45
    assert await store.snapshot_positions("echo") == [45]

    class Slow(InMemoryEventStore):
        async def write_snapshot(self, snapshot, *, keep):  # type: ignore[no-untyped-def]
            await asyncio.sleep(10)

    caplog.set_level(logging.WARNING, logger="allot.snapshots")
    slow = Snapshots(Slow(), every=1000, keep=2, config_hash="h")
    started = time.monotonic()
    assert await slow.on_stop(a_host(45), consistent=True, timeout=0.2) is None
    assert time.monotonic() - started < 2
    assert "not written within the shutdown timeout" in caplog.text


async def test_a_rebuild_builds_one_host_and_logs_the_digest_once_ready(caplog) -> None:
    """``rebuild_projection`` restores the snapshot into the one host it builds; with no tail folded the digest the
    snapshot was checked against is logged with the rebuild, else it is computed once the consumer is ready."""
    from allot_bus.names import BusNames
    from allot_contracts.events import PodDeleted
    from allot_runtime.recorded_config import AppliedConfig, config_hash
    from allot_runtime.service import ProcessorRuntime
    from allot_testing.builders import an_event, ref

    store = InMemoryEventStore()
    for name in ("a", "b", "c"):
        await store.append([an_event(event=PodDeleted(pod=ref(name)))], producer="test")
    await store.advance_checkpoint("echo", 3)
    built: list[EchoProcessor] = []

    def factory() -> EchoProcessor:
        built.append(EchoProcessor())
        return built[-1]

    def runtime() -> ProcessorRuntime:
        return ProcessorRuntime(
            name="echo",
            factory=factory,
            store=store,
            nc=SimpleNamespace(jetstream=lambda: None),  # the consumer is never started here
            names=BusNames(),
            config=AppliedConfig(config={}),
            snapshot_every=10,
        )

    caplog.set_level(logging.INFO)
    first = runtime()
    checkpoint = await first.rebuild_projection()  # no snapshot: folded from 0, its digest logged once ready
    assert first.host.processor.seen == ["a", "b", "c"] and len(built) == 2
    assert f"projection rebuilt up to position {checkpoint}\n" in caplog.text + "\n"
    assert first.settling is not None and not first.settling.done()
    first.consumer.ready.set()
    await first.settling
    assert f"projection at position {checkpoint} (digest {first.host.digest()[:12]})" in caplog.text
    snapshot = await first.snapshot_on_stop(timeout=5)
    assert snapshot is not None and snapshot.config_hash == config_hash({})

    caplog.clear()
    built.clear()
    second = runtime()
    assert await second.rebuild_projection() == checkpoint
    assert len(built) == 2, "one processor for the runtime, one for the restored host: none thrown away"
    assert second.host.processor is built[-1] and second.host.processor.seen == ["a", "b", "c"]
    assert f"restored from the snapshot at position {checkpoint}" in caplog.text
    assert f"rebuilt up to position {checkpoint} (digest {snapshot.digest[:12]})" in caplog.text
    assert second.settling is None, "nothing left to do after ready: the digest is the snapshot's"
