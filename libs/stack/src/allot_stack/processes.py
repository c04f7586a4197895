"""Processes of the dev stack as seen from outside: is a pid ours, who owns a port, the state directory's lock
(held by the supervisor for its whole life; its liveness test), and cleaning up after a supervisor that died.
Used by the supervisor (:mod:`allot_stack.supervisor`) and by ``allot up`` / ``down`` / ``status``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from allot_runtime.secretfiles import private_dir, write_private
from allot_stack.connect import read_stack
from allot_stack.stackfile import StackFile

LOCK_FILE = "supervisor.lock"
STACK_MARKER = "ALLOT_DEVSTACK_DIR"  # in every service's environment: the state directory it belongs to


def bin_path(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


# -- processes and ports -------------------------------------------------------------------------------------------


def pid_alive(pid: int | None) -> bool:
    """Is the process running? Reaps it if it is our own exited child (a zombie is not alive)."""
    if not pid:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[-1].split()[0] == "Z":
                return False
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    args = raw.split(b"\0")
    if args and not args[-1]:
        args.pop()
    return [arg.decode(errors="replace") for arg in args]


def runs(pid: int, command: list[str]) -> bool:
    """Does ``pid`` run ``command``: its program (by name, directly or as the script of an interpreter) followed by
    ``command``'s arguments? ``command`` may be a prefix of the real command line."""
    argv = cmdline(pid)
    program = Path(command[0]).name
    for index, arg in enumerate(argv[:2]):
        if Path(arg).name == program:
            return argv[index + 1 : index + len(command)] == command[1:]
    return False


def has_env(pid: int, entry: str) -> bool:
    """Does ``pid``'s environment hold ``NAME=value``? False when it cannot be read."""
    try:
        return entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def listening_inodes(port: int) -> set[int] | None:
    """The socket inodes listening on TCP ``port`` (any address); None when /proc/net is not there (not Linux)."""
    inodes: set[int] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes if seen else None


def owns_port(pid: int, port: int) -> bool | None:
    """Does ``pid`` hold the socket listening on ``port``? None when that cannot be told (no /proc, no access)."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        return None
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:[") and int(link[8:-1]) in inodes:
                return True
    return False


def verify_listener(
    what: str, proc: subprocess.Popen[bytes] | None, port: int, log_path: Path | None
) -> None:
    """After a server started: the process we spawned is alive and is the one listening on ``port``.

    ``free_port()`` only finds a port that is free now; the server binds it later, and another process may take it
    in between. Then the port answers, but not from our server: fail clearly instead of using someone else's."""
    from allot_contracts.errors import Unavailable

    if proc is None or proc.poll() is not None:
        code = proc.returncode if proc is not None else None
        raise Unavailable(f"{what} exited ({code}) right after it started on port {port}; see {log_path}")
    if owns_port(proc.pid, port) is False:
        raise Unavailable(
            f"127.0.0.1:{port} answers, but not from the {what} we started (pid {proc.pid}): another "
            f"process took the port between choosing it and binding it; run `allot up` again"
        )


def _acquire(state_dir: Path, wait: float) -> IO[str] | None:
    """The state directory's lock (exclusive flock on ``supervisor.lock``), or None if another process holds it.
    ``wait`` rides out the moment in which a checker (:func:`supervisor_pid`) holds a shared lock to test it."""
    private_dir(state_dir)
    handle = open(state_dir / LOCK_FILE, "a+")  # noqa: SIM115 - not "w": that would truncate a holder's pid
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                return None
            time.sleep(0.05)


def _release(handle: IO[str]) -> None:
    with contextlib.suppress(OSError):
        handle.truncate(0)
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


@contextlib.contextmanager
def supervisor_lock(state_dir: Path) -> Any:
    """One supervisor per state directory: the lock is held for the supervisor's whole life and released by the
    kernel when it dies (the file is not inherited by the children). The file holds the holder's pid."""
    handle = _acquire(state_dir, wait=2.0)
    if handle is None:
        raise SystemExit(f"another stack is already running in {state_dir} (allot status / allot down)")
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    try:
        yield
    finally:
        _release(handle)


def _is_supervisor(pid: int, state_dir: Path) -> bool:
    argv = cmdline(pid)
    if not runs(pid, ["allot", "_supervise"]) or "--state-dir" not in argv[:-1]:
        return False
    return Path(argv[argv.index("--state-dir") + 1]).resolve() == state_dir.resolve()


def supervisor_pid(state_dir: Path) -> int | None:
    """The pid of the supervisor running on ``state_dir``, or None when none runs. Running means holding the lock:
    a non-blocking shared flock fails. (A pid in a stale ``stack.json`` proves nothing: it may have been reused.)
    -1: the lock is held but the holder's pid is unknown (another allot command is cleaning up leftovers)."""
    try:
        handle = open(state_dir / LOCK_FILE)  # noqa: SIM115
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass
        else:
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None
        for _ in range(10):  # a supervisor writes its pid right after taking the lock
            handle.seek(0)
            text = handle.read().strip()
            if text.isdigit():
                return int(text)
            time.sleep(0.05)
    stack = read_stack(state_dir)
    recorded = (
        stack.get("supervisor_pid") if stack is not None else None
    )  # a supervisor that wrote no pid to the lock
    return recorded if recorded and _is_supervisor(recorded, state_dir) else -1


def supervisor_running(state_dir: Path) -> bool:
    return supervisor_pid(state_dir) is not None


# -- leftovers of a supervisor that died ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Leftover:
    name: str
    pid: int
    sig: int = signal.SIGTERM


def _default_command(name: str) -> list[str]:
    return [bin_path("allot"), "relay"] if name == "relay" else [bin_path(f"allot-{name}")]


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        first = (data_dir / "postmaster.pid").read_text().splitlines()[0]
        return int(first)
    except (OSError, ValueError, IndexError):
        return None


def _postgres_command(data_dir: Path) -> list[str]:
    return ["postgres", "-D", str(data_dir)]


def clear_reused_postmaster_pid(data_dir: Path) -> str | None:
    """Remove ``postmaster.pid`` if the pid in it now belongs to a program that is not PostgreSQL at all (pid reuse:
    the embedded server would refuse to start). A dead pid is left alone: PostgreSQL itself handles that case
    safely (it also checks that no old backend still uses the shared memory); so is any live PostgreSQL process."""
    pid = _postmaster_pid(data_dir)
    if pid is None or not pid_alive(pid):
        return None
    argv = cmdline(pid)
    if not argv or runs(pid, ["postgres"]) or argv[0].startswith("postgres"):
        return (
            None  # a PostgreSQL (or a backend, whose title is "postgres: ..."), or unreadable: do not touch
        )
    with contextlib.suppress(OSError):
        (data_dir / "postmaster.pid").unlink()
        return f"removed {data_dir / 'postmaster.pid'}: its pid {pid} now belongs to another program"
    return None


def find_leftovers(state_dir: Path, stack: StackFile | None) -> list[Leftover]:
    """Processes recorded in ``stack.json`` (and ``postmaster.pid``) that are alive and still look like ours, in the
    order to stop them: the services, then NATS, then PostgreSQL. Call only while no supervisor runs."""
    recorded_dir = Path(stack["state_dir"] or state_dir) if stack is not None else state_dir
    marker = f"{STACK_MARKER}={recorded_dir}"
    found: list[Leftover] = []
    for name, info in (stack.get("processes", {}) if stack is not None else {}).items():
        pid = info.get("pid")
        command = info.get("command") or _default_command(name)
        if pid and pid_alive(pid) and runs(pid, command) and has_env(pid, marker):
            found.append(Leftover(name, int(pid)))
    pid = stack.get("nats", {}).get("pid") if stack is not None else None
    if pid and pid_alive(pid) and runs(pid, ["nats-server", "-c", str(recorded_dir / "nats.conf")]):
        found.append(Leftover("nats-server", int(pid)))
    data_dir = recorded_dir / "postgres"
    for pid in sorted(
        {
            p
            for p in (
                stack.get("postgres", {}).get("pid") if stack is not None else None,
                _postmaster_pid(state_dir / "postgres"),
            )
            if p
        }
    ):
        if pid_alive(pid) and runs(pid, _postgres_command(data_dir)):
            found.append(Leftover("PostgreSQL", int(pid), signal.SIGINT))  # SIGINT: fast shutdown
    return found


def _stop_pids(leftovers: list[Leftover], timeout: float) -> list[str]:
    messages = []
    signalled = []
    for item in leftovers:
        try:
            os.kill(item.pid, item.sig)
            signalled.append(item)
        except ProcessLookupError:
            pass
        except PermissionError:
            messages.append(f"could not stop {item.name} (pid {item.pid}): permission denied")
    deadline = time.monotonic() + timeout
    while any(pid_alive(item.pid) for item in signalled) and time.monotonic() < deadline:
        time.sleep(0.05)
    for item in signalled:
        if pid_alive(item.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(item.pid, signal.SIGKILL)
            messages.append(f"killed {item.name} (pid {item.pid}): it did not stop within {timeout:.0f}s")
        else:
            messages.append(f"stopped {item.name} (pid {item.pid})")
    return messages


def cleanup_leftovers(state_dir: Path, *, timeout: float = 15.0) -> list[str]:
    """Stop what a supervisor that died left running in ``state_dir`` and remove stale pid files; returns what was
    done (empty when nothing was left, or when a supervisor is running: then nothing is touched)."""
    if not (state_dir / LOCK_FILE).exists() and not (state_dir / "stack.json").exists():
        return []
    lock = _acquire(state_dir, wait=0.5)
    if lock is None:
        return []
    try:
        stack = read_stack(state_dir)
        leftovers = find_leftovers(state_dir, stack)
        messages: list[str] = []
        for group in (
            [x for x in leftovers if x.name not in ("nats-server", "PostgreSQL")],
            [x for x in leftovers if x.name == "nats-server"],
            [x for x in leftovers if x.name == "PostgreSQL"],
        ):
            if group:
                messages += _stop_pids(group, timeout)
        removed = clear_reused_postmaster_pid(state_dir / "postgres")
        if removed:
            messages.append(removed)
        if messages and stack is not None and stack.get("status") != "stopped":
            stack.update(
                {"status": "stopped", "error": "the supervisor had died; its leftovers were cleaned up"}
            )
            with contextlib.suppress(OSError):
                write_private(state_dir / "stack.json", json.dumps(stack, indent=2))
        return messages
    finally:
        _release(lock)
