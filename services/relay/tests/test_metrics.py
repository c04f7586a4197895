"""The relay process's /metrics: its position, lag and publish counters, read from the relay at scrape time."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

from aiohttp import ClientSession

from allot_relay.main import Publishing, _serve


class Store:
    async def head(self) -> tuple[int, bytes]:
        return 120, b""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_relay_reports_what_it_published(monkeypatch: Any) -> None:
    port = free_port()
    monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
    state = Publishing()
    runner = await _serve(state)
    try:
        state.store = Store()
        state.relay = SimpleNamespace(published_position=100, published_total=97, sent=103)
        async with ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    finally:
        await runner.cleanup()
    lines = set(text.splitlines())
    assert "allot_relay_published_position 100.0" in lines
    assert "allot_relay_lag_events 20.0" in lines
    assert "allot_relay_published_events_total 97.0" in lines
    assert "allot_relay_publish_requests_total 103.0" in lines
