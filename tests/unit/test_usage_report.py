"""Quota chargeback over hand-built event sequences: hours come only from the events' recorded times."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from allot_cli.commands.report import render
from allot_contracts.decisions.placement import Allocation, Decision, DeviceAlloc
from allot_contracts.decisions.quota import AdmitDecision
from allot_contracts.events._base import Event, ObjectRef
from allot_contracts.events.inputs import PodDeleted, PodSubmitted
from allot_contracts.events.pods import PodPlaced, PodReleased
from allot_contracts.events.quota import QuotaAdmitted
from allot_stack.usage_window import SYNTAX_ANCHOR_US, parse_window
from allot_views.usage import Window, usage

H = 3_600_000_000  # one hour in µs
T0 = 1_767_225_600_000_000
GIB = 1 << 30


def gpu(minor: int, core: int = 100, mem_gib: int = 80) -> DeviceAlloc:
    return DeviceAlloc(
        minor=minor,
        resources={"koordinator.sh/gpu-core": core, "koordinator.sh/gpu-memory": mem_gib * GIB},
    )


def placed(name: str, ns: str, *devices: DeviceAlloc, cpu_m: int = 4000) -> PodPlaced:
    alloc = Allocation(node="n1", requests={"cpu": cpu_m}, devices={"gpu": devices} if devices else {})
    return PodPlaced(
        pod=ObjectRef(namespace=ns, name=name),
        attempt=1,
        node="n1",
        decision=Decision(pod=f"{ns}/{name}", outcome="Scheduled", node="n1", allocation=alloc),
    )


def submitted(name: str, ns: str, manifest: dict[str, Any] | None = None) -> PodSubmitted:
    return PodSubmitted(pod=ObjectRef(namespace=ns, name=name), uid=name, manifest=manifest or {})


def admitted(
    name: str, ns: str, quota: str, request: dict[str, str], borrow: dict[str, str]
) -> QuotaAdmitted:
    facts = [{"direction": "borrow", "dimension": d, "quota": quota, "amount": a} for d, a in borrow.items()]
    detail = AdmitDecision(
        pod=f"{ns}/{name}", quota=quota, admitted=True, status="Success", reason="Admitted", message="",
        waiting=False, request=request, borrow=facts,
    )  # fmt: skip
    return QuotaAdmitted(pod=ObjectRef(namespace=ns, name=name), attempt=1, quota=quota, request=request,
                         used={}, limit={}, detail=detail)  # fmt: skip


def released(name: str, ns: str) -> PodReleased:
    return PodReleased(pod=ObjectRef(namespace=ns, name=name), node="n1")


def one(events: list[tuple[int, Event]], window: Window, by: str = "quota") -> Any:
    rows = usage(events, window, by)  # type: ignore[arg-type]
    assert len(rows) == 1, rows
    return rows[0]


def test_a_pod_placed_two_hours_on_one_gpu_is_two_gpu_hours() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("a", "team")),
        (T0, admitted("a", "team", "team-q", {"nvidia.com/gpu": "1", "cpu": "4"}, {})),
        (T0, placed("a", "team", gpu(0))),
        (T0 + 2 * H, released("a", "team")),
    ]
    row = one(events, Window(T0 - H, T0 + 10 * H))
    assert (row.key, row.pods) == ("team-q", 1)
    assert row.gpu_hours == 2 and row.gpu_hours_borrowed == 0
    assert row.gpu_mem_gib_hours == 160
    assert row.cpu_hours == 8


def test_borrowed_share_follows_the_admission_borrow_fact() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("a", "team")),
        (T0, admitted("a", "team", "team-q", {"nvidia.com/gpu": "4", "cpu": "8"}, {"nvidia.com/gpu": "1"})),
        (T0, placed("a", "team", gpu(0), gpu(1), gpu(2), gpu(3), cpu_m=8000)),
        (T0 + H, released("a", "team")),
    ]
    row = one(events, Window(T0, T0 + H))
    assert row.gpu_hours == 4 and row.gpu_hours_borrowed == 1
    # memory follows the GPU share when the quota does not govern gpu-memory
    assert row.gpu_mem_gib_hours_borrowed == 80
    assert row.cpu_hours == 8 and row.cpu_hours_borrowed == 0


def test_a_pod_running_past_until_is_counted_up_to_until_and_from_since() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("a", "team")),
        (T0, placed("a", "team", gpu(0))),
        (T0 + 5 * H, released("a", "team")),
    ]
    row = one(events, Window(T0 + H, T0 + 3 * H))
    assert row.gpu_hours == 2
    assert row.key == "-"  # no quota admission recorded


def test_a_shared_gpu_counts_its_core_share() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("nb", "research")),
        (T0, placed("nb", "research", gpu(2, core=50, mem_gib=40))),
        (T0 + 3 * H, PodDeleted(pod=ObjectRef(namespace="research", name="nb"))),
        (T0 + 4 * H, released("nb", "research")),  # the release after the deletion adds nothing
    ]
    row = one(events, Window(T0, T0 + 10 * H), by="namespace")
    assert (row.key, row.gpu_hours, row.gpu_mem_gib_hours) == ("research", Fraction(3, 2), 120)


def test_workload_is_the_controller_else_the_gang_else_the_pod() -> None:
    owner = {"metadata": {"ownerReferences": [{"controller": True, "kind": "Job", "name": "train"}]}}
    gang = {"metadata": {"labels": {"pod-group.scheduling.sigs.k8s.io": "eval"}}}
    events: list[tuple[int, Event]] = []
    for name, manifest in (("j-1", owner), ("j-2", owner), ("w-0", gang), ("solo", None)):
        events += [(T0, submitted(name, "ns", manifest)), (T0, placed(name, "ns", gpu(0)))]
    rows = usage(events, Window(T0, T0 + H), "workload")
    assert [(r.key, r.pods, r.gpu_hours) for r in rows] == [
        ("ns/Job/train", 2, 2),
        ("ns/Pod/solo", 1, 1),
        ("ns/PodGroup/eval", 1, 1),
    ]


def test_events_after_until_are_not_read() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("a", "team")),
        (T0 + 2 * H, placed("a", "team", gpu(0))),
    ]
    assert usage(events, Window(T0, T0 + H)) == []


def test_window_durations_count_back_from_the_log_not_the_clock() -> None:
    assert parse_window("7d", None, last_us=T0) == Window(T0 - 7 * 24 * H, T0)
    assert parse_window("2h", "1h", last_us=T0) == Window(T0 - 3 * H, T0 - H)
    assert parse_window("2026-01-01T00:00:00Z", None, last_us=T0 + H) == Window(T0, T0 + H)


@pytest.mark.parametrize(
    ("since", "until", "message"),
    [
        ("7x", None, "--since: '7x' is neither a duration"),
        ("1d", "yesterday", "--until: 'yesterday' is neither a duration"),
        ("2026-01-01T00:00:00", None, "--since: '2026-01-01T00:00:00' has no time zone"),
        ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z", "--until: the window ends before it starts"),
    ],
)
def test_bad_window_is_refused_with_the_flag(since: str, until: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_window(since, until, last_us=T0)


def test_csv_and_json_carry_own_and_borrowed() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("a", "team")),
        (T0, admitted("a", "team", "team-q", {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"})),
        (T0, placed("a", "team", gpu(0), gpu(1))),
    ]
    window = Window(T0, T0 + H)
    rows = usage(events, window)
    csv = render(window, rows, "quota", "csv").splitlines()
    assert csv[0].startswith("quota,pods,gpuHours_own,gpuHours_borrowed,")
    assert csv[1].startswith("team-q,1,1.0,1.0,")
    import json

    doc = json.loads(render(window, rows, "quota", "json"))
    assert doc["rows"][0]["gpuHours"] == {"own": 1.0, "borrowed": 1.0, "total": 2.0}
    assert doc["since"] == "2026-01-01T00:00:00Z"


def test_the_table_fits_80_columns_and_shows_own_and_borrowed() -> None:
    events: list[tuple[int, Event]] = [
        (T0, submitted("a", "team")),
        (
            T0,
            admitted(
                "a", "team", "koordinator-default-quota", {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "1"}
            ),
        ),
        (T0, placed("a", "team", gpu(0), gpu(1))),
    ]
    window = Window(T0, T0 + H)
    lines = render(window, usage(events, window), "quota", "table").splitlines()
    assert lines[0].split()[:3] == ["QUOTA", "PODS", "GPU-H"]
    assert lines[1].split()[:3] == ["koordinator-default-quota", "1", "1.00/1.00"]
    assert max(map(len, lines)) <= 80


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "7x"], "allot: error: --since: '7x' is neither a duration"),
        (  # taken as the value (not as an unknown option: "expected one argument"), then refused saying why
            ["--since", "-5m"],
            "allot: error: --since: '-5m' has a sign, but a duration already counts back (--since 5m starts 5 "
            "minutes before --until, which is the last recorded event unless given): give it without '-', or an "
            "ISO-8601 time (e.g. 2026-01-01T00:00:00Z)\n",
        ),
        (
            ["--until", "-1h", "--by", "namespace"],
            "allot: error: --until: '-1h' has a sign, but a duration already counts back (--until 5m ends 5 minutes "
            "before the last recorded event)",
        ),
        (["--since", "--by", "quota"], "argument --since: expected one argument"),  # an option is no value
        (
            ["--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"],
            "the window ends before it starts",
        ),
    ],
)
def test_the_command_refuses_a_bad_window_with_exit_2_before_reading_the_log(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from allot_cli.main import main

    monkeypatch.setenv("ALLOT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(SystemExit) as exit_:
        main(["report", "usage", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("since", "until", "message"),
    [
        ("0d", None, "--since: the window is empty"),
        ("1000000d", None, "--since: '1000000d' is outside the times a report can show"),
        ("0001-01-01T00:00:00+14:00", None, "--since: '0001-01-01T00:00:00+14:00' is outside the times"),
        ("7d", "9999-12-31T23:59:59-14:00", "--until: '9999-12-31T23:59:59-14:00' is outside the times"),
        ("99999999999999999999d", None, "--since: '99999999999999999999d' is longer than any window"),
        (f"{'9' * 5000}d", None, "(5001 characters) is longer than any window"),
    ],
)
def test_a_report_window_outside_the_years_1_to_9999_is_refused(
    since: str, until: str | None, message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        parse_window(since, until, last_us=T0)
    assert message in str(refused.value)


def test_a_long_window_is_checked_against_the_log_not_the_syntax_anchor() -> None:
    parse_window("1000000d", None, last_us=SYNTAX_ANCHOR_US)  # syntax only: the log decides
    assert parse_window("0001-01-01T00:00:00Z", None, last_us=T0).since_us == -62_135_596_800_000_000
