"""What the event store says when PostgreSQL does not answer: which database (its URL, the password hidden), which
bound ran out and what sets it."""

from __future__ import annotations

import errno

import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.pg_errors import translate
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
