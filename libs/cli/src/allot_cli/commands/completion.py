"""``allot completion bash|zsh|fish``: the shell completion script (see :mod:`allot_cli.completion`)."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.completion import SHELLS


def cmd_completion(args: argparse.Namespace) -> int:
    from allot_cli.completion import script
    from allot_cli.main import full_parser

    print(script(args.shell, full_parser()), end="")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh, fish)",
        description="bash: source <(allot completion bash); zsh: source <(allot completion zsh); "
        "fish: allot completion fish | source",
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=cmd_completion)
