"""``allot status``: a PORT column, the log state read as the store reads it, and ``-o json|yaml`` as an
``allot.dev/v1alpha1`` ``StackStatus``; its start-up imports none of the event store, contracts or engines."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from allot_cli.commands.stack import stack_status, status_lines
from allot_eventstore.postgres import PostgresEventStore
from allot_stack.control import read_log_state
from allot_testing.builders import an_event

STACK = {
    "state_dir": "/tmp/s",
    "status": "ready",
    "database_url": "postgresql://allot:secret@127.0.0.1:5432/allot",
    "nats_url": "nats://127.0.0.1:4222",
    "processes": {},
}
ROWS = [
    {"name": "binder", "pid": 41, "port": 18123, "alive": True, "ready": True, "restarts": 0},
    {"name": "relay", "pid": 42, "port": None, "alive": True, "ready": False, "restarts": 2},
]


def test_the_log_state_is_what_the_store_says(database_url: str) -> None:
    async def run() -> tuple[dict[str, object], tuple[int, dict[str, int]]]:
        store = PostgresEventStore.connect(database_url)
        try:
            await store.append([an_event() for _ in range(3)], producer="api")
            await store.advance_checkpoint("binder", 2)
            return await read_log_state(database_url), ((await store.head())[0], await store.checkpoints())
        finally:
            await store.close()

    state, (head, checkpoints) = asyncio.run(run())
    assert state == {"head": head, "checkpoints": checkpoints} and head == 3 and checkpoints["binder"] == 2


def test_status_shows_each_process_port_and_a_stack_status_object() -> None:
    log = {"head": 7, "checkpoints": {"binder": 7}}
    lines = status_lines(STACK, ROWS, log)
    header = next(line for line in lines if "PROCESS" in line).split()
    assert header == ["PROCESS", "PID", "PORT", "READY", "RESTARTS", "CHECKPOINT"]
    assert next(line for line in lines if line.startswith("binder")).split() == [
        "binder",
        "41",
        "18123",
        "yes",
        "0",
        "7",
    ]
    assert next(line for line in lines if line.startswith("relay")).split() == [
        "relay",
        "42",
        "-",
        "no",
        "2",
        "-",
    ]
    obj = stack_status(STACK, ROWS, log, healthy=False)
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]) == (
        "allot.dev/v1alpha1",
        "StackStatus",
        {"name": "/tmp/s"},
    )
    assert obj["spec"]["databaseURL"] == "postgresql://allot:***@127.0.0.1:5432/allot"
    assert "secret" not in str(obj)
    assert obj["status"]["processes"][0] == ROWS[0] | {"checkpoint": 7}
    assert "port" not in obj["status"]["processes"][1] and "checkpoint" not in obj["status"]["processes"][1]
    assert (obj["status"]["healthy"], obj["status"]["logHead"]) == (False, 7)


def test_status_starts_without_the_event_store_or_the_engines(tmp_path: object) -> None:
    code = (
        "import sys\n"
        "from allot_cli.main import main\n"
        f"try:\n    main(['status', '--state-dir', {str(tmp_path)!r}])\n"
        "except SystemExit:\n    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('allot_eventstore', 'allot_contracts', 'msgspec', 'alembic', 'sqlalchemy', 'nats', 'allot_placement'))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_database_the_server_does_not_hold_is_one_error_line(database_url: str) -> None:
    from allot_eventstore.urls import with_database

    missing = with_database(database_url, "allot_no_such_database")
    result = subprocess.run(
        [sys.executable, "-c", "from allot_cli.main import main; main()", "get", "pods"],
        capture_output=True,
        text=True,
        env={**os.environ, "ALLOT_DATABASE_URL": missing},
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(
        'allot: error: PostgreSQL refused the connection: database "allot_no_such_database" does not exist'
    ), result.stderr
    assert "Traceback" not in result.stderr
