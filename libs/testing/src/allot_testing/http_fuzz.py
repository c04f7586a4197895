"""Fuzzing an HTTP door over a real socket: the server runs in a thread of its own (its own event loop, as in the
process), the cases are sent by a plain blocking client (``http.client``), and what the server logged is watched for
tracebacks. The strategies make JSON of every type and documents with a wrong type at any one path."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import http.client
import logging
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from hypothesis import strategies as st

from allot_runtime.httpserver import bound_port

__all__ = ["Answer", "Client", "Tracebacks", "json_values", "served", "with_wrong_type"]


@contextlib.contextmanager
def served(start: Callable[[], Awaitable[web.AppRunner]]) -> Iterator[int]:
    """The server ``start`` makes, running in a thread until the block ends: its port."""
    loop = asyncio.new_event_loop()
    ready: list[web.AppRunner] = []
    failed: list[BaseException] = []
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            ready.append(loop.run_until_complete(start()))
        except BaseException as exc:
            failed.append(exc)
        started.set()
        if ready:
            loop.run_forever()
            loop.run_until_complete(ready[0].cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="fuzzed-server", daemon=True)
    thread.start()
    started.wait(60)
    if failed:
        raise failed[0]
    try:
        yield bound_port(ready[0])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


@dataclass
class Client:
    """A kept-alive connection to ``127.0.0.1:port`` (TLS with ``context``), opened again when the server closed it."""

    port: int
    context: ssl.SSLContext | None = None
    timeout: float = 30.0
    connection: http.client.HTTPConnection | None = field(default=None, repr=False)

    def _connect(self) -> http.client.HTTPConnection:
        if self.connection is None:
            if self.context is not None:
                self.connection = http.client.HTTPSConnection(
                    "127.0.0.1", self.port, timeout=self.timeout, context=self.context
                )
            else:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        return self.connection

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        """One request; a stream (``text/event-stream``) is answered with its headers only and closed."""
        for attempt in (1, 2):
            began = time.monotonic()
            connection = self._connect()
            try:
                connection.request(method, path, body=body, headers=headers or {})
                response = connection.getresponse()
                head = {k.lower(): v for k, v in response.getheaders()}
                if head.get("content-type", "").startswith("text/event-stream"):
                    self.close()
                    return Answer(response.status, head, b"", time.monotonic() - began)
                data = response.read()
                if response.will_close:
                    self.close()
                return Answer(response.status, head, data, time.monotonic() - began)
            except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                self.close()  # a kept-alive connection the server closed meanwhile: once more on a new one
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


class Tracebacks(logging.Handler):
    """Every log record with a traceback (or at ERROR) while installed on the root logger."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @contextlib.contextmanager
    def watching(self) -> Iterator[Tracebacks]:
        root = logging.getLogger()
        root.addHandler(self)
        try:
            yield self
        finally:
            root.removeHandler(self)

    def lines(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()} {r.exc_info[1] if r.exc_info else ''}" for r in self.records]


def json_values(leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value (small): null, booleans, numbers, strings, lists and objects of them."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12)
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=leaves,
    )


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _paths(inner, (*prefix, i))


def _replaced(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    copied = copy.deepcopy(doc)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return copied


def with_wrong_type(doc: Any) -> st.SearchStrategy[Any]:
    """``doc`` with the value at one of its paths (any level) replaced by any JSON value, or deleted."""
    paths = list(_paths(doc))
    return st.builds(
        lambda path, value, delete: _replaced(doc, path, value, delete and bool(path)),
        st.sampled_from(paths),
        json_values(),
        st.booleans(),
    )
