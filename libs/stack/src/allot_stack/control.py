"""Starting, stopping and inspecting a dev stack from outside its supervisor (``allot up`` / ``down`` / ``status`` /
``demo``, ``allot bench e2e``): spawn the supervisor and wait for every process to answer ``/readyz``, signal it, clean
up after one that died, and gather what ``allot status`` shows. What is said along the way goes to a
:class:`Reporter` (the command line prints it on stderr; :data:`SILENT` drops it)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

from allot_intake.errors import UsageError
from allot_runtime.secretfiles import private_dir
from allot_stack.connect import read_stack
from allot_stack.processes import (
    bin_path,
    cleanup_leftovers,
    pid_alive,
    supervisor_pid,
    supervisor_running,
)
from allot_stack.stackfile import StackFile


class Reporter(Protocol):
    """Where start-up progress (``show``, ended by ``done``) and notes go. ``tty``: progress is one line rewritten
    in place, so it says how many processes are ready rather than naming each as it becomes ready."""

    @property
    def tty(self) -> bool: ...

    def show(self, text: str) -> None: ...

    def note(self, text: str) -> None: ...

    def done(self) -> None: ...


class _Silent:
    tty = False

    def show(self, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def done(self) -> None:
        pass


SILENT: Reporter = _Silent()


class ProcessRow(TypedDict):
    """One process of the dev stack as ``allot status`` shows it."""

    name: str
    pid: int | None
    port: int | None
    alive: bool
    ready: bool
    restarts: int


class LogState(TypedDict):
    """The log head and the consumers' checkpoints (``error`` when PostgreSQL could not be read)."""

    head: int | None
    checkpoints: dict[str, int]
    error: NotRequired[str]


def ready(port: int | None) -> bool:
    """Does the process on ``port`` answer ``/readyz`` with 200?"""
    if not port:
        return False
    import http.client  # not urllib.request: its proxy and TLS machinery cost start-up, and this is local HTTP

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/readyz")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until_ready(
    state_dir: Path,
    *,
    timeout: float,
    reporter: Reporter = SILENT,
    proc: subprocess.Popen[bytes] | None = None,
) -> StackFile:
    """The stack's ``stack.json`` once every process answers ``/readyz``; :class:`UsageError` when the supervisor
    exits or reports a failure first, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    answered: set[str] = set()
    try:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise UsageError(
                    f"the supervisor exited ({proc.returncode}): "
                    f"{_tail(state_dir / 'logs' / 'supervisor.log')}"
                )
            stack = read_stack(state_dir)
            if stack is not None:
                status = str(stack.get("status", ""))
                if status == "failed":
                    raise UsageError(
                        f"the stack failed to start: {stack.get('error')}\n"
                        f"{_tail(state_dir / 'logs' / 'supervisor.log')}"
                    )
                if status == "ready":
                    processes = stack.get("processes", {})
                    for name, info in processes.items():
                        if name not in answered and ready(info.get("port")):
                            answered.add(name)
                            if not reporter.tty:
                                reporter.show(f"{name} ready")
                    if len(answered) == len(processes):
                        return stack
                    waiting = sorted(set(processes) - answered)
                    reporter.show(
                        f"{len(answered)}/{len(processes)} processes ready (waiting for {', '.join(waiting)})"
                        if reporter.tty
                        else "waiting for the processes to become ready"
                    )
                else:
                    reporter.show(status)
                    if not supervisor_running(state_dir):
                        raise UsageError(
                            f"the supervisor exited: {_tail(state_dir / 'logs' / 'supervisor.log')}"
                        )
            time.sleep(0.2)
    finally:
        reporter.done()
    raise UsageError(f"the stack was not ready within {timeout:.0f}s; see {state_dir / 'logs'}")


def clean_leftovers(state_dir: Path, *, reporter: Reporter = SILENT) -> bool:
    """Stop what a supervisor that died (SIGKILL, OOM) left running; says what it did. False if nothing was left."""
    messages = cleanup_leftovers(state_dir)
    if messages:
        reporter.note(f"the supervisor of the stack in {state_dir} is gone; cleaning up after it:")
        for message in messages:
            reporter.note(f"  {message}")
    return bool(messages)


def start_stack(
    state_dir: Path,
    *,
    timeout: float = 180.0,
    reporter: Reporter = SILENT,
    env: dict[str, str] | None = None,
) -> StackFile:
    """Start a supervisor for ``state_dir`` (or join the one running there) and wait until the stack is ready."""
    if supervisor_running(state_dir):
        existing = read_stack(state_dir)
        if existing is None or existing["status"] not in ("stopping", "stopped", "failed"):
            reporter.note(
                f"a stack is already running in {state_dir}"
                + (
                    f" (degraded: {', '.join(existing['degraded'])})"
                    if existing and existing.get("degraded")
                    else ""
                )
            )
            return wait_until_ready(state_dir, timeout=timeout)
        deadline = time.monotonic() + 30  # it is shutting down: let it finish
        while supervisor_running(state_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
    clean_leftovers(state_dir, reporter=reporter)
    private_dir(state_dir / "logs")  # and the state directory: it will hold the servers' passwords
    (state_dir / "stack.json").unlink(missing_ok=True)
    log = open(state_dir / "logs" / "supervisor.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [bin_path("allot"), "_supervise", "--state-dir", str(state_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    log.close()
    try:
        return wait_until_ready(state_dir, timeout=timeout, reporter=reporter, proc=proc)
    except (UsageError, KeyboardInterrupt) as exc:
        # what this call started and did not become ready (or was interrupted) is stopped, not left holding its
        # ports, the database and the state directory's lock
        stopped = supervisor_running(state_dir) and stop_stack(state_dir)
        if not stopped and proc.poll() is None:  # still starting, its lock not taken yet: it is ours to end
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            stopped = clean_leftovers(state_dir) or True
        if isinstance(exc, UsageError) and stopped:
            raise UsageError(
                f"{exc}\nwhat had started is stopped again (a slow machine may need a longer --timeout)"
            ) from exc
        raise


def stop_stack(state_dir: Path, *, timeout: float = 60.0, reporter: Reporter = SILENT) -> bool:
    """Stop the stack's supervisor (it stops everything else). Signals only a supervisor that holds the state
    directory's lock; if none does, stops the leftovers of one that died. False if there was nothing to stop."""
    pid = supervisor_pid(state_dir)
    if pid is None:
        return clean_leftovers(state_dir, reporter=reporter)
    if pid < 0:
        raise UsageError(f"the stack in {state_dir} is locked by another allot command; try again")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and supervisor_running(state_dir):
        time.sleep(0.2)
    if supervisor_running(state_dir):
        raise UsageError(f"the supervisor (pid {pid}) did not stop within {timeout:.0f}s")
    pid_alive(pid)  # reap it if it is our child (allot demo)
    return True


def process_rows(stack: StackFile) -> list[ProcessRow]:
    """Each process of ``stack.json``: is it alive, does it answer ``/readyz``, how often it was restarted."""
    return [
        {
            "name": name,
            "pid": info.get("pid"),
            "port": info.get("port"),
            "alive": pid_alive(info.get("pid")),
            "ready": ready(info.get("port")),
            "restarts": info.get("restarts", 0),
        }
        for name, info in stack.get("processes", {}).items()
    ]


def log_state(url: str) -> LogState:
    """The log head and every consumer's checkpoint, or the error that kept PostgreSQL from answering."""
    try:
        return asyncio.run(read_log_state(url))
    except Exception as exc:  # PostgreSQL down: say so, and still show the rest
        return {"head": None, "checkpoints": {}, "error": f"{type(exc).__name__}: {exc}"}


async def read_log_state(url: str) -> LogState:
    """The log head and every consumer's checkpoint. Read with asyncpg alone: the event store's module would load
    the contracts and the engines' codecs, several times the cost of the rest of ``allot status``. The two tables
    are the store's (``log_head``, ``checkpoints``: :class:`allot_eventstore.postgres.PostgresEventStore` ``head``
    and ``checkpoints``)."""
    import asyncpg

    plain = url.replace(
        "postgresql+asyncpg://", "postgresql://", 1
    )  # the form the services' settings may use
    connection = await asyncpg.connect(plain, timeout=5)
    try:
        head = await connection.fetchval("SELECT position FROM log_head WHERE id = 1")
        rows = await connection.fetch("SELECT consumer, position FROM checkpoints ORDER BY consumer")
    finally:
        await connection.close()
    return {"head": int(head or 0), "checkpoints": {r["consumer"]: int(r["position"]) for r in rows}}
