"""What ``allot up`` tells the user to type next works: ``allot`` only when it is on PATH."""

from __future__ import annotations

from pathlib import Path

from allot_cli.commands.stack import command_name


def test_the_hint_names_the_allot_that_was_run() -> None:
    repo = Path("/work/repo")
    assert command_name("/work/repo/.venv/bin/allot", repo, None) == ".venv/bin/allot"
    assert command_name("/work/repo/.venv/bin/allot", repo, "/usr/local/bin/allot") == ".venv/bin/allot"
    assert command_name("/work/repo/.venv/bin/allot", repo, "/work/repo/.venv/bin/allot") == "allot"
    assert command_name("/opt/allot/bin/allot", repo, None) == "/opt/allot/bin/allot"
