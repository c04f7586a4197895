"""Start-up: ``allot X --help`` (and ``allot status``, ``allot completion``) import only the invoked command and no
driver, migration tool or engine; every command and subcommand has a description in its help."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from allot_cli.main import full_parser

HEAVY = (
    "alembic",
    "sqlalchemy",
    "asyncpg",
    "nats",
    "msgspec",
    "allot_eventstore",
    "allot_bus",
    "allot_placement",
)


@pytest.mark.parametrize(
    "argv",
    [
        "get --help",
        "describe --help",
        "events tail --help",
        "status --help",
        "up --help",
        "down --help",
        "migrate --help",
        "relay --help",
        "completion bash",
        "sim --help",
        "sim run --help",
        "bench --help",
        "replay --help",
        "decisions --help",
        "schema --help",
        "quota tree --help",
        "explain --help",
        "report usage --help",
    ],
)
def test_help_imports_no_driver_or_engine(argv: str) -> None:
    code = (
        "import sys\n"
        "from allot_cli.main import main\n"
        f"try:\n    main({argv.split()!r})\n"
        "except SystemExit:\n    pass\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


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


def test_every_command_and_subcommand_is_described() -> None:
    parsers = _parsers(full_parser())
    assert len(parsers) > 30
    undescribed = [path for path, sub, listed in parsers if not (sub.description and listed)]
    assert not undescribed, f"no description or no line in the listing: {undescribed}"
