"""Asynchronous JetStream publishing: many messages in flight, their acknowledgements awaited together.

A publish is a core NATS message with a reply subject under one inbox of ours; the server answers each with a
PubAck (or an API error) on that subject, and the answer completes the publish's future. Errors become the same
``nats.js.errors.APIError`` subclasses that ``JetStreamContext.publish`` raises, so callers classify them with the
helpers of :mod:`allot_bus.adapters.nats`.

Why not ``JetStreamContext.publish_async``: in nats-py 2.16 an error answer raises inside its reply callback instead
of failing the future, so a refused publish would never complete.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api as jsapi
from nats.js import errors as jserrors

__all__ = ["Ack", "AsyncPublisher"]


class Ack(msgspec.Struct, frozen=True):
    """The server's answer to one publish (JetStream's PubAck, or an API error)."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None


_decode_ack = msgspec.json.Decoder(Ack)


class AsyncPublisher:
    def __init__(self, nc: Client) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox()
        self._tokens = itertools.count(1)
        self._pending: dict[str, asyncio.Future[Ack]] = {}
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(f"{self.prefix}.*", cb=self._on_reply)

    async def close(self) -> None:
        self.forget(list(self._pending.values()))
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()

    async def publish(self, subject: str, payload: bytes, *, headers: dict[str, str]) -> asyncio.Future[Ack]:
        token = str(next(self._tokens))
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[token] = future
        try:
            await self.nc.publish(subject, payload, reply=f"{self.prefix}.{token}", headers=headers)
        except BaseException:
            self._pending.pop(token, None)
            raise
        return future

    def forget(self, futures: list[asyncio.Future[Ack]]) -> None:
        """Stop waiting for these publishes (a late answer is then ignored); outcomes already in are dropped."""
        gone = {id(f) for f in futures}
        for token in [t for t, f in self._pending.items() if id(f) in gone]:
            self._pending.pop(token).cancel()
        for future in futures:
            if future.done() and not future.cancelled():
                future.exception()  # read, so that it is not reported as never retrieved

    async def _on_reply(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject.rsplit(".", 1)[-1], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get(jsapi.Header.STATUS.value) == "503":
            future.set_exception(jserrors.NoStreamResponseError())
            return
        try:
            answer = _decode_ack.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            future.set_exception(jserrors.APIError(description=f"unreadable publish acknowledgement: {exc}"))
            return
        if answer.error is not None:
            try:
                jserrors.APIError.from_error(answer.error)  # raises the matching subclass
            except jserrors.APIError as exc:
                future.set_exception(exc)
            return
        future.set_result(answer)
