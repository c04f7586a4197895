"""How the CLI finds the event log and the bus: environment first, then a running dev stack.

``ALLOT_DATABASE_URL`` / ``ALLOT_NATS_URL`` (and ``ALLOT_NATS_PREFIX`` / ``ALLOT_NATS_STREAM``) win. Otherwise the
CLI looks for ``.allot/stack.json`` in ``ALLOT_STATE_DIR``, the current directory or any parent (like git finds
``.git``), written by ``allot up``. Each URL keeps where it came from (the variable, or the ``stack.json`` read), so
that a server that cannot be used is reported with the right thing to check (:func:`origin`, :func:`check_hint`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from allot_intake.errors import UsageError
from allot_stack.stackfile import StackFile, is_stack_file

if TYPE_CHECKING:  # imported by endpoints(): reading stack.json (allot status) loads no contracts
    from allot_bus.names import BusNames
    from allot_eventstore.postgres import PostgresEventStore
    from allot_eventstore.protocol import EventStore

STATE_DIR_NAME = ".allot"
STATE_DIR_VARIABLE = "ALLOT_STATE_DIR"
DATABASE_VARIABLE = "ALLOT_DATABASE_URL"
NATS_VARIABLE = "ALLOT_NATS_URL"
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # about half a minute in all

T = TypeVar("T")


def default_state_dir() -> Path:
    env = os.environ.get(STATE_DIR_VARIABLE)
    return Path(env).resolve() if env else (Path.cwd() / STATE_DIR_NAME)


def find_state_dir() -> Path | None:
    env = os.environ.get(STATE_DIR_VARIABLE)
    if env:
        return Path(env).resolve()
    for directory in [Path.cwd(), *Path.cwd().parents]:
        candidate = directory / STATE_DIR_NAME
        if (candidate / "stack.json").exists():
            return candidate
    return None


def read_stack(state_dir: Path | None) -> StackFile | None:
    """The ``stack.json`` of the stack in ``state_dir``; None when there is none (or it is not one)."""
    if state_dir is None:
        return None
    path = state_dir / "stack.json"
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if is_stack_file(found) else None


@dataclass(frozen=True)
class Endpoints:
    """The event log's and the bus's URLs, each with where it came from: the variable (``ALLOT_DATABASE_URL``,
    ``ALLOT_NATS_URL``) or the path of the dev stack's ``stack.json`` it was read from."""

    database_url: str
    nats_url: str | None
    names: BusNames
    database_from: str = DATABASE_VARIABLE
    nats_from: str = NATS_VARIABLE


def endpoints(*, need_nats: bool = False) -> Endpoints:
    from allot_bus.names import BusNames

    names = BusNames(
        prefix=os.environ.get("ALLOT_NATS_PREFIX", "allot"),
        stream=os.environ.get("ALLOT_NATS_STREAM", "ALLOT_EVENTS"),
    )
    db = os.environ.get(DATABASE_VARIABLE)
    nats_url = os.environ.get(NATS_VARIABLE)
    database_from, nats_from = DATABASE_VARIABLE, NATS_VARIABLE
    if not db or (need_nats and not nats_url):
        state_dir = find_state_dir()
        stack = read_stack(state_dir)
        if stack is None or state_dir is None:
            raise UsageError(
                f"no event log configured: start the dev stack with `allot up`, or set {DATABASE_VARIABLE}"
                + (f" and {NATS_VARIABLE}" if need_nats else "")
            )
        stack_json = str(state_dir / "stack.json")
        if not db:
            db, database_from = stack["database_url"], stack_json
        if not nats_url:
            nats_url, nats_from = stack.get("nats_url"), stack_json
        names = BusNames(
            prefix=stack.get("nats_prefix", names.prefix), stream=stack.get("nats_stream", names.stream)
        )
    _check_database_url(db, database_from)
    return Endpoints(
        database_url=db, nats_url=nats_url, names=names, database_from=database_from, nats_from=nats_from
    )


def origin(variable: str) -> str:
    """Where :func:`endpoints` takes the URL of ``variable`` (``ALLOT_DATABASE_URL`` or ``ALLOT_NATS_URL``) from: the
    variable when it is set, else the ``stack.json`` of the dev stack it finds, else (neither) the variable. Asked
    again when a command failed, to name in the hint: the environment and the directories it looks in are those the
    command's own :func:`endpoints` read."""
    if os.environ.get(variable):
        return variable
    state_dir = find_state_dir()
    if state_dir is not None and read_stack(state_dir) is not None:
        return str(state_dir / "stack.json")
    return variable


def check_hint(origin: str) -> str:
    """What to check when the server at a URL from ``origin`` (:func:`origin`) cannot be used: the variable, or for a
    URL read from a dev stack's ``stack.json``, that file and the stack's status."""
    if origin in (DATABASE_VARIABLE, NATS_VARIABLE):
        return f"check {origin}"
    return f"the URL is from {origin}: check the dev stack with `allot status`"


def _check_database_url(url: str, source: str) -> None:
    """A URL that is not PostgreSQL's is refused here, naming where it came from, before any command uses it."""
    from allot_runtime.settings import database_url_problem

    if (problem := database_url_problem(url)) is not None:
        raise UsageError(f"{source}: {problem}")


def db_bounds() -> tuple[float | None, float | None]:
    """A command's ``(read_timeout, write_timeout)`` for the event log, as a service's: from ``ALLOT_DB_READ_TIMEOUT``
    (default 30 s; 0: no bound), refused naming the variable when it is not a number of seconds."""
    from allot_runtime import settings

    return settings.db_bounds(settings.db_read_timeout(os.environ))


def bounded_store(url: str, *, pool_size: int = 5) -> PostgresEventStore:
    """The event log at ``url`` for a command, bounded as a service's is: each read is given ``ALLOT_DB_READ_TIMEOUT``
    seconds (0: no bound) and an append that plus its lock's wait, so a database that stops answering ends the command
    in time with :class:`~allot_eventstore.pg_errors.LogUnavailable` saying so (the database's redacted URL, the bound
    and the variable), instead of holding it for ever. A value of the variable that is not a number of seconds is
    refused naming it."""
    from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
    from allot_eventstore.postgres import PostgresEventStore

    read_timeout, write_timeout = db_bounds()
    return PostgresEventStore.connect(
        url,
        pool_size=pool_size,
        read_timeout=read_timeout,
        write_timeout=write_timeout,
        timeouts_from=DB_READ_TIMEOUT_VARIABLE,
    )


async def on_log(work: Callable[[EventStore], Awaitable[T]], url: str | None = None) -> T:
    """``work(store)`` on the event log at ``url`` (default: the one :func:`endpoints` finds), closed afterwards; the
    store is bounded (:func:`bounded_store`)."""
    store = bounded_store(url or endpoints().database_url)
    try:
        return await work(store)
    finally:
        await store.close()


async def retrying(action: Callable[[], Awaitable[T]], *, what: str, retried: list[str] | None = None) -> T:
    """Run ``action``, retrying transient failures (the database restarting, a lost connection, a connection left in
    a broken state: every driver error the store reports as :class:`TransientError`) with backoff; each retry is
    noted in ``retried``."""
    import asyncio

    from allot_contracts.errors import TransientError

    for attempt, delay in enumerate((*RETRY_DELAYS, None), start=1):
        try:
            return await action()
        except TransientError as exc:
            if delay is None:
                raise
            if retried is not None:
                retried.append(what)
            print(
                f"allot: {what}: {exc}; retrying in {delay:g}s (attempt {attempt} of {len(RETRY_DELAYS)})",
                file=sys.stderr,
            )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
