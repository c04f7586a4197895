"""PodGroup phases, the status dictionary, and explanations."""

from __future__ import annotations

import json

import pytest

from allot_gang import GangEngine, phase
from allot_gang.testing import a_pod, a_pod_group, at

PHASES = [
    # present, min, scheduled, running, succeeded, failed, attempted, expected
    ("no members", 0, 4, 0, 0, 0, 0, False, "Pending"),
    ("too few members", 3, 4, 0, 0, 0, 0, False, "Pending"),
    ("enough members, not attempted", 4, 4, 0, 0, 0, 0, False, "PreScheduling"),
    ("attempt started", 4, 4, 0, 0, 0, 0, True, "Scheduling"),
    ("partly bound", 4, 4, 2, 0, 0, 0, True, "Scheduling"),
    ("all bound", 4, 4, 4, 0, 0, 0, True, "Scheduled"),
    ("bound, some running", 4, 4, 4, 3, 0, 0, True, "Scheduled"),
    ("running", 4, 4, 4, 4, 0, 0, True, "Running"),
    ("running and succeeded", 4, 4, 4, 2, 2, 0, True, "Running"),
    ("one failed", 4, 4, 4, 3, 0, 1, True, "Failed"),
    ("failed but too few finished", 4, 4, 4, 1, 0, 1, True, "Scheduled"),
    ("finished", 4, 4, 4, 0, 4, 0, True, "Finished"),
    ("finished wins over failed", 5, 4, 5, 0, 4, 1, True, "Finished"),
]


@pytest.mark.parametrize(
    ("present", "min_member", "scheduled", "running", "succeeded", "failed", "attempted", "expected"),
    [p[1:] for p in PHASES],
    ids=[p[0] for p in PHASES],
)
def test_phase(
    present: int,
    min_member: int,
    scheduled: int,
    running: int,
    succeeded: int,
    failed: int,
    attempted: bool,
    expected: str,
) -> None:
    assert (
        phase(
            present=present,
            min_member=min_member,
            scheduled=scheduled,
            running=running,
            succeeded=succeeded,
            failed=failed,
            attempted=attempted,
        )
        == expected
    )


def test_phases_follow_a_gang_through_its_life() -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("pg", min_member=2))
    seen = [g.status("default/pg")["phase"]]
    g.submit(a_pod("w-0", pod_group="pg"), at(1))
    seen.append(g.status("default/pg")["phase"])
    g.submit(a_pod("w-1", pod_group="pg"), at(2))
    seen.append(g.status("default/pg")["phase"])
    g.group_placed("default/pg", 1, at(3))
    for name in ("w-0", "w-1"):
        g.member_bound("default", name, at(4))
    seen.append(g.status("default/pg")["phase"])
    for name in ("w-0", "w-1"):
        g.member_running("default", name, at(5))
    seen.append(g.status("default/pg")["phase"])
    g.member_succeeded("default", "w-0", at(6))
    g.member_failed("default", "w-1", at(6))
    seen.append(g.status("default/pg")["phase"])
    assert seen == ["Pending", "Pending", "Scheduling", "Scheduled", "Running", "Failed"]
    status = g.status("default/pg")
    assert status["scheduleStartTime"] == "2023-11-14T22:13:22Z" and status["scheduleStartTimeUs"] == at(2)
    assert (status["scheduled"], status["running"], status["succeeded"], status["failed"]) == (2, 0, 1, 1)


def test_status_is_json_without_floats() -> None:
    g = GangEngine()
    g.submit(a_pod("w-0", gang="train", min_available=2), at(0))
    status = g.status("default/train")
    text = json.dumps(status)
    assert json.loads(text) == status

    def walk(v: object) -> None:
        assert not isinstance(v, float)
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        if isinstance(v, list):
            for x in v:
                walk(x)

    walk(status)
    with pytest.raises(KeyError):
        g.status("default/nope")


def test_explain_a_waiting_gang_in_a_group_after_a_failure() -> None:
    g = GangEngine()
    groups = ["default/train", "default/eval"]
    for i in range(8):
        g.submit(a_pod(f"t-{i}", gang="train", min_available=8, groups=groups), at(i))
    g.submit(a_pod("e-0", gang="eval", min_available=1, groups=groups), at(10))
    g.group_unschedulable(
        "default/eval,default/train", 1, "needs 8 GPUs on one PCIe switch, best node offers 6", at(11)
    )
    g.member_deleted("default", "t-7", at(12))
    g.member_deleted("default", "t-6", at(12))
    g.member_deleted("default", "t-5", at(12))
    g.member_deleted("default", "t-4", at(12))
    g.member_deleted("default", "t-3", at(12))
    text = g.explain("default/train")
    assert "gang default/train [Scheduling]: 3/8 members present (min-available 8)" in text
    assert "waiting since 2023-11-14T22:13:20Z; times out at 2023-11-14T22:23:20Z" in text
    assert "gang group default/eval,default/train: default/eval 1 member present (min-available 1)" in text
    assert "last attempt #1 failed: needs 8 GPUs on one PCIe switch, best node offers 6; retry at" in text
    assert g.explain("default/nope") == "gang default/nope is not known (no PodGroup and no pod names it)"
