"""Bus semantics against a real nats-server and PostgreSQL: relay order, redelivery, duplicates, restarts, and
catching up from the log when JetStream loses its store."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections import Counter

import msgspec
import pytest

from allot_bus import wire
from allot_bus.adapters.nats import connect
from allot_bus.names import HEADER_MSG_ID, BusNames
from allot_bus.relay import Relay
from allot_contracts.envelope import RecordedEvent, canonical
from allot_contracts.errors import Unavailable
from allot_contracts.events import ObjectRef, PodDeleted, TimerFired
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_runtime.service import ProcessorRuntime
from allot_stack.explain import refusal_lines, refused_about, refused_counts, refused_line
from allot_testing.builders import an_event
from allot_testing.processors import EchoProcessor
from allot_testing.servers import private_nats

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _reset_echo():
    EchoProcessor.reset()
    yield
    EchoProcessor.reset()


@pytest.fixture
async def store(database_url):
    store = PostgresEventStore.connect(database_url)
    yield store
    await store.close()


class Stack:
    """A relay and one processor runtime, as tasks, against given servers."""

    def __init__(self, store, nats_url: str, names: BusNames) -> None:
        self.store, self.nats_url, self.names = store, nats_url, names
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    async def start_relay(self) -> None:
        self.relay_nc = await connect(self.nats_url, name="test-relay")
        relay = Relay(self.store, self.relay_nc.jetstream(), self.names, poll_interval=0.1)
        self.tasks.append(asyncio.create_task(relay.run(self.stop), name="relay"))

    async def start_runtime(self) -> ProcessorRuntime:
        self.nc = await connect(self.nats_url, name="test-echo")
        self.runtime = ProcessorRuntime(
            name="echo",
            factory=EchoProcessor,
            store=self.store,
            nc=self.nc,
            names=self.names,
            fetch_timeout=0.2,
        )
        self.consumer_stop = asyncio.Event()
        self.tasks.append(asyncio.create_task(self.runtime.consumer.run(self.consumer_stop), name="echo"))
        await asyncio.wait_for(self.runtime.consumer.ready.wait(), timeout=20)
        return self.runtime

    async def stop_runtime(self) -> None:
        self.consumer_stop.set()
        await asyncio.wait_for(self.tasks.pop(), timeout=10)
        await self.nc.close()

    async def close(self) -> None:
        self.stop.set()
        if hasattr(self, "consumer_stop"):
            self.consumer_stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), timeout=15)
        for nc in (getattr(self, "nc", None), getattr(self, "relay_nc", None)):
            if nc is not None and not nc.is_closed:
                await nc.close()


@pytest.fixture
async def stack(store, nats_server_url, bus_names):
    s = Stack(store, nats_server_url, BusNames(**bus_names))
    yield s
    await s.close()


async def outputs_by_cause(store) -> Counter:
    return Counter(
        e.causation_id for e in await store.read(producer="echo", limit=100_000) if e.type == "pod.released"
    )


async def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def handled_all(store, inputs: list) -> bool:
    causes = await outputs_by_cause(store)
    return all(causes[e.event_id] >= 1 for e in inputs)


async def test_every_event_is_handled_once_in_log_order(store, stack):
    await stack.start_relay()
    runtime = await stack.start_runtime()
    inputs = [an_event() for _ in range(60)]
    for chunk in range(0, 60, 7):
        await store.append(inputs[chunk : chunk + 7], producer="api")
    await wait_for(lambda: handled_all(store, inputs))
    causes = await outputs_by_cause(store)
    assert all(causes[e.event_id] == 1 for e in inputs)
    assert runtime.host.processor.seen == [e.event.pod.name for e in inputs]


async def test_transient_failure_is_retried_in_order_with_one_effect(store, stack):
    inputs = [an_event() for _ in range(12)]
    EchoProcessor.fail_transient = {inputs[4].event.pod.name: 2}
    await stack.start_relay()
    runtime = await stack.start_runtime()
    await store.append(inputs, producer="api")
    await wait_for(lambda: handled_all(store, inputs))
    causes = await outputs_by_cause(store)
    assert all(causes[e.event_id] == 1 for e in inputs)
    assert runtime.consumer.stats.transient_failures >= 2
    assert runtime.host.processor.seen == [e.event.pod.name for e in inputs], "rebuilt in log order"


async def test_a_logged_event_published_again_has_no_second_effect_and_is_recorded_as_a_replay(store, stack):
    await stack.start_relay()
    runtime = await stack.start_runtime()
    first = an_event()
    await store.append([first], producer="api")
    await wait_for(lambda: handled_all(store, [first]))
    # The same event published again after JetStream's duplicate window (a message id the server has not seen):
    # the relay never does this (each publish expects the stream's tail), so it is somebody replaying it.
    record = (await store.read(types=["pod.deleted"]))[0]
    await publish(stack, record, msg_id="retry-1")
    await wait_for(lambda: refusals(store, 1))
    second = an_event()
    await store.append([second], producer="api")
    await wait_for(lambda: handled_all(store, [second]))
    causes = await outputs_by_cause(store)
    assert causes[first.event_id] == 1 and causes[second.event_id] == 1
    assert runtime.host.processor.seen == [first.event.pod.name, second.event.pod.name]
    [warning] = await warnings(store)
    assert (warning["reason"], warning["claimed_position"]) == ("replayed", record.position)
    assert warning["claimed_event_id"] == record.event_id and warning["consumer"] == "echo"
    assert runtime.consumer.stats.refused == {"replayed": 1}


async def test_consumer_restart_resumes_without_loss_or_duplicates(store, stack):
    await stack.start_relay()
    await stack.start_runtime()
    before = [an_event() for _ in range(10)]
    await store.append(before, producer="api")
    await wait_for(lambda: handled_all(store, before))
    digest_before = stack.runtime.host.digest()
    await stack.stop_runtime()
    during = [an_event() for _ in range(10)]  # appended while the consumer is down
    await store.append(during, producer="api")
    runtime = await stack.start_runtime()
    after = [an_event() for _ in range(5)]
    await store.append(after, producer="api")
    everything = before + during + after
    await wait_for(lambda: handled_all(store, everything))
    causes = await outputs_by_cause(store)
    assert all(causes[e.event_id] == 1 for e in everything)
    assert runtime.host.processor.seen == [e.event.pod.name for e in everything]
    assert digest_before != runtime.host.digest()


async def test_permanent_failure_dead_letters_and_moves_on(store, stack):
    inputs = [an_event() for _ in range(5)]
    EchoProcessor.fail_permanent = {inputs[2].event.pod.name}
    await stack.start_relay()
    runtime = await stack.start_runtime()
    await store.append(inputs, producer="api")
    others = inputs[:2] + inputs[3:]
    await wait_for(lambda: handled_all(store, others))
    dead = await store.read(types=["consumer.dead_lettered"])
    assert len(dead) == 1
    assert dead[0].payload_dict()["event_id"] == inputs[2].event_id
    assert "poison" in dead[0].payload_dict()["reason"]
    assert runtime.consumer.stats.dead_lettered == 1
    assert (await outputs_by_cause(store))[inputs[2].event_id] == 0


async def test_an_event_that_crashes_the_handler_every_time_is_dead_lettered_not_retried_for_ever(
    store, stack
):
    inputs = [an_event() for _ in range(5)]
    EchoProcessor.fail_crash = {inputs[2].event.pod.name}
    await stack.start_relay()
    runtime = await stack.start_runtime()
    runtime.consumer.backoff = (0.05,)
    await store.append(inputs, producer="api")
    others = inputs[:2] + inputs[3:]
    await wait_for(lambda: handled_all(store, others))
    dead = await store.read(types=["consumer.dead_lettered"])
    assert [d.payload_dict()["event_id"] for d in dead] == [inputs[2].event_id]
    assert "KeyError" in dead[0].payload_dict()["reason"]
    assert f"failed {runtime.consumer.poison_after} times" in dead[0].payload_dict()["reason"]
    # the projection was rebuilt without the poison event, and a rebuild from the log agrees with it
    assert runtime.host.processor.seen == [e.event.pod.name for e in others]
    rebuilt = Host(EchoProcessor(), name="echo")
    checked, mismatches = await verify_decisions(rebuilt, store)
    assert (checked, mismatches) == (5, [])
    assert rebuilt.digest() == runtime.host.digest()


async def test_catch_up_from_the_log_after_nats_loses_its_store(store, bus_names, tmp_path):
    names = BusNames(**bus_names)
    with private_nats(tmp_path) as server:
        s = Stack(store, server.url, names)
        try:
            await s.start_relay()
            runtime = await s.start_runtime()
            first = [an_event() for _ in range(10)]
            await store.append(first, producer="api")
            await wait_for(lambda: handled_all(store, first))

            server.stop(kill=True)  # crash, and the disk is gone
            shutil.rmtree(server.store_dir)
            during = [an_event() for _ in range(10)]
            await store.append(during, producer="api")
            server.start()

            after = [an_event() for _ in range(10)]
            await store.append(after, producer="api")
            everything = first + during + after
            await wait_for(lambda: handled_all(store, everything), timeout=60)
            causes = await outputs_by_cause(store)
            assert all(causes[e.event_id] == 1 for e in everything)
            assert runtime.host.processor.seen == [e.event.pod.name for e in everything]
        finally:
            await s.close()


async def test_the_log_going_away_while_a_consumer_is_idle_does_not_stop_it(store, stack, monkeypatch):
    await stack.start_relay()
    runtime = await stack.start_runtime()
    task = stack.tasks[-1]
    calls = {"n": 0}
    real_read = store.read

    async def unavailable(*args, **kwargs):
        calls["n"] += 1
        raise Unavailable("PostgreSQL unavailable: connection refused")

    monkeypatch.setattr(store, "read", unavailable)
    runtime.consumer.backoff = (0.05, 0.05, 0.05)
    await asyncio.sleep(1.5)  # several idle checks fail
    assert calls["n"] >= 2
    assert not task.done(), "the consumer must survive the outage"
    monkeypatch.setattr(store, "read", real_read)
    inputs = [an_event() for _ in range(3)]
    await store.append(inputs, producer="api")
    await wait_for(lambda: handled_all(store, inputs))


# -- only events in the log act ------------------------------------------------------------------------------------


async def publish(stack: Stack, record: RecordedEvent, *, msg_id: str | None = None) -> None:
    """Publish a message on the bus as anybody on the network can (NATS without authentication)."""
    js = stack.nc.jetstream()
    await js.publish(
        stack.names.subject(record.type),
        wire.encode(record),
        headers={HEADER_MSG_ID: msg_id or str(uuid.uuid4())},
    )


def forged(like: RecordedEvent, *, position: int, name: str, hash: bytes = b"\xab" * 32) -> RecordedEvent:
    """A ``pod.deleted`` the log never recorded, claiming ``position``."""
    return msgspec.structs.replace(
        like,
        position=position,
        event_id=str(uuid.uuid4()),
        stream_id=f"pod:default/{name}",
        payload=canonical(PodDeleted(pod=ObjectRef(namespace="default", name=name), uid=name)),
        hash=hash,
    )


async def warnings(store) -> list[dict]:
    return [r.payload_dict() for r in await store.read(types=["security.message_refused"])]


async def refusals(store, count: int) -> bool:
    return len(await warnings(store)) >= count


async def genuine_start(store, stack) -> tuple[ProcessorRuntime, RecordedEvent]:
    await stack.start_relay()
    runtime = await stack.start_runtime()
    first = an_event()
    await store.append([first], producer="api")
    await wait_for(lambda: handled_all(store, [first]))
    return runtime, (await store.read(types=["pod.deleted"]))[0]


async def test_a_forged_message_is_refused_recorded_and_the_real_event_at_its_position_still_acts(
    store, stack
):
    runtime, genuine = await genuine_start(store, stack)
    head = (await store.head())[0]
    fake = forged(genuine, position=head + 2, name="forged")  # the warning will be head + 1
    await publish(stack, fake)
    await wait_for(lambda: refusals(store, 1))
    after = an_event()  # lands at the position the forgery claimed
    await store.append([after], producer="api")
    await wait_for(lambda: handled_all(store, [after]))
    assert (await store.read(types=["pod.deleted"]))[-1].position == head + 2
    assert runtime.host.processor.seen == [genuine.payload_dict()["pod"]["name"], after.event.pod.name]
    assert (await outputs_by_cause(store))[fake.event_id] == 0
    [warning] = await warnings(store)
    assert warning["reason"] == "not_in_log"
    assert (warning["claimed_position"], warning["claimed_event_id"]) == (head + 2, fake.event_id)
    assert warning["claimed_type"] == "pod.deleted" and warning["claimed_hash"] == fake.hash.hex()
    assert warning["logged_hash"] == "" and warning["claimed_stream"] == "pod:default/forged"
    assert runtime.consumer.stats.refused == {"not_in_log": 1}
    # `allot explain pod default/forged` says what was claimed and refused
    lines = refusal_lines(await refused_about(store.url, "pod:default/forged"))
    assert "echo: not_in_log: pod.deleted" in lines[-1] and f"claiming position {head + 2}" in lines[-1]
    # `allot replay --verify` counts the refusals by reason
    assert await refused_counts(store) == {"not_in_log": 1}
    assert refused_line(await refused_counts(store)).startswith(
        "bus          1 message(s) refused (not_in_log 1)"
    )
    assert refused_line({}) == "bus          no message was refused"


async def test_a_message_with_a_wrong_hash_or_altered_content_is_refused(store, stack):
    runtime, genuine = await genuine_start(store, stack)
    # an event the consumer does not follow: the position is in the log, ahead of what the consumer has folded
    await store.append([an_event(event=TimerFired(service="other", due=1))], producer="api")
    position, logged = await store.head()
    await publish(stack, forged(genuine, position=position, name="wrong-hash"))
    await wait_for(lambda: refusals(store, 1))
    # the logged hash, with other content
    await publish(stack, forged(genuine, position=position, name="altered", hash=logged))
    await wait_for(lambda: refusals(store, 2))
    assert runtime.host.processor.seen == [genuine.payload_dict()["pod"]["name"]]
    assert [(w["reason"], w["claimed_position"]) for w in await warnings(store)] == [
        ("wrong_hash", position),
        ("altered", position),
    ]
    assert (await warnings(store))[0]["logged_hash"] == logged.hex()
    after = an_event()
    await store.append([after], producer="api")
    await wait_for(lambda: handled_all(store, [after]))
    assert runtime.host.processor.seen == [genuine.payload_dict()["pod"]["name"], after.event.pod.name]
    assert runtime.consumer.stats.refused == {"wrong_hash": 1, "altered": 1}


async def test_a_logged_event_claiming_another_position_is_refused(store, stack):
    runtime, genuine = await genuine_start(store, stack)
    head = (await store.head())[0]
    # the real event, hash and all, somewhere else
    moved = msgspec.structs.replace(genuine, position=head + 1)
    await publish(stack, moved)
    await wait_for(lambda: refusals(store, 1))
    [warning] = await warnings(store)
    assert (warning["reason"], warning["claimed_position"]) == ("wrong_position", head + 1)
    assert warning["claimed_event_id"] == genuine.event_id
    after = an_event()
    await store.append([after], producer="api")
    await wait_for(lambda: handled_all(store, [after]))
    name = genuine.payload_dict()["pod"]["name"]
    assert runtime.host.processor.seen == [name, after.event.pod.name], "decided once, at its logged position"
    assert (await outputs_by_cause(store))[genuine.event_id] == 1


async def test_redeliveries_restarts_and_a_lost_stream_raise_no_warning(store, bus_names, tmp_path):
    inputs = [an_event() for _ in range(12)]
    EchoProcessor.fail_transient = {inputs[4].event.pod.name: 2}  # nak-ed and delivered again, twice
    with private_nats(tmp_path) as server:
        s = Stack(store, server.url, BusNames(**bus_names))
        try:
            await s.start_relay()
            await s.start_runtime()
            await store.append(inputs, producer="api")
            await wait_for(lambda: handled_all(store, inputs))
            await s.stop_runtime()
            during = [an_event() for _ in range(5)]
            await store.append(during, producer="api")
            runtime = await s.start_runtime()
            server.stop(kill=True)  # the stream is lost; the relay fills a new one from the oldest checkpoint
            shutil.rmtree(server.store_dir)
            server.start()
            after = [an_event() for _ in range(5)]
            await store.append(after, producer="api")
            everything = inputs + during + after
            await wait_for(lambda: handled_all(store, everything), timeout=60)
            assert runtime.host.processor.seen == [e.event.pod.name for e in everything]
            assert await warnings(store) == []
            assert runtime.consumer.stats.refused == {}
        finally:
            await s.close()


async def test_a_message_that_is_not_an_event_is_refused_and_recorded(store, stack):
    runtime, genuine = await genuine_start(store, stack)
    js = stack.nc.jetstream()
    await js.publish(
        stack.names.subject("pod.deleted"), b'{"position": "one"}', headers={HEADER_MSG_ID: "junk"}
    )
    await wait_for(lambda: refusals(store, 1))
    [warning] = await warnings(store)
    assert (warning["reason"], warning["consumer"]) == ("undecodable", "echo")
    assert warning["stream_sequence"] > 0 and "position" in warning["detail"]
    after = an_event()
    await store.append([after], producer="api")
    await wait_for(lambda: handled_all(store, [after]))
    assert runtime.host.processor.seen == [genuine.payload_dict()["pod"]["name"], after.event.pod.name]
    assert runtime.consumer.stats.refused == {"undecodable": 1}


async def test_quota_manager_admits_no_pod_the_log_does_not_hold(store, stack):
    """The attack as first seen: a forged ``pod.submitted`` at head+1 with a made-up hash, on quota-manager."""
    from allot_testing.builders import a_pod
    from allot_testing.scenario import Scenario
    from quota_manager.processor import QuotaManager

    template = Scenario().apply(a_pod("ghost")).sim.store  # a well-formed pod.submitted, from another log
    [submitted] = [r for r in await template.read() if r.type == "pod.submitted"]
    await stack.start_relay()
    stack.nc = await connect(stack.nats_url, name="test-quota")
    runtime = ProcessorRuntime(
        name="quota-manager",
        factory=QuotaManager,
        store=store,
        nc=stack.nc,
        names=stack.names,
        fetch_timeout=0.2,
    )
    stack.consumer_stop = asyncio.Event()
    stack.tasks.append(asyncio.create_task(runtime.consumer.run(stack.consumer_stop), name="quota-manager"))
    await asyncio.wait_for(runtime.consumer.ready.wait(), timeout=20)
    head = (await store.head())[0]
    await publish(stack, msgspec.structs.replace(submitted, position=head + 1, hash=b"\xab" * 32))
    await wait_for(lambda: refusals(store, 1))
    assert await store.read(types=["quota.admitted", "quota.waiting", "pod.rejected"]) == []
    assert [w["reason"] for w in await warnings(store)] == ["not_in_log"]
    assert runtime.consumer.stats.refused == {"not_in_log": 1}
