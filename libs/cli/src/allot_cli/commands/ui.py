"""``allot ui``: the web audit view, read-only, served from the log (the process is ``allot_ui.main``; the pages
are ``allot_ui.server``)."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_ui(args: argparse.Namespace) -> int:
    from allot_stack.connect import endpoints
    from allot_ui.main import run

    return run(endpoints().database_url, args, "allot ui")


def register(subparsers: Any) -> None:
    from allot_ui.main import add_arguments

    p = subparsers.add_parser("ui", help="serve the web audit view (read-only) of the event log")
    add_arguments(p)
    p.set_defaults(func=cmd_ui)
