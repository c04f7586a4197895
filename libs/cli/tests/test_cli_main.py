"""The ``allot`` entry point: only the invoked command is imported, the command table matches what the modules
register, and a reader that goes away (``| head``) ends the command quietly."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from allot_cli import commands
from allot_cli.main import COMMANDS, parser_for
from allot_stack.processes import bin_path


def _registered(module: str) -> dict[str, str | None]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(f"allot_cli.commands.{module}").register(sub)
    helps = {action.dest: action.help for action in sub._choices_actions}
    return {name: helps.get(name) for name in sub.choices}


@pytest.mark.parametrize("module", sorted(m.name for m in pkgutil.iter_modules(commands.__path__)))
def test_the_command_table_is_what_each_module_registers(module: str) -> None:
    registered = _registered(module)
    listed = {name: help_text for name, (mod, help_text) in COMMANDS.items() if mod == module}
    assert registered == listed


def test_every_command_parses_its_own_arguments() -> None:
    args = parser_for(["get", "pods", "-o", "json"]).parse_args(["get", "pods", "-o", "json"])
    assert (args.command, args.what, args.output) == ("get", "pods", "json")
    with pytest.raises(SystemExit):
        parser_for(["get", "--no-such-flag"]).parse_args(["get", "--no-such-flag"])


def _imported_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\nfrom allot_cli.main import parser_for\n"
        f"parser_for({argv!r})\n"
        "print(' '.join(m for m in sys.modules if m.startswith('allot_')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_help_imports_no_command_and_a_command_imports_only_itself() -> None:
    assert not {m for m in _imported_after(["--help"]) if m.startswith("allot_cli.commands.")}
    loaded = _imported_after(["get", "pods"])
    assert {m for m in loaded if m.startswith("allot_cli.commands.")} == {"allot_cli.commands.get"}
    engines = {"allot_placement", "allot_quota", "allot_gang"}
    assert not engines & loaded, "listing pods needs no scheduling engine"


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    # `allot schema` prints every event's JSON Schema (a lot of output) without needing a running stack
    allot = subprocess.Popen([bin_path("allot"), "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert allot.stdout is not None and allot.stderr is not None
    allot.stdout.close()  # what `| head` does once it has read enough: here, before the first line
    err = allot.stderr.read().decode()
    allot.stderr.close()
    assert allot.wait(timeout=60) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize("group", ["bench", "sim"])
def test_a_group_lists_each_subcommand_as_its_module_registers_it(group: str) -> None:
    from allot_cli import _groups

    package = importlib.import_module(f"allot_cli.{group}")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"{package.__name__}.{info.name}").register(sub)
        registered = {action.dest: action.help for action in sub._choices_actions}
        listed = _groups._listed(Path(package.__path__[0]) / f"{info.name}.py")
        if listed is not None:  # a module whose name or help is not a plain string is imported instead
            assert {listed[0]: listed[1]} == registered, info.name


def test_a_benchmark_imports_no_other_benchmark() -> None:
    loaded = _imported_after(["bench", "quota"])
    others = {m for m in loaded if m.startswith("allot_cli.bench.") and m != "allot_cli.bench.quota"}
    assert not others
