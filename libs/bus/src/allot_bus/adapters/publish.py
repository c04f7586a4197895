"""Asynchronous JetStream publishing: many messages in flight, their acknowledgements awaited together.

A publish is a core NATS message with a reply subject under one inbox of ours; the server answers each with a
PubAck (or an API error) on that subject, and the answer completes the publish's future. Errors become the same
``nats.js.errors.APIError`` subclasses that ``JetStreamContext.publish`` raises, so callers classify them with the
helpers of :mod:`allot_bus.adapters.nats`.

Why not ``JetStreamContext.publish_async``: in nats-py 2.16 an error answer raises inside its reply callback instead
of failing the future, so a refused publish would never complete.

Headers: nats-py encodes a message's headers one by one (a regular expression, a strip and a translate per header,
about a microsecond each), which for the relay's dozen headers (its own and the CloudEvents attributes) cost more
than the rest of a publish. While connected, :meth:`AsyncPublisher.publish` writes the header block in one piece and
hands the ``HPUB`` command to the client's outgoing buffer, as ``Client.publish`` does after its checks (the same
checks are made here); a header value with a line break (which would end the block) and a connection that is not up
(the client's reconnect buffering rules) take ``Client.publish`` itself.
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
from nats.protocol import command

__all__ = ["Ack", "AsyncPublisher"]


class AckError(msgspec.Struct, frozen=True):
    """JetStream's API error answering a publish: ``code`` (HTTP-like: 503, 400, ...), ``err_code`` (JetStream's own
    number) and ``description``, the arguments of ``nats.js.errors.APIError``."""

    code: int
    err_code: int | None = None
    description: str | None = None


class Ack(msgspec.Struct, frozen=True):
    """The server's answer to one publish (JetStream's PubAck, or an API error)."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: AckError | None = None


_decode_ack = msgspec.json.Decoder(Ack)


def header_block(headers: dict[str, str]) -> bytes | None:
    """The NATS header block of ``headers`` (``NATS/1.0``, one ``key: value`` line each, a blank line), or ``None``
    when a key or value holds a line break or a key is not a plain token (then the client's own encoding decides)."""
    lines = "".join(f"{key}: {value}\r\n" for key, value in headers.items())
    if lines.count("\n") != len(headers) or lines.count("\r") != len(headers) or ":" in "".join(headers):
        return None
    return f"NATS/1.0\r\n{lines}\r\n".encode()


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
            await self._send(subject, payload, f"{self.prefix}.{token}", headers)
        except BaseException:
            self._pending.pop(token, None)
            raise
        return future

    async def _send(self, subject: str, payload: bytes, reply: str, headers: dict[str, str]) -> None:
        nc = self.nc
        block = header_block(headers) if nc.is_connected and len(payload) <= nc.max_payload else None
        if block is None or not subject or " " in subject:
            await nc.publish(subject, payload, reply=reply, headers=headers)
            return
        nc.stats["out_msgs"] += 1
        nc.stats["out_bytes"] += len(payload)
        await nc._send_command(command.hpub_cmd(subject, reply, block, payload))
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()

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
                jserrors.APIError.from_error(
                    msgspec.structs.asdict(answer.error)
                )  # raises the matching subclass
            except jserrors.APIError as exc:
                future.set_exception(exc)
            return
        future.set_result(answer)
