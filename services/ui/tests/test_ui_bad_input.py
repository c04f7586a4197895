"""The web view facing a careless or hostile client: every query parameter is checked (400 naming the parameter and
the reason, never a 500 or a silent default), every answer says ``nosniff``, and the real server closes connections
whose headers do not come (the same limits as every Allot HTTP server)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from allot_contracts.errors import Unavailable
from allot_runtime.httpserver import bound_port
from allot_testing import demo
from allot_ui.model import UiModel
from allot_ui.server import LIMITS, make_app, serve


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return demo.demo_store(tmp_path_factory.mktemp("ui"))


REFUSED = [
    ("/api/stream?after=abc", "query.after: must be a non-negative integer (got 'abc')"),
    ("/api/stream?after=-1", "query.after: must be a non-negative integer (got '-1')"),
    ("/api/stream?after=1&after=2", "query.after: given 2 times; at most once"),
    ("/api/stream?since=1", "query.since: unknown parameter (accepted: after)"),
    ("/pods?limit=x", "query.limit: must be an integer from 1 to 10000 (got 'x')"),
    ("/pods?limit=0", "query.limit: must be an integer from 1 to 10000 (got '0')"),
    ("/pods?phase=Running", "query.phase: must be one of Pending, Waiting, Placed"),
    ("/pods?q=" + "x" * 300, "query.q: at most 256 characters (got 300)"),
    ("/pods?node=a%00b", "query.node: must not contain control characters"),
    ("/?x=1", "query.x: unknown parameter (this page takes none)"),
    ("/api/summary?x", "query.x: unknown parameter (this page takes none)"),
    # numbers too long to read (Python's own message was the reason)
    (
        "/api/stream?after=" + "9" * 5000,
        "query.after: must be a log position, at most 9223372036854775807 (got 5000",
    ),
    (
        "/api/stream?after=9223372036854775808",
        "query.after: must be a log position, at most 9223372036854775807",
    ),
    ("/pods?limit=" + "9" * 5000, "query.limit: must be an integer from 1 to 10000 (got '9999"),
    # windows the log cannot give (were a 500, or a 200 with an error paragraph)
    ("/usage?since=1000000d", "query.since: '1000000d' is outside the times a report can show"),
    ("/usage?until=1000000d", "query.until: '1000000d' is outside the times a report can show"),
    (
        "/usage?since=0001-01-01T00:00:00%2B14:00",
        "query.since: '0001-01-01T00:00:00+14:00' is outside the times",
    ),
    (
        "/usage?since=" + "9" * 20 + "s",
        "query.since: '" + "9" * 20 + "s' is longer than any window (at most 9999 years)",
    ),
    (
        "/usage?since=9999-12-31T23:59:59Z",
        "query.since: '9999-12-31T23:59:59Z' is after the window's end (the last",
    ),
    (
        "/usage?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
        "query.until: the window ends before it starts (until is earlier than since)",
    ),
    # a pod's path that no pod can have, refused before the log is read (a NUL was a 500 on PostgreSQL)
    ("/pods/default/x%00", "path.name: 'x\\x00' is not a valid pod name (an RFC 1123 subdomain"),
    ("/pods/Default/x", "path.namespace: 'Default' is not a valid namespace (an RFC 1123 label"),
    ("/pods/default/" + "x" * 300, "path.name: '" + "x" * 64 + "' is not a valid pod name"),
]


async def test_every_query_parameter_is_checked_and_refused_with_a_reason(store: Any) -> None:
    async with TestClient(TestServer(make_app(UiModel(store)))) as client:
        for path, reason in REFUSED:
            response = await client.get(path)
            assert response.status == 400, path
            assert (await response.json())["message"].startswith(reason), path
            assert response.headers["X-Content-Type-Options"] == "nosniff"


async def test_valid_parameters_still_work_and_every_answer_says_nosniff(store: Any) -> None:
    async with TestClient(TestServer(make_app(UiModel(store)))) as client:
        for path in (
            "/",
            "/pods?phase=&namespace=&node=&q=",
            "/pods?phase=Bound&limit=2",
            "/api/summary",
            "/usage?since=&until=",
            "/nope",
        ):
            response = await client.get(path)
            assert response.status in (200, 404), path
            assert response.headers["X-Content-Type-Options"] == "nosniff", path
        for after in ("0", ""):  # empty: as when absent (was refused with int()'s message)
            response = await client.get(f"/api/stream?after={after}")
            assert response.status == 200
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert (await response.content.readuntil(b"\n\n")).startswith(b"id: 1\n")
            response.close()


async def test_head_of_the_live_stream_is_its_headers_alone(store: Any) -> None:
    async with TestClient(TestServer(make_app(UiModel(store), poll=0.05))) as client:
        response = await asyncio.wait_for(client.head("/api/stream?after=0"), 20)  # was: events, never ending
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert await asyncio.wait_for(response.read(), 20) == b""


async def test_live_streams_have_a_cap_of_their_own(store: Any) -> None:
    async with TestClient(TestServer(make_app(UiModel(store), poll=0.05, max_streams=2))) as client:
        first = await client.get("/api/stream?after=0")
        second = await client.get("/api/stream?after=0")
        assert first.status == second.status == 200
        refused = await client.get("/api/stream?after=0")
        assert refused.status == 503
        assert (await refused.json())["message"] == "too many live streams open (at most 2); try again later"
        assert refused.headers["Retry-After"] == "10"
        assert (await client.get("/pods")).status == 200  # pages are still served
        first.close()
        for _ in range(200):  # the closed stream's slot comes back once its handler sees the reader gone
            again = await client.get("/api/stream?after=0")
            if again.status == 200:
                break
            await asyncio.sleep(0.05)
        assert again.status == 200
        again.close()
        second.close()


async def test_probes_and_scrapes_are_answered_when_every_connection_is_a_stream(store: Any) -> None:
    limits = replace(LIMITS, max_connections=2, reserve=2)
    runner = await serve(UiModel(store), "127.0.0.1", 0, poll=0.05, limits=limits)
    port = bound_port(runner)
    opened = []
    try:
        for _ in range(2):  # every connection taken by a live stream
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /api/stream?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)).startswith(b"HTTP/1.1 200")
            opened.append(writer)

        async def answer(path: str) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            try:
                return await asyncio.wait_for(reader.read(), 20)
            finally:
                writer.close()

        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await answer(path)).startswith(b"HTTP/1.1 200"), path  # was: 503 too many connections
        page = await answer("/pods")
        assert page.startswith(b"HTTP/1.1 503") and b"too many connections; try again" in page
    finally:
        for writer in opened:
            writer.close()
        await runner.cleanup()


async def test_the_served_view_closes_connections_whose_headers_do_not_come(store: Any) -> None:
    runner = await serve(UiModel(store), "127.0.0.1", 0, poll=0.5, header_timeout=0.5)
    try:
        began = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", bound_port(runner))
        writer.write(b"GET /pods HTTP/1.1\r\n")
        answer = await asyncio.wait_for(reader.read(), 20)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408")
        assert time.monotonic() - began < 0.5 + 4.0  # room for a loaded machine
        # a live stream outlasts the header timeout: its headers came, it is being answered
        reader, writer = await asyncio.open_connection("127.0.0.1", bound_port(runner))
        writer.write(b"GET /api/stream?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.readuntil(b"\n\n"), 20)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(2.0)
        received = b""
        with contextlib.suppress(TimeoutError):
            received = await asyncio.wait_for(reader.read(1 << 20), 0.5)
        assert b"HTTP/1.1 408" not in received and not reader.at_eof()
        writer.close()
    finally:
        await runner.cleanup()


async def test_a_stream_whose_reader_goes_away_ends_without_a_traceback(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    model = UiModel(store)
    runner = await serve(model, "127.0.0.1", 0, poll=0.05)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", bound_port(runner))
        writer.write(b"GET /api/stream?after=0 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)).startswith(b"HTTP/1.1 200")
        writer.close()
        await asyncio.sleep(0.5)
        newest = model.recent[-1]
        for step in range(
            1, 4
        ):  # events recorded after the reader left: the stream writes to a closed connection
            model.recent.append(msgspec.structs.replace(newest, position=newest.position + step))
            await asyncio.sleep(0.3)
    finally:
        await runner.cleanup()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


class _Flaky:
    """A store that, while ``down``, refuses every call as PostgreSQL's adapter does when the server is gone."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.down = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise Unavailable("PostgreSQL unavailable: [Errno 111] Connect call failed")
            return attr(*args, **kwargs)

        return call


async def test_a_log_that_cannot_be_read_is_a_503_and_the_view_goes_on_reading_once_it_can(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = _Flaky(store)
    caplog.set_level(logging.INFO, logger="allot.ui")
    async with TestClient(TestServer(make_app(UiModel(flaky), poll=0.02))) as client:
        assert (await client.get("/pods/default/nobody")).status == 404  # read from the log: no such pod
        flaky.down = True
        response = await client.get("/pods/default/nobody")
        assert response.status == 503  # was a 500
        assert (await response.json())["message"].startswith(
            "the event log cannot be read right now: PostgreSQL"
        )
        assert (await client.get("/pods")).status == 200  # pages folded before are still served
        await asyncio.sleep(0.2)  # several reads of the log fail meanwhile
        flaky.down = False
        for _ in range(100):
            if any("can be read again" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
        messages = [r.getMessage() for r in caplog.records if r.name == "allot.ui"]
        # the reading task outlived the outage (it used to end at the first failed read), said so once each way
        assert sum("cannot be read" in m for m in messages) == 1, messages
        assert sum("can be read again" in m for m in messages) == 1, messages
        assert (await client.get("/pods/default/nobody")).status == 404
