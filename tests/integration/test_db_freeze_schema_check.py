"""The schema check a service makes at start (``ensure_current``) against a PostgreSQL that takes the connection and
then stops answering: each query is given the service's read timeout, and the check fails in time saying so, instead
of holding the service's start for ever."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from allot_contracts.errors import Unavailable
from allot_eventstore.migrate import ensure_current
from allot_eventstore.urls import redact
from allot_testing.tcp_proxy import TcpProxy, through

pytestmark = pytest.mark.integration


async def test_a_schema_check_whose_queries_are_never_answered_fails_in_time_saying_so(
    database_url: str, database_proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = asyncpg.connect

    async def connected_then_frozen(*args: Any, **kwargs: Any) -> Any:
        conn = await connect(*args, **kwargs)
        database_proxy.freeze()  # the connection is made; nothing is answered from now on
        return conn

    monkeypatch.setattr(asyncpg, "connect", connected_then_frozen)
    url = through(database_url, database_proxy)
    with pytest.raises(Unavailable) as raised:
        checking = ensure_current(url, read_timeout=1.0, timeouts_from="ALLOT_DB_READ_TIMEOUT")
        await asyncio.wait_for(checking, 10)
    assert str(raised.value) == (
        f"checking the database schema (reading its revision): PostgreSQL at {redact(url)} unavailable: no answer "
        "within 1 s (read timeout, from ALLOT_DB_READ_TIMEOUT)"
    )
    database_proxy.thaw()
    monkeypatch.setattr(asyncpg, "connect", connect)
    await ensure_current(through(database_url, database_proxy), read_timeout=1.0)  # answered again: current
