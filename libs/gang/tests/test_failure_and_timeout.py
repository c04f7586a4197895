"""Failures and timeouts: Strict vs NonStrict, backoff driven by timer ticks, timeouts with no cap."""

from __future__ import annotations

import pytest

from allot_gang import (
    GangConfig,
    GangEngine,
    GroupAdmitted,
    GroupReady,
    GroupRetryAt,
    GroupTimedOut,
    MemberWaiting,
    ReleaseHolds,
)
from allot_gang.actions import Action
from allot_gang.testing import a_pod, a_pod_group, at

GANG = "default/train"


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def gang_of(n: int, *, mode: str = "Strict", waiting_time: str | None = None, t: float = 0) -> GangEngine:
    g = GangEngine()
    for i in range(n):
        g.submit(a_pod(f"w-{i}", gang="train", min_available=n, mode=mode, waiting_time=waiting_time), at(t))
    return g


def members(*idx: int) -> tuple[str, ...]:
    return tuple(f"default/w-{i}" for i in idx)


def test_unschedulable_group_releases_holds_and_retries_after_backoff_on_a_timer_tick() -> None:
    g = gang_of(2)
    assert g.group_unschedulable(GANG, 1, "needs 16 GPUs on one PCIe switch, best node offers 6", at(10)) == [
        ReleaseHolds(
            group=GANG,
            attempt=1,
            members=members(0, 1),
            reason="needs 16 GPUs on one PCIe switch, best node offers 6",
        ),
        GroupRetryAt(
            group=GANG, at=at(20), attempt=1, reason="needs 16 GPUs on one PCIe switch, best node offers 6"
        ),
    ]
    assert g.next_deadline() == at(20)
    assert g.on_timer(at(19.999999)) == []
    assert g.on_timer(at(20)) == [GroupReady(group=GANG, gangs=(GANG,), members=members(0, 1), attempt=2)]


def test_consecutive_failures_back_off_exponentially_and_success_resets() -> None:
    g = gang_of(2, waiting_time="100h")
    delays = []
    now, attempt = at(0), 1
    for _ in range(7):
        [_, retry] = g.group_unschedulable(GANG, attempt, "no capacity", now)
        assert isinstance(retry, GroupRetryAt)
        delays.append((retry.at - now) // 1_000_000)
        now = retry.at
        [ready] = g.on_timer(now)
        assert isinstance(ready, GroupReady)
        attempt = ready.attempt
    assert delays == [10, 20, 40, 80, 160, 300, 300]
    assert kinds(g.group_placed(GANG, attempt, now)) == ["GroupAdmitted"]
    assert g.status(GANG)["group"]["failures"] == 0


def test_an_outcome_for_another_attempt_or_twice_is_ignored() -> None:
    g = gang_of(2)
    assert g.group_unschedulable(GANG, 7, "x", at(1)) == []
    assert kinds(g.group_placed(GANG, 1, at(1))) == ["GroupAdmitted"]
    before = g.digest()
    assert g.group_placed(GANG, 1, at(2)) == []
    assert g.group_unschedulable(GANG, 1, "late", at(2)) == []
    assert g.digest() == before


# A member is deleted while its group is being placed; the placement then succeeds for the rest.
SHORT_AFTER_PLACEMENT = [
    (
        "Strict releases every placed member and waits again",
        "Strict",
        [
            ReleaseHolds(group=GANG, attempt=1, members=members(2), reason="member deleted during placement"),
            ReleaseHolds(
                group=GANG,
                attempt=1,
                members=members(0, 1),
                reason="group short of min-available after placement",
            ),
        ],
        {"pending": 2, "held": 0},
    ),
    (
        "NonStrict keeps the placed members held and waits for a replacement",
        "NonStrict",
        [ReleaseHolds(group=GANG, attempt=1, members=members(2), reason="member deleted during placement")],
        {"pending": 0, "held": 2},
    ),
]


@pytest.mark.parametrize(
    ("mode", "expected", "counts"),
    [c[1:] for c in SHORT_AFTER_PLACEMENT],
    ids=[c[0] for c in SHORT_AFTER_PLACEMENT],
)
def test_group_short_after_placement(mode: str, expected: list[Action], counts: dict[str, int]) -> None:
    g = gang_of(3, mode=mode)
    assert g.member_deleted("default", "w-2", at(1)) == []
    assert g.group_placed(GANG, 1, at(2)) == expected
    status = g.status(GANG)["members"]
    assert {key: status[key] for key in counts} == counts
    # a replacement arrives: the group is ready again
    out = g.submit(a_pod("w-3", gang="train", min_available=3, mode=mode), at(3))
    if mode == "Strict":
        assert out == [GroupReady(group=GANG, gangs=(GANG,), members=members(0, 1, 3), attempt=2)]
    else:
        assert out == [GroupReady(group=GANG, gangs=(GANG,), members=members(3), attempt=2)]
    assert g.group_placed(GANG, 2, at(4)) == [GroupAdmitted(group=GANG, attempt=2, members=members(0, 1, 3))]


def test_nonstrict_failed_attempt_keeps_members_held_from_earlier_attempts() -> None:
    # Only a NonStrict gang can hold placements between attempts (a Strict one releases them at once).
    g = gang_of(3, mode="NonStrict")
    g.member_deleted("default", "w-2", at(1))
    g.group_placed(GANG, 1, at(2))  # w-0 and w-1 are placed and held
    [ready] = g.submit(a_pod("w-3", gang="train", min_available=3, mode="NonStrict"), at(3))
    assert ready == GroupReady(group=GANG, gangs=(GANG,), members=members(3), attempt=2)
    assert g.group_unschedulable(GANG, 2, "no capacity", at(4)) == [
        ReleaseHolds(group=GANG, attempt=2, members=members(3), reason="no capacity"),
        GroupRetryAt(group=GANG, at=at(14), attempt=2, reason="no capacity"),
    ]
    assert {k: g.status(GANG)["members"][k] for k in ("pending", "held")} == {"pending": 1, "held": 2}


def test_timeout_releases_waiting_members_and_the_wait_restarts_with_a_new_member() -> None:
    g = GangEngine()
    for i in range(3):
        assert kinds(g.submit(a_pod(f"w-{i}", gang="train", min_available=4, waiting_time="30m"), at(i))) == [
            "MemberWaiting"
        ]
    assert g.next_deadline() == at(1800)  # from the first member's arrival
    assert g.on_timer(at(1799)) == []
    assert g.on_timer(at(1800)) == [GroupTimedOut(group=GANG, gang=GANG, released_members=members(0, 1, 2))]
    status = g.status(GANG)
    assert status["timeouts"] == 1 and status["phase"] == "Pending"
    # nothing changed: timing out again every 30 minutes would say nothing new
    assert g.next_deadline() is None
    g.submit(a_pod("w-3", gang="train", min_available=4, waiting_time="30m"), at(5000))
    assert g.next_deadline() == at(5000 + 1800)


def test_a_waiting_time_of_a_nanosecond_times_out_once_per_attempt_not_once_per_nanosecond() -> None:
    g = gang_of(2, waiting_time="1ns")
    fired, outcomes = 0, []
    while (deadline := g.next_deadline()) is not None and deadline <= at(3600) and fired < 10_000:
        fired += 1
        for action in g.on_timer(deadline):
            outcomes.append(type(action).__name__)
            if isinstance(action, GroupReady):  # every attempt finds no room
                outcomes += kinds(g.group_unschedulable(GANG, action.attempt, "no room", deadline))
    # the first attempt started with the pods; then backoff 10 s, 20 s, ... at most 300 s between attempts
    assert fired < 40
    assert outcomes.count("GroupTimedOut") == outcomes.count("GroupReady") + 1
    assert outcomes.count("GroupReady") >= 10  # the group is retried: timeouts no longer push its retry away


@pytest.mark.parametrize("waiting_time", ["72h", "2562047h"], ids=["three days", "the largest Go duration"])
def test_the_waiting_time_is_never_capped(waiting_time: str) -> None:
    g = gang_of(0)
    g.submit(a_pod("w-0", gang="train", min_available=2, waiting_time=waiting_time), at(0))
    deadline = g.next_deadline()
    assert deadline is not None and deadline > at(15 * 60)
    assert g.on_timer(at(15 * 60)) == [] and g.on_timer(deadline - 1) == []
    assert kinds(g.on_timer(deadline)) == ["GroupTimedOut"]


def test_pod_group_schedule_timeout_and_default_timeout() -> None:
    g = GangEngine(GangConfig.from_dict({"defaultTimeoutSeconds": 42}))
    g.apply_pod_group(a_pod_group("pg", min_member=2, schedule_timeout_seconds=7200))
    g.submit(a_pod("a", pod_group="pg"), at(0))
    g.submit(a_pod("b", gang="solo", min_available=2), at(0))
    assert g.status("default/pg")["deadlineUs"] == at(7200)
    assert g.status("default/solo")["deadlineUs"] == at(42)


def test_timeout_during_an_attempt_abandons_it_and_compensates_a_late_placement() -> None:
    g = gang_of(2, waiting_time="60s")
    assert g.on_timer(at(60)) == [
        ReleaseHolds(group=GANG, attempt=1, members=members(0, 1), reason="timeout"),
        GroupTimedOut(group=GANG, gang=GANG, released_members=members(0, 1)),
        GroupRetryAt(group=GANG, at=at(70), attempt=1, reason="timeout"),
    ]
    # the allocator committed the abandoned attempt after all: undo it
    assert g.group_placed(GANG, 1, at(61)) == [
        ReleaseHolds(group=GANG, attempt=1, members=members(0, 1), reason="stale-attempt")
    ]
    assert g.group_unschedulable(GANG, 1, "late", at(62)) == []
    assert g.on_timer(at(70)) == [GroupReady(group=GANG, gangs=(GANG,), members=members(0, 1), attempt=2)]
    assert kinds(g.group_placed(GANG, 2, at(71))) == ["GroupAdmitted"]
    assert g.next_deadline() is None


def test_held_members_are_released_on_timeout() -> None:
    g = gang_of(3, mode="NonStrict", waiting_time="5m")
    g.member_deleted("default", "w-2", at(1))
    g.group_placed(GANG, 1, at(2))
    out = g.on_timer(at(300))
    assert out == [
        ReleaseHolds(group=GANG, attempt=1, members=members(0, 1), reason="timeout"),
        GroupTimedOut(group=GANG, gang=GANG, released_members=members(0, 1)),
    ]
    assert g.status(GANG)["members"]["pending"] == 2


def test_members_waiting_during_backoff_are_told_so() -> None:
    g = GangEngine()
    for i in range(2):
        g.submit(a_pod(f"w-{i}", gang="train", min_available=2, total_number=3), at(0))
    g.group_unschedulable(GANG, 1, "no capacity", at(1))
    [waiting] = g.submit(a_pod("w-2", gang="train", min_available=2), at(2))
    assert isinstance(waiting, MemberWaiting) and waiting.reason == "backoff"
    [ready] = g.on_timer(at(11))
    assert isinstance(ready, GroupReady) and ready.members == members(0, 1, 2)
