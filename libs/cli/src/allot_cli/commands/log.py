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
from typing import Any


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be a number of events ≥ 0, not {text!r}")
    return int(text)


def _positive(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, not {text!r}")
    return int(text)


def _archive(args: argparse.Namespace) -> int:
    import asyncio

    from allot_cli.log_segments import run_archive

    return asyncio.run(run_archive(args))


def _verify(args: argparse.Namespace) -> int:
    from allot_cli.log_segments import run_verify

    return run_verify(args)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("log", help="archive older log segments and verify them on their own")
    sub = p.add_subparsers(dest="log_command", metavar="SUBCOMMAND")
    sub.required = True
    a = sub.add_parser("archive", help="write positions 1..--until as self-contained segment files")
    a.add_argument(
        "--until", type=_positive, required=True, metavar="POSITION", help="last position to archive"
    )
    a.add_argument(
        "--out", required=True, metavar="DIR", help="directory of segment files (created if missing)"
    )
    a.add_argument(
        "--segment-size",
        type=_positive,
        default=None,
        metavar="N",
        help="events per segment (default 100,000)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=_archive)
    v = sub.add_parser("verify-segment", help="check segment files on their own and that they meet")
    v.add_argument("files", nargs="+", metavar="FILE", help="segment files, in any order")
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
        type=_count,
        metavar="EVENTS",
        help="fail when more than this many events in a row are not followed by a signed checkpoint",
    )
    v.add_argument(
        "--jobs",
        type=_positive,
        metavar="N",
        help="segments checked at once, one process each (default: one per CPU); the result is the same for any N",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=_verify)
