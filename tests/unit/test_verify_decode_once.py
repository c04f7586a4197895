"""``allot replay --verify`` decodes an event consumed by several processors of one pass once for all of them: the
record they are handed is the one read, field for field, with its payload decoded already."""

from __future__ import annotations

import msgspec

from allot_contracts.envelope import GENESIS_HASH, NewEvent, RecordedEvent, prepare
from allot_contracts.events.cluster import NodeRemoved
from allot_runtime.replay import _Decoded, _decoded_once


def _record() -> RecordedEvent:
    new = NewEvent(stream_id="node:n1", event=NodeRemoved(name="n1"), event_id="e1", correlation_id="c1")
    return prepare(new, position=7, stream_version=2, producer="api", recorded_at=5, prev_hash=GENESIS_HASH)


def test_the_record_is_the_one_read_with_its_event_decoded_once() -> None:
    record = _record()
    shared = _decoded_once(record)
    assert isinstance(shared, _Decoded)
    assert {f: getattr(shared, f) for f in RecordedEvent.__struct_fields__} == msgspec.structs.asdict(record)
    assert shared.decode() == record.decode() == NodeRemoved(name="n1")
    assert shared.decode() is shared.decode()
    assert shared.hash_follows(GENESIS_HASH)


def test_an_undecodable_record_is_handed_on_as_read() -> None:
    broken = msgspec.structs.replace(_record(), payload=b'{"type": "node.removed.v1"')
    assert _decoded_once(broken) is broken
