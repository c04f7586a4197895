"""The subscribe client against real PostgreSQL and NATS: catch-up then live, filters, resuming by position, gaps,
and a live stack followed through a NATS restart without loss or duplicates."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_bus.relay import Relay
from allot_client import AllotClient, Delivery
from allot_contracts.envelope import NewEvent, stream_id
from allot_contracts.events import NodeDeleted, ObjectRef, PodDeleted, PodPlaced, QuotaDeleted
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_stack.apply import record
from allot_testing.builders import a_gpu_device, a_node, a_pod, an_event
from allot_testing.servers import private_nats
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration


def bounded(seconds: float):
    """A test that hangs fails after ``seconds`` with the place it was waiting at, instead of holding up the run."""

    def wrap(test):
        @functools.wraps(test)
        async def run(*args, **kwargs):
            async with asyncio.timeout(seconds):
                return await test(*args, **kwargs)

        return run

    return wrap


ASYNCAPI = Path(__file__).resolve().parents[2] / "libs" / "contracts" / "schemas" / "asyncapi.yaml"


@pytest.fixture
async def store(database_url):
    store = PostgresEventStore.connect(database_url)
    yield store
    await store.close()


@contextlib.asynccontextmanager
async def relay(store, nats_url: str, names: BusNames):
    nc = await connect(nats_url, name="test-relay")
    stop = asyncio.Event()
    task = asyncio.create_task(Relay(store, nc.jetstream(), names, poll_interval=0.05).run(stop))
    try:
        # the relay creates the stream as it starts: a client attaching before that follows the log by polling
        # until its next attach, and on a loaded machine the whole test can be over by then
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            try:
                await nc.jetstream().stream_info(names.stream)
                break
            except Exception:
                if task.done() or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
        await nc.close()


class Collector:
    """Runs a subscription in a task and keeps what it delivers."""

    def __init__(self, subscription) -> None:
        self.subscription = subscription
        self.seen: list[Delivery] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for delivery in self.subscription:
            self.seen.append(delivery)

    async def until(self, position: int, timeout: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.subscription.position < position:
            assert not self.task.done(), self.task.exception()
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"subscription at {self.subscription.position}, expected {position}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.subscription.close()

    @property
    def positions(self) -> list[int]:
        return [d.position for d in self.seen]


def pod_event(namespace: str, name: str) -> NewEvent:
    return an_event(
        stream=stream_id("pod", f"{namespace}/{name}"),
        event=PodDeleted(pod=ObjectRef(namespace=namespace, name=name)),
    )


@bounded(120)
async def test_catch_up_then_live_every_event_once_in_order(store, database_url, nats_server_url, bus_names):
    names = BusNames(**bus_names)
    before = [an_event() for _ in range(25)]
    await store.append(before, producer="api")
    async with (
        relay(store, nats_server_url, names),
        AllotClient(database_url=database_url, nats_url=nats_server_url, **bus_names) as client,
    ):
        collector = Collector(client.follow(after=0, idle=0.2))
        await collector.until(25)
        for chunk in range(5):
            await store.append([an_event() for _ in range(7)], producer="api")
            await asyncio.sleep(0.05 * chunk)
        head = await client.head()
        await collector.until(head)
        await asyncio.sleep(0.3)  # nothing more arrives: no duplicates trail behind
        await collector.stop()
    assert collector.positions == list(range(1, head + 1))
    assert collector.subscription.stats.from_bus > 0, (
        "live events came over NATS, not only by polling the log"
    )
    assert [d.event_id for d in collector.seen[:25]] == [e.event_id for e in before]
    assert isinstance(collector.seen[0].event, PodDeleted)


@bounded(120)
async def test_filters_by_type_namespace_node_and_quota(store, database_url, nats_server_url, bus_names):
    names = BusNames(**bus_names)
    async with (
        relay(store, nats_server_url, names),
        AllotClient(database_url=database_url, nats_url=nats_server_url, **bus_names) as client,
    ):
        by_namespace = Collector(client.follow(namespaces=["team-a"], idle=0.2))
        by_node = Collector(client.follow(nodes=["gpu-1"], idle=0.2))
        by_quota = Collector(client.follow(quotas=["research"], types=["quota.*"], idle=0.2))
        by_type = Collector(client.follow(types=["node.deleted"], idle=0.2))
        await store.append(
            [
                pod_event("team-a", "x"),
                pod_event("team-b", "y"),
                an_event(stream=stream_id("node", "gpu-1"), event=NodeDeleted(name="gpu-1")),
                an_event(stream=stream_id("node", "gpu-2"), event=NodeDeleted(name="gpu-2")),
                an_event(
                    stream=stream_id("quota", "team-a/research"),
                    event=QuotaDeleted(quota=ObjectRef(namespace="team-a", name="research")),
                ),
                pod_event("team-a", "z"),
            ],
            producer="api",
        )
        head = await client.head()
        for collector in (by_namespace, by_node, by_quota, by_type):
            await collector.until(head)
            await collector.stop()
    assert [d.stream_id for d in by_namespace.seen] == [
        "pod:team-a/x",
        "quota:team-a/research",
        "pod:team-a/z",
    ]
    assert [d.stream_id for d in by_node.seen] == ["node:gpu-1"]
    assert [d.stream_id for d in by_quota.seen] == ["quota:team-a/research"]
    assert [d.event.name for d in by_type.seen] == ["gpu-1", "gpu-2"]


@bounded(120)
async def test_resuming_from_a_position_delivers_what_comes_after_it_once(
    store, database_url, nats_server_url, bus_names
):
    names = BusNames(**bus_names)
    await store.append([an_event() for _ in range(10)], producer="api")
    async with (
        relay(store, nats_server_url, names),
        AllotClient(database_url=database_url, nats_url=nats_server_url, **bus_names) as client,
    ):
        first = Collector(client.follow(after=0, idle=0.2))
        await first.until(10)
        await first.stop()
        saved = first.seen[6].position  # the caller handled seven and stopped
        await store.append([an_event() for _ in range(5)], producer="api")
        second = Collector(client.follow(after=saved, idle=0.2))
        await second.until(15)
        await second.stop()
    assert second.positions == list(range(saved + 1, 16))


@bounded(120)
async def test_a_gap_on_the_bus_is_filled_from_the_log(
    store, database_url, nats_server_url, bus_names, monkeypatch
):
    names = BusNames(**bus_names)
    async with (
        relay(store, nats_server_url, names),
        AllotClient(database_url=database_url, nats_url=nats_server_url, **bus_names) as client,
    ):
        subscription = client.follow(idle=30.0)  # no idle check within the test: only the gap check can help
        collector = Collector(subscription)
        for _ in range(500):
            if subscription.stats.attaches:
                break
            await asyncio.sleep(0.02)
        assert subscription.stats.attaches, "the subscription follows NATS"
        real = subscription._from_message

        async def lossy(msg):  # the bus loses positions 3 and 4
            if msg.headers.get("Allot-Position") in ("3", "4"):
                return
            async for delivery in real(msg):
                yield delivery

        monkeypatch.setattr(subscription, "_from_message", lossy)
        for _ in range(6):
            await store.append([an_event()], producer="api")
        await collector.until(6, timeout=10)
        await collector.stop()
    assert collector.positions == [1, 2, 3, 4, 5, 6]
    assert subscription.stats.gaps == 1


@bounded(120)
async def test_without_nats_the_log_is_followed_by_polling(store, database_url):
    async with AllotClient(database_url=database_url) as client:
        collector = Collector(client.follow(types=["pod.deleted"], idle=0.05))
        await store.append([an_event() for _ in range(3)], producer="api")
        await collector.until(3)
        await store.append([an_event() for _ in range(2)], producer="api")
        await collector.until(5)
        await collector.stop()
    assert collector.positions == [1, 2, 3, 4, 5]


def _inputs(*docs: dict) -> list:
    return [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate(docs)]


@bounded(120)
async def test_the_client_follows_a_live_stack_through_a_nats_restart_without_loss_or_duplicates(
    database_url, bus_names, tmp_path
):
    names = BusNames(**bus_names)
    wait = {"wait": True, "wait_each": False, "timeout": 90}
    with private_nats(tmp_path) as server:
        async with (
            InProcessStack(database_url, server.url, names) as stack,
            AllotClient(database_url=database_url, nats_url=server.url, **bus_names) as client,
        ):
            everything = Collector(client.follow(idle=2.0))
            placed = Collector(client.follow(types=["pod.placed"], namespaces=["team-a"], idle=0.5))
            await record(
                database_url,
                _inputs(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
                + _inputs(*(a_pod(f"a{i}", namespace="team-a", gpus=1) for i in range(3))),
                wait=True,
                wait_each=False,
                timeout=60,
            )
            await everything.until(await client.head())
            attached = everything.subscription.stats.attaches

            server.stop()  # NATS goes away; the stack keeps deciding what it can, the log keeps growing
            await record(
                database_url,
                _inputs(*(a_pod(f"b{i}", namespace="team-a", gpus=1) for i in range(2))),
                wait=False,
                wait_each=False,
                timeout=60,
            )
            await asyncio.sleep(1.0)
            server.start()
            await record(
                database_url,
                _inputs(*(a_pod(f"c{i}", namespace=ns, gpus=1) for i, ns in enumerate(["team-a", "team-b"]))),
                **wait,
            )
            for _ in range(300):  # the pods recorded during the outage get placed once the bus is back
                if len(await stack.store.read(types=["pod.placed"], limit=100)) == 7:
                    break
                await asyncio.sleep(0.1)
            await everything.until(await client.head(), timeout=60)
            for _ in range(300):  # its consumer went with the server: re-created once NATS is back
                if everything.subscription.stats.attaches > attached:
                    break
                await asyncio.sleep(0.1)
            before = everything.subscription.stats.from_bus
            await record(database_url, _inputs(a_pod("d0", namespace="team-a", gpus=1)), **wait)
            head = await client.head()
            await everything.until(head, timeout=60)
            await placed.until(head, timeout=60)
            await asyncio.sleep(1.0)  # a late redelivery would show up as a duplicate here
            after_restart = everything.subscription.stats.from_bus - before
            await everything.stop()
            await placed.stop()
            log = await stack.store.read(limit=100_000)
            published = await published_messages(client, names)
    assert everything.positions == [r.position for r in log], "every event once, in order"
    assert [d.event_id for d in everything.seen] == [r.event_id for r in log]
    expected = [r.position for r in log if r.type == "pod.placed" and r.stream_id.startswith("pod:team-a/")]
    assert len(expected) == 7
    assert placed.positions == expected
    assert all(isinstance(d.event, PodPlaced) for d in placed.seen)
    assert after_restart > 0, "after the restart, events arrive over NATS again"
    assert_described_by_the_asyncapi_document(published, names, {r.position: r for r in log})


async def published_messages(client, names: BusNames) -> list:
    js = client._nc.jetstream()
    last = (await js.stream_info(names.stream)).state.last_seq
    return [await js.get_msg(names.stream, seq=seq) for seq in range(1, last + 1)]


def assert_described_by_the_asyncapi_document(messages: list, names: BusNames, log: dict) -> None:
    """Every message the relay published is on its channel's address, with the headers the document describes."""
    doc = yaml.safe_load(ASYNCAPI.read_text())
    headers_schema = jsonschema.Draft202012Validator(doc["components"]["schemas"]["headers"])
    seen_types = set()
    for msg in messages:
        headers = msg.headers or {}
        tag = headers["Allot-Type"]
        event_type = tag.rsplit(".v", 1)[0]
        channel = doc["channels"][event_type]
        assert msg.subject == channel["address"].replace("{prefix}", names.prefix), msg.subject
        assert tag in channel["messages"]
        message = doc["components"]["messages"][tag]
        headers_schema.validate(headers)
        for key, rule in message["headers"]["allOf"][1]["properties"].items():
            assert headers[key] == rule["const"], (key, headers[key])
        record = log[int(headers["Allot-Position"])]
        assert headers["ce-id"] == record.event_id == json.loads(msg.data)["event_id"]
        assert headers["ce-source"] == f"/{names.prefix}/{record.producer}"
        assert headers["ce-subject"] == record.stream_id
        seen_types.add(event_type)
    assert {"pod.submitted", "quota.admitted", "pod.placed", "pod.bound", "node.registered"} <= seen_types


@bounded(120)
async def test_events_tail_follow_prints_what_was_recorded_before_and_after_it_started_once(
    store, database_url, nats_server_url, bus_names, monkeypatch, capsys
):
    import argparse

    from allot_cli.commands import events

    names = BusNames(**bus_names)
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_NATS_URL", nats_server_url)
    monkeypatch.setenv("ALLOT_NATS_PREFIX", names.prefix)
    monkeypatch.setenv("ALLOT_NATS_STREAM", names.stream)
    await store.append([an_event() for _ in range(3)], producer="api")
    args = argparse.Namespace(type=["pod.deleted"], follow=True, last=20, from_position=None)
    async with relay(store, nats_server_url, names):
        task = asyncio.create_task(events.tail(args))
        await asyncio.sleep(0.5)
        for _ in range(4):
            await store.append([an_event()], producer="api")
        await asyncio.sleep(1.5)  # delivered in milliseconds; the margin is for a loaded machine
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    printed = [json.loads(line)["position"] for line in capsys.readouterr().out.splitlines()]
    assert printed == [1, 2, 3, 4, 5, 6, 7]


async def test_events_tail_follow_ends_on_sigterm_while_it_waits_for_nats(store, database_url):
    """NATS not up (nothing listens on the port): the command waits for it a while (``events.NATS_WAIT_S``), and a
    SIGTERM (or Ctrl-C) still ends it at once."""
    import os
    import signal
    import sys

    await store.append([an_event()], producer="api")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from allot_cli.main import main; main()",
        "events",
        "tail",
        "--follow",
        env={**os.environ, "ALLOT_DATABASE_URL": database_url, "ALLOT_NATS_URL": "nats://127.0.0.1:1"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 30)  # the catch-up from the log came first
    assert json.loads(first)["position"] == 1
    await asyncio.sleep(1.0)  # connecting to NATS by now
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
    _, err = await proc.communicate()
    assert b"Traceback" not in err
