"""What the event store says when PostgreSQL does not answer: which database (its URL, the password hidden), which
bound ran out and what sets it; and asyncpg's reconnection warnings, which are not a second warning of an outage."""

from __future__ import annotations

import errno
import logging

import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.pg_errors import RECONNECTS, translate
from allot_eventstore.postgres import PostgresEventStore

URL = "postgresql://allot:s3cret@db.example:5432/allot"


@pytest.mark.parametrize(
    ("bound", "seconds", "said"),
    [
        ("read", 2.5, "no answer within 2.5 s (read timeout, from ALLOT_DB_READ_TIMEOUT)"),
        ("write", 12.5, "no answer within 12.5 s (write timeout, from ALLOT_DB_READ_TIMEOUT)"),
        ("connect", 10.0, "no answer within 10 s (connect timeout)"),  # a constant, set by no variable
    ],
)
def test_a_bound_that_runs_out_names_the_database_the_bound_and_its_variable(
    bound: str, seconds: float, said: str
) -> None:
    store = PostgresEventStore.connect(
        URL, read_timeout=2.5, write_timeout=12.5, timeouts_from="ALLOT_DB_READ_TIMEOUT"
    )
    error = store._error(TimeoutError(), bound)
    assert isinstance(error, Unavailable)
    assert str(error) == f"PostgreSQL at postgresql://allot:***@db.example:5432/allot unavailable: {said}"
    assert "s3cret" not in str(error)


def test_without_a_variable_the_bound_is_named_alone() -> None:
    store = PostgresEventStore.connect(URL, read_timeout=1.0)
    assert str(store._error(TimeoutError("no answer within 1 s"), "read")) == (
        "PostgreSQL at postgresql://allot:***@db.example:5432/allot unavailable: no answer within 1 s (read timeout)"
    )


def test_a_timeout_of_the_network_says_what_it_is_not_a_bound() -> None:
    """ETIMEDOUT (the kernel gave up on a connection) is a TimeoutError too, but no bound of ours ran out."""
    said = str(translate(TimeoutError(errno.ETIMEDOUT, "Connection timed out"), timeout=10.0, url=URL))
    assert (
        said
        == "PostgreSQL at postgresql://allot:***@db.example:5432/allot unavailable: [Errno 110] Connection timed out"
    )


def test_the_drivers_reconnection_attempts_are_one_debug_line_not_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The outage is warned of once by what it stops (a consumer's, the relay's, the view's reader); asyncpg's own
    warning at each attempt to restore the pool's connection made it two warnings for one outage (was: WARNING)."""
    caplog.set_level(logging.DEBUG, logger="asyncpg.pool")
    RECONNECTS.down = False
    pool_log = logging.getLogger("asyncpg.pool")
    for _ in range(3):
        try:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
        except OSError:
            pool_log.warning("Failed to restore the pool connection floor; retrying", exc_info=True)
    RECONNECTS.down = False
    records = [r for r in caplog.records if r.name == "asyncpg.pool"]
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.DEBUG, None)]
    assert records[0].getMessage() == (
        "PostgreSQL cannot be reached (PostgreSQL unavailable: [Errno 111] Connection refused); reconnecting "
        "quietly until it can"
    )
