"""Every HTTP server Allot runs (the services' health and metrics, the relay's, kube-sync's, the admission webhooks,
the web view) is served through :func:`start`, with the same defences against slow, large or hostile clients
(docs/limits.md#http-servers):

- **header timeout**: a connection (after its TLS handshake, itself bounded by the same time) must send a request's
  headers within ``header_timeout`` seconds of its first byte (of connecting, for the first request); else it gets a
  ``408`` and is closed. A client that trickles its headers, or connects and says nothing, does not keep a slot.
- **body timeout**: a body read through :func:`read_body` or :func:`read_json` must arrive whole within
  ``body_timeout`` seconds (``408``): a ``Content-Length`` larger than the body sent, or a body trickled byte by byte,
  is refused instead of held.
- **idle timeout**: a kept-alive connection with no request in ``idle_timeout`` seconds is closed.
- **connections**: at most ``max_connections`` at once; a new one beyond that closes the longest-idle kept-alive
  connection, or, when every connection is busy, is answered ``503`` and closed. A server may hold ``reserve``
  connections more for ``reserved_paths`` (probes and scrapes): a connection taken from the reserve is answered
  only for those paths (``503`` and closed for any other), so a full server still answers ``/healthz``.
- **sizes**: the body (``max_body``, ``413``), the request line and each header (``max_line``), the number of headers
  (``max_headers``); a JSON body nests at most ``max_depth`` levels (``400``, checked before it is parsed).
- every answer carries ``X-Content-Type-Options: nosniff``; refusals are JSON ``{"message": ...}`` naming what was
  wrong.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypedDict

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_runner import BaseSite

__all__ = [
    "HEALTH",
    "Limits",
    "Refusal",
    "application",
    "json_depth",
    "read_body",
    "read_json",
    "refuse",
    "start",
]

NOSNIFF: Final = ("X-Content-Type-Options", "nosniff")


@dataclass(frozen=True)
class Limits:
    """What one HTTP server accepts (docs/limits.md#http-servers)."""

    header_timeout: float = 10.0  # seconds from a request's first byte (or the connection) to its last header
    body_timeout: float = 10.0  # seconds to receive a whole body
    idle_timeout: float = 120.0  # seconds a kept-alive connection may wait for its next request
    max_connections: int = 64
    max_body: int = 1024 * 1024  # bytes
    max_depth: int = 64  # nesting levels of a JSON body
    max_line: int = 8190  # bytes of the request line and of each header
    max_headers: int = 100
    reserve: int = 0  # connections beyond max_connections, answered only for reserved_paths
    reserved_paths: tuple[str, ...] = ()


# /healthz, /readyz, /metrics and /state: GET only, for probes and scrapes
HEALTH: Final = Limits(max_connections=32, max_body=64 * 1024)

LIMITS: Final = web.AppKey("allot_http_limits", Limits)
_GUARDS: Final = web.AppKey("allot_http_guards", dict)


class Refusal(web.HTTPException):
    """A refused request: ``status`` and a JSON ``{"message": reason}``."""

    def __init__(self, status: int, reason: str) -> None:
        self.status_code = status
        super().__init__(
            text=json.dumps({"message": reason}), content_type="application/json", headers=dict([NOSNIFF])
        )
        if status in (408, 413):  # the body is left unread: the connection cannot carry another request
            self.force_close()


def _not_json(constant: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's reader takes them, JSON (and the API server) does not."""
    raise ValueError(f"{constant} is not a JSON value")


def refuse(reason: str, status: int = 400) -> Refusal:
    return Refusal(status, reason)


class _Guard(asyncio.Protocol):
    """One connection: counted, and closed when its headers do not arrive in time (wraps aiohttp's handler)."""

    def __init__(self, site: GuardedSite) -> None:
        self.site = site
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        # "headers" (waiting for a request's headers), "request" (being answered) or "idle" (kept alive)
        self.state = "headers"
        self.reserved = False  # taken from the reserve: answered only for the reserved paths
        self.timer: asyncio.TimerHandle | None = None
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.site.admit(self):
            _answer(transport, 503, "too many connections; try again")
            return
        self.inner = self.site.handler()
        self._arm()
        self.inner.connection_made(transport)

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.site.limits.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if self.state == "headers" and self.transport is not None and not self.transport.is_closing():
            seconds = self.site.limits.header_timeout
            _answer(self.transport, 408, f"the request headers did not arrive within {seconds:g} s")

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.state == "idle":
            self.state = "headers"
            self._arm()
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.site.release(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def started(self) -> None:
        self.state = "request"
        self._disarm()

    def finished(self) -> None:
        self.state = "idle"
        self.idle_since = asyncio.get_running_loop().time()


def _answer(transport: asyncio.Transport, status: int, reason: str) -> None:
    """A whole HTTP/1.1 answer written before any request was read, then the connection closed."""
    body = json.dumps({"message": reason}).encode()
    words = {408: "Request Timeout", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {words}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"{NOSNIFF[0]}: {NOSNIFF[1]}\r\nConnection: close\r\n\r\n"
    )
    transport.write(head.encode() + body)
    transport.close()


class _HandlerSettings(TypedDict):
    """aiohttp's connection-handler settings that carry the server's limits."""

    access_log: Any  # None: no access log (aiohttp annotates a Logger, and reads None as off)
    keepalive_timeout: float
    lingering_time: float
    max_line_size: int
    max_field_size: int
    max_headers: int


def _handler_settings(limits: Limits) -> _HandlerSettings:
    return {
        "access_log": None,
        "keepalive_timeout": limits.idle_timeout,
        "lingering_time": limits.body_timeout,  # a body the handler did not read: at most as long as one it reads
        "max_line_size": limits.max_line,
        "max_field_size": limits.max_line,
        "max_headers": limits.max_headers,
    }


class _Handler(RequestHandler):
    """aiohttp's connection handler, whose own answers (to a request it cannot parse) are JSON and say ``nosniff``
    like every other, and whose refusal of such a request is a one-line log entry, not a traceback: it is the
    client's mistake."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        response = super().handle_error(request, status, exc, message)
        if status < 500:  # the parser's refusal, in the shape of every other: JSON naming what was wrong
            reason = " ".join((message or str(exc or "")).split())
            response = web.json_response(
                {"message": f"not an HTTP request Allot reads: {reason}"}, status=status
            )
            response.force_close()
        response.headers.setdefault(*NOSNIFF)
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        refused = kw.get("exc_info")
        if isinstance(refused, HttpProcessingError):
            self.logger.info("refused a malformed request (%s): %s", refused.code, refused.message.strip())
            return
        super().log_exception(*args, **kw)


class GuardedSite(BaseSite):
    """A TCP site (plain or TLS) whose connections are counted and timed (:class:`_Guard`)."""

    __slots__ = ("_host", "_port", "limits", "guards", "bound_port", "in_reserve")

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        limits: Limits,
        guards: dict[Any, _Guard],
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host, self._port = host, port
        self.limits = limits
        self.guards = guards  # by transport: the middleware finds a request's connection here
        self.bound_port = port
        self.in_reserve = 0  # connections taken from the reserve

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self.bound_port}"

    def handler(self) -> _Handler:
        server = self._runner.server
        assert server is not None
        return _Handler(server, loop=asyncio.get_running_loop(), **_handler_settings(self.limits))

    def admit(self, guard: _Guard) -> bool:
        if len(self.guards) - self.in_reserve >= self.limits.max_connections:
            idle = [g for g in self.guards.values() if g.state == "idle" and not g.reserved]
            if idle:
                oldest = min(idle, key=lambda g: g.idle_since)
                self.release(oldest)
                if oldest.transport is not None:
                    oldest.transport.close()
            elif self.in_reserve < self.limits.reserve and self.limits.reserved_paths:
                guard.reserved = True
                self.in_reserve += 1
            else:
                return False
        self.guards[guard.transport] = guard
        return True

    def release(self, guard: _Guard) -> None:
        if self.guards.get(guard.transport) is guard:
            del self.guards[guard.transport]
            if guard.reserved:
                self.in_reserve -= 1

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Guard(self),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self.limits.header_timeout if self._ssl_context else None,
            backlog=self._backlog,
        )
        if self._server.sockets:
            self.bound_port = self._server.sockets[0].getsockname()[1]


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _routing_refusal(request: web.Request, exc: web.HTTPException) -> Refusal:
    """A path the server does not serve (404), or a method its path does not take (405, with ``Allow``)."""
    if not isinstance(exc, web.HTTPMethodNotAllowed):
        return Refusal(404, f"no such path: {request.path[:200]}")
    allowed = ", ".join(sorted(exc.allowed_methods))
    refusal = Refusal(405, f"{request.method[:20]} is not accepted here; allowed: {allowed}")
    refusal.headers["Allow"] = allowed
    return refusal


def application(limits: Limits = HEALTH) -> web.Application:
    """An aiohttp application with ``limits``: serve it with :func:`start`."""
    guards: dict[Any, _Guard] = {}

    @web.middleware
    async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        guard = guards.get(request.transport)
        if guard is not None and guard.reserved and request.path not in limits.reserved_paths:
            refusal = refuse("too many connections; try again", 503)
            refusal.force_close()
            raise refusal
        if guard is not None:
            guard.started()
        try:
            routing = request.match_info.http_exception  # no route for the path or the method
            if isinstance(routing, web.HTTPNotFound | web.HTTPMethodNotAllowed):
                raise _routing_refusal(request, routing)
            return await handler(request)
        finally:
            if guard is not None:
                guard.finished()

    async def nosniff(_: web.Request, response: web.StreamResponse) -> None:
        response.headers.setdefault(*NOSNIFF)

    app = web.Application(client_max_size=limits.max_body, middlewares=[guarded])
    app[LIMITS] = limits
    app[_GUARDS] = guards
    app.on_response_prepare.append(nosniff)
    return app


async def start(
    app: web.Application, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
) -> web.AppRunner:
    """Serve ``app`` (made by :func:`application`) on ``host:port`` until the runner is cleaned up."""
    limits = app[LIMITS]
    runner = web.AppRunner(app, **_handler_settings(limits))
    await runner.setup()
    try:
        await GuardedSite(runner, host, port, limits, app[_GUARDS], ssl_context).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port ``runner``'s site listens on (the one chosen by the system for port 0)."""
    for site in runner.sites:
        if isinstance(site, GuardedSite):
            return site.bound_port
    raise LookupError("the runner serves no site")


async def read_body(request: web.Request) -> bytes:
    """The request's body, within the application's size limit and body timeout."""
    limits = request.app[LIMITS]
    length = request.content_length
    if length is not None and length > limits.max_body:
        raise refuse(f"the body is {length} bytes; at most {limits.max_body} are accepted", 413)
    try:
        async with asyncio.timeout(limits.body_timeout):
            return await request.read()
    except TimeoutError:
        raise refuse(f"the body did not arrive within {limits.body_timeout:g} s", 408) from None
    except web.HTTPRequestEntityTooLarge:
        raise refuse(f"the body is larger than the {limits.max_body} bytes accepted", 413) from None


_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_ARRAYS: Final = bytes.maketrans(b"{}", b"[]")  # for counting, an object is an array
_STEPS: Final = bytes.maketrans(b"[]", b"\x02\x00")  # opening: +1, closing: -1 (less the 1 per byte)


def json_depth(data: bytes) -> int:
    """How many arrays and objects deep the JSON text ``data`` nests, without parsing it (a text nested 100,000
    levels deep exhausts a parser's recursion). Brackets inside strings do not count; a malformed text is counted as
    far as it goes (the parser then says what is wrong with it)."""
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")  # escapes: a quote left closes or opens a string
    outside = b"".join(plain.split(b'"')[::2])
    brackets = outside.translate(_ARRAYS, _NOT_BRACKETS)
    removed = 0
    for _ in range(4):  # innermost pairs first, cheaply: most bodies are shallow
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        brackets, removed = shorter, removed + 1
    if not brackets:
        return removed
    steps = brackets.translate(_STEPS)
    deepest: int = max(map(operator.sub, itertools.accumulate(steps), itertools.count(1)))
    return removed + deepest


async def read_json(request: web.Request) -> Any:
    """The request's JSON body within the application's limits (size, time, nesting), or a refusal saying which."""
    limits = request.app[LIMITS]
    data = await read_body(request)
    depth = json_depth(data)
    if depth > limits.max_depth:
        raise refuse(f"the body nests {depth} levels deep; at most {limits.max_depth} are accepted")
    try:
        return json.loads(data, parse_constant=_not_json)
    except UnicodeDecodeError:
        raise refuse("the body is not UTF-8 text") from None
    except ValueError as exc:
        raise refuse(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise refuse(f"the body nests deeper than {limits.max_depth} levels") from None
