"""``scripts/dev`` re-syncs an unchanged environment without touching it: a command running from ``.venv`` (the dev
stack, a test run) must not see ``.venv/bin/allot`` disappear under it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_resyncing_an_unchanged_environment_keeps_it() -> None:
    allot = ROOT / ".venv" / "bin" / "allot"
    if not (ROOT / ".tools" / "bin" / "uv").exists() or not allot.exists():
        pytest.skip("no environment made by scripts/dev here (run the suite with `scripts/dev test`)")
    before = allot.stat()
    subprocess.run(
        [str(ROOT / "scripts" / "dev"), "setup"],
        check=True,
        capture_output=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")},
    )
    after = allot.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
