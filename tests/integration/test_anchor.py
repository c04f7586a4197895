"""The anchored chain on a real PostgreSQL: checkpoints of the log head signed by the relay with a key the database
never sees, checked by ``allot replay --verify`` with no extra argument.

The attacker in these tests has the database (superuser: disables the append-only trigger, rewrites rows, recomputes
every hash after them, moves the head, writes checkpoint rows) but not the signing key."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import stat
from pathlib import Path

import asyncpg
import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_bus.relay import Relay
from allot_cli.commands import replay
from allot_contracts.errors import InvalidInput
from allot_eventstore import ManualClock, verify_chain
from allot_eventstore.anchor import CheckpointPolicy, key_id, sign_checkpoint
from allot_eventstore.anchor_keys import ensure_signing_key, load_signing_key, load_verifying_keys
from allot_eventstore.anchor_log import PostgresCheckpoints, Sealer, anchor_check
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url
from allot_intake.errors import InputError
from allot_testing.builders import an_event
from allot_testing.tampering import rewrite_with_recomputed_hashes

pytestmark = pytest.mark.integration


@pytest.fixture
def store(event_store: PostgresEventStore) -> PostgresEventStore:
    return event_store


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return ensure_signing_key(tmp_path / "anchor.key")


async def _sealed_log(store: PostgresEventStore, key_file: Path, events: int = 13) -> PostgresCheckpoints:
    """``events`` events, sealed the way the relay seals them: at the first event, then every 4 (clock passed in)."""
    checkpoints = PostgresCheckpoints(store)
    sealer = Sealer(
        store,
        checkpoints,
        load_signing_key(key_file),
        CheckpointPolicy(every_events=4, every_seconds=3600),
        clock=ManualClock(),
    )
    for _ in range(events):
        result = await store.append([an_event()], producer="t")
        await sealer(result.head)
    return checkpoints


async def _verify(store: PostgresEventStore, keys: dict) -> object:
    return await verify_chain(
        store.iterate(), head=await store.head(), anchor=await anchor_check(store, keys)
    )


def _replay_args(**extra: object) -> argparse.Namespace:
    options = {
        "verify": True,
        "expect_head": None,
        "until": None,
        "config_dir": None,
        "no_live": True,
        "json": True,
    }
    return argparse.Namespace(**{**options, **extra})


async def test_an_intact_sealed_log_verifies_against_its_checkpoints(store, key_file):
    checkpoints = await _sealed_log(store, key_file)
    report = await _verify(store, load_verifying_keys([key_file.with_suffix(".pub")]))
    assert report.ok, report.problem
    assert not report.anchor.failed
    assert report.anchor is not None and report.anchor.anchored
    assert report.anchor.checkpoints == 4 == await checkpoints.count()  # at 1, 5, 9 and 13
    assert report.anchor.newest_position == 13 and report.anchor.unanchored_events == 0


async def test_a_rewrite_with_recomputed_hashes_is_caught_with_no_extra_argument(
    store, database_url, key_file, tmp_path, monkeypatch, capsys
):
    await _sealed_log(store, key_file)
    await rewrite_with_recomputed_hashes(database_url, 6)
    assert (await verify_chain(store.iterate(), head=await store.head())).ok, "the chain alone cannot tell"

    report = await _verify(store, load_verifying_keys([key_file]))
    assert not report.ok
    assert report.position == 9, "the first checkpoint after the edit"
    assert "rewritten" in report.problem and "positions 6 to 9" in report.problem

    # the same through the CLI, with the public key where the dev stack keeps it and no argument at all
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("ALLOT_ANCHOR_PUBLIC_KEYS", raising=False)
    capsys.readouterr()
    code = await replay.run(_replay_args())
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["ok"]
    assert "rewritten" in out["chain"]["problem"] and out["chain"]["anchor"]["failed"]
    capsys.readouterr()
    assert await replay.run(_replay_args(json=False)) == 1
    assert "anchor       BROKEN" in capsys.readouterr().out


async def test_a_checkpoint_forged_with_another_key_is_caught(store, database_url, key_file):
    await _sealed_log(store, key_file)
    await rewrite_with_recomputed_hashes(database_url, 6)
    head = await store.head()
    records = await store.read(after=8, limit=1)
    thief = Ed25519PrivateKey.generate()
    real_id = key_id(load_signing_key(key_file).public_key())
    conn = await asyncpg.connect(plain_url(database_url))
    try:  # the attacker replaces the checkpoints with ones over the rewritten chain, claiming the real key's id
        await conn.execute("DELETE FROM log_checkpoints")
        for position, chain_hash in ((9, records[0].hash), head):
            forged = sign_checkpoint(thief, position=position, hash=chain_hash, signed_at=1)
            await PostgresCheckpoints(store).record(msgspec.structs.replace(forged, key_id=real_id))
    finally:
        await conn.close()
    report = await _verify(store, load_verifying_keys([key_file]))
    assert not report.ok
    assert report.position == 9 and report.anchor is not None and report.anchor.failed
    assert "signature" in report.problem and "forged" in report.problem

    # signed with the thief's own key id instead: not a configured key, refused as well
    await conn_execute(database_url, "DELETE FROM log_checkpoints")
    await PostgresCheckpoints(store).record(
        sign_checkpoint(thief, position=head[0], hash=head[1], signed_at=1)
    )
    report = await _verify(store, load_verifying_keys([key_file]))
    assert not report.ok and "not a configured anchor key" in report.problem


async def conn_execute(url: str, sql: str) -> None:
    conn = await asyncpg.connect(plain_url(url))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def test_a_log_truncated_below_a_checkpoint_is_caught(store, database_url, key_file):
    await _sealed_log(store, key_file)
    conn = await asyncpg.connect(plain_url(database_url))
    try:
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute("DELETE FROM events WHERE position > 10")
        hash10 = await conn.fetchval("SELECT hash FROM events WHERE position = 10")
        await conn.execute("UPDATE log_head SET position = 10, hash = $1 WHERE id = 1", hash10)
        await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()
    report = await _verify(store, load_verifying_keys([key_file]))
    assert not report.ok and report.position == 13
    assert "the chain ends at position 10" in report.problem


async def test_a_log_with_no_key_configured_says_it_is_unanchored(
    store, database_url, key_file, tmp_path, monkeypatch, capsys
):
    await _sealed_log(store, key_file)
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_STATE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("ALLOT_ANCHOR_PUBLIC_KEYS", raising=False)
    capsys.readouterr()
    code = await replay.run(_replay_args(json=False))
    out = capsys.readouterr().out
    assert code == 0, "an unanchored log that is consistent still verifies; it is reported, not failed"
    assert "UNANCHORED" in out and "no public key configured" in out
    assert "4 signed checkpoints in the log are not checked" in out


async def test_the_unanchored_tail_can_be_bounded(store, database_url, key_file, monkeypatch, capsys):
    await _sealed_log(store, key_file, events=15)
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_ANCHOR_PUBLIC_KEYS", str(key_file.with_suffix(".pub")))
    capsys.readouterr()
    assert await replay.run(_replay_args(max_unanchored=2)) == 0
    assert json.loads(capsys.readouterr().out)["chain"]["anchor"]["unanchored_events"] == 2
    assert await replay.run(_replay_args(max_unanchored=1)) == 1
    assert "after the newest checkpoint" in json.loads(capsys.readouterr().out)["chain"]["problem"]


async def test_the_relay_seals_what_it_publishes(store, key_file, nats_server_url, bus_names):
    checkpoints = PostgresCheckpoints(store)
    sealer = Sealer(
        store, checkpoints, load_signing_key(key_file), CheckpointPolicy(every_events=1000, every_seconds=0.0)
    )
    nc = await connect(nats_server_url, name="test-relay")
    relay = Relay(store, nc.jetstream(), BusNames(**bus_names), poll_interval=0.05, on_published=sealer)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        await store.append([an_event() for _ in range(7)], producer="t")
        for _ in range(200):
            latest = await checkpoints.latest()
            if latest is not None and latest.position == 7:
                break
            await asyncio.sleep(0.05)
        assert latest is not None and latest.position == 7
        assert latest.hash == (await store.head())[1]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        with contextlib.suppress(Exception):
            await nc.jetstream().delete_stream(bus_names["stream"])
        await nc.close()
    report = await _verify(store, load_verifying_keys([key_file]))
    assert report.ok and report.anchor is not None and report.anchor.newest_position == 7


def test_the_signing_key_is_generated_once_and_private(tmp_path):
    path = ensure_signing_key(tmp_path / "state" / "anchor.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = key_id(load_signing_key(path).public_key())
    assert ensure_signing_key(path) == path
    assert key_id(load_signing_key(path).public_key()) == first, "a second start keeps the key"
    assert list(load_verifying_keys([path.with_suffix(".pub")])) == [first]


def test_a_bad_key_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "anchor.key"
    bad.write_text("not a key")
    with pytest.raises(InvalidInput, match=r"anchor\.key.*not a PEM"):
        load_signing_key(bad)
    with pytest.raises(InvalidInput, match="does not exist"):
        load_verifying_keys([tmp_path / "missing.pub"])


async def test_verify_against_a_log_older_than_its_checkpoints_says_to_migrate(
    store, database_url, tmp_path, monkeypatch
):
    await store.append([an_event()], producer="t")
    await conn_execute(database_url, "DROP TABLE log_checkpoints")
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.setenv("ALLOT_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("ALLOT_ANCHOR_PUBLIC_KEYS", raising=False)
    with pytest.raises(InputError, match="allot migrate"):
        await replay.run(_replay_args())
