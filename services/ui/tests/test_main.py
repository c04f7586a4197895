"""The web view's process surface: ``allot-ui`` and ``python -m allot_ui`` take the arguments ``allot ui`` takes, and
stop with one line and exit code 2 when there is no log to read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def _without_log(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    return env | {"ALLOT_STATE_DIR": str(tmp_path / "no-stack"), "HOME": str(tmp_path)}


def test_the_entry_points_take_the_views_arguments() -> None:
    for argv in ([str(BIN / "allot-ui"), "--help"], [sys.executable, "-m", "allot_ui", "--help"]):
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert all(flag in result.stdout for flag in ("--host", "--port", "--poll")), argv


def test_allot_ui_without_a_log_stops_at_once(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "allot-ui")],
        env=_without_log(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "allot-ui: no event log configured: start the dev stack with `allot up`, or set ALLOT_DATABASE_URL"
    )


def test_allot_ui_with_a_log_it_cannot_reach_stops_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(BIN / "allot-ui"), "--port", "18097"],
        env=_without_log(tmp_path) | {"ALLOT_DATABASE_URL": "postgresql://allot@127.0.0.1:1/allot"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "allot-ui: cannot read the event log: PostgreSQL at postgresql://allot@127.0.0.1:1/allot unavailable:"
        )
    ), result.stderr
    assert "Traceback" not in result.stderr
