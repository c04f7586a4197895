"""PostgreSQL's errors as the event store reports them: which driver errors there are, which of them are worth a retry
(:class:`~allot_contracts.errors.Unavailable`), and which say the log cannot be used at all (a server that cannot be
reached, a database, user or password it refuses)."""

from __future__ import annotations

import asyncpg

from allot_contracts.errors import ConcurrencyConflict, PermanentError, Unavailable

__all__ = ["DRIVER_ERRORS", "connection_refusal", "translate"]

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


def translate(exc: BaseException) -> Exception:
    """Map a driver error to ours (cause chained by the caller)."""
    if isinstance(exc, asyncpg.exceptions.LockNotAvailableError):
        return Unavailable("event log busy: timed out waiting for the append lock", delay=0.5)
    if getattr(exc, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return Unavailable(f"PostgreSQL asked to retry ({getattr(exc, 'sqlstate', '')}): {exc}", delay=0.5)
    if isinstance(exc, asyncpg.exceptions.UniqueViolationError):
        return ConcurrencyConflict(f"concurrent append to the same stream version: {exc}")
    if isinstance(exc, asyncpg.exceptions.UntranslatableCharacterError | asyncpg.exceptions.DataError):
        return PermanentError(f"event payload rejected by PostgreSQL: {exc}")
    if isinstance(exc, OSError | TimeoutError | asyncpg.exceptions.PostgresConnectionError | ConnectionError):
        return Unavailable(f"PostgreSQL unavailable: {exc}")
    if isinstance(exc, asyncpg.exceptions.InterfaceError | asyncpg.exceptions.InternalClientError):
        return Unavailable(f"PostgreSQL connection problem: {exc}")
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


# PostgreSQL's classes of error (SQLSTATE's first two characters) that refuse a connection: 08 connection exception,
# 28 invalid authorization (a wrong user or password), 3D invalid catalog name (no such database)
_REFUSED_CONNECTION = ("08", "28", "3D")


def connection_refusal(exc: BaseException) -> str | None:
    """Why the event log cannot be used, when ``exc`` says so (the server cannot be reached, or it refuses the
    database, user or password); None for any other error."""
    if isinstance(exc, Unavailable):
        return str(exc)
    sqlstate = getattr(exc, "sqlstate", None)
    if (
        isinstance(exc, asyncpg.PostgresError)
        and isinstance(sqlstate, str)
        and sqlstate[:2] in _REFUSED_CONNECTION
    ):
        return f"PostgreSQL refused the connection: {exc}"
    return None
