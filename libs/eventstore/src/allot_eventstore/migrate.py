"""Schema migrations: Alembic owns all DDL; this module runs it safely.

``migrate(url)`` takes a session-level advisory lock on its own connection, so concurrent starts (several services,
a compose migration job, a Kubernetes Job) serialise: one migrates, the others wait and then find nothing to do.
Migrate over a direct connection, not through a transaction-pooling PgBouncer (session locks would not hold).
``ensure_current(url)`` is what services call at start: it refuses to run against a schema that is behind or ahead.
It reads the database's revision with asyncpg and the head from the scripts' ``revision``/``down_revision`` lines,
so a service's start does not import Alembic and SQLAlchemy (a second of CPU per process); only migrating does.
Each of its round trips is given ``read_timeout`` seconds (a service's ``ALLOT_DB_READ_TIMEOUT``), as the store's
reads are: a server that takes the connection and then stops answering fails the check in time
(:class:`~allot_eventstore.pg_errors.LogUnavailable`) instead of holding the service's start for ever.
"""

from __future__ import annotations

import ast
import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from allot_contracts.errors import SchemaMismatch
from allot_eventstore.bounds import NO_ANSWER, answer_within
from allot_eventstore.pg_errors import CONNECT_TIMEOUT_S, LogUnavailable, translate
from allot_eventstore.urls import async_url, plain_url

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

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
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head_revision() -> str:
    """The revision the scripts lead to: read from their ``revision``/``down_revision`` assignments when they form
    one line of revisions, else asked of Alembic (which imports every script)."""
    head = _single_head(migrations_dir() / "versions")
    if head is not None:
        return head
    from alembic.script import ScriptDirectory

    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None
    return found


def _single_head(versions: Path) -> str | None:
    """The one revision no script revises, when every script names its revision and at most one predecessor (a
    string) and every predecessor is a script; None otherwise (branches, merges, anything unusual)."""
    revisions: dict[str, str | None] = {}
    for path in sorted(versions.glob("*.py")):
        assigned: dict[str, object] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                target = node.target
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if (
                isinstance(target, ast.Name)
                and target.id in ("revision", "down_revision")
                and value is not None
            ):
                try:
                    assigned[target.id] = ast.literal_eval(value)
                except ValueError:
                    return None
        revision, down = assigned.get("revision"), assigned.get("down_revision")
        if (
            not isinstance(revision, str)
            or not (down is None or isinstance(down, str))
            or revision in revisions
        ):
            return None
        revisions[revision] = down
    revised = set(revisions.values())
    heads = [r for r in revisions if r not in revised]
    if len(heads) != 1 or not (revised - {None}) <= revisions.keys():
        return None
    return heads[0]


def _upgrade(connection: Connection) -> None:
    from alembic import command

    cfg = _config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")


def _current(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def migrate(
    url: str, *, read_timeout: float | None = CONNECT_TIMEOUT_S, timeouts_from: str | None = None
) -> tuple[str | None, str]:
    """Upgrade to head under the advisory lock. Returns ``(revision before, revision after)``. ``timeouts_from``:
    what set ``read_timeout`` (``ALLOT_DB_READ_TIMEOUT``), named when the server does not answer within it.

    The connection is given :data:`~allot_eventstore.pg_errors.CONNECT_TIMEOUT_S`; the wait for the lock and the
    scripts, which may rightly take long (another migration holds the lock, a script rewrites a large log), are
    watched (:class:`_Watch`: None, no watch): a server that stops answering ends the migration with
    :class:`~allot_eventstore.pg_errors.LogUnavailable` saying so, nothing of it committed."""
    from sqlalchemy import pool, text
    from sqlalchemy.ext.asyncio import create_async_engine

    watch = _Watch(url, read_timeout, _read_bound(timeouts_from))
    engine = create_async_engine(async_url(url), poolclass=pool.NullPool, async_creator=watch.connect)
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
    except Exception as exc:
        if watch.silent is None:
            raise
        raise LogUnavailable(f"migrating the database schema: {watch.silent}") from exc
    finally:
        watch.stop()
        await engine.dispose()
    assert after is not None
    return before, after


class _Watch:
    """The migration's connection, made within :data:`~allot_eventstore.pg_errors.CONNECT_TIMEOUT_S` and watched while
    it is used: every ``seconds`` the server is asked, over a connection of its own, for an answer within ``seconds``.
    One that does not come closes the migration's connection under whatever waits on it (the server then rolls its
    transaction back) and :attr:`silent` says why. A long statement cannot be told from a server that stopped
    answering by waiting on its own connection, so the statements themselves are given no time limit."""

    def __init__(self, url: str, seconds: float | None, bound: str) -> None:
        self.url, self.seconds, self.bound = url, seconds, bound
        self.silent: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def connect(self) -> Any:
        """The engine's connection (its ``async_creator``): an asyncpg connection, watched from now on."""
        import asyncpg

        try:
            conn = await asyncpg.connect(plain_url(self.url), timeout=CONNECT_TIMEOUT_S)
        except NO_ANSWER as exc:
            raise _unanswered(exc, "migrating the database schema (connecting)", self.url) from exc
        self.stop()  # a connection made again is watched instead
        if self.seconds is not None:
            self._task = asyncio.create_task(self._watch(conn, self.seconds))
        return conn

    async def _watch(self, conn: Any, seconds: float) -> None:
        import asyncpg

        while True:
            await asyncio.sleep(seconds)
            try:
                probe = await asyncpg.connect(plain_url(self.url), timeout=seconds)
                try:
                    await answer_within(probe, seconds, probe.fetchval("SELECT 1"))
                finally:
                    await probe.close(timeout=seconds)
            except NO_ANSWER as exc:
                self.silent = str(translate(exc, timeout=seconds, url=self.url, bound=self.bound))
                conn.terminate()
                return
            except Exception:  # an error is an answer (too many connections, say): the server is still there
                continue

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def current_revision(
    url: str, *, read_timeout: float | None = CONNECT_TIMEOUT_S, timeouts_from: str | None = None
) -> str | None:
    """The database's revision (``alembic_version``), None before the first migration. The connection is given
    :data:`~allot_eventstore.pg_errors.CONNECT_TIMEOUT_S` and each query ``read_timeout`` seconds (None: no bound);
    a server that cannot be reached or does not answer in time raises
    :class:`~allot_eventstore.pg_errors.LogUnavailable` saying so (and what set the bound: ``timeouts_from``)."""
    import asyncpg

    try:
        conn = await asyncpg.connect(plain_url(url), timeout=CONNECT_TIMEOUT_S)
    except NO_ANSWER as exc:
        raise _unanswered(exc, "checking the database schema (connecting)", url) from exc
    try:
        present = await answer_within(conn, read_timeout, conn.fetchval(_HAS_VERSION_TABLE))
        rows = (
            await answer_within(conn, read_timeout, conn.fetch("SELECT version_num FROM alembic_version"))
            if present
            else []
        )
    except NO_ANSWER as exc:
        doing = "checking the database schema (reading its revision)"
        raise _unanswered(exc, doing, url, read_timeout, _read_bound(timeouts_from)) from exc
    finally:
        await conn.close(timeout=read_timeout)
    if len(rows) > 1:
        raise SchemaMismatch(f"database schema has several revisions: {sorted(r[0] for r in rows)}")
    return rows[0][0] if rows else None


_HAS_VERSION_TABLE = "SELECT to_regclass('alembic_version') IS NOT NULL"


def _unanswered(
    exc: BaseException,
    doing: str,
    url: str,
    seconds: float | None = CONNECT_TIMEOUT_S,
    bound: str = "connect timeout",
) -> LogUnavailable:
    """A server at ``url`` that did not answer, as the store reports it, saying what it was asked to do and, when a
    bound ran out, which (the connection's by default)."""
    return LogUnavailable(f"{doing}: {translate(exc, timeout=seconds, url=url, bound=bound)}")


def _read_bound(timeouts_from: str | None) -> str:
    return f"read timeout, from {timeouts_from}" if timeouts_from else "read timeout"


async def ensure_current(
    url: str, *, read_timeout: float | None = CONNECT_TIMEOUT_S, timeouts_from: str | None = None
) -> None:
    """Refuse a schema that is behind or ahead of this version's (:class:`SchemaMismatch`); ``read_timeout``: the
    seconds each query of the check is given, set by ``timeouts_from`` (:func:`current_revision`)."""
    current = await current_revision(url, read_timeout=read_timeout, timeouts_from=timeouts_from)
    head = head_revision()
    if current != head:
        raise SchemaMismatch(
            f"database schema is at revision {current or 'none'} but this version needs {head}; "
            "run `allot migrate` (or the migration job) first"
        )
