"""The defences every Allot HTTP server shares (allot_runtime.httpserver), over real sockets with a raw client: slow
headers and bodies are answered 408 within the timeout, connections beyond the limit do not pile up, bodies too large
or too deep are refused with a reason, and every answer says ``nosniff``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from allot_runtime.httpserver import Limits, application, bound_port, json_depth, read_json, start

# Bounds on how long an answer takes leave room for a loaded machine; a connection held would take the client's wait.
SLACK = 4.0
WAIT = 20.0
LIMITS = Limits(
    header_timeout=0.5, body_timeout=0.5, idle_timeout=5.0, max_connections=3, max_body=1000, max_depth=5
)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = application(LIMITS)

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"got": await read_json(request)})

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app.add_routes([web.post("/echo", echo), web.get("/ok", ok), web.get("/broken", broken)])
    runner = await start(app, "127.0.0.1", 0)
    yield bound_port(runner)
    await runner.cleanup()


async def exchange(port: int, *parts: bytes, pause: float = 0.0) -> tuple[bytes, float]:
    """Send ``parts`` (``pause`` seconds apart) and read until the server closes: (what it said, seconds taken)."""
    began = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        with contextlib.suppress(ConnectionError):
            for part in parts:
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(pause)

    sending = asyncio.create_task(send())
    try:
        answer = await asyncio.wait_for(reader.read(), WAIT)
    except ConnectionResetError:
        answer = b""
    finally:
        sending.cancel()
        writer.close()
    return answer, time.monotonic() - began


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")) else 0


def body(answer: bytes) -> dict[str, str]:
    return dict(json.loads(answer.split(b"\r\n\r\n", 1)[1]))


async def test_headers_that_do_not_arrive_in_time_get_a_408(port: int) -> None:
    answer, took = await exchange(port, b"GET /ok HTTP/1.1\r\n", b"Host: x\r\n", b"X-A: 1\r\n", pause=0.3)
    assert status(answer) == 408 and "headers" in body(answer)["message"]
    assert took < 0.9 + SLACK
    answer, took = await exchange(port)  # connects and says nothing
    assert status(answer) == 408 and took < 0.5 + SLACK


async def test_a_body_shorter_than_its_length_or_trickled_gets_a_408(port: int) -> None:
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    answer, took = await exchange(port, head + b'{"a": 1')
    assert status(answer) == 408 and "body" in body(answer)["message"]
    assert took < 1.0 + SLACK
    answer, took = await exchange(port, head, *[b" "] * 20, pause=0.1)
    assert status(answer) == 408 and took < 1.0 + SLACK


async def test_bodies_too_large_too_deep_or_not_json_are_refused_with_a_reason(port: int) -> None:
    def post(data: bytes) -> bytes:
        return (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
            + str(len(data)).encode()
            + b"\r\n\r\n"
            + data
        )

    answer, _ = await exchange(port, post(b"[" * 2000))
    assert status(answer) == 413 and "1000" in body(answer)["message"]
    answer, _ = await exchange(port, post(b"[" * 6 + b"]" * 6))
    assert (
        status(answer) == 400
        and body(answer)["message"] == "the body nests 6 levels deep; at most 5 are accepted"
    )
    answer, _ = await exchange(port, post(b'{"a": '))
    assert status(answer) == 400 and body(answer)["message"].startswith("the body is not JSON")
    answer, _ = await exchange(port, post(b'"\xff"'))
    assert status(answer) == 400 and "UTF-8" in body(answer)["message"]
    answer, _ = await exchange(port, post(b'[[[["]]]]]]]]"]]]]'))
    assert status(answer) == 200 and b'"got"' in answer


async def test_connections_beyond_the_limit_do_not_pile_up(port: int) -> None:
    silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    answer, took = await exchange(port, b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status(answer) == 503 and took < SLACK  # every slot is waiting for headers: refused at once
    for reader, _ in silent:  # and those are closed when their headers do not come
        assert status(await asyncio.wait_for(reader.read(), WAIT)) == 408
    for _, writer in silent:
        writer.close()
    idle = []
    for _ in range(3):  # kept alive after an answer: idle
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")
        idle.append((reader, writer))
    answer, _ = await exchange(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status(answer) == 200  # the longest-idle connection made room
    assert await asyncio.wait_for(idle[0][0].read(), WAIT) == b""
    for _, writer in idle:
        writer.close()


async def test_every_answer_says_nosniff(port: int, caplog: pytest.LogCaptureFixture) -> None:
    for request in (b"GET /ok", b"GET /missing", b"GET /broken", b"POST /ok"):
        answer, _ = await exchange(port, request + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"\r\nX-Content-Type-Options: nosniff\r\n" in answer, answer
    caplog.clear()
    for garbage in (b"GARBAGE\r\n\r\n", b"GET /ok HTTP/1.1\r\nBad Header\r\n\r\n", b"GET /" + b"a" * 9000):
        answer, _ = await exchange(port, garbage + b" HTTP/1.1\r\n\r\n")
        assert status(answer) == 400 and b"\r\nX-Content-Type-Options: nosniff\r\n" in answer, answer
        assert body(answer)["message"].startswith("not an HTTP request Allot reads: "), answer
    assert not [r for r in caplog.records if r.exc_info], (
        "a malformed request is the client's mistake: no traceback"
    )


async def test_a_path_or_method_not_served_is_refused_in_json_like_every_other_refusal(port: int) -> None:
    answer, _ = await exchange(port, b"GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (status(answer), body(answer)) == (404, {"message": "no such path: /missing"})
    assert b"\r\nContent-Type: application/json" in answer
    answer, _ = await exchange(port, b"DELETE /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (status(answer), body(answer)) == (405, {"message": "DELETE is not accepted here; allowed: POST"})
    assert b"\r\nAllow: POST\r\n" in answer


def test_the_depth_of_a_json_text_is_counted_without_parsing_it() -> None:
    assert json_depth(b"1") == 0
    assert json_depth(b"[" * 100_000 + b"]" * 100_000) == 100_000
    assert json_depth(b'[[1], [2, [3]], {"a": [[[]]]}]') == 5
    assert json_depth(b'["[[[\\"[[", {"b": "\\\\"}]') == 2  # brackets and escaped quotes inside strings
