"""A service restarts from its newest snapshot on real PostgreSQL: same digest, same next decisions; a corrupt or
forged snapshot is not used (a warning says why) and the projection is folded from position 0."""

from __future__ import annotations

import functools
import hashlib
import logging

import asyncpg
import msgspec
import pytest

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_runtime import forked, statecodec
from allot_runtime.processor import Host
from allot_runtime.recorded_config import AppliedConfig, config_hash
from allot_runtime.replay import rebuild
from allot_runtime.service import ProcessorRuntime
from allot_runtime.snapshots import take
from allot_stack.pipeline import build
from allot_testing.snapshots import OPENB, copy_log, openb_log

SERVICE = "device-allocator"


async def test_restart_restores_the_newest_snapshot_and_falls_back_when_it_is_wrong(
    event_store, database_url, nats_server_url, caplog
) -> None:
    if not OPENB.is_dir():
        pytest.skip(f"the openb trace is not at {OPENB}")
    log = openb_log(nodes=20, pods=120, window=40)
    cut = len(log.events) * 3 // 4
    await copy_log(event_store, log.events[:cut])
    head, _ = await event_store.head()
    await event_store.advance_checkpoint(SERVICE, head)
    nc = await connect(nats_server_url, name="test-snapshots")
    factory = functools.partial(build, SERVICE, {})
    applied = AppliedConfig(config={})

    def runtime() -> ProcessorRuntime:
        return ProcessorRuntime(
            name=SERVICE,
            factory=factory,
            store=event_store,
            nc=nc,
            names=BusNames(),
            config=applied,
            snapshot_every=1000,
        )

    try:
        cold = runtime()
        await cold.rebuild_projection()  # no snapshot yet: folded from 0
        digest = cold.host.digest()
        middle = Host(factory(), name=SERVICE)
        await rebuild(middle, event_store, until=head // 2)
        snapshot, _ = take(middle, config_hash(applied.config))
        await event_store.write_snapshot(snapshot, keep=2)

        caplog.set_level(logging.INFO, logger="allot.snapshots")
        warm = runtime()
        await warm.rebuild_projection()
        assert f"restored from the snapshot at position {head // 2}" in caplog.text
        assert warm.host.digest() == digest and warm.host.position == cold.host.position
        for record in log.events[cut:]:  # the next decisions are the same
            if cold.host.wants(record):
                assert warm.host.step(record) == cold.host.step(record)
        assert warm.host.digest() == cold.host.digest()

        conn = await asyncpg.connect(plain_url(database_url))
        try:
            await conn.execute("UPDATE snapshots SET state = substring(state from 1 for 20)")
            caplog.clear()
            corrupt = runtime()
            await corrupt.rebuild_projection()
            assert (
                "not used: its state does not match its SHA-256; folding the log from position 0"
                in caplog.text
            )
            assert corrupt.host.digest() == digest

            forged = msgspec.msgpack.encode(
                [statecodec.FORMAT, ["os:system"], "", ["", "name", "interests", "processor"], [], None]
            )
            await conn.execute(
                "UPDATE snapshots SET state = $1, state_hash = $2", forged, hashlib.sha256(forged).digest()
            )
            caplog.clear()
            refused = runtime()
            await refused.rebuild_projection()
            assert "its state cannot be decoded" in caplog.text and "os:system" in caplog.text
            assert refused.host.digest() == digest
        finally:
            await conn.close()
    finally:
        await nc.close()


async def test_a_snapshot_written_again_at_the_same_position_replaces_the_old_one(event_store) -> None:
    """A service that stops at the position of a snapshot made by other code (before an upgrade: refused on load)
    writes its own there; the old one must not stay and be refused again on every start. Same on both stores."""
    from allot_eventstore.memory import InMemoryEventStore
    from allot_eventstore.protocol import Snapshot

    def made(state: bytes) -> Snapshot:
        return Snapshot(
            consumer=SERVICE,
            position=40,
            format=2,
            config_hash="c",
            digest=state.hex(),
            state=state,
            state_hash=b"",
        )

    for store in (event_store, InMemoryEventStore()):
        await store.write_snapshot(made(b"old code"), keep=2)
        await store.write_snapshot(made(b"new code"), keep=2)
        found = await store.latest_snapshot(SERVICE, format=2, config_hash="c")
        assert found is not None and found.state == b"new code"
        assert found.state_hash == hashlib.sha256(b"new code").digest()
        assert await store.snapshot_positions(SERVICE) == [40]


@pytest.mark.skipif(
    not forked.AVAILABLE, reason="a forked snapshot child needs os.fork, which this platform lacks"
)
async def test_on_postgresql_a_running_service_s_snapshot_is_written_by_its_forked_child(
    event_store, caplog
) -> None:
    """The state never comes into the service: the child writes the row over a connection of its own; the service's
    own connections go on working, and the snapshot restores. A write that fails in the child is logged."""
    from allot_runtime.snapshots import Snapshots, restore
    from allot_testing.processors import EchoProcessor

    host = Host(EchoProcessor(), name="echo")
    host.processor.seen.append("pod-10")
    host.position = 10
    caplog.set_level(logging.INFO, logger="allot.snapshots")
    await event_store.snapshot_positions("echo")  # the service's pool is open before the fork
    snapshots = Snapshots(event_store, every=10, keep=2, config_hash="h")
    snapshots.start(host)
    assert snapshots.writing is not None and await snapshots.writing
    assert "encoded and written by a forked process" in caplog.text
    assert await event_store.snapshot_positions("echo") == [10]
    restored, position, _ = await restore(
        lambda: Host(EchoProcessor(), name="echo"), event_store, config_hash="h", until=10
    )
    assert position == 10 and restored.processor.seen == ["pod-10"]

    gone = PostgresEventStore.connect(event_store.url.replace("/allot_t_", "/allot_missing_"))
    failing = Snapshots(gone, every=10, keep=2, config_hash="h")
    host.position = 20
    failing.start(host)
    assert failing.writing is not None and not await failing.writing
    assert "echo: its projection cannot be snapshot at position 20" in caplog.text
