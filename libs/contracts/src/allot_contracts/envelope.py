"""Recorded events (what the log returns) and new events (what a writer appends).

Responsibility: the envelope around an event payload, the canonical bytes an event's hash covers, deterministic
event ids for derived events, stream ids and NATS subjects.

Invariants:
- ``position`` is the global, dense (1, 2, 3, …) order of the log; ``stream_version`` is dense per stream from 1.
- The hash of event *n* is ``sha256(hash(n-1) ‖ canonical_header(n) ‖ "\\n" ‖ canonical_payload(n))`` where canonical
  means msgspec JSON with sorted keys; the genesis "previous hash" is 32 zero bytes. Operational metadata (trace
  context) is not hashed: it is not a decision input.
- Times are integers: microseconds since the Unix epoch (UTC), taken from an injected clock by the writer.
- An event derived by a service from a trigger has the id ``uuid5(ALLOT_NS, f"{producer}/{trigger_id}/{index}")``, so
  re-running the same decision (after a crash, or in replay) produces the same ids and re-appending is a no-op.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Final

import msgspec

from allot_contracts.events import AnyEvent, Event, split_tag, tag_of
from allot_contracts.upcasters import upcast

__all__ = [
    "GENESIS_HASH",
    "EnvelopeHeader",
    "NewEvent",
    "RecordedEvent",
    "canonical",
    "chain_hash",
    "derived_event_id",
    "stream_id",
    "subject_for",
]

GENESIS_HASH = bytes(32)
ALLOT_NS = uuid.UUID("6f1c3d1e-5b7a-4f43-9c1b-2a8e7d0c4b11")

_canonical = msgspec.json.Encoder(order="sorted")
_plain = msgspec.json.Encoder()
_decode_any = msgspec.json.Decoder(AnyEvent)
_split_tags: dict[type, tuple[str, int]] = {}  # event class → (type name, schema version), filled by prepare


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes (sorted keys, no whitespace) of a Struct or builtins. Maps keyed by integers (CPU ids,
    NUMA nodes, GPU minors in typed objects) are written with their keys as strings, as JSON has them, which is
    how they read back."""
    try:
        return _canonical.encode(obj)
    except TypeError:
        return _canonical.encode(msgspec.to_builtins(obj, str_keys=True))


_NS_BYTES = ALLOT_NS.bytes
# the RFC 4122 variant written into the first hex digit of the fourth group: its two top bits set to 10
_VARIANT_DIGIT = {digit: "89ab"[int(digit, 16) & 0x3] for digit in "0123456789abcdef"}


def derived_event_id(producer: str, trigger_id: str, index: int) -> str:
    """``str(uuid.uuid5(ALLOT_NS, f"{producer}/{trigger_id}/{index}"))``, computed on the hex digest without building
    UUID objects (every decision of every service derives one id per output event): version digit 5, variant 10."""
    h = hashlib.sha1(_NS_BYTES + f"{producer}/{trigger_id}/{index}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT_DIGIT[h[16]]}{h[17:20]}-{h[20:32]}"


def stream_id(kind: str, key: str) -> str:
    """``stream_id("pod", "default/train-0")`` → ``"pod:default/train-0"``."""
    return f"{kind}:{key}"


def subject_for(prefix: str, event_type: str) -> str:
    """NATS subject of an event type: ``<prefix>.events.<kind>.<action>``."""
    return f"{prefix}.events.{event_type}"


def chain_hash(prev: bytes, header: bytes, payload: bytes) -> bytes:
    return hashlib.sha256(
        b"".join((prev, header, b"\n", payload))
    ).digest()  # one call: cheaper than four updates


class NewEvent(msgspec.Struct, frozen=True, kw_only=True):
    """An event to append. ``expected_version``: ``None`` = no check; ``0`` = the stream must not exist yet;
    ``n`` = the stream's current version must be ``n``."""

    stream_id: str
    event: Event
    event_id: str
    causation_id: str | None = None
    correlation_id: str | None = None
    expected_version: int | None = None
    metadata: dict[str, str] = {}

    @property
    def tag(self) -> str:
        return tag_of(self.event)


class EnvelopeHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The envelope of a recorded event, defined once: the fields its hash covers (in this order) and that every
    form of a recorded event carries, stored (:class:`RecordedEvent`), on the wire (``allot_bus.wire``) and in the
    exported JSON Schema (``allot_contracts.schema.Envelope``). The forms differ only in how they hold the payload
    and the hash."""

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


_HEADER_FIELDS: Final = len(EnvelopeHeader.__struct_fields__)


class RecordedEvent(EnvelopeHeader, frozen=True, kw_only=True):
    """An event as stored in the log. ``payload`` is its JSON (bytes as read); ``event`` decodes it (typed)."""

    payload: bytes
    hash: bytes
    metadata: dict[str, str] = {}

    @property
    def tag(self) -> str:
        return f"{self.type}.v{self.schema_version}"

    def header_bytes(self) -> bytes:
        """The canonical bytes of the envelope fields the hash covers (:class:`EnvelopeHeader`'s, in its order)."""
        return canonical(list(msgspec.structs.astuple(self)[:_HEADER_FIELDS]))

    def canonical_payload(self) -> bytes:
        return canonical(msgspec.json.decode(self.payload))

    def expected_hash(self, prev: bytes) -> bytes:
        return chain_hash(prev, self.header_bytes(), self.canonical_payload())

    def hash_follows(self, prev: bytes) -> bool:
        """Whether the envelope and payload, hashed after ``prev``, give the hash the record carries. The payload as
        stored is the canonical text; one that is not (re-encoded on the way) is canonicalised first, and one that
        is not JSON at all does not match."""
        if chain_hash(prev, self.header_bytes(), self.payload) == self.hash:
            return True
        try:
            return self.expected_hash(prev) == self.hash
        except (msgspec.DecodeError, ValueError):
            return False

    def decode(self) -> Event:
        """The typed payload, upcast to the current schema when it was written by an older version. A payload that
        is not of the record's type (its ``type`` field names another event) is refused (``ValidationError``, as
        for any payload that does not match its schema): a consumer choosing events by the record's type must not
        be handed another kind of event."""
        known = self.tag
        try:
            event: Event = _decode_any.decode(self.payload)
        except msgspec.ValidationError:
            try:
                raw = msgspec.json.decode(self.payload)
            except UnicodeDecodeError as exc:  # a string that is not UTF-8: undecodable like any broken JSON
                raise msgspec.DecodeError(f"the payload is not valid UTF-8: {exc}") from exc
            if not isinstance(raw, dict):
                raise
            try:
                upgraded = upcast(known, raw)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                # an old payload that does not have its schema's shape: as undecodable as a new one
                raise msgspec.ValidationError(f"a {known} payload that cannot be upcast: {exc!r}") from exc
            if upgraded is raw:
                raise
            converted: Event = msgspec.convert(upgraded, AnyEvent)  # type: ignore[arg-type]
            if split_tag(tag_of(converted))[0] != self.type:
                raise msgspec.ValidationError(
                    f"the payload is a {tag_of(converted)} event, the record says {known}"
                ) from None
            return converted
        if tag_of(event) != known:
            raise msgspec.ValidationError(f"the payload is a {tag_of(event)} event, the record says {known}")
        return event

    def payload_dict(self) -> dict[str, Any]:
        value = msgspec.json.decode(self.payload)
        assert isinstance(value, dict)
        return value


def prepare(
    new: NewEvent, *, position: int, stream_version: int, producer: str, recorded_at: int, prev_hash: bytes
) -> RecordedEvent:
    """Turn a new event into the record the store writes (computes the canonical payload and the chain hash)."""
    event = new.event
    kind = _split_tags.get(type(event))
    if kind is None:
        kind = _split_tags[type(event)] = split_tag(new.tag)
    type_name, schema_version = kind
    payload = canonical(event)
    header = canonical(
        [
            position,
            new.event_id,
            new.stream_id,
            stream_version,
            type_name,
            schema_version,
            new.causation_id,
            new.correlation_id,
            producer,
            recorded_at,
        ]
    )  # EnvelopeHeader's fields, in its order (RecordedEvent.header_bytes)
    return RecordedEvent(
        position=position,
        event_id=new.event_id,
        stream_id=new.stream_id,
        stream_version=stream_version,
        type=type_name,
        schema_version=schema_version,
        causation_id=new.causation_id,
        correlation_id=new.correlation_id,
        producer=producer,
        recorded_at=recorded_at,
        payload=payload,
        hash=chain_hash(prev_hash, header, payload),
        metadata=dict(new.metadata),
    )


def encode_plain(obj: Any) -> bytes:
    return _plain.encode(obj)
