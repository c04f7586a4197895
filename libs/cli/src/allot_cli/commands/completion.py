"""``allot completion bash|zsh|fish``: the shell completion script, as stored in the package (see
:mod:`allot_cli.completion`): printing it imports no command module."""

from __future__ import annotations

import argparse
from typing import Any

from allot_cli.completion import SHELLS


def cmd_completion(args: argparse.Namespace) -> int:
    from allot_cli.completion import stored

    print(stored(args.shell), end="")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh, fish)",
        description="a static script: save it once, and the shell loads it without running allot. "
        "bash: allot completion bash > ~/.local/share/bash-completion/completions/allot; "
        "zsh: allot completion zsh > ~/.zfunc/_allot (a directory of $fpath); "
        "fish: allot completion fish > ~/.config/fish/completions/allot.fish",
    )
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=cmd_completion)
