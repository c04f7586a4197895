"""kube-sync's process surface: ``allot-kube-sync`` and ``python -m allot_kube_sync`` refuse a missing database with one
clear line and exit code 2, as the services do; ``allot kube-sync`` (the CLI's wrapper) says it as a usage error; all
three take the same flags."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
NO_DATABASE = {k: v for k, v in os.environ.items() if k != "ALLOT_DATABASE_URL"}


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=NO_DATABASE, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "argv",
    [[str(BIN / "allot-kube-sync")], [sys.executable, "-m", "allot_kube_sync", "--scheduler-name", "x"]],
)
def test_the_process_without_a_database_stops_at_its_settings(argv: list[str]) -> None:
    result = run(*argv)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "allot-kube-sync: invalid configuration: ALLOT_DATABASE_URL: is required "
        "(e.g. postgresql://user@host:5432/allot)"
    )


def test_the_cli_wrapper_reports_it_as_a_usage_error() -> None:
    result = run(str(BIN / "allot"), "kube-sync", "--kubeconfig", "/nowhere")
    assert result.returncode == 2
    assert result.stderr.strip() == "allot: error: ALLOT_DATABASE_URL is required"


@pytest.mark.parametrize("argv", [[str(BIN / "allot-kube-sync")], [str(BIN / "allot"), "kube-sync"]])
def test_both_commands_take_the_same_flags(argv: list[str]) -> None:
    helped = run(*argv, "--help")
    assert helped.returncode == 0
    assert "--scheduler-name" in helped.stdout and "--kubeconfig" in helped.stdout
    refused = run(*argv, "--no-such-flag")
    assert refused.returncode == 2 and "--no-such-flag" in refused.stderr
