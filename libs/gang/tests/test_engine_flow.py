"""Gang engine flows: waiting, readiness, admission, match policies, gang groups, PodGroups, conflicts."""

from __future__ import annotations

import pytest

from allot_gang import (
    GangEngine,
    GroupAdmitted,
    GroupReady,
    MemberWaiting,
    PassThrough,
    Rejected,
    ReleaseHolds,
)
from allot_gang.actions import Action
from allot_gang.testing import a_pod, a_pod_group, at


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


def submit_all(engine: GangEngine, pods: list[dict[str, object]], t: float = 0) -> list[Action]:
    out: list[Action] = []
    for pod in pods:
        out.extend(engine.submit(pod, at(t)))
    return out


def workers(
    n: int, gang: str = "train", namespace: str = "default", start: int = 0, **kw: object
) -> list[dict[str, object]]:
    return [a_pod(f"{gang}-{i}", namespace=namespace, gang=gang, **kw) for i in range(start, start + n)]  # type: ignore[arg-type]


def test_plain_pod_passes_through() -> None:
    assert GangEngine().submit(a_pod("web"), at()) == [
        PassThrough(pod="default/web", gang=None, reason="not-a-gang")
    ]


def test_members_wait_until_min_available_then_the_group_is_ready_in_name_order() -> None:
    g = GangEngine()
    pods = [a_pod(n, gang="train", min_available=3) for n in ("w-2", "w-0")]
    out = submit_all(g, pods)
    assert out == [
        MemberWaiting(
            gang="default/train",
            group="default/train",
            pod="default/w-2",
            present=1,
            min_available=3,
            reason="gang-incomplete",
        ),
        MemberWaiting(
            gang="default/train",
            group="default/train",
            pod="default/w-0",
            present=2,
            min_available=3,
            reason="gang-incomplete",
        ),
    ]
    assert g.submit(a_pod("w-1", gang="train", min_available=3), at(1)) == [
        GroupReady(
            group="default/train",
            gangs=("default/train",),
            members=("default/w-0", "default/w-1", "default/w-2"),
            attempt=1,
        )
    ]
    assert g.group_placed("default/train", 1, at(2)) == [
        GroupAdmitted(group="default/train", attempt=1, members=("default/w-0", "default/w-1", "default/w-2"))
    ]


def test_a_pod_arriving_during_an_attempt_waits_and_is_not_added_to_it() -> None:
    g = GangEngine()
    submit_all(g, workers(2, min_available=2, total_number=3))
    [action] = g.submit(workers(1, start=2, min_available=2)[0], at(1))
    assert action == MemberWaiting(
        gang="default/train",
        group="default/train",
        pod="default/train-2",
        present=3,
        min_available=2,
        reason="attempt-in-progress",
    )
    assert g.group_placed("default/train", 1, at(2)) == [
        GroupAdmitted(group="default/train", attempt=1, members=("default/train-0", "default/train-1"))
    ]
    # once-satisfied: the straggler goes on alone as soon as any member is bound
    assert g.member_bound("default", "train-0", at(3)) == [
        PassThrough(pod="default/train-2", gang="default/train", reason="gang-satisfied")
    ]


# After 3 of 4 members are bound, one more pod arrives. What happens depends on the match policy.
POLICY_CASES = [
    ("once-satisfied", ["PassThrough"]),
    ("waiting-and-running", ["GroupReady"]),
    ("only-waiting", ["MemberWaiting"]),
]


@pytest.mark.parametrize(("policy", "expected"), POLICY_CASES, ids=[c[0] for c in POLICY_CASES])
def test_match_policy_after_members_are_bound(policy: str, expected: list[str]) -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("pg", min_member=3, match_policy=policy))
    submit_all(g, [a_pod(f"w-{i}", pod_group="pg") for i in range(3)])
    g.group_placed("default/pg", 1, at(1))
    for i in range(3):
        g.member_bound("default", f"w-{i}", at(2))
    g.member_deleted("default", "w-0", at(3))  # one worker is replaced: 2 bound remain, min is 3
    out = g.submit(a_pod("w-3", pod_group="pg"), at(4))
    assert kinds(out) == expected
    if expected == ["GroupReady"]:
        assert out[0] == GroupReady(
            group="default/pg", gangs=("default/pg",), members=("default/w-3",), attempt=2
        )


def test_once_satisfied_is_permanent_even_after_every_member_is_gone() -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("pg", min_member=2))
    submit_all(g, [a_pod(f"w-{i}", pod_group="pg") for i in range(2)])
    g.group_placed("default/pg", 1, at(1))
    g.member_bound("default", "w-0", at(2))
    for i in range(2):
        g.member_deleted("default", f"w-{i}", at(3))
    assert g.submit(a_pod("w-9", pod_group="pg"), at(4)) == [
        PassThrough(pod="default/w-9", gang="default/pg", reason="gang-satisfied")
    ]


def test_a_pod_already_bound_at_submit_marks_the_gang_satisfied() -> None:
    g = GangEngine()
    assert g.submit(a_pod("w-0", gang="g", min_available=3, node_name="n1", phase="Running"), at()) == []
    assert kinds(g.submit(a_pod("w-1", gang="g", min_available=3), at(1))) == ["PassThrough"]
    assert g.status("default/g")["running"] == 1


def test_total_number_above_min_available_admits_at_min() -> None:
    g = GangEngine()
    out = submit_all(g, workers(2, min_available=2, total_number=4))
    assert kinds(out) == ["MemberWaiting", "GroupReady"]
    assert g.status("default/train")["totalNumber"] == 4


def test_gang_group_across_namespaces_is_attempted_and_admitted_as_one_unit() -> None:
    g = GangEngine()
    groups = ["team-a/trainer", "team-b/evaluator"]
    trainers = workers(2, gang="trainer", namespace="team-a", min_available=2, groups=groups)
    evaluator = workers(1, gang="evaluator", namespace="team-b", min_available=1, groups=groups)
    out = submit_all(g, trainers)
    assert [a.reason for a in out if isinstance(a, MemberWaiting)] == ["gang-incomplete", "group-incomplete"]
    [ready] = g.submit(evaluator[0], at(1))
    assert ready == GroupReady(
        group="team-a/trainer,team-b/evaluator",
        gangs=("team-a/trainer", "team-b/evaluator"),
        members=("team-a/trainer-0", "team-a/trainer-1", "team-b/evaluator-0"),
        attempt=1,
    )
    [admitted] = g.group_placed(ready.group, 1, at(2))
    assert isinstance(admitted, GroupAdmitted) and admitted.members == ready.members
    assert g.group_of("team-b/evaluator") == ready.group


def test_gang_group_listing_must_agree_across_its_gangs() -> None:
    g = GangEngine()
    g.submit(a_pod("a-0", gang="a", min_available=1, groups=["default/a", "default/b"]), at())
    [rejected] = g.submit(a_pod("b-0", gang="b", min_available=1), at(1))
    assert isinstance(rejected, Rejected)
    [error] = rejected.errors
    assert error.path == 'metadata.annotations["gang.scheduling.koordinator.sh/groups"]'
    assert (
        "gang default/a (declared by pod default/a-0) is grouped with [default/a, default/b]" in error.message
    )


CONFLICTS = [
    ("different min-available", {"min_available": 5}, "min-available", "min-available is 4"),
    ("different mode", {"min_available": 4, "mode": "NonStrict"}, "mode", "mode is Strict"),
    (
        "different waiting-time",
        {"min_available": 4, "waiting_time": "20m"},
        "waiting-time",
        "waiting-time is 10m",
    ),
    (
        "different policy",
        {"min_available": 4, "match_policy": "only-waiting"},
        "match-policy",
        "match-policy is once-satisfied",
    ),
]


@pytest.mark.parametrize(
    ("settings", "key", "reason"), [c[1:] for c in CONFLICTS], ids=[c[0] for c in CONFLICTS]
)
def test_a_later_pod_with_conflicting_settings_is_rejected(
    settings: dict[str, object], key: str, reason: str
) -> None:
    g = GangEngine()
    g.submit(a_pod("w-0", gang="train", min_available=4, waiting_time="10m"), at())
    [rejected] = g.submit(a_pod("w-1", gang="train", **settings), at(1))  # type: ignore[arg-type]
    assert isinstance(rejected, Rejected)
    assert [e.path for e in rejected.errors] == [
        f'metadata.annotations["gang.scheduling.koordinator.sh/{key}"]'
    ]
    assert (
        "declared by pod default/w-0" in rejected.errors[0].message and reason in rejected.errors[0].message
    )
    assert g.status("default/train")["members"]["present"] == 1


def test_later_pods_that_repeat_or_omit_settings_join() -> None:
    g = GangEngine()
    g.submit(a_pod("w-0", gang="train", min_available=3, mode="NonStrict", waiting_time="600s"), at())
    out = g.submit(a_pod("w-1", gang="train", min_available=3, waiting_time="10m"), at(1))
    out += g.submit(a_pod("w-2", gang="train"), at(2))  # joins without settings
    assert kinds(out) == ["MemberWaiting", "GroupReady"]
    assert g.status("default/train")["mode"] == "NonStrict"


def test_pods_wait_for_their_pod_group_then_become_ready_when_it_is_applied() -> None:
    g = GangEngine()
    out = submit_all(g, [a_pod(f"w-{i}", pod_group="pg") for i in range(2)])
    assert [a.reason for a in out if isinstance(a, MemberWaiting)] == ["pod-group-missing"] * 2
    assert "waiting for PodGroup default/pg" in g.explain("default/pg")
    assert g.apply_pod_group(a_pod_group("pg", min_member=2)) == []
    assert g.settle(at(5)) == [
        GroupReady(
            group="default/pg", gangs=("default/pg",), members=("default/w-0", "default/w-1"), attempt=1
        )
    ]


def test_a_pod_declaring_settings_for_a_pod_group_gang_must_match_it() -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("pg", min_member=2))
    [rejected] = g.submit(a_pod("w-0", gang="pg", min_available=3), at())
    assert isinstance(rejected, Rejected)
    assert "declared by PodGroup default/pg: min-available is 2" in rejected.errors[0].message
    assert kinds(g.submit(a_pod("w-1", gang="pg", min_available=2), at())) == ["MemberWaiting"]


def test_a_pod_group_cannot_take_over_an_annotation_gang() -> None:
    g = GangEngine()
    g.submit(a_pod("w-0", gang="train", min_available=2), at())
    [error] = g.apply_pod_group(a_pod_group("train", min_member=2))
    assert error.path == "metadata.name" and "already declared by pod default/w-0" in error.message


def test_pod_group_update_changes_min_member() -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("pg", min_member=3))
    submit_all(g, [a_pod(f"w-{i}", pod_group="pg") for i in range(2)])
    assert g.apply_pod_group(a_pod_group("pg", min_member=2)) == []
    assert kinds(g.settle(at(1))) == ["GroupReady"]


def test_deleting_a_pod_group_mid_attempt_releases_the_attempt() -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("pg", min_member=2))
    submit_all(g, [a_pod(f"w-{i}", pod_group="pg") for i in range(2)])
    assert g.delete_pod_group("default", "pg") == [
        ReleaseHolds(
            group="default/pg", attempt=1, members=("default/w-0", "default/w-1"), reason="pod group deleted"
        )
    ]
    assert g.settle(at(1)) == []
    assert g.status("default/pg")["source"] == "missing-pod-group"
    # the allocator's late answer for the abandoned attempt is compensated again
    assert kinds(g.group_placed("default/pg", 1, at(2))) == ["ReleaseHolds"]


def test_submitting_the_same_pod_twice_changes_nothing() -> None:
    g = GangEngine()
    pod = a_pod("w-0", gang="train", min_available=2)
    g.submit(pod, at())
    before = g.digest()
    assert g.submit(pod, at(1)) == []
    assert g.digest() == before


def test_deleting_members_releases_their_holds_and_an_annotation_gang_dies_with_its_last_pod() -> None:
    g = GangEngine()
    submit_all(g, workers(2, min_available=2))
    g.group_placed("default/train", 1, at(1))
    assert g.member_deleted("default", "train-0", at(2)) == [
        ReleaseHolds(group="default/train", attempt=1, members=("default/train-0",), reason="member deleted")
    ]
    g.member_bound("default", "train-1", at(3))
    assert g.member_deleted("default", "train-1", at(4)) == []
    assert g.gangs() == [] and g.groups() == []
    assert g.member_deleted("default", "train-1", at(5)) == []


def test_pod_groups_can_form_a_gang_group_and_a_mixed_group_is_strict() -> None:
    g = GangEngine()
    groups = ["a/pg", "b/pg"]
    assert (
        g.apply_pod_group(a_pod_group("pg", namespace="a", min_member=1, groups=groups, mode="NonStrict"))
        == []
    )
    assert g.apply_pod_group(a_pod_group("pg", namespace="b", min_member=2, groups=groups)) == []
    g.submit(a_pod("x", namespace="a", pod_group="pg"), at())
    g.submit(a_pod("y", namespace="b", pod_group="pg"), at())
    out = g.submit(a_pod("z", namespace="b", pod_group="pg"), at())
    assert out == [
        GroupReady(group="a/pg,b/pg", gangs=("a/pg", "b/pg"), members=("a/x", "b/y", "b/z"), attempt=1)
    ]
    g.member_deleted("b", "z", at(1))
    # one gang is Strict, so the whole group behaves Strict: everything placed is released
    assert g.group_placed("a/pg,b/pg", 1, at(2)) == [
        ReleaseHolds(
            group="a/pg,b/pg", attempt=1, members=("b/z",), reason="member deleted during placement"
        ),
        ReleaseHolds(
            group="a/pg,b/pg",
            attempt=1,
            members=("a/x", "b/y"),
            reason="group short of min-available after placement",
        ),
    ]


def test_statuses_lists_every_gang_in_order() -> None:
    g = GangEngine()
    g.apply_pod_group(a_pod_group("zeta", min_member=1))
    g.submit(a_pod("p", gang="alpha", min_available=2), at())
    assert [s["gang"] for s in g.statuses()] == ["default/alpha", "default/zeta"]
    assert [s["phase"] for s in g.statuses()] == ["Pending", "Pending"]


BIND_FAILED = [
    # policy, other member bound first?, expected actions after the release
    ("once-satisfied", True, ["PassThrough"]),
    ("once-satisfied", False, ["MemberWaiting"]),
    ("waiting-and-running", True, ["GroupReady"]),
    ("only-waiting", True, ["MemberWaiting"]),
]


@pytest.mark.parametrize(
    ("policy", "other_bound", "expected"),
    BIND_FAILED,
    ids=[f"{c[0]}, other bound={c[1]}" for c in BIND_FAILED],
)
def test_a_failed_bind_releases_the_member_and_it_waits_again(
    policy: str, other_bound: bool, expected: list[str]
) -> None:
    g = GangEngine()
    for i in range(2):
        g.submit(a_pod(f"w-{i}", gang="train", min_available=2, match_policy=policy), at())
    g.group_placed("default/train", 1, at(1))
    if other_bound:
        g.member_bound("default", "w-0", at(2))
    out = g.member_bind_failed("default", "w-1", "node gone", at(3))
    assert out[0] == ReleaseHolds(
        group="default/train", attempt=1, members=("default/w-1",), reason="bind failed: node gone"
    )
    assert kinds(out[1:]) == expected
    assert g.member_bind_failed("default", "w-1", "again", at(4)) == []
