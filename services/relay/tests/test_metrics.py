"""The relay process's /metrics: its position, lag and publish counters, read from the relay and its wake-ups at
scrape time, never from PostgreSQL: a scrape answers at once while the database does not."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace
from typing import Any

from aiohttp import ClientSession, ClientTimeout

from allot_relay.main import Publishing, _serve


class Unanswered:
    """A log whose database does not answer."""

    async def head(self) -> tuple[int, bytes]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_relay_reports_what_it_published_whether_the_database_answers_or_not(
    monkeypatch: Any,
) -> None:
    port = free_port()
    monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
    state = Publishing()
    runner = await _serve(state)
    try:
        state.store = Unanswered()
        state.relay = SimpleNamespace(published_position=100, published_total=97, sent=103)
        state.listening = SimpleNamespace(head=120)
        async with (
            ClientSession(timeout=ClientTimeout(total=5)) as http,
            http.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            # was: the scrape waited for the log's head (then a 500 once the read gave up)
            assert response.status == 200
            text = await response.text()
    finally:
        await runner.cleanup()
    lines = set(text.splitlines())
    assert "allot_relay_published_position 100.0" in lines
    assert "allot_relay_lag_events 20.0" in lines
    assert "allot_relay_published_events_total 97.0" in lines
    assert "allot_relay_publish_requests_total 103.0" in lines
