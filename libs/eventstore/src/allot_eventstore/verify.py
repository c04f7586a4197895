"""Hash-chain verification: detects any edited, inserted, reordered or deleted event.

Pure over an ordered iterable of records: positions must be 1, 2, 3, … with no gap, each hash must equal
``sha256(previous hash ‖ header ‖ payload)`` recomputed from the stored columns, and the last record must match the
log head (position and hash), which catches a deleted tail. A verify run can also pin the head hash a previous
audit printed (``expected_head``), so even a complete rewrite of the chain is detected against that anchor.
With ``anchor`` (:class:`allot_eventstore.anchor.AnchorCheck`) every signed checkpoint is checked on the way: its
signature against the configured public keys, and the chain hash at its position against the one it signed.
:class:`ChainCheck` is the same check fed page by page by a reader of the log that reads it anyway (``allot replay
--verify`` checks the chain in the pass that re-derives decisions); :func:`verify_chain` reads the records itself.

Each record's hash is recomputed over its payload as stored first: every writer stores canonical JSON, so that is
the hash in the common case and costs no re-encoding. Only when it differs is the payload decoded and re-encoded
canonically (a payload stored in another form, e.g. by an older column type) and compared again.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable

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
    """Check the chain of ``records`` (the whole log, in position order), read here to the first problem."""
    check = ChainCheck(head=head, expected_head=expected_head, anchor=anchor)
    async for record in records:
        if not await check.feed((record,)):
            break
    return await check.report()


class ChainCheck:
    """The chain checked as the log is read: :meth:`feed` it every record in position order, a page at a time (from
    whichever reader reads the log anyway: ``allot replay --verify`` checks it in the pass that re-derives the
    decisions), then :meth:`report`. Whatever is fed after the first problem is passed over."""

    def __init__(
        self, *, head: tuple[int, bytes], expected_head: str | None = None, anchor: AnchorCheck | None = None
    ) -> None:
        self.head = head
        self._expected_head = expected_head
        self._anchor = anchor
        self._prev = GENESIS_HASH
        self._count = 0  # records checked so far: the next one must be at position ``_count + 1``
        self._started = False
        self._broken: ChainReport | None = None

    async def _start(self) -> None:
        self._started = True
        problem = await self._anchor.start() if self._anchor is not None else None
        if self._anchor is not None and problem is not None:
            self._broken = _broken(problem, self._anchor.next_position, 0, self.head)

    async def feed(self, records: Iterable[RecordedEvent]) -> bool:
        """Check the next ``records``; whether the chain is still intact (worth feeding on)."""
        if not self._started:
            await self._start()
        if self._broken is not None:
            return False
        anchor, prev, count = self._anchor, self._prev, self._count
        try:
            for record in records:
                found = _problem(record, count + 1, prev)
                if found is None and anchor is not None and record.position == anchor.next_position:
                    problem = await anchor.check(record)
                    found = None if problem is None else (problem, record.position)
                if found is not None:
                    self._broken = _broken(found[0], found[1], count, self.head)
                    return False
                prev = record.hash
                count += 1
        finally:
            self._prev, self._count = prev, count
        return True

    async def report(self) -> ChainReport:
        """What the records fed show: the first problem, or the end of the chain checked against the head."""
        if not self._started:
            await self._start()
        report = self._broken or self._end()
        if self._anchor is not None:
            report.anchor = self._anchor.report(report.events)
        return report

    def _end(self) -> ChainReport:
        head, prev, last = self.head, self._prev, self._count
        problem = self._anchor.finish(last) if self._anchor is not None else None
        if self._anchor is not None and problem is not None:
            return _broken(problem, self._anchor.next_position, last, head)
        if (last, prev) != (head[0], head[1]):
            return _broken(
                f"the log head says position {head[0]} but the chain ends at {last}: events were deleted from the end"
                if head[0] > last
                else f"the chain ends at position {last} but the log head is at {head[0]} with a different hash",
                last + 1,
                last,
                head,
            )
        if self._expected_head is not None and self._expected_head != prev.hex():
            return ChainReport(
                ok=False,
                events=last,
                head_position=head[0],
                head_hash=prev.hex(),
                position=last,
                problem=f"the chain is intact, but its head hash {prev.hex()} differs from the expected head "
                f"{self._expected_head}",
                head_unexpected=True,
            )
        return ChainReport(ok=True, events=last, head_position=head[0], head_hash=prev.hex())


def _problem(record: RecordedEvent, expected_position: int, prev: bytes) -> tuple[str, int] | None:
    """What is wrong with ``record`` as the event at ``expected_position`` after the hash ``prev``, and where."""
    if record.position != expected_position:
        what = "missing" if record.position > expected_position else "duplicated"
        return (
            f"event at position {expected_position} is {what} (next stored position is {record.position})",
            expected_position,
        )
    try:
        if record.hash_follows(prev):
            return None
    except msgspec.DecodeError as exc:
        return f"event at position {record.position} has an unreadable payload: {exc}", record.position
    return (
        f"event at position {record.position} ({record.type}, id {record.event_id}) does not match its hash: it "
        "was edited, or an earlier event was",
        record.position,
    )


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
