"""``allot replay [--verify]``: rebuild every projection from the log alone and prove each decision.

The checks (in order, stopping at the first failure with a non-zero exit) are :mod:`allot_audit.replay`; this module
is their command line: the flags, the lines as they come, the JSON report and the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from allot_cli.files import directory
from allot_runtime.flags import event_count, log_position, processes

if (
    TYPE_CHECKING
):  # the rest is imported when the command runs: ``allot replay --help`` loads no engine or driver
    from allot_audit.replay import Extra
    from allot_eventstore.protocol import EventStore


def head_hash(text: str) -> str:
    """``--expect-head``: a chain hash as ``replay --verify`` prints it (SHA-256, 64 hex digits; either case), in the
    lower case it is compared in. Anything else can never match, so it is refused before the log is read."""
    if len(text) != 64 or not all(c in "0123456789abcdefABCDEF" for c in text):
        raise argparse.ArgumentTypeError(f"must be a chain hash of 64 hex digits, not {text!r}")
    return text.lower()


async def run(args: argparse.Namespace) -> int:
    from allot_audit.replay import Extras, Options, replay

    options = Options(
        verify=args.verify,
        until=args.until,
        since=getattr(args, "since", None) or 0,
        expect_head=args.expect_head,
        anchor_keys=getattr(args, "anchor_key", None),
        max_unanchored=getattr(args, "max_unanchored", None),
        check_snapshots=getattr(args, "check_snapshots", 0) or 0,
        config_dir=args.config_dir,
        live=not args.no_live,
        jobs=getattr(args, "jobs", None) or os.cpu_count() or 1,
    )
    bound = getattr(args, "enactment_bound", None)
    code, report = await replay(
        options, lambda line: _say(args, line), Extras(refused=_refused, enacted=_enactment(bound))
    )
    return _finish(args, report, code)


async def _refused(store: EventStore, head: int) -> tuple[str, Any]:
    from allot_stack.explain import refused_counts, refused_line

    counts = await refused_counts(store, until=head)
    return refused_line(counts), counts


def _enactment(bound: float | None) -> Extra:
    async def enacted(store: EventStore, head: int) -> tuple[str, Any] | None:
        from allot_cli.enactment_bound import DEFAULT_BOUND
        from allot_stack.enactment import verify_report

        return await verify_report(
            store,
            until=head,
            now=time.time_ns() // 1000,
            bound=int((DEFAULT_BOUND if bound is None else bound) * 1e6),
        )

    return enacted


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.json:
        print(line, flush=True)


def _finish(args: argparse.Namespace, report: Mapping[str, object], code: int) -> int:
    if args.json:
        print(json.dumps(report, indent=2))
    elif code:
        print("replay verification FAILED", file=sys.stderr)
    return code


def cmd_replay(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))


def register(subparsers: Any) -> None:
    from allot_cli.enactment_bound import DEFAULT_BOUND, bound_seconds

    p = subparsers.add_parser(
        "replay", help="rebuild projections from the log; --verify proves every decision"
    )
    p.add_argument(
        "--verify", action="store_true", help="check the hash chain, every decision and live projections"
    )
    p.add_argument(
        "--expect-head",
        type=head_hash,
        metavar="HASH",
        help="hash the log head must have (from an earlier audit: 64 hex digits)",
    )
    p.add_argument(
        "--anchor-key",
        action="append",
        metavar="PATH",
        help="public key (PEM) that signs the log's checkpoints; repeat for rotated keys "
        "(default: ALLOT_ANCHOR_PUBLIC_KEYS, else <state dir>/anchor.pub)",
    )
    p.add_argument(
        "--max-unanchored",
        type=event_count,
        metavar="EVENTS",
        help="fail when more than this many events follow the newest signed checkpoint",
    )
    p.add_argument("--until", type=log_position, help="stop at this log position")
    p.add_argument(
        "--since",
        type=log_position,
        metavar="POSITION",
        help="with --verify: re-derive each service's decisions from its newest snapshot at or before POSITION "
        "(checked by re-deriving it); the hash chain and signed checkpoints are still checked in full",
    )
    p.add_argument(
        "--check-snapshots",
        type=event_count,
        default=0,
        metavar="N",
        help="with --verify: re-derive each service's newest N snapshots from the log and record each verdict "
        "(snapshot.verified); a service never restarts from a snapshot that did not reproduce",
    )
    p.add_argument(
        "--enactment-bound",
        type=bound_seconds,
        default=DEFAULT_BOUND,
        metavar="SECONDS",
        help="Kubernetes mode: report decisions older than this with no recorded outcome in the cluster (default 300)",
    )
    p.add_argument("--config-dir", type=directory, help="directory with <service>.yaml decision configs")
    p.add_argument("--no-live", action="store_true", help="do not compare with running services")
    p.add_argument(
        "--jobs",
        type=processes,
        default=os.cpu_count() or 1,
        help="processes verifying at once (default: one per CPU); the result is the same for any number",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_replay)
