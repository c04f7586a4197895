"""A file a command cannot write is one error line naming the flag (an output path that is a directory or in a
missing one), and a database URL whose port is not one or whose IPv6 host is not closed is refused naming the
setting, before any connection is tried."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from allot_cli.files import write_lines
from allot_cli.main import main
from allot_intake.errors import InputError
from allot_runtime.settings import database_url_problem


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgres://:::", "':::' is not host:port (an IPv6 address is written in brackets"),
        (
            "postgresql://a@127.0.0.1:99999/x",
            "port '99999' of '127.0.0.1:99999' is not a port from 1 to 65535",
        ),
        ("postgresql://a@127.0.0.1:0/x", "port '0' of '127.0.0.1:0' is not a port from 1 to 65535"),
        ("postgresql://a@h:abc/x", "port 'abc' of 'h:abc' is not a port"),
        ("postgresql://a:secret@[::1/x", "does not close it with ']' in 'postgresql://***@[::1/x'"),
        ("postgresql://a@h1:5432,h2:70000/x", "port '70000' of 'h2:70000'"),
    ],
)
def test_a_database_url_whose_address_cannot_be_used_is_refused(url: str, problem: str) -> None:
    assert problem in (database_url_problem(url) or "")


def test_a_nats_url_whose_address_cannot_be_used_is_refused_naming_the_setting() -> None:
    from allot_bus.adapters.natsauth import NatsAuth, problems

    for url, problem in (
        ("nats://127.0.0.1:99999", "port '99999' of '127.0.0.1:99999' is not a port from 1 to 65535"),
        ("nats://[::1", "does not close it with ']'"),
    ):
        [(setting, reason)] = problems(NatsAuth(), url)
        assert setting == "ALLOT_NATS_URL" and problem in reason
    assert problems(NatsAuth(), "nats://[::1]:4222") == problems(NatsAuth(), "nats://h:4222") == []


def test_database_urls_libpq_takes_are_taken() -> None:
    for url in (
        "postgresql://a@127.0.0.1:5432/x",
        "postgresql://a@[::1]:5432/x",
        "postgresql://a@[::1]/x",
        "postgresql://a@h1:5432,h2:5433/x",
        "postgresql:///x?host=/run/postgresql",
        "postgres://a@h/x",
    ):
        assert database_url_problem(url) is None, url


def test_a_bad_database_port_is_one_error_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOT_DATABASE_URL", "postgresql://allot@127.0.0.1:abc/allot")
    monkeypatch.setattr(sys, "argv", ["allot", "events", "tail"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(
        "allot: error: ALLOT_DATABASE_URL: port 'abc' of '127.0.0.1:abc'"
    )


def test_an_output_file_that_cannot_be_written_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^-o/--output .*: cannot write it: Is a directory$"):
        write_lines(tmp_path, ["x\n"], flag="-o/--output")
    with pytest.raises(InputError, match="cannot write it: No such file or directory"):
        write_lines(tmp_path / "missing" / "x", ["x\n"], flag="--state")
    write_lines(tmp_path / "ok", ["a\n", "b\n"], flag="-o")
    assert (tmp_path / "ok").read_text() == "a\nb\n"


def test_sim_run_output_that_cannot_be_written_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = Path(__file__).parents[3] / "examples" / "quota" / "01-borrow-and-wait.yaml"
    monkeypatch.setattr(sys, "argv", ["allot", "sim", "run", str(scenario), "--state", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    assert capsys.readouterr() == (
        "",
        f"allot: error: --state {tmp_path}: is a directory; give the file to write\n",
    )


def test_sim_trace_outputs_that_cannot_be_written_are_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for flag, value, said in (
        ("--summary-json", tmp_path, f"--summary-json {tmp_path}: is a directory; give the file to write"),
        ("--out", blocker, f"--out {blocker}: is a file; give a directory to write in"),
        (
            "--plot",
            blocker / "x.png",
            f"--plot {blocker / 'x.png'}: its directory {blocker} is a file, not a directory",
        ),
    ):
        argv = ["allot", "sim", "trace", "--nodes", __file__, "--pods", __file__, flag, str(value)]
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 1
        assert f"allot: error: {said}" in capsys.readouterr().err


def test_log_archive_names_a_bad_until_or_out_as_such_not_as_an_unreadable_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from allot_audit import log_segments
    from allot_contracts.errors import InvalidInput

    class Store:
        async def close(self) -> None:
            pass

    async def refused(*_: object, **__: object) -> None:
        raise InvalidInput(
            [("--until", "must be a position of the log, 1 to its head 35, not 99")], subject="log archive"
        )

    monkeypatch.setattr(log_segments, "bounded_store", lambda _url: Store())
    monkeypatch.setattr(log_segments, "archive", refused)
    monkeypatch.setenv("ALLOT_DATABASE_URL", "postgresql://allot@127.0.0.1:1/allot")
    monkeypatch.chdir(tmp_path)  # --out segments is created there before the log is read
    monkeypatch.setattr(sys, "argv", ["allot", "log", "archive", "--until", "99", "--out", "segments"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "allot: error: log archive: --until: must be a position of the log, 1 to its head 35, not 99\n"
    )


@pytest.mark.parametrize(
    ("argv", "flag", "name", "directory"),
    [
        (["sim", "run", "SCENARIO", "-o"], "-o/--output", "decisions.jsonl", False),
        (["sim", "run", "SCENARIO", "--state"], "--state", "state.json", False),
        (["sim", "run", "SCENARIO", "--out-dir"], "--out-dir", "run", True),
        (
            ["sim", "trace", "--nodes", __file__, "--pods", __file__, "--summary-json"],
            "--summary-json",
            "s.json",
            False,
        ),
        (["sim", "trace", "--nodes", __file__, "--pods", __file__, "--plot"], "--plot", "p.png", False),
        (["sim", "trace", "--nodes", __file__, "--pods", __file__, "--out"], "--out", "trace", True),
        (["schema", "--out"], "--out", "schemas", True),
        (["decisions", "-o"], "-o/--output", "decisions.jsonl", False),
        (["log", "archive", "--until", "5", "--out"], "--out", "segments", True),
    ],
    ids=[
        "sim-run-o",
        "sim-run-state",
        "sim-run-out-dir",
        "trace-summary",
        "trace-plot",
        "trace-out",
        "schema",
        "decisions",
        "log-archive",
    ],
)
def test_an_output_in_a_directory_that_does_not_exist_is_refused_before_any_work_and_nothing_is_created(
    argv: list[str],
    flag: str,
    name: str,
    directory: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario = Path(__file__).parents[3] / "examples" / "quota" / "01-borrow-and-wait.yaml"
    missing = tmp_path / "nope" / "x"
    output = missing / name
    monkeypatch.setenv("ALLOT_DATABASE_URL", "postgresql://allot@127.0.0.1:1/allot")  # never reached
    with pytest.raises(SystemExit) as exited:
        main([str(scenario) if arg == "SCENARIO" else arg for arg in argv] + [str(output)])
    assert exited.value.code == 1
    above = "its parent directory" if directory else "its directory"
    assert capsys.readouterr() == (
        "",
        f"allot: error: {flag} {output}: {above} {missing} does not exist (create it first)\n",
    )
    assert not (tmp_path / "nope").exists()  # nothing was made of the mistyped path


def _unusable_state_dirs(tmp_path: Path, given_by: str) -> tuple[Path, Path, list[tuple[Path, str]]]:
    """A state directory in a missing directory and one that is a file, each with its refusal naming ``given_by``."""
    missing = tmp_path / "missing" / "state"
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    return (
        missing,
        a_file,
        [
            (
                missing,
                f"{given_by} {missing}: its parent directory {missing.parent} does not exist (create it first)",
            ),
            (a_file, f"{given_by} {a_file}: is a file; give a directory to write in"),
        ],
    )


@pytest.mark.parametrize("command", ["up", "demo"])
def test_a_state_dir_in_a_missing_directory_is_refused_and_nothing_is_made(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--state-dir`` is created when missing, but not in a directory that is missing (a mistyped path), as every
    path a command writes; a file there is refused too. No stack is started."""
    from allot_stack import control

    started: list[Path] = []

    def start_stack(state_dir: Path, **_: object) -> None:
        started.append(state_dir)
        raise SystemExit(99)

    monkeypatch.setattr(control, "start_stack", start_stack)
    monkeypatch.setattr(
        f"allot_cli.commands.{'stack' if command == 'up' else 'demo'}.start_stack", start_stack, raising=False
    )
    missing, a_file, refusals = _unusable_state_dirs(tmp_path, "--state-dir")
    for state_dir, said in (
        *refusals,
        (a_file / "state", f"its parent directory {a_file} is a file, not a directory"),
    ):
        monkeypatch.setattr(sys, "argv", ["allot", command, "--state-dir", str(state_dir)])
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 1
        assert said in capsys.readouterr().err
    assert started == [] and not missing.parent.exists()
    monkeypatch.setattr(sys, "argv", ["allot", command, "--state-dir", str(tmp_path / "new")])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 99 and started == [tmp_path / "new"]  # in a directory that exists: taken


def test_an_allot_state_dir_in_a_missing_directory_is_refused_naming_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ALLOT_STATE_DIR`` is taken by ``allot up`` as ``--state-dir`` is: created when missing, but not in a directory
    that is missing; the error names the variable. No stack is started."""
    started: list[Path] = []

    def start_stack(state_dir: Path, **_: object) -> None:
        started.append(state_dir)
        raise SystemExit(99)

    monkeypatch.setattr("allot_cli.commands.stack.start_stack", start_stack)
    monkeypatch.setattr(sys, "argv", ["allot", "up"])
    missing, _, refusals = _unusable_state_dirs(tmp_path, "ALLOT_STATE_DIR")
    for state_dir, said in refusals:
        monkeypatch.setenv("ALLOT_STATE_DIR", str(state_dir))
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == 1
        assert capsys.readouterr().err == f"allot: error: {said}\n"
    assert started == [] and not missing.parent.exists()
    monkeypatch.setenv("ALLOT_STATE_DIR", str(tmp_path / "new"))
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 99 and started == [tmp_path / "new"]  # in a directory that exists: taken
