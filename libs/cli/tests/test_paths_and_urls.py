"""Paths a command is given are checked before any work, and a file it cannot write is one error line: an output
path that is a directory or in a missing one names the flag."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from allot_cli.files import write_lines
from allot_cli.main import main
from allot_intake.errors import InputError


def test_an_output_file_that_cannot_be_written_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^-o/--output .*: cannot write it: Is a directory$"):
        write_lines(tmp_path, ["x\n"], flag="-o/--output")
    with pytest.raises(InputError, match="cannot write it: No such file or directory"):
        write_lines(tmp_path / "missing" / "x", ["x\n"], flag="--state")
    write_lines(tmp_path / "ok", ["a\n", "b\n"], flag="-o")
    assert (tmp_path / "ok").read_text() == "a\nb\n"


def test_sim_run_output_that_cannot_be_written_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = Path(__file__).parents[3] / "examples" / "quota" / "01-borrow-and-wait.yaml"
    monkeypatch.setattr(sys, "argv", ["allot", "sim", "run", str(scenario), "--state", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    assert f"allot: error: --state {tmp_path}: cannot write it: Is a directory" in capsys.readouterr().err
