"""Start-up: ``allot X --help`` (and ``allot status``, ``allot completion``) import only the invoked command and no
driver, migration tool or engine; every command and subcommand has a description in its help."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from allot_cli.main import full_parser

# Packages and modules no ``--help`` may import: drivers, the migration tool, the engines and what loads them.
HEAVY = (
    "alembic",
    "sqlalchemy",
    "asyncpg",
    "nats",
    "msgspec",
    "yaml",
    "allot_eventstore",
    "allot_bus",
    "allot_placement",
    "allot_quota",
    "allot_gang",
    "allot_runtime.processor",
    "allot_intake.documents",
    "allot_intake.manifests",
    "allot_stack.pipeline",
    "allot_sim.simulator",
)


def _parsers(
    parser: argparse.ArgumentParser, path: str = ""
) -> list[tuple[str, argparse.ArgumentParser, str]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not name.startswith("_"):
                    out.append((f"{path} {name}".strip(), sub, helps.get(name, "")))
                    out += _parsers(sub, f"{path} {name}")
    return out


def _command_lines() -> list[str]:
    """``X --help`` for every command and subcommand (the full parser lists them), and ``completion bash``."""
    return [*(f"{path} --help" for path, _, _ in _parsers(full_parser())), "completion bash"]


def test_every_command_line_is_checked() -> None:
    lines = _command_lines()
    assert len(lines) > 30
    assert {"apply --help", "bench gang --help", "bench restart --help", "sim typical-pods --help"} <= set(
        lines
    )


@pytest.mark.parametrize("argv", _command_lines())
def test_help_imports_no_driver_or_engine(argv: str) -> None:
    code = (
        "import sys\n"
        "from allot_cli.main import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "loaded = set(sys.modules) | {m.split('.')[0] for m in sys.modules}\n"
        f"heavy = sorted(loaded & set({HEAVY!r}))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv.split()], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_command_and_subcommand_is_described() -> None:
    parsers = _parsers(full_parser())
    assert len(parsers) > 30
    undescribed = [path for path, sub, listed in parsers if not (sub.description and listed)]
    assert not undescribed, f"no description or no line in the listing: {undescribed}"
