"""Archiving the PostgreSQL log into segment files (format: :mod:`allot_eventstore.archive`), and comparing segments
with the live log.

:func:`archive` is incremental: the segments already in the output directory are checked against the log's stored
hashes at their boundaries and kept; new segments start after the newest one and hold ``segment_size`` events each
(the last one up to ``until``). Records are read in keyset pages and streamed to the file, so memory does not grow
with the log. Nothing is deleted from PostgreSQL: pruning archived rows needs the services' snapshots at or after
the boundary and a verify that starts from the boundary hash (docs/adr/0011-bounded-verification.md, "Retention").
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec

from allot_contracts.envelope import GENESIS_HASH, RecordedEvent
from allot_contracts.errors import InvalidInput, PermanentError, SchemaMismatch
from allot_eventstore.anchor import SignedCheckpoint
from allot_eventstore.anchor_log import _COLUMNS, PostgresCheckpoints, _checkpoint
from allot_eventstore.archive import (
    PAGE,
    SUFFIX,
    Manifest,
    SegmentError,
    SegmentReport,
    read_manifest,
    segment_name,
    write_segment,
)
from allot_eventstore.postgres import PostgresEventStore

SEGMENT_SIZE = 100_000  # events per segment by default
SUBJECT = "log archive"
_NAME = re.compile(r"^log-(\d{12})-(\d{12})" + re.escape(SUFFIX) + "$")


class ArchiveConflict(PermanentError):
    """The output directory holds a segment that does not belong to this log (or cannot be read): never replaced."""


Progress = Callable[[int, int], None]  # (events archived in this run, events to archive in this run)


class Archived(msgspec.Struct, frozen=True, kw_only=True):
    """One segment of the output directory after a run: ``written`` now, or ``kept`` from an earlier run."""

    path: str
    status: str
    manifest: Manifest


async def _boundaries(store: PostgresEventStore, positions: list[int]) -> dict[int, bytes]:
    found = await store.hashes([p for p in positions if p > 0])
    return {0: GENESIS_HASH, **found}


def _segment_files(out: Path) -> list[Path]:
    """The segment files in ``out`` (created when missing), by name: position order."""
    if out.exists() and not out.is_dir():
        raise InvalidInput([("--out", f"{out} is not a directory")], subject=SUBJECT)
    out.mkdir(parents=True, exist_ok=True)
    return sorted(p for p in out.iterdir() if _NAME.match(p.name))


async def _existing(store: PostgresEventStore, files: list[Path]) -> list[Archived]:
    """The segments already archived, each checked against the log's stored hashes at its two boundaries."""
    kept: list[Archived] = []
    for path in files:
        try:
            manifest, problem = read_manifest(path)
        except SegmentError as exc:
            raise ArchiveConflict(f"{exc}; it is not replaced") from exc
        if manifest is None:
            raise ArchiveConflict(
                f"{path}: {problem}; it is not replaced (check it with `allot log verify-segment`, move it away)"
            )
        stored = await _boundaries(store, [manifest.first_position - 1, manifest.last_position])
        if (
            stored.get(manifest.first_position - 1, b"").hex() != manifest.boundary_hash
            or stored.get(manifest.last_position, b"").hex() != manifest.last_hash
        ):
            raise ArchiveConflict(
                f"{path} holds positions {manifest.first_position} to {manifest.last_position} with boundary "
                "hashes the log does not have there: it is a segment of another log, or one of the two was "
                "rewritten; it is not replaced"
            )
        kept.append(Archived(path=str(path), status="kept", manifest=manifest))
    return kept


async def checkpoints_between(store: PostgresEventStore, first: int, last: int) -> list[SignedCheckpoint]:
    """The signed checkpoints at positions ``first``..``last``, in (position, key id) order."""
    rows = await store._fetch(
        f"SELECT {_COLUMNS} FROM log_checkpoints WHERE position BETWEEN $1 AND $2 ORDER BY position, key_id",
        first,
        last,
    )
    return [_checkpoint(row) for row in rows]


async def archive(
    store: PostgresEventStore,
    *,
    until: int,
    out: Path,
    segment_size: int = SEGMENT_SIZE,
    progress: Progress | None = None,
) -> list[Archived]:
    """Archive positions 1..``until`` of ``store`` into segment files in ``out`` (module docstring); returns every
    segment of ``out`` in position order. :class:`InvalidInput` for a position beyond the head;
    :class:`ArchiveConflict` for a directory holding a segment that does not belong to this log."""
    head = (await store.head())[0]
    issues = []
    if until < 1 or until > head:
        issues.append(("--until", f"must be a position of the log, 1 to its head {head}, not {until}"))
    if segment_size < 1:
        issues.append(("--segment-size", f"must be a positive number of events, not {segment_size}"))
    if issues:
        raise InvalidInput(issues, subject=SUBJECT)
    if not await PostgresCheckpoints(store).exists():
        raise SchemaMismatch("the event log has no log_checkpoints table: run `allot migrate`")
    segments = await _existing(store, _segment_files(out))
    start = max((s.manifest.last_position for s in segments), default=0) + 1
    total, done = max(until - start + 1, 0), 0
    while start <= until:
        last = min(start + segment_size - 1, until)
        path = out / segment_name(start, last)
        boundary = (await _boundaries(store, [start - 1]))[start - 1]

        async def counted(records: AsyncIterator[RecordedEvent], before: int) -> AsyncIterator[RecordedEvent]:
            n = before
            async for record in records:
                yield record
                n += 1
                if progress is not None and n % PAGE == 0:
                    progress(n, total)

        try:
            manifest = await write_segment(
                path,
                counted(store.iterate(after=start - 1, until=last, page=PAGE), done),
                first=start,
                last=last,
                boundary_hash=boundary,
                checkpoints=await checkpoints_between(store, start, last),
            )
        except FileExistsError:
            raise ArchiveConflict(
                f"{path} appeared while archiving (another archive run?); it is not replaced"
            ) from None
        segments.append(Archived(path=str(path), status="written", manifest=manifest))
        done += manifest.count
        if progress is not None:
            progress(done, total)
        start = last + 1
    return sorted(segments, key=lambda s: s.manifest.first_position)


async def against_log(store: PostgresEventStore, reports: list[SegmentReport]) -> list[str]:
    """Where segments that verified disagree with the live log's stored hashes at their boundaries. The newest
    segment's last position must be in the log; a boundary no longer in it (pruned) is not compared."""
    good = sorted((r for r in reports if r.ok), key=lambda r: r.first_position)
    if not good:
        return []
    wanted = sorted({p for r in good for p in (r.first_position - 1, r.last_position)})
    stored = await _boundaries(store, wanted)
    problems: list[str] = []
    for report in good:
        name = Path(report.file).name
        for position, theirs in (
            (report.first_position - 1, report.boundary_hash),
            (report.last_position, report.last_hash),
        ):
            ours = stored.get(position)
            if ours is None:
                if report is good[-1] and position == report.last_position:
                    head = (await store.head())[0]
                    problems.append(
                        f"{name} ends at position {position}, which is not in the live log (head {head})"
                    )
                continue
            if ours.hex() != theirs:
                problems.append(
                    f"{name}: the live log has hash {ours.hex()[:16]}… at position {position}, the segment "
                    f"{theirs[:16]}…: the segment and the log are not the same chain"
                )
    return problems
