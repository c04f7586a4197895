"""The wire form of an event on NATS: one JSON object, the envelope fields plus the payload embedded as JSON.

Subscribers in other languages decode it with the JSON Schemas exported by ``allot schema`` (``envelope`` plus the
payload schema named by ``type``/``schema_version``). The hash is hex, so a subscriber can check the chain too.
"""

from __future__ import annotations

import msgspec

from allot_contracts.envelope import RecordedEvent


class WireEvent(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    event_id: str
    stream_id: str
    stream_version: int
    type: str
    schema_version: int
    causation_id: str | None
    correlation_id: str | None
    producer: str
    recorded_at: int
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
