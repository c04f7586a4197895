"""Exit codes as kubectl's: 1 for refused input (an unknown kind, an invalid selector, a file or config that cannot
be used), 2 for a command line that cannot be understood; one line on stderr, no traceback. None of these needs a
running stack: input is refused before anything connects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def allot(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("allot"))
    # no stack anywhere: a command that got as far as connecting would fail differently
    env = {"PATH": "/usr/bin:/bin", "ALLOT_STATE_DIR": str(cwd / "no-stack")}
    return subprocess.run([exe, *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["get", "secrets"], 1, 'doesn\'t have a resource type "secrets"'),
        (["describe", "secrets", "x"], 1, 'doesn\'t have a resource type "secrets"'),
        (["get", "pods", "--selector=tier in (a"], 1, "unbalanced parentheses"),
        (["get", "pods", "-l", "app=a b"], 1, "cannot read 'app=a b'"),
        (["describe", "pods"], 2, "the following arguments are required: NAME"),
        (["sim", "run", "missing.yaml"], 1, "cannot read missing.yaml"),
        (
            ["sim", "run", "scenario.yaml", "--config", "config.yaml"],
            1,
            "cannot read config: config.yaml must hold a mapping",
        ),
        (["sim", "run", "bad.yaml"], 1, "is not valid YAML"),
        (["get", "pods", "--no-such-flag"], 2, "unrecognized arguments"),
        (["completion", "tcsh"], 2, "invalid choice: 'tcsh'"),
    ],
)
def test_exit_codes(tmp_path: Path, argv: list[str], code: int, message: str) -> None:
    (tmp_path / "scenario.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n")
    (tmp_path / "config.yaml").write_text("- a list\n")
    (tmp_path / "bad.yaml").write_text("a: [\n")
    result = allot(*argv, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
