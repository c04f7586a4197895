"""The wire form of an event on NATS: one JSON object, the envelope fields plus the payload embedded as JSON.

Subscribers in other languages decode it with the JSON Schemas exported by ``allot schema`` (``envelope`` plus the
payload schema named by ``type``/``schema_version``). The hash is hex, so a subscriber can check the chain too.

Every message also carries the CloudEvents attributes as headers (binary content mode: ``ce-<attribute>`` headers;
the message body, this envelope, is the event's ``data``), so a generic CloudEvents consumer can route and
deduplicate without reading the body (docs/subscribe.md). Two attributes are the same for every message and are
stated once, in the AsyncAPI document, rather than sent with each: ``datacontenttype`` (``application/json``) and
``dataschema`` (the envelope's schema). Each header costs the relay about a microsecond per event in the client
library's encoding, so the set is kept to what varies.
"""

from __future__ import annotations

import time

import msgspec

from allot_contracts.envelope import EnvelopeHeader, RecordedEvent
from allot_contracts.schema import CE_HEADERS as CE_HEADERS  # re-exported: defined with the message schema
from allot_contracts.schema import cloudevent_type

CE_SPECVERSION = "1.0"


class WireEvent(EnvelopeHeader, frozen=True, kw_only=True):
    """The envelope with the hash in hex and the payload embedded as it is (the form of ``schema.Envelope``)."""

    hash: str
    payload: msgspec.Raw
    metadata: dict[str, str] = {}


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WireEvent)


def encode(record: RecordedEvent) -> bytes:
    return _encoder.encode(
        WireEvent(
            position=record.position,
            event_id=record.event_id,
            stream_id=record.stream_id,
            stream_version=record.stream_version,
            type=record.type,
            schema_version=record.schema_version,
            causation_id=record.causation_id,
            correlation_id=record.correlation_id,
            producer=record.producer,
            recorded_at=record.recorded_at,
            hash=record.hash.hex(),
            payload=msgspec.Raw(record.payload),
            metadata=record.metadata,
        )
    )


def decode(data: bytes) -> RecordedEvent:
    wire = _decoder.decode(data)
    return RecordedEvent(
        position=wire.position,
        event_id=wire.event_id,
        stream_id=wire.stream_id,
        stream_version=wire.stream_version,
        type=wire.type,
        schema_version=wire.schema_version,
        causation_id=wire.causation_id,
        correlation_id=wire.correlation_id,
        producer=wire.producer,
        recorded_at=wire.recorded_at,
        payload=bytes(wire.payload),
        hash=bytes.fromhex(wire.hash),
        metadata=wire.metadata,
    )


def cloudevent_source(prefix: str, producer: str) -> str:
    """``ce-source``: the installation (bus prefix) and the producer that recorded the event (``/allot/binder``)."""
    return f"/{prefix}/{producer}"


_second: list[tuple[int, str]] = [(-1, "")]  # the last second formatted: events of a batch mostly share it
_types: dict[tuple[str, int], str] = {}


def rfc3339(micros: int) -> str:
    """``recorded_at`` (microseconds since the epoch, UTC) as RFC 3339 with microseconds (``ce-time``)."""
    seconds, fraction = divmod(micros, 1_000_000)
    last, text = _second[0]
    if seconds != last:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _second[0] = (seconds, text)
    return f"{text}.{fraction:06d}Z"


def cloudevent_headers(record: RecordedEvent, prefix: str) -> dict[str, str]:
    """The CloudEvents 1.0 attributes of a recorded event as NATS headers (binary content mode)."""
    key = (record.type, record.schema_version)
    ce_type = _types.get(key)
    if ce_type is None:
        ce_type = _types[key] = cloudevent_type(record.type, record.schema_version)
    return {
        "ce-specversion": CE_SPECVERSION,
        "ce-id": record.event_id,
        "ce-source": f"/{prefix}/{record.producer}",
        "ce-type": ce_type,
        "ce-time": rfc3339(record.recorded_at),
        "ce-subject": record.stream_id,
    }
