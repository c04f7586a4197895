"""Command groups whose subcommands live in their own package (``allot bench …``, ``allot sim …``).

Each module of the group package exports ``register(subparsers)`` adding one subcommand with ``func`` set. Only the
subcommand on the command line is imported (a benchmark imports the engines it drives: seconds of start-up); the
others are listed with the name and help their ``register`` gives, read from the module's source without running it.
:data:`invoked` is the command line being parsed (``None``: import every subcommand, as the completion scripts need).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any

invoked: list[str] | None = None


def subcommands(
    subparsers: Any, name: str, *, help_text: str, description: str | None = None
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """``allot <name> SUBCOMMAND``: the command (``help_text`` in the list of commands) and its subcommands, one of
    which must be given (``args.<name>_command``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=description)
    sub = parser.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")
    sub.required = True
    return sub


def register_group(subparsers: Any, *, name: str, help_text: str, package: ModuleType) -> None:
    sub = subcommands(subparsers, name, help_text=help_text, description=help_text)
    wanted = _wanted(name)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        path = Path(package.__path__[0]) / f"{info.name}.py"
        listed = _listed(path) if wanted is not None and path.exists() else None
        if listed is not None and listed[0] != wanted:
            sub.add_parser(listed[0], help=listed[1], add_help=False)
        else:
            importlib.import_module(f"{package.__name__}.{info.name}").register(sub)


def _wanted(group: str) -> str | None:
    """The subcommand of ``group`` on the command line being parsed ("" when none is), or None to import all."""
    if invoked is None:
        return None
    words = [w for w in invoked if not w.startswith("-")]
    if group in words[:1]:
        return words[1] if len(words) > 1 else ""
    return None


# Calls that add a benchmark's subcommand named after its module (``allot_cli.bench``), whose name is the file's.
NAMED_BY_MODULE = ("benchmark_parser", "history_parser")


def _listed(path: Path) -> tuple[str, str] | None:
    """``(name, help)`` of the ``add_parser(NAME, help=…)`` call in a subcommand module's source, or of its
    ``benchmark_parser(…, help=…)`` call (named after the module), when both are plain strings (else None: the
    module is imported)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        called = getattr(node.func, "attr", None) or getattr(node.func, "id", "")
        helps = [k.value for k in node.keywords if k.arg == "help"]
        if not helps or not isinstance(helps[0], ast.Constant):
            continue
        if called == "add_parser" and node.args and isinstance(node.args[0], ast.Constant):
            return str(node.args[0].value), str(helps[0].value)
        if called in NAMED_BY_MODULE:
            return path.stem, str(helps[0].value)
    return None
