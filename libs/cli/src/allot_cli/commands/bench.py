"""``allot bench``: benchmarks that print one JSON object of figures (ratios against baselines run in the same job)."""

from typing import Any

from allot_cli import bench
from allot_cli._groups import register_group


def register(subparsers: Any) -> None:
    register_group(subparsers, name="bench", help_text="run a benchmark and print its figures", package=bench)
