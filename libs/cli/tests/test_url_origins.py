"""A server the CLI cannot use is reported naming where its URL came from: the variable (``ALLOT_DATABASE_URL``,
``ALLOT_NATS_URL``) when it is set, else the dev stack's ``stack.json`` the URL was read from, never a variable
that is not set."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from allot_cli.main import main
from allot_runtime.embedded import EmbeddedNats
from allot_testing.servers import private_nats

NOTHING_THERE = "postgresql://allot@127.0.0.1:1/allot"


def _stack(state_dir: Path, *, database_url: str = NOTHING_THERE, nats_url: str) -> Path:
    """A ``stack.json`` as ``allot up`` writes it (the fields the CLI reads), found through ALLOT_STATE_DIR."""
    state_dir.mkdir()
    path = state_dir / "stack.json"
    fields = {
        "status": "ready",
        "state_dir": str(state_dir),
        "database_url": database_url,
        "nats_url": nats_url,
    }
    path.write_text(json.dumps(fields))
    return path


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "argv", ["allot", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0)


@pytest.fixture
def no_urls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for variable in ("ALLOT_DATABASE_URL", "ALLOT_NATS_URL", "ALLOT_NATS_PREFIX", "ALLOT_NATS_STREAM"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("ALLOT_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _from_stack(stack_json: Path) -> str:
    """The end of an error about a URL read from the dev stack's ``stack.json``."""
    return (
        f" (the URL is from {stack_json}: check the dev stack with `allot status`, or start the dev stack with "
        "`allot up`)\n"
    )


def test_a_log_from_the_dev_stack_that_cannot_be_reached_names_its_stack_json(
    no_urls: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_json = _stack(no_urls, nats_url="nats://127.0.0.1:4222")
    assert _run(["get", "pods"], monkeypatch) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"allot: error: PostgreSQL at {NOTHING_THERE} unavailable:"
    )  # the database it names
    assert err.endswith(_from_stack(stack_json))
    assert "ALLOT_DATABASE_URL" not in err and "Traceback" not in err


def test_a_nats_from_the_dev_stack_that_does_not_answer_names_its_stack_json(
    no_urls: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from allot_cli.commands import events
    from allot_runtime.embedded import free_port
    from allot_stack import connect

    async def caught_up(*_: object, **__: object) -> tuple[list[object], int]:
        return [], 0

    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    stack_json = _stack(no_urls, nats_url=url)
    monkeypatch.setattr(connect, "on_log", caught_up)
    monkeypatch.setattr(events, "NATS_WAIT_S", 0.5)
    assert _run(["events", "tail", "--follow"], monkeypatch) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"allot: error: cannot connect to NATS at {url} within 0.5 s: ")
    assert err.endswith(_from_stack(stack_json))
    assert "ALLOT_NATS_URL" not in err and "ALLOT_DATABASE_URL" not in err


def test_each_url_names_its_own_origin_when_one_is_set_and_the_other_read_from_the_stack(
    no_urls: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database URL set in the environment is refused naming ALLOT_DATABASE_URL even when NATS's comes from the
    dev stack, and a NATS URL from the stack that cannot work is refused naming the stack's file."""
    from allot_stack.connect import endpoints

    stack_json = _stack(no_urls, nats_url="garbage")
    monkeypatch.setenv("ALLOT_DATABASE_URL", "mysql://allot@127.0.0.1/allot")
    assert _run(["events", "tail", "--follow"], monkeypatch) == 2
    assert capsys.readouterr().err.startswith("allot: error: ALLOT_DATABASE_URL: not a PostgreSQL URL")
    monkeypatch.setenv("ALLOT_DATABASE_URL", NOTHING_THERE)
    ep = endpoints(need_nats=True)
    assert (ep.database_from, ep.nats_from) == ("ALLOT_DATABASE_URL", str(stack_json))
    assert _run(["events", "tail", "--follow"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"allot: error: {stack_json}: 'garbage' is not nats://host:port or tls://host:port")
    assert "ALLOT_NATS_URL" not in err


def test_a_database_url_in_the_stack_that_is_not_postgresqls_names_its_stack_json(
    no_urls: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_json = _stack(no_urls, database_url="mysql://allot@127.0.0.1/allot", nats_url="nats://h:4222")
    assert _run(["get", "pods"], monkeypatch) == 2
    assert capsys.readouterr().err.startswith(f"allot: error: {stack_json}: not a PostgreSQL URL")


@pytest.fixture
def nats_with_password(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A NATS server that requires a user and password (the dev stack's)."""
    with private_nats(tmp_path) as server:
        yield server


@pytest.mark.integration
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (
            "nats://allot:not-the-password@127.0.0.1:{port}",
            "the server refused the user and password in {stack}",
        ),
        ("tls://allot:{password}@127.0.0.1:{port}", "is tls:// but the server does not require TLS"),
    ],
    ids=["credentials", "tls"],
)
def test_a_nats_from_the_dev_stack_that_refuses_the_connection_names_its_stack_json(
    no_urls: Path,
    nats_with_password: EmbeddedNats,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    reason: str,
) -> None:
    """Refused credentials or TLS are a setting to fix, named where it is: the stack's file, not ALLOT_NATS_URL."""
    from allot_stack import connect

    async def caught_up(*_: object, **__: object) -> tuple[list[object], int]:
        return [], 0

    server = nats_with_password
    stack_json = _stack(no_urls, nats_url=url.format(port=server.port, password=server.password))
    monkeypatch.setattr(connect, "on_log", caught_up)
    assert _run(["events", "tail", "--follow"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("allot: error: NATS at ")
    assert f": {stack_json}: {reason.format(stack=stack_json)}" in err
    assert "ALLOT_NATS_URL" not in err and "not-the-password" not in err and server.password not in err
