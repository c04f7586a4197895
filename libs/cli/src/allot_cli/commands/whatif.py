"""``allot what-if``: what the scheduler would do, asked of the live state and answered in memory (docs/whatif.md).

``allot what-if -f pod.yaml [--at POSITION]``: would the pods fit now (or at POSITION), where, under which quota
(and borrowing from whom), what they would preempt or wait for, and the nearest miss when they do not fit.
``allot what-if --config FILE --window FROM:TO``: every decision of the recorded window that would differ under
another configuration of one service. Neither writes anything to the log.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
from pathlib import Path
from typing import Any

from allot_cli.files import directory, file_name
from allot_runtime.flags import log_position


def window(text: str) -> str:
    """``--window FROM:TO``: its form (:func:`allot_sim.whatif.window.span`) is checked before any work starts (that
    TO is in the log, once the log is read)."""
    from allot_sim.whatif.window import WindowSyntaxError, span

    try:
        span(text)
    except WindowSyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def cmd_whatif(args: argparse.Namespace) -> int:
    from allot_audit.replay_configs import load_configs, plan
    from allot_intake.errors import UsageError
    from allot_sim.whatif import render, run
    from allot_sim.whatif.facts import NodeLabels
    from allot_stack.connect import endpoints, find_state_dir

    if not args.filename and not args.window:
        raise UsageError("what-if: give -f FILE (pods to try) or --config FILE --window FROM:TO")
    if args.filename and args.window:
        raise UsageError("what-if: -f and --window ask different questions; give one")
    if args.window and not (args.config or args.node_labels):
        raise UsageError(
            "--window: needs --config FILE or --node-labels (the change to replay the window under)"
        )
    if args.window and args.at:
        raise UsageError("--at: only with -f (a window says its own positions)")
    config = run.changed_config(args.config) if args.config else None
    facts = NodeLabels.parse(args.node_labels) if args.node_labels else None
    state_dir = find_state_dir()
    config_dir = Path(args.config_dir) if args.config_dir else (state_dir / "config" if state_dir else None)
    configs = functools.partial(plan, files=load_configs(config_dir))
    url = endpoints().database_url
    report: run.WindowReport | run.PodsReport
    if args.window:
        window = asyncio.run(
            run.window(
                url,
                args.window,
                plan=configs,
                config=config or ("device-allocator", {}),
                config_path=args.config or "",
                facts=facts,
            )
        )
        report, lines = window, render.window_lines(window)
    else:
        pods = asyncio.run(
            run.pods(
                url,
                args.filename,
                at=args.at,
                plan=configs,
                config=config,
                config_path=args.config or "",
                facts=facts,
            )
        )
        report, lines = pods, render.report_lines(pods)
    if args.output == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "what-if",
        help="would these pods fit now, or what a config change would decide differently (writes nothing)",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        type=file_name,
        help="YAML of the Pods (and PodGroups) to try ('-' for stdin); repeatable",
    )
    p.add_argument(
        "--at",
        type=log_position,
        metavar="POSITION",
        help="answer as of this log position (default: the head)",
    )
    p.add_argument(
        "--config",
        type=file_name,
        metavar="FILE",
        help="one service's changed settings (service: {…}, or a placement config alone), merged over its recorded "
        "configuration",
    )
    p.add_argument(
        "--window",
        type=window,
        metavar="FROM:TO",
        help="with --config and/or --node-labels: re-decide the recorded positions FROM..TO and list every decision that would differ",
    )
    p.add_argument(
        "--node-labels",
        metavar="SELECTOR:KEY=VALUE[,…]",
        help="set labels on the nodes SELECTOR matches (k=v,… or *) as if recorded so, e.g. "
        "'pool=h100:node.koordinator.sh/gpu-partition-policy=Prefer'; with --window, device-allocator replays it "
        "unless --config names another service",
    )
    p.add_argument(
        "--config-dir",
        type=directory,
        help="directory with <service>.yaml for a log recorded before services recorded theirs",
    )
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_whatif)
