"""The event-store contract. Subclass ``EventStoreContract`` and provide a ``store`` fixture; every backend must pass.

Covers what every caller relies on: atomic batches, dense commit-ordered positions, idempotent append by event id,
optimistic concurrency on stream versions, checkpoints in the same transaction (exactly-once effect), fenced appends
(a stale leadership term writes nothing), filtered reads, and a hash chain that verifies.
"""

from __future__ import annotations

import hashlib

import pytest

from allot_contracts.errors import AlreadyProcessed, ConcurrencyConflict, Fenced
from allot_contracts.events import ObjectRef, PodReleased
from allot_eventstore import Checkpoint, EventStore, Fence, Snapshot, verify_chain
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
        await store.append(
            [an_event(stream="s:a"), an_event(stream="s:b"), an_event(stream="s:a")], producer="t"
        )
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

    async def test_outputs_come_with_the_position_of_their_cause(self, store: EventStore) -> None:
        first, second = an_event(), an_event()
        await store.append([first, second], producer="api")
        answers = [an_event(causation_id=cause.event_id) for cause in (first, first, second)]
        await store.append(answers[:2], producer="svc", checkpoint=Checkpoint("svc", 1))
        uncaused = an_event()  # no cause: position 0
        astray = an_event(causation_id=an_event().event_id)  # a cause not in the log: position 0 too
        await store.append([uncaused], producer="svc")
        await store.append([astray], producer="svc")
        await store.append(answers[2:], producer="svc", checkpoint=Checkpoint("svc", 2))
        await store.append([an_event(causation_id=first.event_id)], producer="other")
        got = [(cause, record.event_id) async for cause, record in store.outputs("svc", page=2)]
        assert got == [
            (1, answers[0].event_id),
            (1, answers[1].event_id),
            (0, uncaused.event_id),
            (0, astray.event_id),
            (2, answers[2].event_id),
        ]
        assert [record.position async for _, record in store.outputs("svc", page=1)] == [3, 4, 5, 6, 7]
        assert [record.position async for _, record in store.outputs("svc", after=5)] == [6, 7]

    async def test_payload_round_trips_and_the_chain_verifies(self, store: EventStore) -> None:
        events = [an_event() for _ in range(4)]
        await store.append(events, producer="t")
        read = await store.read()
        assert [r.decode() for r in read] == [e.event for e in events]
        report = await verify_chain(store.iterate(), head=await store.head())
        assert report.ok, report.problem
        assert report.events == 4

    async def test_latest_types_and_recorded_ids(self, store: EventStore) -> None:
        released = an_event(
            stream="pod:ns/a", event=PodReleased(pod=ObjectRef(namespace="ns", name="a"), node="n")
        )
        await store.append([an_event(stream="pod:ns/a"), an_event(stream="pod:ns/b")], producer="t")
        await store.append([released], producer="t")
        kinds = ["pod.deleted", "pod.released"]
        got = await store.latest_types(["pod:ns/a", "pod:ns/b", "pod:ns/none"], kinds)
        assert got == {"pod:ns/a": "pod.released", "pod:ns/b": "pod.deleted"}
        assert await store.latest_types(["pod:ns/a"], ["pod.deleted"]) == {"pod:ns/a": "pod.deleted"}
        assert await store.latest_types(["pod:ns/a"], ["pod.placed"]) == {}
        missing = an_event()
        assert await store.recorded_ids([released.event_id, missing.event_id]) == {released.event_id}

    async def test_holds_any_of_some_types_up_to_a_position(self, store: EventStore) -> None:
        released = an_event(event=PodReleased(pod=ObjectRef(namespace="ns", name="a"), node="n"))
        first = await store.append([an_event(), an_event()], producer="t")
        last = await store.append([released], producer="t")
        before = last.positions[0] - 1
        assert first.positions[-1] == before
        assert await store.holds_any(["pod.released"])
        assert await store.holds_any(["pod.placed", "pod.released"], until=last.positions[0])
        assert not await store.holds_any(["pod.released"], until=before)
        assert await store.holds_any(["pod.placed", "pod.deleted"], until=first.positions[0])
        assert not await store.holds_any(["pod.placed", "pod.bound"])
        assert not await store.holds_any([])

    async def test_newest_of_some_types_up_to_a_position(self, store: EventStore) -> None:
        released = an_event(event=PodReleased(pod=ObjectRef(namespace="ns", name="a"), node="n"))
        await store.append([released], producer="t")
        await store.append([an_event() for _ in range(5)], producer="t")  # pod.deleted, at 2..6
        assert [r.position for r in await store.newest(["pod.deleted"], limit=2)] == [5, 6]
        assert [r.position for r in await store.newest(["pod.deleted", "pod.released"], limit=3)] == [4, 5, 6]
        assert [r.position for r in await store.newest(["pod.released", "pod.bound"], limit=3)] == [1]
        assert [r.position for r in await store.newest(["pod.deleted"], limit=2, until=3)] == [2, 3]
        assert [r.type for r in await store.newest(["pod.released"], limit=1)] == ["pod.released"]
        assert await store.newest(["pod.deleted"], limit=0) == []
        assert await store.newest([], limit=5) == []

    async def test_hashes_and_positions_of_what_the_log_holds(self, store: EventStore) -> None:
        first, second = an_event(), an_event()
        await store.append([first, second], producer="t")
        recorded = await store.read()
        assert await store.hashes([0, 1, 2, 3, -5]) == {r.position: r.hash for r in recorded}
        assert await store.hashes([]) == {}
        assert await store.hashes([2, 500, 10_000]) == {2: recorded[1].hash}  # far apart
        assert await store.hashes([1, 3]) == {1: recorded[0].hash}  # only those asked for
        missing = an_event().event_id
        assert await store.positions_of([second.event_id, missing, "not-an-id"]) == {second.event_id: 2}
        assert await store.positions_of(["not-an-id"]) == {}

    async def test_a_stale_term_writes_nothing(self, store: EventStore) -> None:
        assert await store.advance_fence(Fence("binder", 3), holder="a") == (3, "a")
        await store.append([an_event()], producer="binder", fence=Fence("binder", 3))
        assert await store.advance_fence(Fence("binder", 2), holder="old") == (3, "a")  # never backwards
        assert await store.advance_fence(Fence("binder", 4), holder="b") == (4, "b")
        for events, checkpoint in (
            ([an_event()], None),
            ([an_event() for _ in range(70)], Checkpoint("binder", 9)),  # a large batch (COPY)
            ([], Checkpoint("binder", 10)),  # a checkpoint alone
        ):
            with pytest.raises(Fenced) as refused:
                await store.append(events, producer="binder", checkpoint=checkpoint, fence=Fence("binder", 3))
            assert (refused.value.term, refused.value.current) == (3, 4)
        assert len(await store.read()) == 1
        assert await store.get_checkpoint("binder") == 0
        await store.append([an_event()], producer="binder", fence=Fence("binder", 4))
        await store.append(
            [an_event()], producer="other", fence=Fence("other", 0)
        )  # another name: no fence yet
        stamps = [r.metadata.get("fence") for r in await store.read()]
        assert stamps == ["binder/3", "binder/4", "other/0"]

    async def test_the_newest_usable_snapshot_is_read_and_only_the_newest_kept(
        self, store: EventStore
    ) -> None:
        def snap(position: int, *, config: str = "c1", fmt: int = 1) -> Snapshot:
            return Snapshot(
                consumer="svc",
                position=position,
                format=fmt,
                config_hash=config,
                digest=f"d{position}",
                state=f"state {position}".encode(),
                state_hash=b"",
            )

        assert await store.latest_snapshot("svc", format=1, config_hash="c1") is None
        await store.write_snapshot(snap(10), keep=3)
        await store.write_snapshot(snap(20, config="c2"), keep=3)
        await store.write_snapshot(snap(30, fmt=2), keep=3)
        found = await store.latest_snapshot("svc", format=1, config_hash="c1")
        assert found is not None
        assert (found.position, found.digest, found.state) == (10, "d10", b"state 10")
        assert found.state_hash == hashlib.sha256(b"state 10").digest()
        assert (await store.latest_snapshot("svc", format=1, config_hash="c2", until=19)) is None
        await store.write_snapshot(snap(40, config="other"), keep=3)
        await store.write_snapshot(snap(40), keep=3)  # same position: the later write replaces the row
        assert await store.snapshot_positions("svc") == [20, 30, 40]
        latest = await store.latest_snapshot("svc", format=1, config_hash="c1", until=45)
        assert latest is not None and latest.position == 40
        assert await store.latest_snapshot("svc", format=1, config_hash="other", until=45) is None
        assert await store.latest_snapshot("svc", format=1, config_hash="c1", until=39) is None
        assert await store.snapshot_positions("other") == []
