"""What `allot log archive` and `allot log verify-segment` run; their command line is allot_cli.commands.log."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import msgspec

from allot_contracts.errors import ControlPlaneError, SchemaMismatch
from allot_eventstore.archive import SegmentError, SegmentReport, check_segment, joins, unsealed_stretches
from allot_eventstore.archive_log import SEGMENT_SIZE, ArchiveConflict, against_log, archive
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.errors import InputError, UsageError
from allot_stack.anchoring import key_paths, verifying_keys
from allot_stack.connect import endpoints, find_state_dir

PROGRESS_EVERY = 2.0  # seconds between progress lines


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = time.perf_counter()
        self.last = self.started

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.quiet or (now - self.last < PROGRESS_EVERY and done < total):
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        print(
            f"archived {done}/{total} events ({100 * done // max(total, 1)}%), {rate:,.0f} events/s",
            file=sys.stderr,
            flush=True,
        )


async def run_archive(args: argparse.Namespace) -> int:
    store = PostgresEventStore.connect(endpoints().database_url)
    started = time.perf_counter()
    try:
        segments = await archive(
            store,
            until=args.until,
            out=Path(args.out),
            segment_size=args.segment_size or SEGMENT_SIZE,
            progress=_Progress(args.json),
        )
    except (ArchiveConflict, SchemaMismatch) as exc:
        raise InputError(str(exc)) from exc
    except ControlPlaneError as exc:  # the database cannot be reached or read
        raise UsageError(f"cannot read the event log: {exc}") from exc
    finally:
        await store.close()
    seconds = time.perf_counter() - started
    written = [s for s in segments if s.status == "written"]
    if args.json:
        print(json.dumps({"seconds": round(seconds, 3), "segments": msgspec.to_builtins(segments)}, indent=2))
        return 0
    for segment in segments:
        m = segment.manifest
        print(
            f"{segment.status:<8} {segment.path}  positions {m.first_position}–{m.last_position} "
            f"({m.count} events, {len(m.checkpoints)} signed checkpoint(s)), last hash {m.last_hash[:16]}…"
        )
    events = sum(s.manifest.count for s in written)
    print(
        f"archived {events} events in {len(written)} new segment(s) in {seconds:.1f}s"
        + (f" ({events / seconds:,.0f} events/s)" if events and seconds > 0 else "")
        + "; nothing was deleted from the log"
    )
    return 0


def _segment_line(report: SegmentReport) -> str:
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


def _checked(args: argparse.Namespace) -> Iterator[SegmentReport]:
    """Each segment's report, in the order of the arguments; ``--jobs`` segments are checked at once (one process
    each: a segment is checked on its own, so the result is the same for any number)."""
    state_dir = find_state_dir()
    verifying_keys(args.anchor_pub, os.environ, state_dir)  # a bad key file is reported once, here
    key_files = [str(p) for p in key_paths(args.anchor_pub, os.environ, state_dir)]
    jobs = min(args.jobs or os.cpu_count() or 1, len(args.files))
    try:
        if jobs <= 1:
            yield from (check_segment(file, key_files) for file in args.files)
            return
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            yield from pool.map(check_segment, args.files, [key_files] * len(args.files))
    except SegmentError as exc:
        raise UsageError(str(exc)) from exc


async def _against_db(reports: list[SegmentReport]) -> list[str]:
    store = PostgresEventStore.connect(endpoints().database_url)
    try:
        return await against_log(store, reports)
    except ControlPlaneError as exc:
        raise UsageError(f"--against-db: cannot read the event log: {exc}") from exc
    finally:
        await store.close()


def run_verify(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    reports: list[SegmentReport] = []
    for report in _checked(args):
        reports.append(report)
        _say(args, _segment_line(report))
    problems = [f"{Path(r.file).name}: {r.problem}" for r in reports if not r.ok]
    problems += joins(reports)
    if args.max_unanchored is not None:
        if not key_paths(args.anchor_pub, os.environ, find_state_dir()):
            raise UsageError(
                "--max-unanchored needs a public key (--anchor-pub) to check the checkpoints with"
            )
        problems += unsealed_stretches(reports, args.max_unanchored)
    if not problems:
        first, last = min(r.first_position for r in reports), max(r.last_position for r in reports)
        _say(args, f"segments {len(reports)} meet: one chain over positions {first}–{last}")
    if args.against_db and not problems:
        live = asyncio.run(_against_db(reports))
        _say(
            args, "live log " + ("; ".join(live) if live else "ok: the segments meet the log's stored hashes")
        )
        problems += live
    seconds = time.perf_counter() - started
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not problems,
                    "problems": problems,
                    "seconds": round(seconds, 3),
                    "segments": msgspec.to_builtins(reports),
                },
                indent=2,
            )
        )
    elif problems:
        for problem in problems:
            print(f"MISMATCH: {problem}")
        print("segment verification FAILED", file=sys.stderr)
    else:
        events = sum(r.count for r in reports)
        _say(
            args, f"verified {events} events in {seconds:.1f}s ({events / max(seconds, 1e-9):,.0f} events/s)"
        )
    return 1 if problems else 0


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, flush=True)
