"""An append whose COMMIT reaches PostgreSQL, which commits, while its answer never reaches the store: the connection
drops just then, or the answer stalls past ``write_timeout``. A fault proxy (:mod:`allot_testing.tcp_proxy`) between
the store and a real PostgreSQL lets asyncpg's ``COMMIT;`` through and loses what the server says to it.

What is meant to happen (:mod:`allot_eventstore.bounds`): the append raises :class:`Unavailable`, since the store cannot
tell whether it was recorded; the log holds the batch once (the commit was made) with its checkpoint moved; the same
append made again records nothing: refused with :class:`AlreadyProcessed` when it moves a checkpoint (the consumer then
rebuilds from the log, where it finds its decisions), or every event skipped by id when it does not. A service rides it
out: the consumer naks the batch, rebuilds from the log up to the checkpoint the lost commit moved, and neither decides
those events again nor loses the next ones.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_bus.relay import Relay
from allot_contracts.envelope import NewEvent
from allot_contracts.errors import AlreadyProcessed, Unavailable
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.protocol import Checkpoint
from allot_eventstore.urls import redact
from allot_eventstore.verify import verify_chain
from allot_runtime.service import ProcessorRuntime
from allot_testing.builders import an_event
from allot_testing.processors import EchoProcessor
from allot_testing.tcp_proxy import LostAnswer, TcpProxy, through

pytestmark = pytest.mark.integration

BOUND_S = 1.0
LOST = {  # why the append failed, by how the answer is lost (after "PostgreSQL at <its redacted URL> ")
    "drop": "unavailable: connection was closed in the middle of operation",
    "withhold": f"unavailable: no answer within {BOUND_S:g} s (write timeout)",
}
IN_DOUBT = (  # and what the caller is to make of it
    "; its COMMIT was sent, so the append may have been recorded (the same events appended again are skipped, and "
    "its checkpoint refused as already processed)"
)


@pytest.fixture
async def proxied(database_url: str, database_proxy: TcpProxy) -> AsyncIterator[PostgresEventStore]:
    """A store whose every connection goes through the proxy, each round trip bounded as a service's."""
    store = PostgresEventStore.connect(
        through(database_url, database_proxy), read_timeout=BOUND_S, write_timeout=BOUND_S
    )
    await store.head()  # the pool is open
    yield store
    await store.close()


async def assert_each_once_and_chained(store: PostgresEventStore, ids: list[str]) -> None:
    """The log holds exactly the events ``ids``, each once, at dense positions, and its hash chain verifies."""
    recorded = await store.read(limit=10_000)
    assert [e.position for e in recorded] == list(range(1, len(recorded) + 1))  # no hole
    assert sorted(e.event_id for e in recorded) == sorted(ids)  # each once, nothing else
    report = await verify_chain(store.iterate(), head=await store.head())
    assert report.ok, report


@pytest.mark.parametrize("how", ["drop", "withhold"])
async def test_an_append_whose_commit_answer_is_lost_is_recorded_once_and_appending_it_again_records_nothing(
    how: LostAnswer, database_proxy: TcpProxy, proxied: PostgresEventStore, event_store: PostgresEventStore
) -> None:
    triggers = [an_event() for _ in range(2)]
    await event_store.append(triggers, producer="api")
    decisions = [an_event(causation_id=triggers[-1].event_id) for _ in range(3)]
    ids = [e.event_id for e in decisions]
    checkpoint = Checkpoint("echo", 2)

    database_proxy.lose_commit_answer(how)
    with pytest.raises(Unavailable) as raised:
        await asyncio.wait_for(proxied.append(decisions, producer="echo", checkpoint=checkpoint), 10)
    assert database_proxy.commit_lost.is_set()
    lost = f"PostgreSQL at {redact(proxied.url)} {LOST[how]}"
    assert str(raised.value) == lost + IN_DOUBT  # was: the same error as an append that recorded nothing
    assert proxied.unreachable.reason == lost  # readiness says why until the next answer
    # the server committed: the batch and its checkpoint are in the log
    assert await event_store.recorded_ids(ids) == set(ids)
    assert await event_store.get_checkpoint("echo") == 2

    # the same append again, as a caller that cannot tell: refused for the checkpoint, not recorded twice
    with pytest.raises(AlreadyProcessed, match="consumer echo is already at or past position 2"):
        await proxied.append(decisions, producer="echo", checkpoint=checkpoint)
    assert proxied.unreachable.reason is None  # it was answered (was: still "unreachable")
    # without a checkpoint (a timer's event, say): every event skipped by id
    again = await proxied.append(decisions, producer="echo")
    assert (again.positions, again.skipped, again.head) == ([], ids, 5)

    # the store goes on: the next decision lands right after, on the same chain
    trigger = an_event()
    await event_store.append([trigger], producer="api")
    after = an_event(causation_id=trigger.event_id)
    result = await proxied.append([after], producer="echo", checkpoint=Checkpoint("echo", 6))
    assert result.positions == [7]
    await assert_each_once_and_chained(
        event_store, [e.event_id for e in [*triggers, *decisions, trigger, after]]
    )


@pytest.fixture(autouse=True)
def _reset_echo() -> None:
    EchoProcessor.reset()


async def outputs_by_cause(store: PostgresEventStore) -> Counter[str | None]:
    return Counter(e.causation_id for e in await store.read(producer="echo", limit=10_000))


async def wait_for_outputs(store: PostgresEventStore, inputs: list[NewEvent], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await outputs_by_cause(store)
        if all(found[e.event_id] for e in inputs):
            return
        assert asyncio.get_running_loop().time() < deadline, "the events were not decided in time"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["drop", "withhold"])
async def test_a_service_whose_decision_commit_answer_is_lost_decides_every_event_once_and_goes_on(
    how: LostAnswer,
    database_proxy: TcpProxy,
    proxied: PostgresEventStore,
    event_store: PostgresEventStore,
    nats_server_url: str,
    bus_names: dict[str, str],
) -> None:
    """The echo processor's runtime (consumer, decisions appended with its checkpoint) on the proxied store; the
    relay and the test's own appends and reads go to PostgreSQL directly."""
    names, stop = BusNames(**bus_names), asyncio.Event()
    relay_nc = await connect(nats_server_url, name="test-relay")
    nc = await connect(nats_server_url, name="echo")
    relay = Relay(event_store, relay_nc.jetstream(), names, poll_interval=0.1)
    runtime = ProcessorRuntime(
        name="echo", factory=EchoProcessor, store=proxied, nc=nc, names=names, fetch_timeout=0.2
    )
    tasks = [asyncio.create_task(relay.run(stop)), asyncio.create_task(runtime.consumer.run(stop))]
    try:
        await asyncio.wait_for(runtime.consumer.ready.wait(), 20)
        before, during, after = ([an_event() for _ in range(3)] for _ in range(3))
        await event_store.append(before, producer="api")
        await wait_for_outputs(event_store, before)

        database_proxy.lose_commit_answer(how)
        await event_store.append(during, producer="api")
        await asyncio.wait_for(database_proxy.commit_lost.wait(), 10)
        await wait_for_outputs(event_store, during)
        await event_store.append(after, producer="api")  # the next decisions: neither lost nor doubled
        await wait_for_outputs(event_store, after)

        assert not any(task.done() for task in tasks)  # the service rode it out
        assert runtime.consumer.stats.transient_failures >= 1  # the lost answer was noticed
        inputs = before + during + after
        outputs = await event_store.read(producer="echo", limit=10_000)
        assert [e.causation_id for e in outputs] == [e.event_id for e in inputs]  # each once, in log order
        last = (await event_store.positions_of([after[-1].event_id]))[after[-1].event_id]
        assert await event_store.get_checkpoint("echo") == last
        assert runtime.host.processor.seen == [e.event.pod.name for e in inputs]  # the projection: each once
        assert runtime.host.processor.echoed == len(inputs)
        await assert_each_once_and_chained(event_store, [e.event_id for e in inputs + outputs])
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)
        await nc.close()
        await relay_nc.close()
