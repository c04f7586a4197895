"""PostgreSQL's errors as the event store reports them: which driver errors there are, which of them are worth a retry
(:class:`~allot_contracts.errors.Unavailable`), and which say the log cannot be used at all (a server that cannot be
reached, a database, user or password it refuses); and asyncpg's log of its reconnection attempts, one DEBUG line per
outage (:data:`RECONNECTS`)."""

from __future__ import annotations

import logging

import asyncpg

from allot_contracts.errors import ConcurrencyConflict, PermanentError, Unavailable
from allot_eventstore.urls import redact

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DRIVER_ERRORS",
    "RECONNECTS",
    "LogUnavailable",
    "connection_refusal",
    "in_doubt",
    "translate",
]

CONNECT_TIMEOUT_S = 10.0  # seconds to make a connection

# canceled or timed-out statement, serialization failure, deadlock, operator intervention / shutdown
_RETRYABLE_SQLSTATES = frozenset({"57014", "40001", "40P01", "57P01", "57P02", "57P03", "55P03", "53300"})
# every error the driver raises: InternalClientError is what a connection lost mid-query can leave behind ("cannot
# switch to state 12; another operation is in progress") and is not an InterfaceError
DRIVER_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    TimeoutError,
)


class LogUnavailable(Unavailable):
    """PostgreSQL, which holds the event log, cannot be used just now (not reached, no answer in time, asked to
    retry): worth a retry, and what the command line's hint about the database URL (ALLOT_DATABASE_URL, or the dev
    stack's ``stack.json``) is about (other servers' :class:`~allot_contracts.errors.Unavailable` errors name their own
    settings)."""


def translate(
    exc: BaseException,
    *,
    reading: bool = False,
    timeout: float | None = None,
    url: str | None = None,
    bound: str = "timed out",
) -> Exception:
    """Map a driver error to ours (cause chained by the caller). ``reading``: the statement only read (a value it was
    given that PostgreSQL refuses wrote nothing); ``timeout``: the seconds the statement (or connection) was given, for
    the reason of a timeout, which has no text of its own; ``bound``: which bound that is and what sets it, e.g.
    ``read timeout, from ALLOT_DB_READ_TIMEOUT``; ``url``: the database's, named (redacted) in the reason."""
    server = "PostgreSQL" if url is None else f"PostgreSQL at {redact(url)}"
    # a bound that ran out (the driver's, or :mod:`allot_eventstore.bounds`'): a TimeoutError with no errno (an
    # OSError's ETIMEDOUT is one too, with an errno, and says what happened itself)
    if isinstance(exc, TimeoutError) and exc.errno is None and (timeout is not None or not str(exc)):
        within = f"within {timeout:g} s" if timeout is not None else "in time"
        return LogUnavailable(f"{server} unavailable: no answer {within} ({bound})")
    if isinstance(exc, asyncpg.exceptions.LockNotAvailableError):
        return LogUnavailable("event log busy: timed out waiting for the append lock", delay=0.5)
    if getattr(exc, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return LogUnavailable(f"{server} asked to retry ({getattr(exc, 'sqlstate', '')}): {exc}", delay=0.5)
    if isinstance(exc, asyncpg.exceptions.UniqueViolationError):
        return ConcurrencyConflict(f"concurrent append to the same stream version: {exc}")
    if isinstance(exc, asyncpg.exceptions.UntranslatableCharacterError | asyncpg.exceptions.DataError):
        if reading:
            return PermanentError(
                f"PostgreSQL refused a value the read was given (nothing was written): {exc}"
            )
        return PermanentError(f"event payload rejected by PostgreSQL: {exc}")
    if isinstance(exc, OSError | TimeoutError | asyncpg.exceptions.PostgresConnectionError | ConnectionError):
        return LogUnavailable(f"{server} unavailable: {exc}")
    if isinstance(exc, asyncpg.exceptions.InterfaceError | asyncpg.exceptions.InternalClientError):
        return LogUnavailable(f"{server} connection problem: {exc}")
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


def in_doubt(error: Exception) -> LogUnavailable:
    """``error`` (translated) for an append whose COMMIT was sent and never answered: the server may have committed
    it, and only the log can tell (:mod:`allot_eventstore.bounds`)."""
    return LogUnavailable(
        f"{error}; its COMMIT was sent, so the append may have been recorded "
        "(the same events appended again are skipped, and its checkpoint refused as already processed)"
    )


# PostgreSQL's classes of error (SQLSTATE's first two characters) that refuse a connection: 08 connection exception,
# 28 invalid authorization (a wrong user or password), 3D invalid catalog name (no such database)
_REFUSED_CONNECTION = ("08", "28", "3D")


def connection_refusal(exc: BaseException) -> str | None:
    """Why the event log cannot be used, when ``exc`` says so (the server cannot be reached, or it refuses the
    database, user or password); None for any other error."""
    if isinstance(exc, LogUnavailable):
        return str(exc)
    sqlstate = getattr(exc, "sqlstate", None)
    if (
        isinstance(exc, asyncpg.PostgresError)
        and isinstance(sqlstate, str)
        and sqlstate[:2] in _REFUSED_CONNECTION
    ):
        return f"PostgreSQL refused the connection: {exc}"
    return None


class _QuietReconnects(logging.Filter):
    """asyncpg's "Failed to restore the pool connection floor; retrying" (a warning with a traceback, at every attempt
    while the server is away) as one DEBUG line per outage, with the reason: the attempts after it are dropped until a
    connection is made again (the store's connection set-up clears :attr:`down`). The outage is said by what it stops,
    once as it begins and once as it ends (a consumer's or the relay's :class:`allot_bus.outage.Outage`, the web
    view's reader, a command's error): the driver's warning besides made two for one outage."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Failed to restore the pool connection"):
            return True
        if self.down:
            return False
        self.down = True
        cause = record.exc_info[1] if record.exc_info else None
        reason = str(translate(cause, timeout=CONNECT_TIMEOUT_S)) if cause is not None else "no reason given"
        record.msg, record.args = (
            "PostgreSQL cannot be reached (%s); reconnecting quietly until it can",
            (reason,),
        )
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


# on asyncpg's pool logger from the first import (one per process, as the logger)
RECONNECTS = _QuietReconnects()
logging.getLogger("asyncpg.pool").addFilter(RECONNECTS)
