"""``allot up`` / ``down`` / ``status`` (the dev stack), ``allot migrate`` and ``allot relay`` (a process)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from allot_cli.connect import default_state_dir, endpoints, find_state_dir, read_stack
from allot_cli.devstack import bin_path, describe, supervise
from allot_cli.errors import UsageError


def _alive(pid: int | None) -> bool:
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


def _ready(port: int | None) -> bool:
    if not port:
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until_ready(state_dir: Path, *, timeout: float, quiet: bool = False) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        stack = read_stack(state_dir)
        if stack is not None:
            status = str(stack.get("status", ""))
            if status != last and not quiet:
                print(f"  … {status}", file=sys.stderr, flush=True)
                last = status
            if status == "failed":
                raise UsageError(f"the stack failed to start: {stack.get('error')}\n"
                                 f"{_tail(state_dir / 'logs' / 'supervisor.log')}")
            if status == "ready":
                processes = stack.get("processes", {})
                waiting = [n for n, p in processes.items() if not _ready(p.get("port"))]
                if not waiting:
                    return stack
                if waiting and f"waiting for {len(waiting)}" not in last and not quiet:
                    last = f"waiting for {len(waiting)} process(es) to become ready"
                    print(f"  … {last}", file=sys.stderr, flush=True)
            if not _alive(stack.get("supervisor_pid")) and status not in ("ready",):
                raise UsageError(f"the supervisor exited: {_tail(state_dir / 'logs' / 'supervisor.log')}")
        time.sleep(0.2)
    raise UsageError(f"the stack was not ready within {timeout:.0f}s; see {state_dir / 'logs'}")


def start_stack(state_dir: Path, *, timeout: float = 180.0, quiet: bool = False) -> dict[str, Any]:
    existing = read_stack(state_dir)
    if existing and _alive(existing.get("supervisor_pid")) and existing.get("status") not in ("stopped", "failed"):
        if not quiet:
            print(f"a stack is already running in {state_dir}", file=sys.stderr)
        return wait_until_ready(state_dir, timeout=timeout, quiet=True)
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    (state_dir / "stack.json").unlink(missing_ok=True)
    log = open(state_dir / "logs" / "supervisor.log", "ab")  # noqa: SIM115
    subprocess.Popen([bin_path("allot"), "_supervise", "--state-dir", str(state_dir)], stdout=log,
                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    return wait_until_ready(state_dir, timeout=timeout, quiet=quiet)


def stop_stack(state_dir: Path, *, timeout: float = 60.0) -> bool:
    stack = read_stack(state_dir)
    pid = stack.get("supervisor_pid") if stack else None
    if not stack or not _alive(pid):
        return False
    os.kill(int(pid), signal.SIGTERM)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        raise UsageError(f"the supervisor (pid {pid}) did not stop within {timeout:.0f}s")
    return True


def print_summary(stack: dict[str, Any]) -> None:
    for line in describe(stack):
        print(line)
    print(f"{'PROCESS':<22}{'PID':>8}  {'HTTP':<24}{'RESTARTS':>9}  LOG")
    for name, info in stack.get("processes", {}).items():
        http = f"127.0.0.1:{info.get('port')}" if info.get("port") else "-"
        print(f"{name:<22}{info.get('pid') or '-':>8}  {http:<24}{info.get('restarts', 0):>9}  {info.get('log')}")


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = Path(args.state_dir).resolve() if args.state_dir else default_state_dir()
    print(f"starting the Allot dev stack in {state_dir}", file=sys.stderr)
    started = time.monotonic()
    stack = start_stack(state_dir, timeout=args.timeout)
    print(f"ready in {time.monotonic() - started:.1f}s\n", file=sys.stderr)
    print_summary(stack)
    print("\nnext: allot apply -f examples/demo/cluster.yaml; allot get pods; allot down")
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
    if stack is None or not _alive(stack.get("supervisor_pid")):
        print("no running stack (start one with `allot up`)")
        return 1
    rows = []
    for name, info in stack.get("processes", {}).items():
        rows.append({"name": name, "pid": info.get("pid"), "alive": _alive(info.get("pid")),
                     "ready": _ready(info.get("port")), "restarts": info.get("restarts", 0)})
    log_state = asyncio.run(_log_state(stack["database_url"]))
    if args.json:
        print(json.dumps({"stack": stack, "processes": rows, "log": log_state}, indent=2))
        return 0
    for line in describe(stack):
        print(line)
    print(f"log        head position {log_state['head']}")
    print(f"\n{'PROCESS':<22}{'PID':>8}  {'READY':<7}{'RESTARTS':>9}  {'CHECKPOINT':>10}")
    for row in rows:
        checkpoint = log_state["checkpoints"].get(row["name"], "-")
        print(f"{row['name']:<22}{row['pid'] or '-':>8}  {('yes' if row['ready'] else 'no'):<7}"
              f"{row['restarts']:>9}  {checkpoint:>10}")
    return 0 if all(r["ready"] for r in rows) else 1


async def _log_state(url: str) -> dict[str, Any]:
    from allot_eventstore.postgres import PostgresEventStore

    store = PostgresEventStore.connect(url)
    try:
        return {"head": (await store.head())[0], "checkpoints": await store.checkpoints()}
    finally:
        await store.close()


def cmd_supervise(args: argparse.Namespace) -> int:
    return supervise(Path(args.state_dir).resolve())


def cmd_migrate(args: argparse.Namespace) -> int:
    from allot_eventstore.migrate import migrate
    from allot_eventstore.urls import redact

    url = endpoints().database_url
    before, after = asyncio.run(migrate(url))
    print(f"{redact(url)}: schema {before or 'empty'} → {after}" if before != after else
          f"{redact(url)}: schema already at {after}")
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    from allot_cli.relay_process import run_relay

    if not os.environ.get("ALLOT_DATABASE_URL"):
        raise UsageError("ALLOT_DATABASE_URL is required")
    asyncio.run(run_relay())
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
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    supervise_p = subparsers.add_parser("_supervise", help=argparse.SUPPRESS)
    supervise_p.add_argument("--state-dir", required=True)
    supervise_p.set_defaults(func=cmd_supervise)
    migrate_p = subparsers.add_parser("migrate", help="upgrade the event-log schema (safe to run concurrently)")
    migrate_p.set_defaults(func=cmd_migrate)
    relay = subparsers.add_parser("relay", help="run the log → JetStream relay process")
    relay.set_defaults(func=cmd_relay)
