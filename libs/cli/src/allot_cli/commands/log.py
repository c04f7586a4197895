"""``allot log archive`` and ``allot log verify-segment``: older history as self-contained segment files.

``archive --until P --out DIR`` writes positions 1..P as segment files (format: :mod:`allot_eventstore.archive`),
incrementally: segments already in DIR are checked against the log at their boundaries and kept, new ones follow
them. Nothing is deleted from the database. ``verify-segment FILE...`` checks each segment on its own (its chain
from the boundary hash to its last hash, every signed checkpoint in it, its manifest and SHA-256), that consecutive
segments meet, and with ``--against-db`` that they meet the live log. Exit codes as ``replay --verify``: 0 when
everything holds, 1 on a mismatch (tampering or damage), 2 for input that is not segments (or bad flags).
Anchor keys are found as ``replay --verify`` finds them (:mod:`allot_stack.anchoring`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from allot_cli._groups import subcommands
from allot_cli.files import file_name, prepare_output
from allot_runtime.flags import event_count, positive, processes

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


def _archive(args: argparse.Namespace) -> int:
    import asyncio

    import msgspec

    from allot_audit.log_segments import archive_log

    prepare_output(Path(args.out), flag="--out", directory=True)  # before the log is read
    started = time.perf_counter()
    segments = asyncio.run(
        archive_log(
            until=args.until,
            out=Path(args.out),
            segment_size=args.segment_size,
            progress=_Progress(args.json),
        )
    )
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


def _verify(args: argparse.Namespace) -> int:
    import asyncio

    import msgspec

    from allot_audit.log_segments import against_db, checked, problems, segment_line
    from allot_eventstore.archive import SegmentReport

    started = time.perf_counter()
    reports: list[SegmentReport] = []
    for report in checked(args.files, args.anchor_pub, args.jobs):
        reports.append(report)
        _say(args, segment_line(report))
    found = problems(reports, args.anchor_pub, args.max_unanchored)
    if not found:
        first, last = min(r.first_position for r in reports), max(r.last_position for r in reports)
        _say(args, f"segments {len(reports)} meet: one chain over positions {first}–{last}")
    if args.against_db and not found:
        live = asyncio.run(against_db(reports))
        _say(
            args, "live log " + ("; ".join(live) if live else "ok: the segments meet the log's stored hashes")
        )
        found += live
    seconds = time.perf_counter() - started
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not found,
                    "problems": found,
                    "seconds": round(seconds, 3),
                    "segments": msgspec.to_builtins(reports),
                },
                indent=2,
            )
        )
    elif found:
        for problem in found:
            print(f"MISMATCH: {problem}")
        print("segment verification FAILED", file=sys.stderr)
    else:
        events = sum(r.count for r in reports)
        _say(
            args, f"verified {events} events in {seconds:.1f}s ({events / max(seconds, 1e-9):,.0f} events/s)"
        )
    return 1 if found else 0


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, flush=True)


def register(subparsers: Any) -> None:
    sub = subcommands(subparsers, "log", help_text="archive older log segments and verify them on their own")
    a = sub.add_parser("archive", help="write positions 1..--until as self-contained segment files")
    a.add_argument(
        "--until", type=positive, required=True, metavar="POSITION", help="last position to archive"
    )
    a.add_argument(
        "--out",
        type=file_name,
        required=True,
        metavar="DIR",
        help="directory of segment files (created if missing)",
    )
    a.add_argument(
        "--segment-size",
        type=positive,
        default=None,
        metavar="N",
        help="events per segment (default 100,000)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_archive)
    v = sub.add_parser("verify-segment", help="check segment files on their own and that they meet")
    v.add_argument("files", nargs="+", type=file_name, metavar="FILE", help="segment files, in any order")
    v.add_argument(
        "--anchor-pub",
        "--anchor-key",
        action="append",
        metavar="KEY",
        help="public key (PEM) that signed the checkpoints; repeat for rotated keys "
        "(default: ALLOT_ANCHOR_PUBLIC_KEYS, else <state dir>/anchor.pub)",
    )
    v.add_argument(
        "--against-db",
        action="store_true",
        help="also check that the segments meet the live log's stored hashes",
    )
    v.add_argument(
        "--max-unanchored",
        type=event_count,
        metavar="EVENTS",
        help="fail when more than this many events in a row are not followed by a signed checkpoint",
    )
    v.add_argument(
        "--jobs",
        type=processes,
        metavar="N",
        help="segments checked at once, one process each (default: one per CPU); the result is the same for any N",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_verify)
