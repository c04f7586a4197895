"""The PostgreSQL server of ``allot bench append`` and ``allot bench replay`` and their scratch databases:
``ALLOT_DATABASE_URL`` when set, else an embedded server with default durability. The driver is imported when a
connection is opened, not when the command line is parsed."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import asyncpg

DURABILITY_SETTINGS = (
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_sync_method",
    "wal_level",
    "commit_delay",
    "shared_buffers",
    "max_wal_size",
)


def _progress(message: str) -> None:
    print(f"[bench append] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def postgres_server() -> Iterator[tuple[str, str]]:
    """``(admin url, source)``: ``ALLOT_DATABASE_URL``, else an embedded server with default durability."""
    url = os.environ.get("ALLOT_DATABASE_URL")
    if url:
        yield url, "environment"
        return
    from allot_runtime.embedded import EmbeddedPostgres

    root = Path(tempfile.mkdtemp(prefix="allot-bench-pg-"))
    root.chmod(0o755)
    server = EmbeddedPostgres(
        root / "data"
    )  # not fast=True: fsync, synchronous_commit, full_page_writes stay on
    try:
        _progress(f"starting an embedded PostgreSQL under {root}")
        server.start()
        yield server.url, "embedded"
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _admin(url: str) -> asyncpg.Connection:
    import asyncpg

    from allot_eventstore.urls import plain_url

    return await asyncpg.connect(plain_url(url), timeout=10)


async def _execute(server_url: str, statement: str) -> None:
    conn = await _admin(server_url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def create_database(server_url: str, name: str) -> str:
    from allot_eventstore.urls import with_database

    await _execute(server_url, f'CREATE DATABASE "{name}"')
    return with_database(server_url, name)


async def drop_database(server_url: str, name: str) -> None:
    await _execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class ServerFacts(TypedDict):
    """The server's version and the settings that decide how durable a commit is."""

    postgres_version: str
    durability: dict[str, str]


async def server_facts(server_url: str) -> ServerFacts:
    conn = await _admin(server_url)
    try:
        version = await conn.fetchval("SHOW server_version")
        settings = {name: await conn.fetchval(f"SHOW {name}") for name in DURABILITY_SETTINGS}
    finally:
        await conn.close()
    return {"postgres_version": version, "durability": settings}


async def checkpoint(server_url: str) -> bool:
    """Flush dirty buffers before a timed section; ``False`` when the role may not (nothing else changes)."""
    import asyncpg

    conn = await _admin(server_url)
    try:
        await conn.execute("CHECKPOINT")
        return True
    except asyncpg.InsufficientPrivilegeError:
        return False
    finally:
        await conn.close()
