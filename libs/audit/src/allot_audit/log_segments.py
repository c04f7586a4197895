"""Archived log segments: writing them from the log, checking them on their own, that they meet each other and the
live log (``allot log archive`` and ``allot log verify-segment``; their command line is allot_cli.commands.log)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from allot_contracts.errors import ControlPlaneError, InvalidInput, SchemaMismatch
from allot_eventstore.archive import SegmentError, SegmentReport, check_segment, joins, unsealed_stretches
from allot_eventstore.archive_log import SEGMENT_SIZE, ArchiveConflict, Archived, against_log, archive
from allot_intake.errors import InputError, UsageError
from allot_stack.anchoring import key_paths, verifying_keys
from allot_stack.connect import bounded_store, endpoints, find_state_dir


async def archive_log(
    *, until: int, out: Path, segment_size: int | None, progress: Callable[[int, int], None]
) -> list[Archived]:
    """Write positions 1..``until`` of the log as segment files in ``out`` (kept ones checked, new ones after)."""
    store = bounded_store(endpoints().database_url)
    try:
        return await archive(
            store, until=until, out=out, segment_size=segment_size or SEGMENT_SIZE, progress=progress
        )
    except (ArchiveConflict, SchemaMismatch) as exc:
        raise InputError(str(exc)) from exc
    except InvalidInput as exc:  # a flag the log refuses (--until past the head, --out a file): a usage error
        raise UsageError(str(exc)) from exc
    except ControlPlaneError as exc:  # the database cannot be reached or read
        raise UsageError(f"cannot read the event log: {exc}") from exc
    finally:
        await store.close()


def segment_line(report: SegmentReport) -> str:
    """One line of ``allot log verify-segment`` about a segment."""
    name = Path(report.file).name
    if not report.ok:
        return f"segment  {name}: MISMATCH: {report.problem}"
    anchor = report.anchor
    if anchor is None or not anchor.keys:
        sealed = "signatures NOT checked (no public key configured)"
    elif not anchor.anchored:
        sealed = f"no signed checkpoint inside: its {report.count} events are sealed only by the next segment"
    else:
        tail = f"; {anchor.unanchored_events} event(s) after the newest" if anchor.unanchored_events else ""
        sealed = f"{anchor.checkpoints} signed checkpoint(s) match (key {', '.join(anchor.keys)}){tail}"
    return (
        f"segment  {name}: ok, positions {report.first_position}–{report.last_position} ({report.count} events), "
        f"chain {report.boundary_hash[:16]}… → {report.last_hash[:16]}…, {sealed}"
    )


def checked(files: Sequence[str], anchor_pub: list[str] | None, jobs: int | None) -> Iterator[SegmentReport]:
    """Each segment's report, in the order of ``files``; ``jobs`` segments are checked at once (one process each: a
    segment is checked on its own, so the result is the same for any number)."""
    state_dir = find_state_dir()
    verifying_keys(anchor_pub, os.environ, state_dir)  # a bad key file is reported once, here
    key_files = [str(p) for p in key_paths(anchor_pub, os.environ, state_dir)]
    workers = min(jobs or os.cpu_count() or 1, len(files))
    try:
        if workers <= 1:
            yield from (check_segment(file, key_files) for file in files)
            return
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            yield from pool.map(check_segment, files, [key_files] * len(files))
    except SegmentError as exc:
        raise UsageError(str(exc)) from exc


def problems(
    reports: list[SegmentReport], anchor_pub: list[str] | None, max_unanchored: int | None
) -> list[str]:
    """What is wrong with the segments: each one's own problem, where consecutive ones do not meet, and with
    ``max_unanchored`` the stretches of more events than that with no signed checkpoint after them."""
    found = [f"{Path(r.file).name}: {r.problem}" for r in reports if not r.ok]
    found += joins(reports)
    if max_unanchored is not None:
        if not key_paths(anchor_pub, os.environ, find_state_dir()):
            raise UsageError(
                "--max-unanchored needs a public key (--anchor-pub) to check the checkpoints with"
            )
        found += unsealed_stretches(reports, max_unanchored)
    return found


async def against_db(reports: list[SegmentReport]) -> list[str]:
    """Where the segments do not meet the live log's stored hashes (none: they do)."""
    store = bounded_store(endpoints().database_url)
    try:
        return await against_log(store, reports)
    except ControlPlaneError as exc:
        raise UsageError(f"--against-db: cannot read the event log: {exc}") from exc
    finally:
        await store.close()
