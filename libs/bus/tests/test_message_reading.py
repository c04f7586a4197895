"""What a delivered message says of itself, read faster than nats-py reads it and to the same result: the header
reader gives what nats-py's own gives, for the relay's headers and for any block of bytes, and a live connection
reads headers through it; the stream sequence and delivery count come off the reply subject as nats-py reads them."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.aio.client import Client

from allot_bus.adapters.nats import HeaderClient, connect

RELAY_HEADERS = {
    "Nats-Msg-Id": "0193a6d2-7c1e-7f3a-9b2c-1a2b3c4d5e6f",
    "allot-position": "123456",
    "allot-type": "pod.submitted",
    "ce-specversion": "1.0",
    "ce-source": "/allot/relay",
    "ce-time": "2026-11-28T11:00:00.123456Z",
    "ce-subject": "pod/default/p-123",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
}


def block(headers: dict[str, str]) -> bytes:
    return b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"


def test_the_relay_s_headers_read_as_nats_py_reads_them() -> None:
    raw = block(RELAY_HEADERS)
    assert HeaderClient._parse_header_lines(raw) == Client._parse_header_lines(raw) == RELAY_HEADERS


# lines made of the characters that matter: separators, blanks of every kind, control and non-ASCII bytes
_PIECES = st.sampled_from(
    [b"a", b"Z", b"-", b":", b" ", b"\t", b"\r", b"\n", b"\r\n", b"\x0b", b"\x0c", b"\x1c", b"\x1f", b"\x85",
     b"\xc3\xa9", b"\xff", b"", b"ce-id", b": value ", b"\x00"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=40).map(b"".join))
def test_any_block_reads_as_nats_py_reads_it(raw: bytes) -> None:
    assert HeaderClient._parse_header_lines(raw) == Client._parse_header_lines(raw)


async def test_a_live_connection_reads_headers_through_it(nats_server_url: str, monkeypatch) -> None:
    read: list[bytes] = []
    parse = HeaderClient._parse_header_lines
    monkeypatch.setattr(
        HeaderClient, "_parse_header_lines", staticmethod(lambda raw: read.append(raw) or parse(raw))
    )
    nc = await connect(nats_server_url, name="header-test")
    try:
        assert isinstance(nc, HeaderClient)
        sub = await nc.subscribe("allot.test.headers")
        await nc.publish("allot.test.headers", b"{}", headers=RELAY_HEADERS)
        msg = await asyncio.wait_for(sub.next_msg(), 5)
        assert msg.headers == RELAY_HEADERS
        assert read, "the message's headers were not read by HeaderClient"
    finally:
        await nc.close()


def test_the_stream_sequence_and_deliveries_read_off_the_reply_as_nats_py_reads_them() -> None:
    from nats.aio.msg import Msg

    from allot_bus.consumer import _delivery

    for reply in (
        "$JS.ACK.ALLOT_EVENTS.quota-manager.3.123456.120000.1764327600123456789.55",
        "$JS.ACK.hub.AAAAAAAA.ALLOT_EVENTS.quota-manager.2.77.70.1764327600123456789.0.xyz",
    ):
        msg = Msg(None, subject="allot.events.pod.submitted", reply=reply)
        assert _delivery(msg) == (msg.metadata.sequence.stream, msg.metadata.num_delivered)
    assert _delivery(Msg(None, subject="x", reply="$JS.ACK.S.c.3.9.1.5.0")) == (9, 3)
