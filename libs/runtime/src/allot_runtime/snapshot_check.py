"""Checking a stored snapshot by re-deriving it, and the verdicts recorded for it (docs/adr/0011).

:func:`check` folds a decider's projection from the previous snapshot whose latest verdict is ``ok`` (restored and
checked as on restart), or from position 0, up to the snapshot's position, under the configuration the snapshot was
made under, and compares the encoding of the folded state with the stored bytes: byte equality of the canonical
encoding (:mod:`allot_runtime.statecodec`). A difference is located: the first differing path in the state
(``processor.engine.nodes["n1"]``). :func:`record` appends the verdict as ``snapshot.verified``; :func:`verdicts` reads
them back, so that a service restarting refuses a snapshot whose latest verdict is a mismatch
(:func:`allot_runtime.snapshots.restore`). Which snapshots are checked is :func:`sample`: the newest ``count``
of each decider, deterministic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import SnapshotVerified
from allot_eventstore.protocol import EventStore, Snapshot
from allot_runtime import statecodec, stateformat
from allot_runtime.processor import Host
from allot_runtime.replay import rebuild

OK, MISMATCH = "ok", "mismatch"
PRODUCER = "replay.snapshots"  # who records the verdicts: ``allot replay --verify --check-snapshots``

_OBJECTS = (stateformat.OBJECT, stateformat.STRUCT)
_MAPPINGS = (stateformat.DICT, stateformat.ODICT, stateformat.COUNTER)


def verdict_stream(consumer: str) -> str:
    return stream_id("snapshot", consumer)


async def verdicts(store: EventStore, consumer: str) -> dict[int, SnapshotVerified]:
    """The latest verdict recorded for each of ``consumer``'s snapshot positions."""
    out: dict[int, SnapshotVerified] = {}
    for record in await store.read_stream(verdict_stream(consumer)):
        event = record.decode()
        if isinstance(event, SnapshotVerified):
            out[event.position] = event
    return out


def sample(positions: list[int], count: int) -> list[int]:
    """The snapshots checked of a decider's stored ``positions``: the newest ``count``, oldest first."""
    return sorted(positions)[-count:] if count > 0 else []


def _key(item: Any) -> str:
    return repr(item) if not isinstance(item, list) else "…"


def _pairs(node: list[object], start: int) -> dict[str, object]:
    items = node[start:]
    return {_key(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


def _named(node: list[object], start: int) -> dict[str, object]:
    items = node[start:]
    return {f".{items[i]}": items[i + 1] for i in range(0, len(items) - 1, 2)}


def _children(node: object) -> tuple[str, dict[str, object]] | None:
    """How a codec node's children are addressed, and the children by address (None for a leaf)."""
    if not isinstance(node, list) or not node or not isinstance(node[0], int):
        return None
    tag = node[0]
    if tag in _OBJECTS:
        return "attr", _named(node, 2)
    if tag in _MAPPINGS:
        return "key", {f"[{k}]": v for k, v in _pairs(node, 1).items()}
    if tag == stateformat.DDICT:
        return "key", {f"[{k}]": v for k, v in _pairs(node, 2).items()}
    return "index", {f"[{i}]": v for i, v in enumerate(node[1:])}


def _first(path: str, a: Any, b: Any) -> str | None:
    if a == b and type(a) is type(b):
        return None
    left, right = _children(a), _children(b)
    if left is None or right is None or left[0] != right[0] or a[0] != b[0]:
        return path or "$"
    ka, kb = left[1], right[1]
    for name in [*ka, *(k for k in kb if k not in ka)]:
        if name not in ka or name not in kb:
            return f"{path}{name}"
        found = _first(f"{path}{name}", ka[name], kb[name])
        if found is not None:
            return found
    return path or "$"


def made_by_other_code(state: bytes) -> bool:
    """Whether a snapshot's state was encoded by other code than this process runs (its code fingerprint differs):
    restart does not load it, so it cannot be checked here either. Unreadable bytes are not (they are checked, and
    reported)."""
    try:
        frame = msgspec.msgpack.decode(state)
        _, names, code = frame[0], frame[1], frame[2]
    except (msgspec.DecodeError, TypeError, IndexError, KeyError):
        return False
    if not isinstance(frame, list) or frame[0] != stateformat.FORMAT or not isinstance(names, list):
        return False
    return all(isinstance(n, str) for n in names) and code != stateformat.code_fingerprint(names)


def first_difference(stored: bytes, derived: bytes) -> str:
    """The first path at which two encoded states differ ("$" when they cannot be read as states)."""
    try:
        a, b = msgspec.msgpack.decode(stored), msgspec.msgpack.decode(derived)
        _, _, _, anchors, overlays_a, _ = a  # format, names, code fingerprint, anchors, overlays, root
        overlays_b = b[4]
    except (msgspec.DecodeError, ValueError, TypeError, IndexError):
        return "$"
    for index, (one, other) in enumerate(zip(overlays_a, overlays_b, strict=False)):
        prefix = anchors[index] if index < len(anchors) else f"${index}"
        found = _first(prefix or "", [stateformat.OBJECT, *one], [stateformat.OBJECT, *other])
        if found is not None:
            return found.lstrip(".") or "$"
    return _first("", a, b) or "$"


async def check(
    build: Callable[[], Host],
    store: EventStore,
    snapshot: Snapshot,
    *,
    start: Snapshot | None,
) -> SnapshotVerified:
    """Re-derive ``snapshot`` from ``start`` (an earlier snapshot of the same configuration whose latest verdict is
    ok, or None: position 0) with hosts from ``build`` (the snapshot's configuration), and say whether it matches."""
    host, origin = build(), 0
    if start is not None and hashlib.sha256(start.state).digest() == start.state_hash:
        try:
            host.restore_state(start.state)
            origin = start.position
        except statecodec.StateCodecError:
            pass
        if origin and host.digest() != start.digest:
            origin = 0
        if not origin:
            host = build()
    await rebuild(host, store, until=snapshot.position, after=origin)
    derived = host.export_state()
    same = derived == snapshot.state and hashlib.sha256(snapshot.state).digest() == snapshot.state_hash
    return SnapshotVerified(
        consumer=snapshot.consumer,
        position=snapshot.position,
        state_hash=snapshot.state_hash.hex(),
        result=OK if same else MISMATCH,
        start=origin,
        config_hash=snapshot.config_hash,
        path="" if same else first_difference(snapshot.state, derived),
    )


async def record(store: EventStore, verdict: SnapshotVerified) -> int | None:
    """Append ``verdict`` to its consumer's verdict stream; the position appended at."""
    stream = verdict_stream(verdict.consumer)
    previous = await store.read_stream(stream)
    key = f"{len(previous) + 1}/{verdict.position}/{verdict.state_hash}/{verdict.result}"
    new = NewEvent(
        stream_id=stream,
        event=verdict,
        event_id=derived_event_id(PRODUCER, key, 0),
        expected_version=len(previous),
    )
    result = await store.append([new], producer=PRODUCER)
    return result.positions[0] if result.positions else None
