"""``allot up`` / ``down`` / ``status`` (the dev stack), ``allot migrate`` and ``allot relay`` (a process)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from allot_cli.stackprocs import (
    bin_path,
    cleanup_leftovers,
    find_leftovers,
    pid_alive,
    supervisor_pid,
    supervisor_running,
)
from allot_cli.stackview import describe
from allot_intake.errors import InputError, UsageError
from allot_runtime.secretfiles import private_dir
from allot_stack.connect import default_state_dir, endpoints, find_state_dir, read_stack


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


def _ready(port: int | None) -> bool:
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


class Progress:
    """Start-up progress on stderr: on a terminal, one line rewritten in place; otherwise one line per phase and one
    per process as it becomes ready (logs stay readable)."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last = ""

    def show(self, text: str) -> None:
        if self.quiet or text == self.last:
            return
        self.last = text
        if self.tty:
            print(f"\r\033[K  … {text}", end="", file=sys.stderr, flush=True)
        else:
            print(f"  … {text}", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty and self.last and not self.quiet:
            print(file=sys.stderr, flush=True)


def wait_until_ready(
    state_dir: Path, *, timeout: float, quiet: bool = False, proc: subprocess.Popen[bytes] | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    progress = Progress(quiet=quiet)
    ready: set[str] = set()
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
                        if name not in ready and _ready(info.get("port")):
                            ready.add(name)
                            if not progress.tty:
                                progress.show(f"{name} ready")
                    if len(ready) == len(processes):
                        return stack
                    waiting = sorted(set(processes) - ready)
                    progress.show(
                        f"{len(ready)}/{len(processes)} processes ready (waiting for {', '.join(waiting)})"
                        if progress.tty
                        else "waiting for the processes to become ready"
                    )
                else:
                    progress.show(status)
                    if not supervisor_running(state_dir):
                        raise UsageError(
                            f"the supervisor exited: {_tail(state_dir / 'logs' / 'supervisor.log')}"
                        )
            time.sleep(0.2)
    finally:
        progress.done()
    raise UsageError(f"the stack was not ready within {timeout:.0f}s; see {state_dir / 'logs'}")


def clean_leftovers(state_dir: Path, *, quiet: bool = False) -> bool:
    """Stop what a supervisor that died (SIGKILL, OOM) left running; says what it did. False if nothing was left."""
    messages = cleanup_leftovers(state_dir)
    if messages and not quiet:
        print(f"the supervisor of the stack in {state_dir} is gone; cleaning up after it:", file=sys.stderr)
        for message in messages:
            print(f"  {message}", file=sys.stderr)
    return bool(messages)


def start_stack(
    state_dir: Path, *, timeout: float = 180.0, quiet: bool = False, env: dict[str, str] | None = None
) -> dict[str, Any]:
    if supervisor_running(state_dir):
        existing = read_stack(state_dir) or {}
        if existing.get("status") not in ("stopping", "stopped", "failed"):
            if not quiet:
                print(
                    f"a stack is already running in {state_dir}"
                    + (f" (degraded: {', '.join(existing['degraded'])})" if existing.get("degraded") else ""),
                    file=sys.stderr,
                )
            return wait_until_ready(state_dir, timeout=timeout, quiet=True)
        deadline = time.monotonic() + 30  # it is shutting down: let it finish
        while supervisor_running(state_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
    clean_leftovers(state_dir, quiet=quiet)
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
    return wait_until_ready(state_dir, timeout=timeout, quiet=quiet, proc=proc)


def stop_stack(state_dir: Path, *, timeout: float = 60.0) -> bool:
    """Stop the stack's supervisor (it stops everything else). Signals only a supervisor that holds the state
    directory's lock; if none does, stops the leftovers of one that died. False if there was nothing to stop."""
    pid = supervisor_pid(state_dir)
    if pid is None:
        return clean_leftovers(state_dir)
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


def print_summary(stack: dict[str, Any]) -> None:
    for line in describe(stack):
        print(line)
    print(f"{'PROCESS':<22}{'PID':>8}  {'HTTP':<24}{'RESTARTS':>9}  LOG")
    for name, info in stack.get("processes", {}).items():
        http = f"127.0.0.1:{info.get('port')}" if info.get("port") else "-"
        print(
            f"{name:<22}{info.get('pid') or '-':>8}  {http:<24}{info.get('restarts', 0):>9}  {info.get('log')}"
        )


def command_name(argv0: str, cwd: Path, on_path: str | None) -> str:
    """How to type this ``allot`` again: ``allot`` when that is what PATH finds, else its path (relative to the
    current directory when it is below it, as ``.venv/bin/allot``)."""
    me = Path(argv0).absolute()
    if on_path is not None and Path(on_path).absolute() == me:
        return "allot"
    try:
        return str(me.relative_to(cwd.absolute()))
    except ValueError:
        return str(me)


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve() if args.state_dir else default_state_dir()
    print(f"starting the Allot dev stack in {state_dir}", file=sys.stderr)
    started = time.monotonic()
    stack = start_stack(state_dir, timeout=args.timeout)
    print(f"ready in {time.monotonic() - started:.1f}s\n", file=sys.stderr)
    print_summary(stack)
    allot = command_name(sys.argv[0], Path.cwd(), shutil.which("allot"))
    print(f"\nnext: {allot} apply -f examples/demo/cluster.yaml; {allot} get pods; {allot} down")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve() if args.state_dir else find_state_dir()
    if state_dir is None or not stop_stack(state_dir):
        print("no running stack found", file=sys.stderr)
        return 0
    print(f"stopped the stack in {state_dir}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve() if args.state_dir else find_state_dir()
    stack = read_stack(state_dir)
    if stack is None or state_dir is None or not supervisor_running(state_dir):
        print("no running stack (start one with `allot up`)")
        leftovers = find_leftovers(state_dir, stack) if state_dir is not None and stack is not None else []
        if leftovers:
            print(
                "its supervisor died, but these processes are still running: "
                + ", ".join(f"{x.name} (pid {x.pid})" for x in leftovers)
                + "; `allot down` stops them"
            )
        return 1
    rows: list[ProcessRow] = []
    for name, info in stack.get("processes", {}).items():
        rows.append(
            {
                "name": name,
                "pid": info.get("pid"),
                "port": info.get("port"),
                "alive": pid_alive(info.get("pid")),
                "ready": _ready(info.get("port")),
                "restarts": info.get("restarts", 0),
            }
        )
    try:
        log_state: LogState = asyncio.run(_log_state(stack["database_url"]))
    except Exception as exc:  # PostgreSQL down: say so, and still show the rest
        log_state = {"head": None, "checkpoints": {}, "error": f"{type(exc).__name__}: {exc}"}
    healthy = all(r["ready"] for r in rows) and not stack.get("degraded") and "error" not in log_state
    output = "json" if args.json else getattr(args, "output", "table")
    if output in ("json", "yaml"):  # no passwords
        print(structured(stack_status(stack, rows, log_state, healthy=healthy), output))
        return 0
    print("\n".join(status_lines(stack, rows, log_state)))
    return 0 if healthy else 1


def stack_status(
    stack: dict[str, Any], rows: list[ProcessRow], log: LogState, *, healthy: bool
) -> dict[str, Any]:
    """``allot status -o json|yaml``: the stack as an ``allot.dev/v1alpha1`` ``StackStatus`` (docs/cli.md): what it
    was started with in ``spec`` (URLs without passwords), how it is in ``status``."""
    from allot_cli.stackview import redact
    from allot_views.objects import ALLOT_API, clean

    checkpoints = log.get("checkpoints") or {}
    spec = {
        "stateDir": stack.get("state_dir"),
        "databaseURL": redact(stack["database_url"]) if stack.get("database_url") else None,
        "natsURL": redact(stack["nats_url"]) if stack.get("nats_url") else None,
        "natsPrefix": stack.get("nats_prefix"),
        "natsStream": stack.get("nats_stream"),
    }
    status = {
        "phase": stack.get("status"),
        "healthy": healthy,
        "degraded": stack.get("degraded"),
        "logHead": log.get("head"),
        "logError": log.get("error"),
        "processes": [{**r, "checkpoint": checkpoints.get(r["name"])} for r in rows],
    }
    name = str(stack.get("state_dir") or "stack")
    body: dict[str, Any] = clean({"spec": spec, "status": status})
    return {"apiVersion": ALLOT_API, "kind": "StackStatus", "metadata": {"name": name}} | body


def structured(obj: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(obj, indent=2)
    import yaml

    return str(yaml.safe_dump(obj, sort_keys=False)).rstrip("\n")


def status_lines(stack: dict[str, Any], rows: list[ProcessRow], log: LogState) -> list[str]:
    """``allot status``: the stack, the log head, then one line per process with its HTTP port (``/readyz``,
    ``/metrics``, ``/state``), readiness, restarts and checkpoint."""
    lines = describe(stack)
    lines.append(
        f"log        unavailable: {log['error']}"
        if "error" in log
        else f"log        head position {log['head']}"
    )
    lines.append(f"\n{'PROCESS':<22}{'PID':>8}  {'PORT':>5}  {'READY':<7}{'RESTARTS':>9}  {'CHECKPOINT':>10}")
    for row in rows:
        checkpoint = log["checkpoints"].get(row["name"], "-")
        lines.append(
            f"{row['name']:<22}{row['pid'] or '-':>8}  {row.get('port') or '-':>5}  "
            f"{('yes' if row['ready'] else 'no'):<7}{row['restarts']:>9}  {checkpoint:>10}"
        )
    return lines


async def _log_state(url: str) -> LogState:
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


def cmd_supervise(args: argparse.Namespace) -> int:
    from allot_cli.devstack import supervise

    return supervise(Path(args.state_dir).resolve())


def cmd_migrate(args: argparse.Namespace) -> int:
    from allot_eventstore.migrate import migrate
    from allot_eventstore.urls import redact

    url = endpoints().database_url
    before, after = asyncio.run(migrate(url))
    print(
        f"{redact(url)}: schema {before or 'empty'} → {after}"
        if before != after
        else f"{redact(url)}: schema already at {after}"
    )
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    from allot_relay.main import run_relay
    from allot_relay.settings import AnchorSettingsError

    if not os.environ.get("ALLOT_DATABASE_URL"):
        raise UsageError("ALLOT_DATABASE_URL is required")
    try:
        asyncio.run(run_relay())
    except AnchorSettingsError as exc:
        raise InputError(str(exc)) from exc
    return 0


def register(subparsers: Any) -> None:
    up = subparsers.add_parser("up", help="start the dev stack (PostgreSQL, NATS, relay, seven services)")
    up.add_argument("--state-dir", help="where data and logs go (default: ./.allot or ALLOT_STATE_DIR)")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    up.set_defaults(func=cmd_up)
    down = subparsers.add_parser("down", help="stop the dev stack")
    down.add_argument("--state-dir")
    down.set_defaults(func=cmd_down)
    status = subparsers.add_parser("status", help="show the dev stack's processes, readiness and checkpoints")
    status.add_argument("--state-dir")
    status.add_argument("--json", action="store_true", help="the same as -o json")
    status.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default="table",
        help="json/yaml: an allot.dev/v1alpha1 StackStatus object",
    )
    status.set_defaults(func=cmd_status)
    supervise_p = subparsers.add_parser("_supervise")  # no help: not listed
    supervise_p.add_argument("--state-dir", required=True)
    supervise_p.set_defaults(func=cmd_supervise)
    migrate_p = subparsers.add_parser(
        "migrate", help="upgrade the event-log schema (safe to run concurrently)"
    )
    migrate_p.set_defaults(func=cmd_migrate)
    relay = subparsers.add_parser("relay", help="run the log → JetStream relay process")
    relay.set_defaults(func=cmd_relay)
