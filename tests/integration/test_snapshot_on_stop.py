"""A service process stopped gracefully (SIGTERM) snapshots its projection at its checkpoint, and its next start
restores that snapshot and folds no tail; a stop with nothing new since writes no second snapshot.

On real PostgreSQL and NATS, the real ``allot-node-reporter`` process, with periodic snapshots out of reach
(``ALLOT_SNAPSHOT_EVERY`` far beyond the log) so that only the stop can have taken the snapshot.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest

from allot_bus.names import BusNames
from allot_eventstore.urls import plain_url
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_stack.apply import record
from allot_testing.builders import a_node
from allot_testing.processes import relaying

pytestmark = pytest.mark.integration

SERVICE = "node-reporter"
NODES = 12


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    binary = str(Path(sys.executable).parent / f"allot-{SERVICE}")
    with log.open("ab") as out:
        return subprocess.Popen([binary], env=env, stdout=out, stderr=subprocess.STDOUT)


async def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.to_thread(process.wait, 30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _text(log: Path) -> str:
    return log.read_text()


async def _until(predicate, what: str, log: Path, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{_text(log)[-3000:]}")


async def _snapshots(database_url: str) -> list[tuple[int, str]]:
    conn = await asyncpg.connect(plain_url(database_url))
    try:
        rows = await conn.fetch("SELECT position, consumer FROM snapshots ORDER BY position")
        return [(row["position"], row["consumer"]) for row in rows]
    finally:
        await conn.close()


async def test_a_graceful_stop_snapshots_at_the_checkpoint_and_the_next_start_folds_no_tail(
    event_store, database_url, nats_server_url, bus_names, tmp_path
) -> None:
    names = BusNames(**bus_names)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    env.update(
        {
            "ALLOT_DATABASE_URL": database_url,
            "ALLOT_NATS_URL": nats_server_url,
            "ALLOT_NATS_PREFIX": names.prefix,
            "ALLOT_NATS_STREAM": names.stream,
            "ALLOT_HTTP_HOST": "127.0.0.1",
            "ALLOT_HTTP_PORT": "0",
            "ALLOT_LOG_FORMAT": "text",
            "ALLOT_SNAPSHOT_EVERY": "1000000",  # no periodic snapshot: only the stop can take one
        }
    )
    log = tmp_path / f"{SERVICE}.log"
    nodes = [to_input(Document(source="t", index=i, body=a_node(f"n{i}", cpu="32"))) for i in range(NODES)]
    await record(database_url, nodes, wait=False, wait_each=False, timeout=60)

    async def registered() -> bool:
        return len(await event_store.read(types=["node.registered"], limit=1000)) == NODES

    async with relaying(event_store, nats_server_url, names):
        first = _start(env, log)
        try:
            await _until(registered, f"{NODES} node.registered", log)
        finally:
            assert await _stop(first) == 0, _text(log)[-3000:]
    checkpoint = await event_store.get_checkpoint(SERVICE)
    assert checkpoint > 0
    assert await _snapshots(database_url) == [(checkpoint, SERVICE)], _text(log)[-3000:]
    assert f"snapshot at position {checkpoint}" in _text(log)

    mark = len(_text(log))
    second = _start(env, log)
    try:

        async def rebuilt() -> bool:
            return "projection rebuilt up to position" in _text(log)[mark:]

        await _until(rebuilt, "the second start's rebuild", log)
    finally:
        assert await _stop(second) == 0, _text(log)[-3000:]
    started = _text(log)[mark:]
    assert f"projection restored from the snapshot at position {checkpoint}" in started, started
    assert f"projection rebuilt up to position {checkpoint}" in started, started
    assert await _snapshots(database_url) == [(checkpoint, SERVICE)], "nothing new: no second snapshot"
