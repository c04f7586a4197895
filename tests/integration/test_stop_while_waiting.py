"""A process waiting for NATS (the server not up yet: it is waited for, never given up on) still stops at once on
SIGTERM, as Kubernetes and the dev stack's supervisor stop it, instead of being killed at the end of its grace period."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NO_NATS = "nats://127.0.0.1:1"  # nothing listens there


@pytest.mark.parametrize("binary", ["allot-device-allocator", "allot-relay"])
def test_sigterm_ends_a_process_that_waits_for_nats(binary: str, database_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {
        "ALLOT_DATABASE_URL": database_url,
        "ALLOT_NATS_URL": NO_NATS,
        "ALLOT_HTTP_HOST": "127.0.0.1",
        "ALLOT_HTTP_PORT": "0",
        "ALLOT_LOG_FORMAT": "text",
    }
    log = tmp_path / f"{binary}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / binary)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while "nats connection problem" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)  # past the database: connecting to NATS, retrying
        assert "nats connection problem" in log.read_text(), log.read_text()[-2000:]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0, log.read_text()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("binary", ["allot-device-allocator", "allot-relay"])
def test_a_database_url_that_is_not_postgresqls_is_refused_at_start(binary: str, tmp_path: Path) -> None:
    """Waiting cannot fix it: one line and exit code 2, as for any setting a process cannot use."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {
        "ALLOT_DATABASE_URL": "mysql://allot@127.0.0.1/allot",
        "ALLOT_NATS_URL": NO_NATS,
    }
    result = subprocess.run(
        [str(Path(sys.executable).parent / binary)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "invalid configuration: ALLOT_DATABASE_URL: not a PostgreSQL URL: 'mysql://allot@127.0.0.1/allot' "
        "(expected postgresql://user@host:port/database)"
    ), result.stderr


def test_up_that_is_not_ready_in_time_stops_what_it_started(database_url: str, tmp_path: Path) -> None:
    """``allot up`` with a NATS that never answers: after its ``--timeout`` it says so and stops the supervisor and
    the processes it started, instead of leaving them holding their ports, the database and the state directory."""
    from allot_stack.connect import read_stack
    from allot_stack.processes import pid_alive, supervisor_running

    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | {
        "ALLOT_DATABASE_URL": database_url,
        "ALLOT_NATS_URL": NO_NATS,
    }
    state = tmp_path / "stack"
    done = subprocess.run(
        [str(Path(sys.executable).parent / "allot"), "up", "--state-dir", str(state), "--timeout", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "not ready within 3s" in done.stderr and "stopped again" in done.stderr, done.stderr[-2000:]
    assert not supervisor_running(state)
    started = (read_stack(state) or {}).get("processes", {})
    assert started and not [name for name, info in started.items() if pid_alive(info.get("pid"))]
    assert "Traceback" not in done.stderr
