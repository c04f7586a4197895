"""Continuous pull from a durable JetStream consumer: messages as soon as they are published, in batches of whatever
has arrived.

Why not ``PullSubscription.fetch(n)``: once the stream is idle, a fetch of *n* waits for all *n* messages or for its
timeout, so at a modest rate every hop of the pipeline waits up to the full timeout. Here pull requests stay
outstanding on the server (``batch`` credits in all, refilled when half are used), the server pushes each message to
our inbox the moment it is stored, and :meth:`Puller.next_batch` returns everything that arrived, at most ``batch``,
without waiting for more. That is the "consume" mode of the newer NATS clients, on nats-py's public API: a core
subscription on our own inbox and pull requests published to ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<durable>``.

Credit accounting: the server serves pull requests in order, so a delivered message uses a credit of the oldest
outstanding request, and a ``408 Request Timeout`` status ends the oldest one. A request the server forgot (it
restarted) is dropped locally ``EXPIRY_GRACE_S`` after its expiry. ``409`` statuses that mean the consumer is gone
(deleted, now push based) and ``503`` (no responders: JetStream or the stream is away) make ``next_batch`` raise
:class:`ConsumerGone`; the caller re-creates the consumer and catches up from the log.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import Header

from allot_contracts.errors import Unavailable

__all__ = ["ConsumerGone", "Puller"]

EXPIRY_GRACE_S = 1.0
_GONE = ("consumer deleted", "consumer is push based", "consumer not found", "stream not found")


class ConsumerGone(Unavailable):
    """The durable consumer (or its stream) no longer serves this puller: re-create it and catch up."""


class _Request:
    __slots__ = ("expires_at", "remaining")

    def __init__(self, remaining: int, expires_at: float) -> None:
        self.remaining = remaining
        self.expires_at = expires_at


class Puller:
    """Keeps ``batch`` credits outstanding on a durable pull consumer and hands out what arrives."""

    def __init__(
        self,
        nc: Client,
        *,
        stream: str,
        durable: str,
        batch: int = 500,
        expires: float = 5.0,
        api_prefix: str = "$JS.API",
    ) -> None:
        if batch < 2:
            raise ValueError("batch must be at least 2")
        self.nc = nc
        self.batch = batch
        self.expires = expires
        self.next_subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        self._sub: Any = None
        self._buffer: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._requests: deque[_Request] = deque()
        self._error: ConsumerGone | None = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(self.inbox, cb=self._on_message)

    async def close(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            await sub.unsubscribe()

    def reset(self) -> None:
        """Forget credits and buffered messages (after a re-attach or catch-up: whatever was buffered is either a
        duplicate now or comes again)."""
        self._buffer.clear()
        self._requests.clear()
        self._error = None
        self._arrived.clear()

    @property
    def credits(self) -> int:
        return sum(r.remaining for r in self._requests)

    async def next_batch(self, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages, as soon as at least one has arrived; ``TimeoutError`` if none within
        ``timeout`` seconds; :class:`ConsumerGone` if the server says the consumer is gone."""
        deadline = time.monotonic() + timeout
        while True:
            self._raise_error()
            await self._refill()
            if self._buffer:
                size = min(len(self._buffer), self.batch)
                out = [self._buffer.popleft() for _ in range(size)]
                if not self._buffer:
                    self._arrived.clear()
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=min(remaining, self.expires))
            except TimeoutError:
                continue  # re-checks expired requests, then the deadline

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            self._requests.clear()
            raise error

    async def _refill(self) -> None:
        now = time.monotonic()
        while self._requests and self._requests[0].expires_at + EXPIRY_GRACE_S < now:
            self._requests.popleft()  # the server forgot it (restart): no 408 will come
        want = self.batch - self.credits - len(self._buffer)
        if want < self.batch // 2:
            return
        request = {"batch": want, "expires": int(self.expires * 1_000_000_000)}
        self._requests.append(_Request(want, now + self.expires))
        await self.nc.publish(self.next_subject, json.dumps(request).encode(), reply=self.inbox)

    async def _on_message(self, msg: Msg) -> None:
        status = msg.headers.get(Header.STATUS.value) if msg.headers else None
        if not status:
            if self._requests:
                first = self._requests[0]
                first.remaining -= 1
                if first.remaining <= 0:
                    self._requests.popleft()
            self._buffer.append(msg)
            self._arrived.set()
            return
        if status == "100":  # idle heartbeat or flow control: nothing to do for a pull consumer
            return
        description = str((msg.headers or {}).get(Header.DESCRIPTION, "")).lower()  # keyed by the member
        if status in ("408", "404"):  # the oldest request expired (or found nothing)
            if self._requests:
                self._requests.popleft()
        elif status == "503" or (status == "409" and any(g in description for g in _GONE)):
            self._error = ConsumerGone(
                f"JetStream consumer unavailable: {status} {description or 'no responders'}"
            )
        else:  # 409 leadership change, server shutdown, exceeded limits: ask again
            self._requests.clear()
        self._arrived.set()
