"""Pytest plugin (loaded with ``-p allot_testing.plugin``): fixtures for real PostgreSQL and NATS.

- ``pg_server`` / ``nats_server`` (session): the servers chosen by :mod:`allot_testing.servers`.
- ``database_url`` (function): a fresh database cloned from a migrated template; dropped afterwards
  (``scratch_database`` gives one inside an async test, for tests that need several at once).
- ``event_store`` (function): a :class:`PostgresEventStore` on ``database_url``, closed afterwards.
- ``database_proxy`` (function): a fault proxy (:mod:`allot_testing.tcp_proxy`) in front of the test's PostgreSQL;
  ``through(database_url, database_proxy)`` is the URL that goes through it.
- ``bus_names`` (function): a unique NATS subject prefix and stream name for the test.
- ``external_database_url`` / ``external_nats_url``: the machine's own servers (marker ``external``); skipped with a
  clear reason when they do not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from allot_eventstore.migrate import migrate
from allot_eventstore.postgres import PostgresEventStore
from allot_eventstore.urls import plain_url, with_database
from allot_testing.servers import Server, nats_server, postgres_server
from allot_testing.tcp_proxy import TcpProxy, tcp_proxy


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def nats_server_url() -> Iterator[str]:
    with nats_server() as server:
        yield server.url


async def _admin(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(plain_url(url), timeout=10)


async def _create_template(url: str, name: str) -> None:
    conn = await _admin(url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    await migrate(with_database(url, name))


async def _clone(url: str, template: str, name: str) -> None:
    conn = await _admin(url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await conn.close()


async def _drop(url: str, name: str) -> None:
    conn = await _admin(url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_template(pg_server: Server) -> Iterator[str]:
    name = f"allot_tpl_{uuid.uuid4().hex[:10]}"
    asyncio.run(_create_template(pg_server.url, name))
    yield name
    asyncio.run(_drop(pg_server.url, name))


@contextlib.asynccontextmanager
async def scratch_database(server_url: str, template: str) -> AsyncIterator[str]:
    """A migrated, empty database cloned from ``template`` for as long as the block runs (for async tests that need
    several at once)."""
    name = f"allot_t_{uuid.uuid4().hex[:12]}"
    await _clone(server_url, template, name)
    try:
        yield with_database(server_url, name)
    finally:
        await _drop(server_url, name)


def _fresh_database(server_url: str, template: str) -> Iterator[str]:
    name = f"allot_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_clone(server_url, template, name))
    try:
        yield with_database(server_url, name)
    finally:
        asyncio.run(_drop(server_url, name))


@pytest.fixture
def database_url(pg_server: Server, pg_template: str) -> Iterator[str]:
    """A migrated, empty database of this test's own."""
    yield from _fresh_database(pg_server.url, pg_template)


@pytest.fixture
async def event_store(database_url: str) -> AsyncIterator[PostgresEventStore]:
    """The event log of this test's own database."""
    store = PostgresEventStore.connect(database_url)
    yield store
    await store.close()


@pytest.fixture
async def database_proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    """A fault proxy in front of the test's PostgreSQL (freeze it, refuse, thaw, lose the answer to a COMMIT)."""
    parts = urlsplit(database_url)
    async with tcp_proxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        yield proxy


@pytest.fixture
def empty_database_url(pg_server: Server) -> Iterator[str]:
    """A database with no schema at all (for migration tests)."""
    name = f"allot_e_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        conn = await _admin(pg_server.url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    try:
        yield with_database(pg_server.url, name)
    finally:
        asyncio.run(_drop(pg_server.url, name))


def unique_bus_names() -> dict[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return {"prefix": f"t{suffix}", "stream": f"ALLOT_T{suffix.upper()}"}


@pytest.fixture
def bus_names() -> dict[str, str]:
    return unique_bus_names()


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def _external(variable: str, default: str, port: int, what: str) -> str:
    """The URL of the machine's own server (``variable``, else ``default``); the test is skipped when it does not
    answer."""
    url = os.environ.get(variable, default)
    if not _reachable(url, port):
        pytest.skip(f"external {what} not reachable at {url} (set {variable})")
    return url


@pytest.fixture(scope="session")
def external_pg_url() -> str:
    return _external(
        "ALLOT_EXTERNAL_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres", 5432, "PostgreSQL"
    )


@pytest.fixture(scope="session")
def external_nats_url() -> str:
    return _external("ALLOT_EXTERNAL_NATS_URL", "nats://127.0.0.1:4222", 4222, "NATS")


@pytest.fixture(scope="session")
def external_pg_template(external_pg_url: str) -> Iterator[str]:
    name = f"allot_tpl_{uuid.uuid4().hex[:10]}"
    asyncio.run(_create_template(external_pg_url, name))
    yield name
    asyncio.run(_drop(external_pg_url, name))


@pytest.fixture
def external_database_url(external_pg_url: str, external_pg_template: str) -> Iterator[str]:
    yield from _fresh_database(external_pg_url, external_pg_template)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its fuzz counts to the controller, which prints the report."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from allot_testing.fuzz import tallies

        workeroutput["allot_fuzz_tallies"] = tallies()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller's side of :func:`pytest_sessionfinish`: add a finished worker's fuzz counts."""
    from allot_testing.fuzz import merge

    merge(getattr(node, "workeroutput", {}).get("allot_fuzz_tallies", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many cases each door's fuzz test tried, and what came of them (allot_testing.fuzz)."""
    from allot_testing.fuzz import report

    lines = report()
    if lines:
        terminalreporter.section("fuzzed doors")
        for line in lines:
            terminalreporter.write_line(line)
