"""``allot up`` / ``down`` / ``status`` (the dev stack), ``allot migrate`` and ``allot relay`` (a process)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from allot_cli.files import check_output, file_name
from allot_intake.errors import InputError, UsageError
from allot_runtime.flags import seconds
from allot_stack.connect import (
    STATE_DIR_VARIABLE,
    db_bounds,
    default_state_dir,
    endpoints,
    find_state_dir,
    read_stack,
)
from allot_stack.control import LogState, ProcessRow, log_state, process_rows, start_stack, stop_stack
from allot_stack.processes import find_leftovers, supervisor_running
from allot_stack.summary import describe

if TYPE_CHECKING:
    from allot_contracts.jsonvalue import JsonObject
    from allot_stack.stackfile import StackFile


class Progress:
    """Start-up progress on stderr: on a terminal, one line rewritten in place; otherwise one line per phase and one
    per process as it becomes ready (logs stay readable). Notes are printed as they are, unless ``quiet``."""

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

    def note(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr)

    def done(self) -> None:
        if self.tty and self.last and not self.quiet:
            print(file=sys.stderr, flush=True)


def print_summary(stack: StackFile) -> None:
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


def new_state_dir(given: str | None) -> Path:
    """Where ``allot up`` starts the stack: ``--state-dir``, else ``ALLOT_STATE_DIR``, else ``./.allot``. Created if
    missing, in a directory that exists (never a mistyped path made whole): an error naming the flag or the variable
    otherwise."""
    if given:
        check_output(Path(given).resolve(), flag="--state-dir", directory=True)
        return Path(given).resolve()
    state_dir = default_state_dir()
    if os.environ.get(STATE_DIR_VARIABLE):
        check_output(state_dir, flag=STATE_DIR_VARIABLE, directory=True)
    return state_dir


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = new_state_dir(args.state_dir)
    print(f"starting the Allot dev stack in {state_dir}", file=sys.stderr)
    started = time.monotonic()
    stack = start_stack(state_dir, timeout=args.timeout, reporter=Progress())
    print(f"ready in {time.monotonic() - started:.1f}s\n", file=sys.stderr)
    print_summary(stack)
    allot = command_name(sys.argv[0], Path.cwd(), shutil.which("allot"))
    print(f"\nnext: {allot} apply -f examples/demo/cluster.yaml; {allot} get pods; {allot} down")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve() if args.state_dir else find_state_dir()
    if state_dir is None or not stop_stack(state_dir, reporter=Progress()):
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
    rows = process_rows(stack)
    log: LogState = log_state(stack["database_url"])
    healthy = all(r["ready"] for r in rows) and not stack.get("degraded") and "error" not in log
    output = "json" if args.json else getattr(args, "output", "table")
    if output in ("json", "yaml"):  # no passwords
        print(structured(stack_status(stack, rows, log, healthy=healthy), output))
        return 0
    print("\n".join(status_lines(stack, rows, log)))
    return 0 if healthy else 1


def stack_status(stack: StackFile, rows: list[ProcessRow], log: LogState, *, healthy: bool) -> JsonObject:
    """``allot status -o json|yaml``: the stack as an ``allot.dev/v1alpha1`` ``StackStatus`` (docs/cli.md): what it
    was started with in ``spec`` (URLs without passwords), how it is in ``status``."""
    from allot_stack.summary import redact
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
    body: JsonObject = clean({"spec": spec, "status": status})
    return {"apiVersion": ALLOT_API, "kind": "StackStatus", "metadata": {"name": name}, **body}


def structured(obj: JsonObject, output: str) -> str:
    if output == "json":
        return json.dumps(obj, indent=2)
    import yaml

    return str(yaml.safe_dump(obj, sort_keys=False)).rstrip("\n")


def status_lines(stack: StackFile, rows: list[ProcessRow], log: LogState) -> list[str]:
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


def cmd_supervise(args: argparse.Namespace) -> int:
    from allot_stack.supervisor import supervise

    return supervise(Path(args.state_dir).resolve())


def cmd_migrate(args: argparse.Namespace) -> int:
    from allot_eventstore.bounds import DB_READ_TIMEOUT_VARIABLE
    from allot_eventstore.migrate import migrate
    from allot_eventstore.urls import redact

    url = endpoints().database_url
    before, after = asyncio.run(
        migrate(url, read_timeout=db_bounds()[0], timeouts_from=DB_READ_TIMEOUT_VARIABLE)
    )
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
    up.add_argument(
        "--state-dir",
        type=file_name,
        help="where data and logs go, created if missing in a directory that exists (default: ./.allot or "
        "ALLOT_STATE_DIR)",
    )
    up.add_argument("--timeout", type=seconds, default=180.0, help="seconds to wait for readiness")
    up.set_defaults(func=cmd_up)
    down = subparsers.add_parser("down", help="stop the dev stack")
    down.add_argument("--state-dir", type=file_name)
    down.set_defaults(func=cmd_down)
    status = subparsers.add_parser("status", help="show the dev stack's processes, readiness and checkpoints")
    status.add_argument("--state-dir", type=file_name)
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
    supervise_p.add_argument("--state-dir", type=file_name, required=True)
    supervise_p.set_defaults(func=cmd_supervise)
    migrate_p = subparsers.add_parser(
        "migrate", help="upgrade the event-log schema (safe to run concurrently)"
    )
    migrate_p.set_defaults(func=cmd_migrate)
    relay = subparsers.add_parser("relay", help="run the log → JetStream relay process")
    relay.set_defaults(func=cmd_relay)
