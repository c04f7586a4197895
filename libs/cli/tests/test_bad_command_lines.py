"""Command lines the CLI cannot use are one error line, never a traceback: a number a flag cannot mean (a negative
count, no runs, a port past 65535, a timeout of nan) is a usage error naming the flag and the value, before any work
starts, while every value a flag documents is taken; an event log that cannot be reached or is not PostgreSQL's says
so."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from allot_cli.main import main, parser_for
from allot_runtime import flags
from allot_ui.main import add_arguments as ui_arguments
from allot_webhook.main import add_arguments as webhook_arguments


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["replay", "--until", "-5"], "argument --until: must be a log position ≥ 1, not '-5'"),
        (
            ["replay", "--verify", "--jobs", "0"],
            "argument --jobs: must be a number of processes from 1 to 1024, not '0'",
        ),
        (
            ["replay", "--verify", "--expect-head", "zz"],
            "argument --expect-head: must be a chain hash of 64 hex",
        ),
        (["events", "tail", "--last", "-3"], "argument --last: must be a number of events ≥ 0, not '-3'"),
        (["events", "tail", "--from-position", "x"], "argument --from-position: must be a log position ≥ 0"),
        (
            ["sim", "typical-pods", "--threshold", "500"],
            "must be a whole percentage from 1 to 100, not '500'",
        ),
        (
            ["sim", "trace", "--tune", "0"],
            "argument --tune: must be a number above 0 and at most 100, not '0'",
        ),
        (
            ["apply", "-f", "x.yaml", "--timeout", "-1"],
            "argument --timeout: must be a number of seconds above 0",
        ),
        (["up", "--timeout", "inf"], "argument --timeout: must be a number of seconds above 0, not 'inf'"),
        (["ui", "--port", "99999"], "argument --port: must be a port from 1 to 65535, not '99999'"),
        (["ui", "--poll", "0"], "argument --poll: must be a number of seconds above 0, not '0'"),
        (
            ["bench", "gang", "--gangs", "-1"],
            "argument --gangs: must be a whole number from 1 to 10000000, not '-1'",
        ),
        (
            ["bench", "quota", "--quotas", "0"],
            "argument --quotas: must be a whole number from 1 to 10000000, not '0'",
        ),
        (
            ["bench", "placement", "--repeat", "0"],
            "argument --repeat: must be a whole number from 1 to 10000000, not '0'",
        ),
        (
            ["bench", "placement", "--node-count", "-6"],
            "argument --node-count: must be a whole number from 0 to 10000000",
        ),
        (["bench", "e2e", "--duration", "nan"], "argument --duration: must be a number of seconds above 0"),
        (
            ["bench", "replay", "--runs", "0"],
            "argument --runs: must be a whole number from 1 to 10000000, not '0'",
        ),
        (["bench", "sampler", "--seconds", "-1"], "argument --seconds: must be a number of seconds above 0"),
        (
            ["events", "tail", "--from-position", str(2**63)],
            "--from-position: must be a log position ≥ 0 and at",
        ),
        (
            ["replay", "--until", "9" * 5000],
            f"at most 9223372036854775807, not '{'9' * 20}'...'{'9' * 10}' (5000 characters)",
        ),
        (["replay", "--verify", "--jobs", "2000"], "--jobs: must be a number of processes from 1 to 1024"),
        (["log", "verify-segment", "--jobs", str(10**20), "f"], "--jobs: must be a number of processes"),
        (["bench", "placement", "--shards", "5000"], "argument --shards: must be a number of processes"),
        (["bench", "append", "--events", str(10**30)], "--events: must be a whole number from 1 to 10000000"),
        (["bench", "gang", "--gangs", str(10**9)], "--gangs: must be a whole number from 1 to 10000000"),
        (["bench", "replay", "--events", "1,,2"], "'1,,2': each comma-separated size must be a whole number"),
        (["bench", "restart", "--events", "0"], "each comma-separated size must be a whole number from 1 to"),
        (["sim", "trace", "--seeds", "5-1"], "--seeds: '5-1' is not a range A-B or a comma list of seeds"),
        (["sim", "trace", "--seeds", ""], "--seeds: '' is not a range A-B or a comma list of seeds"),
        (
            ["sim", "trace", "--seeds", f"1-{10**20}"],
            "must be a whole number ≥ 0 and at most 9223372036854775807",
        ),
        (["sim", "trace", "--tune", "1e308"], "argument --tune: must be a number above 0 and at most 100"),
        (["decisions", "-o", ""], "argument -o/--output: must be a file name, not ''"),
        (["sim", "run", "s.yaml", "--state", "a\0b"], "argument --state: must be a file name"),
        (["replay", "--config-dir", "/nonexistent-dir"], "--config-dir: /nonexistent-dir does not exist"),
        (["what-if", "--config-dir", __file__], f"--config-dir: {__file__} is not a directory"),
        (["get", "pods", ""], "argument NAME: must be NAME or NAMESPACE/NAME, not ''"),
        (["get", "pods", "a/b/c"], "argument NAME: must be NAME or NAMESPACE/NAME, not 'a/b/c'"),
        (["get", "pods", "-n", ""], "argument -n/--namespace: must be a namespace (at most 63 lowercase"),
        (["describe", "pods", "x", "-n", "BAD NS"], "-n/--namespace: must be a namespace"),
        (["describe", "pods", "Web/x"], "argument NAME: NAMESPACE/NAME: the namespace must be a namespace"),
        (["explain", "pod", "/a"], "argument name: must be NAME or NAMESPACE/NAME, not '/a'"),
        (["explain", "node", "n\x01"], "argument name: must be NAME or NAMESPACE/NAME, not 'n\\x01'"),
        (["apply", "-f", ""], "argument -f/--filename: must be a file name, not ''"),
        (["schema", "--out", ""], "argument --out: must be a file name, not ''"),
        (["log", "archive", "--until", "5", "--out", ""], "argument --out: must be a file name, not ''"),
        (["log", "verify-segment", "a", ""], "argument FILE: must be a file name, not ''"),
        (["sim", "trace", "--summary-json", ""], "argument --summary-json: must be a file name, not ''"),
        (["bench", "gang", "--nodes", ""], "argument --nodes: must be a file name, not ''"),
        (["what-if", "--config", ""], "argument --config: must be a file name, not ''"),
    ],
)
def test_a_value_a_flag_cannot_mean_is_a_usage_error(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser_for(argv).parse_args(argv)
    assert exited.value.code == 2
    assert refusal in capsys.readouterr().err


@pytest.mark.parametrize(
    ("window", "refusal"),
    [
        (
            "9" * 5000,
            f"argument --window: '{'9' * 20}'...'{'9' * 10}' (5000 characters) is not FROM:TO (log positions; "
            "either may be left out): no ':' between them",
        ),
        (
            "1:" + "9" * 5000,
            f"argument --window: '1:{'9' * 18}'...'{'9' * 10}' (5002 characters) is not FROM:TO (log positions; "
            "either may be left out): must be a log position ≥ 1 and at most 9223372036854775807, "
            f"not '{'9' * 20}'...'{'9' * 10}' (5000 characters)",
        ),
        (
            "0:",
            "argument --window: '0:' is not FROM:TO (log positions; either may be left out): must be a log "
            "position ≥ 1, not '0'",
        ),
        ("5:3", "argument --window: '5:3': needs FROM ≤ TO"),
    ],
    ids=["long-no-colon", "long-to", "zero", "backwards"],
)
def test_a_window_that_is_not_from_to_is_refused_before_the_log_is_read_and_cut_when_long(
    window: str, refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["what-if", "--config", "c.yaml", "--window", window]
    with pytest.raises(SystemExit) as exited:
        parser_for(argv).parse_args(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"allot what-if: error: {refusal}"
    for taken in (":", "3:", ":9", "2:2"):
        assert (
            parser_for(["what-if", "--window", taken]).parse_args(["what-if", "--window", taken]).window
            == taken
        )


@pytest.mark.parametrize("text", ["5", "0:", "a:b", "9:3", "1:" + "9" * 5000, "-1:"])
def test_the_window_is_read_once_the_command_line_and_the_library_refuse_it_alike(text: str) -> None:
    """``what-if --window`` is read by the simulator's parser: refused on the command line before the log is read,
    and with the same words by the library (which also checks TO against the log's head)."""
    from allot_cli.commands.whatif import window as flag
    from allot_intake.errors import UsageError
    from allot_sim.whatif.window import window

    with pytest.raises(argparse.ArgumentTypeError) as said:
        flag(text)
    with pytest.raises(UsageError) as refused:
        window(text, 50)
    assert str(refused.value) == f"--window: {said.value}"


def test_the_values_each_flag_documents_are_taken() -> None:
    assert flags.after_position("0") == 0 and flags.log_position("1") == 1
    assert flags.port("1") == 1 and flags.port("65535") == 65535
    assert flags.percent("100") == 100 and flags.whole_number("0") == 0
    assert flags.seconds("0.5") == 0.5 and flags.factor("1.3") == 1.3
    for refused in ("", " 5", "+5", "5.0", "٥", "1e3"):  # not ASCII digits only
        with pytest.raises(argparse.ArgumentTypeError):
            flags.positive(refused)
    args = parser_for(["replay", "--until", "7", "--jobs", "3"]).parse_args(
        ["replay", "--until", "7", "--jobs", "3"]
    )
    assert (args.until, args.jobs) == (7, 3)
    head = "AB" * 32
    argv = ["replay", "--verify", "--expect-head", head]
    assert parser_for(argv).parse_args(argv).expect_head == head.lower()  # compared with the hash as printed


def test_a_port_from_the_environment_is_checked_as_the_flag_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALLOT_UI_PORT", "8090")
    parser = argparse.ArgumentParser()
    ui_arguments(parser)
    assert parser.parse_args([]).port == 8090
    monkeypatch.setenv("ALLOT_UI_PORT", "http")
    parser = argparse.ArgumentParser()
    ui_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args([])
    webhook = argparse.ArgumentParser()
    webhook_arguments(webhook)
    with pytest.raises(SystemExit):
        webhook.parse_args(["--tls-cert-file", "c", "--tls-private-key-file", "k", "--port", "0"])


def test_schemas_that_cannot_be_written_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(sys, "argv", ["allot", "schema", "--out", str(blocker / "schemas")])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1  # as every output that cannot be written (allot_cli.files)
    said = capsys.readouterr().err
    assert f"--out {blocker / 'schemas'}: its parent directory {blocker} is a file, not a directory" in said


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (
            ["e2e", "--policy", "nope"],
            "--policy nope: policy: unknown policy 'nope'; one of koordinator, binpack",
        ),
        (
            ["e2e", "--policy", "fgd"],
            "--policy fgd: fragmentation.typicalPods: policy fgd needs the typical-pod",
        ),
        (["placement", "--policy", "nope"], "--policy nope: policy: unknown policy 'nope'"),
        (
            ["placement", "--policy", "spread", "--check"],
            "--check: binpack only (its baseline and prototype are",
        ),
        (["placement", "--policy", "koordinator", "--shards", "2"], "--shards: binpack only"),
    ],
)
def test_a_policy_the_benchmark_cannot_run_is_refused_before_anything_starts(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["allot", "bench", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert refusal in said and "Traceback" not in said and "in process" not in said


def _run(argv: list[str], url: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("ALLOT_DATABASE_URL", url)
    monkeypatch.setattr(sys, "argv", ["allot", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0)


def test_a_log_that_cannot_be_reached_is_one_error_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(["get", "pods"], "postgresql://allot@127.0.0.1:1/allot", monkeypatch) == 1
    err = capsys.readouterr().err
    assert err.startswith("allot: error: PostgreSQL at postgresql://allot@127.0.0.1:1/allot unavailable:")
    assert "check ALLOT_DATABASE_URL" in err
    assert "Traceback" not in err
    assert _run(["replay"], "mysql://allot@127.0.0.1/allot", monkeypatch) == 2
    assert capsys.readouterr().err.startswith(
        "allot: error: ALLOT_DATABASE_URL: not a PostgreSQL URL: 'mysql://"
    )


def test_another_server_that_cannot_be_used_is_named_without_the_logs_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Unavailable that is not the event log's (the Kubernetes API, an embedded server that did not start) is one
    line naming what failed, not a hint to check ALLOT_DATABASE_URL."""
    from allot_cli.commands import stack
    from allot_runtime.kube.client import ApiUnavailable

    def api_down(args: object) -> int:
        raise ApiUnavailable("Kubernetes API at https://10.0.0.1:6443 unavailable: connection refused")

    monkeypatch.setattr(stack, "cmd_status", api_down)
    monkeypatch.setattr(sys, "argv", ["allot", "status"])
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err
    assert exited.value.code == 1
    assert err == "allot: error: Kubernetes API at https://10.0.0.1:6443 unavailable: connection refused\n"


def test_events_tail_refuses_a_type_it_would_never_match() -> None:
    import asyncio

    from allot_cli.commands.events import _check_types
    from allot_eventstore.memory import InMemoryEventStore
    from allot_intake.errors import UsageError

    store = InMemoryEventStore()
    for taken in (["pod.placed"], ["pod.placed.v2"], ["pod.*"], []):
        asyncio.run(_check_types(store, taken))
    for typo, said in (
        (
            ["pod.placd"],
            "'pod.placd' is not an event type Allot records, nor one the log holds (did you mean pod.placed",
        ),
        (["pods.*"], "no event type is of kind 'pods'"),
        (["pod"], "'pod' is not an event type (pod.placed), tag (pod.placed.v2) or kind (pod.*)"),
        (
            ["pod.placed.2"],
            "'pod.placed.2' is not an event type (pod.placed), tag (pod.placed.v2) or kind (pod.*)",
        ),
        (["pod.placed.v999"], "'pod.placed.v999': pod.placed is recorded as v1 to v2, so no event is tagged"),
        (["pod.placed.v0"], "'pod.placed.v0' is not an event type (pod.placed), tag (pod.placed.v2)"),
        (["pod.placed.v01"], "'pod.placed.v01' is not an event type (pod.placed), tag (pod.placed.v2)"),
        (["pod.placed.v" + "9" * 5000], "(5012 characters) is not an event type (pod.placed), tag"),
    ):
        with pytest.raises(UsageError, match=re.escape(said)):
            asyncio.run(_check_types(store, typo))


def test_events_tail_follow_refuses_a_nats_url_before_printing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLOT_NATS_URL", "garbage")
    # the log is not reachable either: the NATS setting is refused before the log is read
    assert _run(["events", "tail", "--follow"], "postgresql://allot@127.0.0.1:1/allot", monkeypatch) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "ALLOT_NATS_URL: 'garbage' is not nats://host:port or tls://host:port" in captured.err


def test_a_nats_that_does_not_answer_ends_events_tail_follow_naming_the_nats_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """NATS is waited for a while at the start, then the command ends naming ALLOT_NATS_URL and what failed, not the
    log's setting (the log was read: the catch-up is stubbed here)."""
    from allot_cli.commands import events
    from allot_runtime.embedded import free_port
    from allot_stack import connect

    async def caught_up(*_: object, **__: object) -> tuple[list[object], int]:
        return [], 0

    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setattr(connect, "on_log", caught_up)
    monkeypatch.setattr(events, "NATS_WAIT_S", 0.5)
    monkeypatch.setenv("ALLOT_NATS_URL", url)
    assert _run(["events", "tail", "--follow"], "postgresql://allot@127.0.0.1:1/allot", monkeypatch) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"allot: error: cannot connect to NATS at {url} within 0.5 s: ")
    assert err.endswith(" (check ALLOT_NATS_URL, or start the dev stack with `allot up`)\n")
    assert "ALLOT_DATABASE_URL" not in err and "Traceback" not in err
