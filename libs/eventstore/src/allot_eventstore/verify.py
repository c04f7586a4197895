"""Hash-chain verification: detects any edited, inserted, reordered or deleted event.

Pure over an ordered iterable of records: positions must be 1, 2, 3, … with no gap, each hash must equal
``sha256(previous hash ‖ header ‖ payload)`` recomputed from the stored columns, and the last record must match the
log head (position and hash), which catches a deleted tail. A verify run can also pin the head hash a previous
audit printed (``expected_head``), so even a complete rewrite of the chain is detected against that anchor.

A segment of the log can be checked on its own: ``after`` and ``prev`` start the chain at a stored position and its
stored hash, and ``head`` is then the segment's last position and stored hash. Segments that cover the log and meet
at their boundaries check exactly what one pass does (each boundary hash is recomputed by the segment ending there),
so they can run in parallel.

Each record's hash is recomputed over its payload as stored first: every writer stores canonical JSON, so that is
the hash in the common case and costs no re-encoding. Only when it differs is the payload decoded and re-encoded
canonically (a payload stored in another form, e.g. by an older column type) and compared again.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

import msgspec

from allot_contracts.envelope import GENESIS_HASH, RecordedEvent, chain_hash


class ChainReport(msgspec.Struct, kw_only=True):
    ok: bool
    events: int
    head_position: int
    head_hash: str
    problem: str = ""
    position: int | None = None


def _matches(record: RecordedEvent, prev: bytes) -> bool:
    header = record.header_bytes()
    if chain_hash(prev, header, record.payload) == record.hash:
        return True
    return chain_hash(prev, header, record.canonical_payload()) == record.hash


async def verify_chain(
    records: AsyncIterable[RecordedEvent],
    *,
    head: tuple[int, bytes],
    expected_head: str | None = None,
    after: int = 0,
    prev: bytes = GENESIS_HASH,
    at_head: bool = True,
) -> ChainReport:
    """Check ``records`` (positions ``after+1 … head[0]``). ``at_head``: the segment ends at the log head (a missing
    end is then a deleted tail); otherwise at a stored position inside the log."""
    expected_position = after + 1
    count = 0
    async for record in records:
        if record.position != expected_position:
            what = "missing" if record.position > expected_position else "duplicated"
            return ChainReport(
                ok=False,
                events=count,
                head_position=head[0],
                head_hash=head[1].hex(),
                position=expected_position,
                problem=f"event at position {expected_position} is {what} (next stored position is {record.position})",
            )
        try:
            matches = _matches(record, prev)
        except msgspec.DecodeError as exc:
            return ChainReport(
                ok=False,
                events=count,
                head_position=head[0],
                head_hash=head[1].hex(),
                position=record.position,
                problem=f"event at position {record.position} has an unreadable payload: {exc}",
            )
        if not matches:
            return ChainReport(
                ok=False,
                events=count,
                head_position=head[0],
                head_hash=head[1].hex(),
                position=record.position,
                problem=(
                    f"event at position {record.position} ({record.type}, id {record.event_id}) does not match its "
                    "hash: it was edited, or an earlier event was"
                ),
            )
        prev = record.hash
        expected_position += 1
        count += 1
    last = expected_position - 1
    if (last, prev) != (head[0], head[1]):
        return ChainReport(
            ok=False,
            events=count,
            head_position=head[0],
            head_hash=head[1].hex(),
            position=last + 1,
            problem=(
                f"event at position {last + 1} is missing (the chain stops at {last})"
                if head[0] > last and not at_head
                else f"the log head says position {head[0]} but the chain ends at {last}: events were deleted from the end"
                if head[0] > last
                else f"the chain ends at position {last} but the log head is at {head[0]} with a different hash"
            ),
        )
    if expected_head is not None and expected_head != prev.hex():
        return ChainReport(
            ok=False,
            events=count,
            head_position=head[0],
            head_hash=prev.hex(),
            position=last,
            problem=f"head hash {prev.hex()} differs from the expected anchor {expected_head}",
        )
    return ChainReport(ok=True, events=count, head_position=head[0], head_hash=prev.hex())
