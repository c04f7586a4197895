"""Command groups whose subcommands live in their own package (``allot bench …``, ``allot sim …``).

Each module of the group package exports ``register(subparsers)`` adding one subcommand with ``func`` set.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from types import ModuleType
from typing import Any


def register_group(
    subparsers: Any, *, name: str, help_text: str, package: ModuleType
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
    sub = parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"{package.__name__}.{info.name}").register(sub)
    return parser
