"""Alembic environment for Allot's event log.

Online migrations run on a connection handed in by ``allot_eventstore.migrate`` (inside its advisory lock) or, when
run as plain ``alembic upgrade head``, on an async engine built from ALLOT_DATABASE_URL.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from allot_eventstore.urls import async_url

config = context.config
target_metadata = None


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("ALLOT_DATABASE_URL", "")
    if not url:
        raise SystemExit(
            "set ALLOT_DATABASE_URL (e.g. postgresql://user@host:5432/allot) or use `allot migrate`"
        )
    try:
        return async_url(url)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc


def do_run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, transaction_per_migration=False)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url(), poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(do_run_migrations)
        await connection.commit()
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()
else:
    given = config.attributes.get("connection")
    if given is not None:
        do_run_migrations(given)
    else:
        asyncio.run(_run_async())
