"""Schema migrations: Alembic owns all DDL; this module runs it safely.

``migrate(url)`` takes a session-level advisory lock on its own connection, so concurrent starts (several services,
a compose migration job, a Kubernetes Job) serialise: one migrates, the others wait and then find nothing to do.
Migrate over a direct connection, not through a transaction-pooling PgBouncer (session locks would not hold).
``ensure_current(url)`` is what services call at start: it refuses to run against a schema that is behind or ahead.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from allot_contracts.errors import SchemaMismatch
from allot_eventstore.urls import async_url

MIGRATION_LOCK_KEY = 0x616C6C6F74  # "allot"


def migrations_dir() -> Path:
    """Where the Alembic scripts are: ``ALLOT_MIGRATIONS_DIR``, else ``migrations/`` in the checkout or image."""
    override = os.environ.get("ALLOT_MIGRATIONS_DIR")
    if override:
        return Path(override)
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "migrations" / "env.py"
        if candidate.exists():
            return candidate.parent
    raise SchemaMismatch("cannot find the migrations directory; set ALLOT_MIGRATIONS_DIR")


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def _upgrade(connection: Connection) -> None:
    cfg = _config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def migrate(url: str) -> tuple[str | None, str]:
    """Upgrade to head under the advisory lock. Returns ``(revision before, revision after)``."""
    engine = create_async_engine(async_url(url), poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
            await conn.commit()
            try:
                before = await conn.run_sync(_current)
                await conn.run_sync(_upgrade)
                await conn.commit()
                after = await conn.run_sync(_current)
            finally:
                await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
                await conn.commit()
    finally:
        await engine.dispose()
    assert after is not None
    return before, after


async def current_revision(url: str) -> str | None:
    engine = create_async_engine(async_url(url), poolclass=pool.NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_current)
    finally:
        await engine.dispose()


async def ensure_current(url: str) -> None:
    current, head = await current_revision(url), head_revision()
    if current != head:
        raise SchemaMismatch(
            f"database schema is at revision {current or 'none'} but this version needs {head}; "
            "run `allot migrate` (or the migration job) first"
        )
