"""Exclusive ownership of a consumer name across processes.

Two processes consuming under one name would split the durable consumer's messages between them and each decide
on a projection missing the other's inputs. ``Ownership`` makes the second one stand by: it holds a session-level
PostgreSQL advisory lock, keyed by the consumer name, on a dedicated connection for as long as the process runs.
When that connection is lost the lock is gone too (another instance may take over), so ``hold`` raises and the
service stops; its supervisor restarts it as a standby. A stopping owner releases the lock last, after its final batch
and checkpoint are recorded: released at the stop itself, a standby took over while the old owner still appended.

A check that gets no answer (a hung server, a network that drops packets) is not a loss: the server keeps the lock for
as long as it keeps the session, and this process cannot record anything while it cannot reach the server either (its
reads and appends fail, its ``/readyz`` says so). The check waits for that answer, logged once, and the service goes on
once PostgreSQL answers; a connection the server closed meanwhile fails the check then (reset, closed) and the service
stops as above. The wait has a bound, ``unanswered_s`` (60 s): a server may drop a session it cannot reach (its TCP
keepalives) and free the lock for a standby, while this side's half-open socket would wait for the kernel's
retransmissions (about 15 minutes); past the bound the lock counts as lost and the service stops, so that two instances
never decide at once once the network heals. Rejected: stopping after ``check_s`` without an answer, which turned every
database pause longer than a few seconds into a crash and a restart of every service (and a traceback each).

A check left unanswered (past the bound, at ``stop``, or when the task holding is cancelled) is ended by closing its
connection under it, as :func:`~allot_eventstore.bounds.answer_within` does; a connection with a query in flight is of
no further use. Nothing the check started outlives it. Rejected: cancelling the query, which makes asyncpg send a
CancelRequest over a new connection from a background task with no bound of its own; through the same silent network
that task waited for ever, and nothing closed the connection that would have cancelled it.

A standby has nothing to lose by trying again: each attempt to take the lock is given ``check_s`` for its answer, and
one left unanswered closes its connection (:func:`~allot_eventstore.bounds.answer_within`) and is made again over a
new one, so a standby neither waits for ever on a connection that went silent nor misses its stop meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from typing import Any

import asyncpg

from allot_contracts.errors import Deposed
from allot_eventstore.bounds import answer_within
from allot_eventstore.pg_errors import LogUnavailable
from allot_eventstore.urls import plain_url

log = logging.getLogger("allot.ownership")


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for a consumer name."""
    return int.from_bytes(hashlib.sha256(f"allot.consumer:{name}".encode()).digest()[:8], "big", signed=True)


class OwnershipLost(Deposed, LogUnavailable):
    """The connection holding the lock is gone, and with it the lock: another instance may take over."""


class Ownership:
    def __init__(
        self, url: str, name: str, *, retry_s: float = 2.0, check_s: float = 5.0, unanswered_s: float = 60.0
    ) -> None:
        self.url = url
        self.name = name
        self.key = lock_key(name)
        self.retry_s = retry_s
        self.check_s = check_s
        self.unanswered_s = unanswered_s  # a check unanswered this long: the lock counts as lost
        self._conn: Any = None
        self._unanswered: asyncio.Future[Any] | None = (
            None  # a check left waiting at ``stop``, for ``release``
        )

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this process owns the name (True), or until ``stop`` is set (False)."""
        waiting_logged = False
        while not stop.is_set():
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await asyncpg.connect(plain_url(self.url), timeout=10)
                taking = self._conn.fetchval("SELECT pg_try_advisory_lock($1)", self.key)
                if await answer_within(self._conn, self.check_s, taking):
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
        """Check the lock's connection every ``check_s`` until ``stop``; raise :class:`Unavailable` when it is lost
        (a check without an answer is waited for: the module's docstring). The lock stays held at ``stop``: the owner
        releases it (:meth:`release`) once its work has ended, its last appends and checkpoint recorded, so that a
        standby takes over only then."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.check_s)
            if stop.is_set():
                break
            try:
                await self._check(stop)
            except (
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.exceptions.InternalClientError,
                AttributeError,
                TimeoutError,
            ) as exc:
                raise OwnershipLost(
                    f"{self.name}: lost the connection that holds ownership ({exc}); stopping so "
                    "that exactly one instance decides"
                ) from exc

    async def _check(self, stop: asyncio.Event) -> None:
        """One check: its answer, waited for until it comes or ``stop``; raises what the driver raises. One still
        unanswered at ``stop`` is left to :meth:`release`: closing its connection now would free the lock (a server
        that is only slow sees the session end) before the stopping owner's last writes."""
        ping = asyncio.ensure_future(self._conn.fetchval("SELECT 1"))
        stopped = asyncio.ensure_future(stop.wait())
        handed = False  # to ``release``
        try:
            await asyncio.wait([ping], timeout=self.check_s)
            if not ping.done():
                log.info(
                    "%s: PostgreSQL does not answer the ownership check; waiting for it (the lock is held for "
                    "as long as the server keeps the session)",
                    self.name,
                )
                await asyncio.wait(
                    [ping, stopped],
                    timeout=max(self.unanswered_s - self.check_s, 0),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not ping.done() and stop.is_set():
                    self._unanswered, handed = ping, True
                    return
                if not ping.done():
                    raise TimeoutError(f"no answer to the ownership check within {self.unanswered_s:g} s")
                if ping.done() and ping.exception() is None:
                    log.info("%s: PostgreSQL answers the ownership check again", self.name)
            if ping.done():
                ping.result()
        finally:
            stopped.cancel()
            if not handed:
                await self._end(ping)
            await asyncio.wait([stopped])

    async def _end(self, ping: asyncio.Future[Any]) -> None:
        """``ping`` ended: unanswered, its connection is closed under it (the module's docstring); nothing of the
        check outlives it, and an answer cut off is not an error of its own."""
        if not ping.done():
            self._conn.terminate()
        await asyncio.wait([ping])
        if not ping.cancelled():
            ping.exception()

    async def release(self) -> None:
        """Give the lock up (a check left waiting at ``stop`` ends with its connection)."""
        ping, self._unanswered = self._unanswered, None
        if ping is not None:
            await self._end(ping)
        await self._close()

    async def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
            self._conn = None
