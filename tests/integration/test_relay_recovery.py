"""The relay against a real nats-server and PostgreSQL when the stream is not what it left behind: deleted and
recreated, purged, with a message of someone else's at its tail, or refusing an event. Every test checks that
messages actually reach the stream (consumers would hide a stuck relay by catching up from PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from nats.js import JetStreamContext
from nats.js import errors as jserrors

from allot_bus.adapters.nats import connect, ensure_stream, stream_config
from allot_bus.names import HEADER_MSG_ID, HEADER_POSITION, BusNames
from allot_bus.relay import Relay
from allot_contracts.events import ObjectRef, PodDeleted
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.embedded import EmbeddedNats
from allot_testing.builders import an_event

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresEventStore]:
    store = PostgresEventStore.connect(database_url)
    yield store
    await store.close()


@pytest.fixture
def names(bus_names: dict[str, str]) -> BusNames:
    return BusNames(**bus_names)


@pytest.fixture
def relay_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="allot.relay")
    return caplog


class RunningRelay:
    """A relay task with its own connection; ``publishes`` counts the publish requests it sends."""

    def __init__(self, store: PostgresEventStore, nats_url: str, names: BusNames) -> None:
        self.store, self.nats_url, self.names = store, nats_url, names

    @property
    def publishes(self) -> int:
        return self.relay.sent

    async def __aenter__(self) -> RunningRelay:
        self.nc = await connect(self.nats_url, name="test-relay")
        self.js = self.nc.jetstream()
        self.relay = Relay(self.store, self.js, self.names, poll_interval=0.1)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.relay.run(self.stop), name="relay")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, timeout=10)
        await self.nc.close()


@pytest.fixture
async def admin(nats_server_url: str, names: BusNames) -> AsyncIterator[JetStreamContext]:
    nc = await connect(nats_server_url, name="test-admin")
    js = nc.jetstream()
    yield js
    with contextlib.suppress(jserrors.NotFoundError):
        await js.delete_stream(names.stream)
    await nc.close()


async def stream_positions(js: JetStreamContext, names: BusNames) -> list[int]:
    """``Allot-Position`` of every message in the stream, in stream order (0 for a message without one)."""
    try:
        state = (await js.stream_info(names.stream)).state
    except jserrors.NotFoundError:
        return []
    positions: list[int] = []
    if not state.messages:
        return positions
    for seq in range(state.first_seq, state.last_seq + 1):
        try:
            msg = await js.get_msg(names.stream, seq=seq)
        except jserrors.NotFoundError:
            continue
        positions.append(int((msg.headers or {}).get(HEADER_POSITION, "0")))
    return positions


async def eventually(predicate: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def append(store: PostgresEventStore, count: int, *, uid_size: int = 0) -> list[int]:
    if uid_size:
        events = [
            an_event(
                event=PodDeleted(pod=ObjectRef(namespace="default", name=f"big-{i}"), uid="u" * uid_size)
            )
            for i in range(count)
        ]
    else:
        events = [an_event() for _ in range(count)]
    await store.append(events, producer="api")
    ids = {e.event_id for e in events}
    return [r.position for r in await store.read(limit=100_000) if r.event_id in ids]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "allot.relay" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("recreated_by_someone_else", [True, False])
async def test_a_deleted_stream_is_refilled_from_the_lowest_checkpoint(
    store, nats_server_url, names, admin, relay_log, recreated_by_someone_else
):
    async with RunningRelay(store, nats_server_url, names) as running:
        first = await append(store, 5)
        await eventually(lambda: _ends_at(admin, names, first[-1]))
        await store.advance_checkpoint("echo", first[2])
        await store.advance_checkpoint("audit", first[3])

        await admin.delete_stream(names.stream)
        if recreated_by_someone_else:
            await ensure_stream(admin, names)
        publishes_before = running.publishes
        later = await append(store, 3)

        await eventually(lambda: _ends_at(admin, names, later[-1]))
        assert await stream_positions(admin, names) == first[3:] + later
        assert running.publishes - publishes_before <= 20
    assert len(warnings_of(relay_log)) <= 5


async def test_an_empty_stream_with_a_checkpoint_is_filled_by_a_starting_relay(
    store, nats_server_url, names, admin, relay_log
):
    positions = await append(store, 6)
    await store.advance_checkpoint("echo", positions[3])
    await ensure_stream(admin, names)
    async with RunningRelay(store, nats_server_url, names):
        await eventually(lambda: _ends_at(admin, names, positions[-1]))
        more = await append(store, 2)
        await eventually(lambda: _ends_at(admin, names, more[-1]))
    assert await stream_positions(admin, names) == positions[4:] + more
    assert warnings_of(relay_log) == []


async def test_a_foreign_message_at_the_tail_does_not_stop_the_relay(
    store, nats_server_url, names, admin, relay_log
):
    async with RunningRelay(store, nats_server_url, names) as running:
        first = await append(store, 3)
        await eventually(lambda: _ends_at(admin, names, first[-1]))
        await admin.publish(names.subject("pod.deleted"), b"{}", headers={HEADER_MSG_ID: "someone-else"})
        publishes_before = running.publishes

        later = await append(store, 4)
        await eventually(lambda: _ends_at(admin, names, later[-1]))
        assert await stream_positions(admin, names) == first + [0] + later
        assert running.publishes - publishes_before <= 15
    assert len(warnings_of(relay_log)) <= 3


async def test_a_starting_relay_resumes_after_its_last_event_below_foreign_messages(
    store, nats_server_url, names, admin, relay_log
):
    async with RunningRelay(store, nats_server_url, names):
        first = await append(store, 3)
        await eventually(lambda: _ends_at(admin, names, first[-1]))
    for _ in range(2):
        await admin.publish(names.subject("pod.deleted"), b"{}")
    await store.advance_checkpoint("echo", first[0])
    later = await append(store, 2)
    async with RunningRelay(store, nats_server_url, names):
        await eventually(lambda: _ends_at(admin, names, later[-1]))
    assert await stream_positions(admin, names) == first + [0, 0] + later
    assert warnings_of(relay_log) == []


async def test_a_forged_position_beyond_the_head_is_ignored_not_purged(
    store, nats_server_url, names, admin, relay_log
):
    async with RunningRelay(store, nats_server_url, names) as running:
        first = await append(store, 3)
        await eventually(lambda: _ends_at(admin, names, first[-1]))
        # anyone on the bus: a well-formed message claiming an event far beyond the log's head
        forged = first[-1] + 1000
        await admin.publish(
            names.subject("pod.deleted"),
            b"{}",
            headers={HEADER_MSG_ID: str(uuid.uuid4()), HEADER_POSITION: str(forged)},
        )
        publishes_before = running.publishes
        later = await append(store, 4)
        await eventually(lambda: _ends_at(admin, names, later[-1]))
        assert await stream_positions(admin, names) == first + [forged] + later, "nothing was purged"
        assert running.publishes - publishes_before <= 15
    # a restart reads the same tail: the forged message is looked past again
    more = await append(store, 2)
    async with RunningRelay(store, nats_server_url, names):
        await eventually(lambda: _ends_at(admin, names, more[-1]))
    assert await stream_positions(admin, names) == first + [forged] + later + more
    messages = [r.getMessage() for r in warnings_of(relay_log)]
    assert not any("purg" in m for m in messages)
    assert any(f"claims position {forged}" in m and "not in the log" in m for m in messages)


async def test_a_stream_ahead_of_a_restored_log_is_looked_past_not_purged(
    store, nats_server_url, names, admin, relay_log
):
    async with RunningRelay(store, nats_server_url, names):
        first = await append(store, 5)
        await eventually(lambda: _ends_at(admin, names, first[-1]))
    # the database was restored to an older backup: the stream has an event the log does not
    await admin.publish(
        names.subject("pod.deleted"),
        b"{}",
        headers={HEADER_MSG_ID: "lost-event", HEADER_POSITION: str(first[-1] + 100)},
    )
    await store.advance_checkpoint("echo", first[2])
    later = await append(store, 3)

    async with RunningRelay(store, nats_server_url, names):
        await eventually(lambda: _ends_at(admin, names, later[-1]))
        more = await append(store, 2)
        await eventually(lambda: _ends_at(admin, names, more[-1]))
    # it cannot be told from a forged message: left in place (consumers refuse it), publishing goes on after it
    assert await stream_positions(admin, names) == first + [first[-1] + 100] + later + more
    messages = [r.getMessage() for r in warnings_of(relay_log)]
    assert any("not in the log" in m for m in messages) and not any("purg" in m for m in messages)
    assert len(messages) <= 3


async def test_an_event_the_stream_refuses_is_reported_and_retried_with_backoff(
    store, nats_server_url, names, admin, relay_log
):
    config = stream_config(names)
    config.max_msg_size = 4096
    await admin.add_stream(config)
    async with RunningRelay(store, nats_server_url, names) as running:
        first = await append(store, 2)
        await eventually(lambda: _ends_at(admin, names, first[-1]))
        big = await append(store, 1, uid_size=8000)
        await append(store, 2)
        await asyncio.sleep(2.0)
        assert (await stream_positions(admin, names)) == first, "nothing is skipped"
        assert running.publishes <= 2 + 3 + 8, "retried with backoff, not in a loop"
    errors = [
        r.getMessage() for r in relay_log.records if r.name == "allot.relay" and r.levelno == logging.ERROR
    ]
    assert 1 <= len(errors) <= 6
    assert (
        f"position {big[0]}" in errors[0] and "pod.deleted" in errors[0] and "max_msg_size=4096" in errors[0]
    )


class SmallPayloadNats(EmbeddedNats):
    """A private nats-server whose max_payload is 16 KiB."""

    def write_config(self) -> None:
        super().write_config()
        text = self.config_path.read_text().replace("max_payload: 8MB", "max_payload: 16KB")
        self.config_path.write_text(text)


async def test_an_event_larger_than_max_payload_is_reported_without_sending_it(
    store, names, relay_log, tmp_path
):
    server = SmallPayloadNats(tmp_path / "js")
    server.start()
    try:
        async with RunningRelay(store, server.url, names) as running:
            first = await append(store, 2)
            await eventually(lambda: _ends_at(running.js, names, first[-1]))
            big = await append(store, 1, uid_size=20_000)
            await append(store, 2)
            await asyncio.sleep(1.5)
            assert await stream_positions(running.js, names) == first
            assert running.publishes == 2, (
                "the oversized event is never sent (the server would drop the connection)"
            )
            assert running.nc.is_connected
    finally:
        server.stop(kill=True)
    errors = [
        r.getMessage() for r in relay_log.records if r.name == "allot.relay" and r.levelno == logging.ERROR
    ]
    assert 1 <= len(errors) <= 6
    assert f"position {big[0]}" in errors[0] and "max_payload" in errors[0] and "16384" in errors[0]


async def test_a_notification_during_a_publish_is_not_lost(store, nats_server_url, names, admin):
    relay_nc = await connect(nats_server_url, name="test-relay")
    relay = Relay(store, relay_nc.jetstream(), names, poll_interval=30.0)
    wake, stop = asyncio.Event(), asyncio.Event()
    publish_pending = relay.publish_pending

    async def slow_publish_pending() -> int:
        done = await publish_pending()
        await asyncio.sleep(0.2)  # an event committed and notified while the relay is still busy
        return done

    relay.publish_pending = slow_publish_pending  # type: ignore[method-assign]
    task = asyncio.create_task(relay.run(stop, wake=wake))
    try:
        await eventually(lambda: _stream_exists(admin, names))
        await asyncio.sleep(0.05)
        positions = await append(store, 1)
        wake.set()
        await eventually(lambda: _ends_at(admin, names, positions[-1]), timeout=3.0)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await relay_nc.close()


async def _ends_at(js: JetStreamContext, names: BusNames, position: int) -> bool:
    positions = await stream_positions(js, names)
    return bool(positions) and positions[-1] == position


async def _stream_exists(js: JetStreamContext, names: BusNames) -> bool:
    try:
        await js.stream_info(names.stream)
        return True
    except jserrors.NotFoundError:
        return False
