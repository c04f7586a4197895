"""``allot sim run`` writes files only where asked: ``--out-dir`` takes both, the current directory stays clean."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from allot_cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_out_dir_takes_the_decisions_and_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd, out = tmp_path / "cwd", tmp_path / "run"  # created: its parent exists
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(SystemExit) as done:
        main(["sim", "run", str(ROOT / "examples/gangs/01-gang-of-four.yaml"), "--out-dir", str(out)])
    assert done.value.code == 0
    assert os.listdir(cwd) == []
    assert sorted(os.listdir(out)) == ["decisions.jsonl", "state.json"]
    assert json.loads((out / "state.json").read_text())["pods"]
    assert all(json.loads(line)["pod"] for line in (out / "decisions.jsonl").read_text().splitlines())


def test_the_readme_runs_the_simulator_without_writing_to_the_current_directory() -> None:
    line = next(x for x in (ROOT / "README.md").read_text().splitlines() if "allot sim run" in x)
    assert "--out-dir" in line and " -o " not in line and "--state" not in line
