"""``allot webhook``: the validating and mutating admission webhooks over HTTPS, the process of
:mod:`allot_webhook.main` (``allot-webhook``; docs/kubernetes.md#admission-webhooks)."""

from __future__ import annotations

import argparse
from typing import Any

from allot_webhook.main import add_arguments, run


def cmd_webhook(args: argparse.Namespace) -> int:
    return run(args, "allot webhook")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("webhook", help="serve the validating and mutating admission webhooks (HTTPS)")
    add_arguments(p)
    p.set_defaults(func=cmd_webhook)
