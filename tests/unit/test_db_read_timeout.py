"""``ALLOT_DB_READ_TIMEOUT``: read and checked as the other settings (the services' and the relay's), what readiness says
while the event log cannot be reached, and an outage logged as two lines however many retries it takes."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import asyncpg
import pytest

from allot_bus.outage import Outage
from allot_contracts.errors import InvalidInput
from allot_eventstore.bounds import Unreachable
from allot_runtime.metrics import Metrics
from allot_runtime.service_http import Liveness, not_ready
from allot_runtime.settings import db_read_timeout, load

BASE = {"ALLOT_DATABASE_URL": "postgresql://allot@127.0.0.1:5432/allot"}


def test_the_setting_is_read_defaulted_and_checked() -> None:
    default = load("binder", BASE)
    assert (default.read_timeout, default.write_timeout) == (30.0, 40.0)  # an append: plus its lock's 10 s
    assert db_read_timeout({}) == 30.0
    short = load("binder", {**BASE, "ALLOT_DB_READ_TIMEOUT": "2.5"})
    assert (short.read_timeout, short.write_timeout) == (2.5, 12.5)
    unbounded = load("binder", {**BASE, "ALLOT_DB_READ_TIMEOUT": "0"})
    assert (unbounded.read_timeout, unbounded.write_timeout) == (None, None)
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(InvalidInput, match="ALLOT_DB_READ_TIMEOUT"):
            load("binder", {**BASE, "ALLOT_DB_READ_TIMEOUT": bad})
        with pytest.raises(InvalidInput, match="ALLOT_DB_READ_TIMEOUT"):
            db_read_timeout({"ALLOT_DB_READ_TIMEOUT": bad})


def _live(reason: str | None, *, connected: bool = True, ready: bool = True) -> Liveness:
    unreachable = Unreachable()
    unreachable.reason = reason
    consumer = SimpleNamespace(ready=asyncio.Event())
    if ready:
        consumer.ready.set()
    ctx = SimpleNamespace(
        store=SimpleNamespace(unreachable=unreachable),
        nc=SimpleNamespace(is_connected=connected),
        consumer=consumer,
    )
    return Liveness(service="binder", metrics=Metrics.__new__(Metrics), phase="running", ctx=ctx)  # type: ignore[arg-type]


def test_readiness_names_what_is_missing_the_event_log_first() -> None:
    assert not_ready(
        Liveness(service="binder", metrics=Metrics.__new__(Metrics), phase="connecting to NATS")
    ) == ("connecting to NATS")
    assert not_ready(_live(None)) is None
    no_answer = "PostgreSQL unavailable: no answer within 30 s (timed out)"
    assert not_ready(_live(no_answer, connected=False, ready=False)) == (
        f"the event log cannot be reached: {no_answer}"
    )
    assert not_ready(_live(None, connected=False)) == "NATS is not connected"
    assert not_ready(_live(None, ready=False)) == "catching up with the log"


def test_an_outage_is_a_warning_and_an_end_however_many_retries(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="test.outage")
    outage = Outage("binder", logging.getLogger("test.outage"))
    outage.over()  # no outage: nothing to say
    for _ in range(50):
        outage.failed("the event log is unreachable", TimeoutError("no answer"), retry_in=5.0)
    outage.over()
    levels = [r.levelno for r in caplog.records]
    assert levels.count(logging.WARNING) == 1 and levels.count(logging.INFO) == 1
    assert caplog.records[0].getMessage() == (
        "binder: the event log is unreachable (TimeoutError: no answer); retrying in 5.0s, quietly until it works"
    )
    assert caplog.records[-1].getMessage().startswith("binder: working again after ")
    assert caplog.records[-1].getMessage().endswith("s and 50 failed attempt(s)")


def test_a_step_that_fails_for_another_reason_is_said_each_time(caplog: pytest.LogCaptureFixture) -> None:
    """Only an outage of the log or the bus is folded into one warning; a bug in a step (a TypeError) is said at
    every attempt, with its traceback, and never as "the event log is unreachable"."""
    from types import SimpleNamespace

    from allot_bus.consumer import DurableConsumer
    from allot_contracts.errors import Unavailable

    caplog.set_level(logging.DEBUG)
    consumer = SimpleNamespace(name="binder", _outage=Outage("binder", logging.getLogger("test.outage")))
    for _ in range(3):
        DurableConsumer._step_failed(consumer, "the event log is unreachable", TypeError("a bug"), None)  # type: ignore[arg-type]
    bugs = [r for r in caplog.records if r.levelno == logging.WARNING and "a bug" in r.getMessage()]
    assert len(bugs) == 3 and all(r.exc_info for r in bugs)
    for _ in range(3):
        DurableConsumer._step_failed(consumer, "the event log is unreachable", Unavailable("no answer"), 0.5)  # type: ignore[arg-type]
    outage = [r for r in caplog.records if r.levelno == logging.WARNING and "no answer" in r.getMessage()]
    assert len(outage) == 1


@pytest.mark.parametrize(
    "text", ["", "  ", "0", "2.5", " 12 ", "1e3", "-0", "soon", " soon ", "-1", "nan", "inf"]
)
def test_the_client_and_the_services_read_the_variable_alike(text: str) -> None:
    """One parser (:func:`allot_eventstore.bounds.db_read_timeout_seconds`) for both: the same values taken, the same
    reason for one refused, each in its caller's error (the services' InvalidInput with the variable as its path, the
    client's ValueError naming it). Was: two copies, the client's quoting a padded value as given."""
    from allot_client import AllotClient

    env = {**BASE, "ALLOT_DB_READ_TIMEOUT": text}
    try:
        seconds = db_read_timeout(env)
    except InvalidInput as refused:
        assert [path for path, _ in refused.issues] == ["ALLOT_DB_READ_TIMEOUT"]
        reason = refused.issues[0][1]
        assert reason == f"must be a number of seconds (0: no bound), not {text.strip()!r}"
        with pytest.raises(ValueError) as raised:
            AllotClient.from_env(env)
        assert str(raised.value) == f"ALLOT_DB_READ_TIMEOUT: {reason}"
        return
    assert AllotClient.from_env(env).read_timeout == (seconds or None)


def test_a_refusal_is_an_answer_and_ends_the_reason_an_outage_left() -> None:
    """Readiness says why the log cannot be reached until the server answers again, and a refusal is an answer (was:
    a read refused after an outage, or an append that timed out on the lock, left the outage's reason standing)."""
    unreachable = Unreachable()
    unreachable.failed(
        ConnectionRefusedError("refused"), RuntimeError("PostgreSQL at … unavailable: refused")
    )
    assert unreachable.reason == "PostgreSQL at … unavailable: refused"
    unreachable.failed(asyncpg.exceptions.LockNotAvailableError("lock"), RuntimeError("event log busy"))
    assert unreachable.reason is None
    unreachable.failed(TimeoutError(), RuntimeError("no answer within 1 s"))
    assert unreachable.reason == "no answer within 1 s"
    unreachable.failed(asyncpg.exceptions.DataError("bad value"), RuntimeError("rejected"))
    assert unreachable.reason is None
