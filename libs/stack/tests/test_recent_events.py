"""The newest events of some types (:func:`allot_stack.logtools.recent`, behind ``allot events tail --type T --last
N``): the N newest events of type T, wherever they are in the log."""

from __future__ import annotations

import asyncio

from allot_stack.logtools import recent
from allot_testing.builders import a_node, a_pod
from allot_testing.scenario import Scenario


def test_last_counts_the_events_that_match_the_type() -> None:
    s = Scenario()
    s.apply(a_node("n1", gpus=1))
    s.apply(*(a_pod(f"p{i}") for i in range(6)))
    store = s.sim.store
    types = [r.type for r in store.events]
    submitted = [r.position for r in store.events if r.type == "pod.submitted"]
    assert len(submitted) == 6 and types[-1] != "pod.submitted"  # other events came after the last one

    async def run(patterns: list[str], last: int, after: int | None = None) -> tuple[list[int], int]:
        records, until = await recent(store, patterns, last=last, after=after)
        return [r.position for r in records], until

    head = store.events[-1].position
    assert asyncio.run(run(["pod.submitted"], 2)) == (submitted[-2:], head)
    assert asyncio.run(run(["pod.*"], 1))[0] == [
        max(r.position for r in store.events if r.type.startswith("pod."))
    ]
    assert asyncio.run(run([], 3))[0] == [head - 2, head - 1, head]
    assert asyncio.run(run(["pod.submitted"], 0))[0] == []
    assert asyncio.run(run(["pod.submitted"], 20, after=submitted[3]))[0] == submitted[4:]


def test_a_long_log_is_read_back_from_the_head_with_the_same_answer_as_a_full_read() -> None:
    """Several windows back from the head (the newest first): what is found is what reading the whole log and keeping
    the newest matches finds, for a type that is everywhere, one that is only near the start, and none."""
    from allot_contracts.events import NodeDeleted
    from allot_eventstore.memory import InMemoryEventStore
    from allot_testing.builders import an_event

    store = InMemoryEventStore()

    async def fill() -> None:
        await store.append([an_event(event=NodeDeleted(name="early"), stream="node:early")], producer="api")
        for _ in range(20):
            await store.append([an_event() for _ in range(250)], producer="api")

    asyncio.run(fill())
    head = len(store.events)
    assert head == 5001

    async def run(patterns: list[str], last: int) -> list[int]:
        records, until = await recent(store, patterns, last=last, after=None)
        assert until == head
        return [r.position for r in records]

    def newest(patterns: list[str], last: int) -> list[int]:
        return [r.position for r in store.events if not patterns or r.type in patterns][-last:]

    assert asyncio.run(run(["pod.deleted"], 3)) == newest(["pod.deleted"], 3) == [head - 2, head - 1, head]
    assert asyncio.run(run(["pod.deleted"], 2000)) == newest(["pod.deleted"], 2000)  # across windows
    assert asyncio.run(run(["node.*"], 5)) == [1]  # only at the start: every window back to it
    assert asyncio.run(run([], 10_000)) == list(range(1, head + 1))
    assert asyncio.run(run(["quota.applied"], 5)) == []
    tag = store.events[-1].tag  # pod.deleted at its present version
    assert asyncio.run(run([tag], 2)) == [head - 1, head]
    other = tag.rsplit(".v", 1)[0] + f".v{store.events[-1].schema_version + 1}"
    assert asyncio.run(run([other], 2)) == []  # a tag is that version only
