"""A server process for fault tests: started with its own environment and a log file, asked about ``/readyz``, waited
for with a bound, and stopped (SIGTERM, then killed after a grace period) however the test ends; and the relay run in
the test's own process, publishing the log to NATS for the processes under test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from allot_bus.adapters.nats import connect
from allot_bus.names import BusNames
from allot_bus.relay import Relay
from allot_eventstore.protocol import EventStore
from allot_runtime.embedded import free_port

__all__ = [
    "free_port",
    "process_environment",
    "ready_as",
    "readyz",
    "relaying",
    "running",
    "tail",
    "until",
]

T = TypeVar("T")


def process_environment(
    database_url: str, nats_url: str, names: BusNames, port: int, **more: str
) -> dict[str, str]:
    """The environment of a server process under test: this one's without its ``ALLOT_`` settings, then the database
    and NATS to use, the bus names, ``/readyz`` on ``127.0.0.1:port``, text logs, and ``more``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {
        "ALLOT_DATABASE_URL": database_url,
        "ALLOT_NATS_URL": nats_url,
        "ALLOT_NATS_PREFIX": names.prefix,
        "ALLOT_NATS_STREAM": names.stream,
        "ALLOT_HTTP_HOST": "127.0.0.1",
        "ALLOT_HTTP_PORT": str(port),
        "ALLOT_LOG_FORMAT": "text",
        **more,
    }


def tail(log: Path, size: int = 3000) -> str:
    return log.read_text()[-size:] if log.exists() else ""


@contextlib.asynccontextmanager
async def running(
    argv: Sequence[str], env: dict[str, str], log: Path, *, grace: float = 15.0
) -> AsyncIterator[None]:
    """``argv`` as a process writing to ``log`` for as long as the block runs; SIGTERM at the end, killed after
    ``grace`` seconds."""
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(*argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=grace)
            except TimeoutError:
                process.kill()
                await process.wait()


async def until(what: str, check: Callable[[], Awaitable[T | None]], timeout: float, log: Path) -> T:
    """``check()``'s first true answer within ``timeout`` seconds (asked every 0.1 s), else an error with the end of the
    process's log."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout:g} s; the log ends:\n{tail(log)}")


async def readyz(http: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, Any]]:
    """The status and body of ``/readyz`` on ``port`` (0 and the error when it does not answer in 2 s)."""
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
            return r.status, await r.json()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, {"error": str(exc)}


async def ready_as(http: aiohttp.ClientSession, port: int, status: int) -> dict[str, Any] | None:
    """The body of ``/readyz`` on ``port`` when it answers ``status``, else None (a check for :func:`until`)."""
    answer, body = await readyz(http, port)
    return body if answer == status else None


@contextlib.asynccontextmanager
async def relaying(store: EventStore, nats_url: str, names: BusNames) -> AsyncIterator[None]:
    """The relay, in this process, publishing ``store``'s log to NATS for as long as the block runs."""
    nc = await connect(nats_url, name="test-relay")
    stop = asyncio.Event()
    task = asyncio.create_task(Relay(store, nc.jetstream(), names, poll_interval=0.1).run(stop), name="relay")
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await nc.close()
