"""Only logged events act: the check of delivered messages against the log (allot_bus.provenance), on the in-memory
store. The same check on real NATS and PostgreSQL is in tests/integration/test_bus.py."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from allot_bus.provenance import Delivered, StreamOrder, judge, vouch, warning
from allot_contracts.envelope import RecordedEvent
from allot_eventstore.memory import InMemoryEventStore
from allot_testing import fuzz
from allot_testing.builders import an_event


async def a_log(count: int = 5) -> tuple[InMemoryEventStore, list[RecordedEvent]]:
    store = InMemoryEventStore()
    await store.append([an_event() for _ in range(count)], producer="api")
    return store, await store.read()


def delivered(record: RecordedEvent, sequence: int, times: int = 1) -> Delivered:
    return Delivered(record=record, subject=f"t.events.{record.type}", sequence=sequence, delivered=times)


async def never_rewritten() -> int:
    return 1


async def test_the_logged_events_pass_in_delivery_order() -> None:
    store, log = await a_log()
    messages = [delivered(r, r.position) for r in log]
    accepted, refused = await vouch(store, messages, StreamOrder(), never_rewritten)
    assert (accepted, refused) == (messages, [])


async def test_each_kind_of_lie_is_refused_with_its_reason() -> None:
    store, log = await a_log()
    other = log[1]
    lies = {
        "not_in_log": msgspec.structs.replace(log[0], position=99, event_id=an_event().event_id),
        "wrong_hash": msgspec.structs.replace(log[2], hash=b"\x01" * 32),
        "altered": msgspec.structs.replace(log[2], payload=other.payload),  # the log's hash, other content
        "wrong_position": msgspec.structs.replace(log[0], position=3),
        "producer": msgspec.structs.replace(log[3], producer="quota-manager"),  # an envelope field
        "time": msgspec.structs.replace(log[3], recorded_at=log[3].recorded_at + 1),
    }
    messages = [delivered(r, 10 + i) for i, r in enumerate(lies.values())]
    accepted, refused = await vouch(store, messages, StreamOrder(), never_rewritten)
    assert accepted == []
    assert [r.reason for r in refused] == [
        "not_in_log",
        "wrong_hash",
        "altered",
        "wrong_position",
        "altered",
        "altered",
    ]
    assert refused[3].logged_position == 1 and refused[1].logged_hash == log[2].hash


async def test_redeliveries_pass_and_a_logged_event_published_again_is_a_replay() -> None:
    store, log = await a_log()
    order = StreamOrder()
    first = [delivered(r, r.position) for r in log[:3]]
    assert (await vouch(store, first, order, never_rewritten))[1] == []
    again = [
        delivered(log[1], 2, times=2),
        delivered(log[2], 3, times=2),
    ]  # JetStream redelivers: same sequences
    assert (await vouch(store, again, order, never_rewritten))[1] == []
    accepted, refused = await vouch(
        store, [delivered(log[1], 4), delivered(log[3], 5)], order, never_rewritten
    )
    assert [r.reason for r in refused] == ["replayed"]
    assert [m.record.position for m in accepted] == [4]


async def test_a_rewritten_stream_starts_the_order_again() -> None:
    store, log = await a_log()
    order = StreamOrder()
    await vouch(store, [delivered(r, 100 + r.position) for r in log], order, never_rewritten)

    async def purged() -> int:  # the relay purged the stream and refills it from the oldest checkpoint
        return 106

    accepted, refused = await vouch(store, [delivered(log[0], 106), delivered(log[1], 107)], order, purged)
    assert refused == [] and len(accepted) == 2
    # a new stream numbers from 1 again: a first delivery below what was seen
    renumbered = [delivered(log[2], 1), delivered(log[3], 2)]
    assert (await vouch(store, renumbered, order, never_rewritten))[1] == []


async def test_the_warning_names_the_claim_and_is_the_same_for_the_same_message() -> None:
    store, log = await a_log()
    fake = msgspec.structs.replace(log[0], position=42)
    _, [refusal] = await vouch(store, [delivered(fake, 7)], StreamOrder(), never_rewritten)
    new = warning("quota-manager", refusal)
    assert new.stream_id == "security:quota-manager" and new.causation_id is None
    event = new.event
    assert (event.reason, event.claimed_position, event.logged_position) == ("wrong_position", 42, 1)  # type: ignore[attr-defined]
    assert warning("quota-manager", refusal).event_id == new.event_id


@pytest.mark.parametrize("examples", fuzz.LENGTHS, ids=fuzz.LENGTH_IDS)
def test_only_the_logged_event_itself_passes(examples: int) -> None:
    """Any change to any field a decision can read, at any position, is refused."""
    import asyncio

    tally = fuzz.Tally("bus messages")
    store, log = asyncio.run(a_log(4))
    hashes = {r.position: r.hash for r in log}
    fields = st.sampled_from(
        [
            "position",
            "event_id",
            "stream_id",
            "stream_version",
            "type",
            "producer",
            "recorded_at",
            "payload",
            "hash",
        ]
    )

    @fuzz.settings_for(examples)
    @given(st.sampled_from(log), fields, st.integers(-3, 8), st.binary(max_size=40))
    def check(record: RecordedEvent, field: str, number: int, data: bytes) -> None:
        value: object
        current = getattr(record, field)
        if isinstance(current, int):
            value = number
        elif isinstance(current, bytes):
            value = data
        else:
            value = data.hex() or "x"
        changed = msgspec.structs.replace(record, **{field: value})
        verdict = judge(changed, hashes)
        if changed == record:
            assert verdict is None
            tally.count("unchanged, passed")
        else:
            assert verdict is not None, f"{field}={value!r} passed"
            tally.count(f"refused: {verdict[0]}")

    check()
