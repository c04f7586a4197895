"""A publish's answer from JetStream: a PubAck completes the future, an API error fails it with the matching
``nats.js.errors`` class (what callers classify), an unreadable answer with a plain APIError."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from nats.js import errors as jserrors

from allot_bus.adapters.publish import Ack, AsyncPublisher


def a_publisher() -> AsyncPublisher:
    return AsyncPublisher(SimpleNamespace(new_inbox=lambda: "_INBOX.test"))


async def answer(data: bytes) -> asyncio.Future[Ack]:
    publisher = a_publisher()
    future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
    publisher._pending["7"] = future
    await publisher._on_reply(SimpleNamespace(subject="_INBOX.test.7", headers=None, data=data))
    return future


async def test_a_puback_completes_the_publish():
    future = await answer(b'{"stream":"ALLOT_EVENTS","seq":12,"duplicate":true}')
    assert future.result() == Ack(stream="ALLOT_EVENTS", seq=12, duplicate=True)


@pytest.mark.parametrize(
    ("code", "error"),
    [(503, jserrors.ServiceUnavailableError), (400, jserrors.BadRequestError), (409, jserrors.APIError)],
)
async def test_an_api_error_fails_the_publish_with_its_class(code, error):
    future = await answer(
        b'{"error":{"code":%d,"err_code":10071,"description":"wrong last sequence"}}' % code
    )
    exc = future.exception()
    assert type(exc) is error
    assert (exc.code, exc.err_code, exc.description) == (code, 10071, "wrong last sequence")


async def test_an_unreadable_answer_fails_the_publish():
    future = await answer(b'{"error":{"description":"no code"}}')
    exc = future.exception()
    assert type(exc) is jserrors.APIError
    assert "unreadable publish acknowledgement" in str(exc.description)
