"""Exclusive ownership of a consumer name across processes.

Two processes consuming under one name would split the durable consumer's messages between them and each decide
on a projection missing the other's inputs. ``Ownership`` makes the second one stand by: it holds a session-level
PostgreSQL advisory lock, keyed by the consumer name, on a dedicated connection for as long as the process runs.
When that connection is lost the lock is gone too (another instance may take over), so ``hold`` raises and the
service stops; its supervisor restarts it as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import Any

import asyncpg

from allot_eventstore.pg_errors import LogUnavailable
from allot_eventstore.urls import plain_url

log = logging.getLogger("allot.ownership")


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for a consumer name."""
    return int.from_bytes(hashlib.sha256(f"allot.consumer:{name}".encode()).digest()[:8], "big", signed=True)


class Ownership:
    def __init__(self, url: str, name: str, *, retry_s: float = 2.0, check_s: float = 5.0) -> None:
        self.url = url
        self.name = name
        self.key = lock_key(name)
        self.retry_s = retry_s
        self.check_s = check_s
        self._conn: Any = None

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this process owns the name (True), or until ``stop`` is set (False)."""
        waiting_logged = False
        while not stop.is_set():
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(plain_url(self.url), timeout=10)
                if await self._conn.fetchval("SELECT pg_try_advisory_lock($1)", self.key):
                    if waiting_logged:
                        log.info("%s: the other instance is gone; this one takes over", self.name)
                    return True
                if not waiting_logged:
                    log.warning(
                        "%s: another instance is running under this name; standing by until it stops",
                        self.name,
                    )
                    waiting_logged = True
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
                log.warning("%s: cannot take ownership yet (%s); retrying", self.name, exc)
                await self._close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.retry_s)
        return False

    async def hold(self, stop: asyncio.Event) -> None:
        """Check the lock's connection until ``stop``; raise :class:`Unavailable` when it is lost."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.check_s)
            if stop.is_set():
                break
            try:
                await asyncio.wait_for(self._conn.fetchval("SELECT 1"), timeout=self.check_s)
            except (
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                TimeoutError,
                AttributeError,
            ) as exc:
                raise LogUnavailable(
                    f"{self.name}: lost the connection that holds ownership ({exc}); stopping so "
                    "that exactly one instance decides"
                ) from exc
        await self.release()

    async def release(self) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
            self._conn = None
