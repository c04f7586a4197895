"""The event-store contract. Subclass ``EventStoreContract`` and provide a ``store`` fixture; every backend must pass.

Covers what every caller relies on: atomic batches, dense commit-ordered positions, idempotent append by event id,
optimistic concurrency on stream versions, checkpoints in the same transaction (exactly-once effect), filtered
reads, and a hash chain that verifies.
"""

from __future__ import annotations

import pytest

from allot_contracts.errors import AlreadyProcessed, ConcurrencyConflict
from allot_eventstore import Checkpoint, EventStore, verify_chain
from allot_testing.builders import an_event


class EventStoreContract:
    @pytest.fixture
    def store(self) -> EventStore:  # pragma: no cover - overridden
        raise NotImplementedError

    async def test_positions_are_dense_and_ordered(self, store: EventStore) -> None:
        first = await store.append([an_event(), an_event()], producer="t")
        second = await store.append([an_event()], producer="t")
        assert first.positions == [1, 2]
        assert second.positions == [3]
        assert [e.position for e in await store.read()] == [1, 2, 3]
        assert (await store.head())[0] == 3

    async def test_reappending_the_same_event_id_is_a_no_op(self, store: EventStore) -> None:
        event = an_event()
        await store.append([event], producer="t")
        again = await store.append([event], producer="t")
        assert again.positions == []
        assert again.skipped == [event.event_id]
        assert len(await store.read()) == 1

    async def test_stream_versions_are_dense_per_stream(self, store: EventStore) -> None:
        await store.append([an_event(stream="s:a"), an_event(stream="s:b"), an_event(stream="s:a")], producer="t")
        versions = [(e.stream_id, e.stream_version) for e in await store.read()]
        assert versions == [("s:a", 1), ("s:b", 1), ("s:a", 2)]
        assert [e.stream_version for e in await store.read_stream("s:a")] == [1, 2]

    async def test_stale_expected_version_conflicts_and_writes_nothing(self, store: EventStore) -> None:
        await store.append([an_event(stream="s:x", expected_version=0)], producer="t")
        with pytest.raises(ConcurrencyConflict):
            await store.append([an_event(), an_event(stream="s:x", expected_version=0)], producer="t")
        assert len(await store.read()) == 1
        ok = await store.append([an_event(stream="s:x", expected_version=1)], producer="t")
        assert ok.positions == [2]

    async def test_checkpoint_moves_with_the_events_exactly_once(self, store: EventStore) -> None:
        await store.append([an_event()], producer="t", checkpoint=Checkpoint("c1", 7))
        assert await store.get_checkpoint("c1") == 7
        with pytest.raises(AlreadyProcessed):
            await store.append([an_event()], producer="t", checkpoint=Checkpoint("c1", 7))
        assert len(await store.read()) == 1
        await store.advance_checkpoint("c1", 5)  # never moves backwards
        assert await store.get_checkpoint("c1") == 7

    async def test_filtered_reads(self, store: EventStore) -> None:
        await store.append([an_event() for _ in range(5)], producer="a")
        await store.append([an_event() for _ in range(3)], producer="b")
        assert [e.position for e in await store.read(after=2, until=6)] == [3, 4, 5, 6]
        assert [e.position for e in await store.read(producer="b")] == [6, 7, 8]
        assert len(await store.read(types=["pod.deleted"])) == 8
        assert await store.read(types=["pod.placed"]) == []
        assert [e.position for e in await store.read(limit=2)] == [1, 2]
        assert [e.position async for e in store.iterate(after=1, page=3)] == list(range(2, 9))

    async def test_payload_round_trips_and_the_chain_verifies(self, store: EventStore) -> None:
        events = [an_event() for _ in range(4)]
        await store.append(events, producer="t")
        read = await store.read()
        assert [r.decode() for r in read] == [e.event for e in events]
        report = await verify_chain(store.iterate(), head=await store.head())
        assert report.ok, report.problem
        assert report.events == 4
