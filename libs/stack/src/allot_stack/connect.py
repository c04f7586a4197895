"""How the CLI finds the event log and the bus: environment first, then a running dev stack.

``ALLOT_DATABASE_URL`` / ``ALLOT_NATS_URL`` (and ``ALLOT_NATS_PREFIX`` / ``ALLOT_NATS_STREAM``) win. Otherwise the
CLI looks for ``.allot/stack.json`` in ``ALLOT_STATE_DIR``, the current directory or any parent (like git finds
``.git``), written by ``allot up``.
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
    from allot_eventstore.protocol import EventStore

STATE_DIR_NAME = ".allot"
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # about half a minute in all

T = TypeVar("T")


def default_state_dir() -> Path:
    env = os.environ.get("ALLOT_STATE_DIR")
    return Path(env).resolve() if env else (Path.cwd() / STATE_DIR_NAME)


def find_state_dir() -> Path | None:
    env = os.environ.get("ALLOT_STATE_DIR")
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
    database_url: str
    nats_url: str | None
    names: BusNames
    source: str


def endpoints(*, need_nats: bool = False) -> Endpoints:
    from allot_bus.names import BusNames

    names = BusNames(
        prefix=os.environ.get("ALLOT_NATS_PREFIX", "allot"),
        stream=os.environ.get("ALLOT_NATS_STREAM", "ALLOT_EVENTS"),
    )
    db = os.environ.get("ALLOT_DATABASE_URL")
    nats_url = os.environ.get("ALLOT_NATS_URL")
    source = "environment"
    if not db or (need_nats and not nats_url):
        stack = read_stack(find_state_dir())
        if stack is None:
            raise UsageError(
                "no event log configured: start the dev stack with `allot up`, or set ALLOT_DATABASE_URL"
                + (" and ALLOT_NATS_URL" if need_nats else "")
            )
        db = db or stack["database_url"]
        nats_url = nats_url or stack.get("nats_url")
        names = BusNames(
            prefix=stack.get("nats_prefix", names.prefix), stream=stack.get("nats_stream", names.stream)
        )
        source = f"dev stack in {stack.get('state_dir')}"
    assert db is not None
    _check_database_url(db, "ALLOT_DATABASE_URL" if source == "environment" else source)
    return Endpoints(database_url=db, nats_url=nats_url, names=names, source=source)


def _check_database_url(url: str, source: str) -> None:
    """A URL that is not PostgreSQL's is refused here, naming where it came from, before any command uses it."""
    from allot_runtime.settings import database_url_problem

    if (problem := database_url_problem(url)) is not None:
        raise UsageError(f"{source}: {problem}")


async def on_log(work: Callable[[EventStore], Awaitable[T]], url: str | None = None) -> T:
    """``work(store)`` on the event log at ``url`` (default: the one :func:`endpoints` finds), closed afterwards."""
    from allot_eventstore.postgres import PostgresEventStore

    store = PostgresEventStore.connect(url or endpoints().database_url)
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
