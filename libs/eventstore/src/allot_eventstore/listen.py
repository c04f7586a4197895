"""Wake-ups when the log grows: LISTEN on a connection of its own, checked and replaced when it is lost.

Every append ends with ``pg_notify(channel, head)`` (:mod:`allot_eventstore.postgres`), delivered at commit to every
session LISTENing. A :class:`Listener` keeps one such session: it sets :attr:`Listener.woken` on each notification and
keeps :attr:`Listener.head`, the newest head position it has seen, for figures that must not wait on PostgreSQL (the
relay's lag on ``/metrics``).

A LISTENing session only receives, so nothing tells it that it is gone: a server that restarted or closed it (an
administrator, an idle timeout) leaves a closed connection, and a server that stops answering (a hung server, a network
that drops packets) leaves one that waits for ever. Every ``check_s`` seconds the listener therefore reads the head
over its connection, within ``answer_s`` (:func:`~allot_eventstore.bounds.answer_within`; None: no bound), and replaces
a connection that is closed or does not answer; meanwhile the caller goes on by its own polling (the relay's every
second). Each new session sets :attr:`Listener.woken` once it listens, for what was appended while none did. The loss
is logged once (INFO: the caller says what the outage stops, e.g. the relay's ``cannot relay the log``) and so is the
return.

Rejected: TCP keepalives (the kernel's defaults notice a dead peer after two hours; tuned per socket they still say
nothing of a server that hangs with its sockets open) and asyncpg's termination listener alone (it fires for a
connection closed under it, never for a silent one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import asyncpg

from allot_eventstore.bounds import answer_within
from allot_eventstore.pg_errors import CONNECT_TIMEOUT_S, DRIVER_ERRORS, LogUnavailable

__all__ = ["CHECK_S", "Listener"]

log = logging.getLogger("allot.listen")
T = TypeVar("T")

CHECK_S = 5.0  # seconds between two checks of the LISTENing connection
_HEAD = "SELECT position FROM log_head WHERE id = 1"


class Listener:
    """LISTEN on ``channel`` at ``url`` (a plain PostgreSQL URL) for as long as the ``async with`` block runs; entering
    fails with :class:`LogUnavailable` when the first connection cannot be made."""

    def __init__(
        self,
        url: str,
        channel: str,
        *,
        check_s: float = CHECK_S,
        answer_s: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.url, self.channel = url, channel
        self.check_s, self.answer_s = check_s, answer_s  # between two checks; for an answer (None: no bound)
        self.connect_timeout = connect_timeout
        self.woken = asyncio.Event()  # set by every notification and every new session; the caller clears it
        self.head = 0  # the newest head position seen
        self._conn: Any = None
        self._lost_at: float | None = None  # monotonic time the session was lost, while it is
        self._keeping: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def __aenter__(self) -> Listener:
        try:
            await self._connect()
        except DRIVER_ERRORS as exc:
            raise LogUnavailable(f"cannot LISTEN for new events: {exc}") from exc
        self._keeping = asyncio.create_task(self._keep(), name=f"listen-{self.channel}")
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._keeping is not None:
            self._keeping.cancel()
            await asyncio.gather(self._keeping, return_exceptions=True)
        conn = self._conn
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
        self._close()

    async def _answer(self, conn: Any, call: Awaitable[T]) -> T:
        """``call``'s answer, a round trip on ``conn``, within ``answer_s``."""
        return await answer_within(conn, self.answer_s, call)

    async def _connect(self) -> None:
        """A new session, LISTENing, its head read; raises what the driver raises."""
        conn = await asyncpg.connect(self.url, timeout=self.connect_timeout)
        try:
            await self._answer(conn, conn.add_listener(self.channel, self._notified))
            head = await self._answer(conn, conn.fetchval(_HEAD))
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        self._saw(head)
        self.woken.set()  # whatever was appended while no session listened
        if self._lost_at is not None:
            log.info("listening for new events again after %.0f s", time.monotonic() - self._lost_at)
            self._lost_at = None

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.check_s)
            try:
                await self._check()
            except DRIVER_ERRORS as exc:
                self._lost(exc)

    async def _check(self) -> None:
        """One check: the session answers (its head is read), else it is replaced."""
        conn = self._conn
        if conn is not None and not conn.is_closed():
            try:
                self._saw(await self._answer(conn, conn.fetchval(_HEAD)))
                return
            except DRIVER_ERRORS as exc:
                self._lost(exc)
        elif self._lost_at is None:
            self._lost(ConnectionError("the server closed it"))
        await self._connect()

    def _lost(self, exc: BaseException) -> None:
        self._close()
        if self._lost_at is None:
            self._lost_at = time.monotonic()
            log.info(
                "not listening for new events (%s: %s); polling until a new session listens",
                type(exc).__name__,
                exc,
            )

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self._saw(int(payload))
        self.woken.set()

    def _saw(self, head: Any) -> None:
        if head is not None and int(head) > self.head:
            self.head = int(head)
