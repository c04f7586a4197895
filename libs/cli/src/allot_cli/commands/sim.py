"""``allot sim``: run the scheduler offline on a scenario file or a cluster trace."""

from typing import Any

from allot_cli import sim
from allot_cli._groups import register_group


def register(subparsers: Any) -> None:
    register_group(
        subparsers, name="sim", help_text="what would the scheduler do: offline simulation", package=sim
    )
