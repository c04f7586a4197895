"""A service whose consumer lock is lost (the connection holding it closed by the server) stops as designed, so that
exactly one instance decides: with status 1 for its supervisor to restart it as a standby, and one line saying why,
not a traceback (an expected end, not a crash).

The real runtime shell (``service_main``) in its own process, around the echo processor."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from allot_bus.names import BusNames
from allot_eventstore.urls import plain_url
from allot_testing.processes import free_port, process_environment, ready_as, tail, until

pytestmark = pytest.mark.integration

SERVICE = (
    "from allot_runtime.entry import service_main\n"
    "from allot_testing.processors import EchoProcessor\n"
    "service_main('echo', EchoProcessor)\n"
)
LOCK_HOLDER = (  # the session holding this database's advisory lock: the service's ownership connection
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


async def test_a_service_whose_lock_is_lost_stops_with_status_1_and_one_line(
    database_url: str, nats_server_url: str, bus_names: dict[str, str], tmp_path: Path
) -> None:
    names, port, log = BusNames(**bus_names), free_port(), tmp_path / "echo.log"
    env = process_environment(database_url, nats_server_url, names, port, ALLOT_SNAPSHOT_EVERY="0")
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SERVICE, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    try:
        async with aiohttp.ClientSession() as http:
            await until("ready", lambda: ready_as(http, port, 200), 30, log)
        conn = await asyncpg.connect(plain_url(database_url))
        try:
            holders = [row["pid"] for row in await conn.fetch(LOCK_HOLDER)]
            assert len(holders) == 1, holders
            await conn.execute("SELECT pg_terminate_backend($1)", holders[0])
        finally:
            await conn.close()
        status = await asyncio.wait_for(process.wait(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = tail(log, 100_000)
    assert status == 1, text
    assert "Traceback" not in text, text  # was: the ExceptionGroup of the service's tasks, with every frame
    said = [line for line in text.splitlines() if line.startswith("allot-echo: ")]
    assert len(said) == 1 and "lost the connection that holds ownership" in said[0], text
