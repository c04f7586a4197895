"""Hash-chain verification: detects any edited, inserted, reordered or deleted event.

Pure over an ordered iterable of records: positions must be 1, 2, 3, … with no gap, each hash must equal
``sha256(previous hash ‖ header ‖ payload)`` recomputed from the stored columns, and the last record must match the
log head (position and hash), which catches a deleted tail. A verify run can also pin the head hash a previous
audit printed (``expected_head``), so even a complete rewrite of the chain is detected against that anchor.
With ``anchor`` (:class:`allot_eventstore.anchor.AnchorCheck`) every signed checkpoint is checked on the way: its
signature against the configured public keys, and the chain hash at its position against the one it signed.

Each record's hash is recomputed over its payload as stored first: every writer stores canonical JSON, so that is
the hash in the common case and costs no re-encoding. Only when it differs is the payload decoded and re-encoded
canonically (a payload stored in another form, e.g. by an older column type) and compared again.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

import msgspec

from allot_contracts.envelope import GENESIS_HASH, RecordedEvent
from allot_eventstore.anchor import AnchorCheck, AnchorReport


class ChainReport(msgspec.Struct, kw_only=True):
    ok: bool
    events: int
    head_position: int
    head_hash: str
    problem: str = ""
    position: int | None = None
    anchor: AnchorReport | None = None
    # the chain itself is intact, but its head is not the one ``expected_head`` pinned
    head_unexpected: bool = False


async def verify_chain(
    records: AsyncIterable[RecordedEvent],
    *,
    head: tuple[int, bytes],
    expected_head: str | None = None,
    anchor: AnchorCheck | None = None,
) -> ChainReport:
    report = await _verify_chain(records, head=head, expected_head=expected_head, anchor=anchor)
    if anchor is not None:
        report.anchor = anchor.report(report.events)
    return report


async def _verify_chain(
    records: AsyncIterable[RecordedEvent],
    *,
    head: tuple[int, bytes],
    expected_head: str | None,
    anchor: AnchorCheck | None,
) -> ChainReport:
    prev = GENESIS_HASH
    expected_position = 1
    count = 0
    problem = await anchor.start() if anchor is not None else None
    if anchor is not None and problem is not None:
        return _broken(problem, anchor.next_position, count, head)
    async for record in records:
        if record.position != expected_position:
            what = "missing" if record.position > expected_position else "duplicated"
            return _broken(
                f"event at position {expected_position} is {what} (next stored position is {record.position})",
                expected_position,
                count,
                head,
            )
        try:
            matches = record.hash_follows(prev)
        except msgspec.DecodeError as exc:
            return _broken(
                f"event at position {record.position} has an unreadable payload: {exc}",
                record.position,
                count,
                head,
            )
        if not matches:
            return _broken(
                f"event at position {record.position} ({record.type}, id {record.event_id}) does not match its "
                "hash: it was edited, or an earlier event was",
                record.position,
                count,
                head,
            )
        if anchor is not None and record.position == anchor.next_position:
            problem = await anchor.check(record)
            if problem is not None:
                return _broken(problem, record.position, count, head)
        prev = record.hash
        expected_position += 1
        count += 1
    last = expected_position - 1
    problem = anchor.finish(last) if anchor is not None else None
    if anchor is not None and problem is not None:
        return _broken(problem, anchor.next_position, count, head)
    if (last, prev) != (head[0], head[1]):
        return _broken(
            f"the log head says position {head[0]} but the chain ends at {last}: events were deleted from the end"
            if head[0] > last
            else f"the chain ends at position {last} but the log head is at {head[0]} with a different hash",
            last + 1,
            count,
            head,
        )
    if expected_head is not None and expected_head != prev.hex():
        return ChainReport(
            ok=False,
            events=count,
            head_position=head[0],
            head_hash=prev.hex(),
            position=last,
            problem=f"the chain is intact, but its head hash {prev.hex()} differs from the expected head "
            f"{expected_head}",
            head_unexpected=True,
        )
    return ChainReport(ok=True, events=count, head_position=head[0], head_hash=prev.hex())


def _broken(problem: str, position: int, count: int, head: tuple[int, bytes]) -> ChainReport:
    """A failed verification: ``problem`` found at ``position`` after ``count`` good events."""
    return ChainReport(
        ok=False,
        events=count,
        head_position=head[0],
        head_hash=head[1].hex(),
        position=position,
        problem=problem,
    )
