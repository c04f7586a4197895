"""How long the event store waits for PostgreSQL, and what it remembers of an outage.

A server that stops answering with its connections left open (a hung server, a network that drops packets) is only
noticed by waiting: the store gives each read ``read_timeout`` seconds and each append (and each move of a fence)
``write_timeout`` seconds to take a pooled connection, and as many again from then to the last answer (None: no bound).
PostgreSQL's ``lock_timeout`` bounds the wait for the append lock on the server; it cannot bound a wait for packets that
never arrive.

A read or an append that runs out of time is ended by closing its connection under it (:func:`bounded`). The server then
rolls back whatever it had not committed, so an append stays all or nothing; the caller only cannot tell which (a COMMIT
may have been applied and its answer lost). Appending again is safe: events already recorded are skipped by id, and a
checkpoint never moves twice (``AlreadyProcessed``: a consumer rebuilds from the log, where it finds its decisions).
A round trip on a connection of its own (the advisory lock's) is bounded the same way (:func:`answer_within`).

Rejected: asyncpg's per-statement ``timeout`` (``BEGIN`` and ``COMMIT`` take none, and a statement that times out
waits for its cancellation, which asyncpg sends over a new connection through the same silent network);
``asyncio.timeout`` around the transaction (the ``ROLLBACK`` on the way out then waits on the silent connection).

:attr:`Unreachable.reason` is what readiness reads: why the log could not be reached at the last failed round trip,
until one is answered again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any, TypeVar

import asyncpg

__all__ = [
    "DB_READ_TIMEOUT_S",
    "DB_READ_TIMEOUT_VARIABLE",
    "NO_ANSWER",
    "Unreachable",
    "answer_within",
    "bounded",
    "db_read_timeout_seconds",
    "is_unreachable",
]

T = TypeVar("T")

DB_READ_TIMEOUT_VARIABLE = (
    "ALLOT_DB_READ_TIMEOUT"  # what sets a process's read_timeout (and write_timeout from it)
)
DB_READ_TIMEOUT_S = 30.0  # its default

# errors that say PostgreSQL did not answer (no connection, a lost one, no answer in time), not that it refused
NO_ANSWER = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.PostgresConnectionError,
)


def db_read_timeout_seconds(text: str) -> float:
    """The seconds that a value of ``ALLOT_DB_READ_TIMEOUT`` says (0: no bound; blank: the default, 30), for every
    process that reads it (the services, the relay, the commands, the subscribe client). :class:`ValueError` says why
    a value is not one, for the caller to name the variable in its own error (InvalidInput, ValueError)."""
    text = text.strip()
    if not text:
        return DB_READ_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):  # refuses nan too
        raise ValueError(f"must be a number of seconds (0: no bound), not {text!r}")
    return seconds


def is_unreachable(exc: BaseException) -> bool:
    """Whether a driver error says that PostgreSQL did not answer (rather than refusing what it was asked)."""
    return isinstance(exc, NO_ANSWER)


class Unreachable:
    """Why the event log cannot be reached right now (None while it answers): set by a round trip that got no answer,
    cleared by the next answered one."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def answered(self) -> None:
        self.reason = None

    def failed(self, driver_error: BaseException, translated: BaseException) -> None:
        """A round trip failed: unanswered, ``translated`` says why; refused (a value it rejects, a lock it could not
        take in time), the server answered, and an earlier outage is over."""
        self.reason = str(translated) if is_unreachable(driver_error) else None


@contextlib.asynccontextmanager
async def bounded(pool: Any, seconds: float | None) -> AsyncIterator[Any]:
    """A pooled connection (taken within ``seconds``) to use within ``seconds`` (None: no bound): when the time is up
    the connection is closed under whatever waits on it, which then fails with :class:`TimeoutError`."""
    if seconds is None:
        async with pool.acquire() as conn:
            yield conn
        return
    async with pool.acquire(timeout=seconds) as conn:
        with _closed_after(conn, seconds, None):
            yield conn


async def answer_within(conn: Any, seconds: float | None, call: Awaitable[T]) -> T:
    """The answer to ``call``, a round trip on ``conn`` (a connection of its own, not a pooled one), within
    ``seconds`` (None: no bound): when the time is up the connection is closed under it (as :func:`bounded` does),
    and :class:`TimeoutError` ("no answer within N s") is raised."""
    if seconds is None:
        return await call
    with _closed_after(conn, seconds, f"no answer within {seconds:g} s"):
        return await call


@contextlib.contextmanager
def _closed_after(conn: Any, seconds: float, message: str | None) -> Iterator[None]:
    """``conn`` closed under whatever waits on it once ``seconds`` have passed in the block; what fails in it then is
    raised as :class:`TimeoutError` (with ``message``)."""
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        conn.terminate()

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        yield
    except Exception as exc:
        if expired:
            raise (TimeoutError() if message is None else TimeoutError(message)) from exc
        raise
    finally:
        timer.cancel()
