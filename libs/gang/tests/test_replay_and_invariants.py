"""Determinism, replay, snapshots, JSON payloads, and invariants under seeded random input sequences.

A random driver plays the roles around the engine (pods arriving and leaving, a device-allocator answering
attempts, a binder, a timer) and keeps its own ledger of quota/placement holds keyed by (attempt, member):
added when a group is offered (quota admitted) and when an attempt is committed, removed by ``ReleaseHolds`` and
by binding. After every step the ledger must equal what the engine says is held — no partial holds are ever left
behind — and every ``GroupAdmitted`` must satisfy each gang's match policy.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from allot_contracts.objects.pod import parse_pod
from allot_gang import (
    GangConfig,
    GangEngine,
    GroupAdmitted,
    GroupReady,
    ReleaseHolds,
    action_from_dict,
    is_satisfied,
)
from allot_gang.actions import Action
from allot_gang.testing import a_pod, a_pod_group, a_pod_manifest, at

S = 1_000_000
CFG = GangConfig.from_dict({"retryInitialBackoffSeconds": 1, "retryMaxBackoffSeconds": 8})

GANGS: dict[str, dict[str, Any]] = {
    "a/strict": {"min_available": 2, "total_number": 3, "waiting_time": "40s"},
    "a/loose": {
        "min_available": 3,
        "mode": "NonStrict",
        "match_policy": "waiting-and-running",
        "waiting_time": "1m",
    },
    "a/left": {"min_available": 2, "groups": ["a/left", "b/right"], "match_policy": "only-waiting"},
    "b/right": {"min_available": 1, "groups": ["a/left", "b/right"], "match_policy": "only-waiting"},
    "b/pg": {},  # a PodGroup gang; its pods reference it by label
}

Input = tuple[str, tuple[Any, ...]]


class Driver:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = at(0)
        self.names = 0
        self.live: list[str] = []  # pod keys known to exist
        self.outstanding: dict[int, tuple[str, tuple[str, ...]]] = {}  # attempt -> (group, members)
        self.admitted: list[str] = []
        self.bound: list[str] = []
        self.ledger: set[tuple[int, str]] = set()
        self.inputs: list[Input] = []

    def next_input(self, engine: GangEngine) -> Input:
        r = self.rng.random()
        if r < 0.35:
            gang = self.rng.choice(sorted(GANGS))
            ns, name = gang.split("/")
            self.names += 1
            pod_name = f"{name}-{self.names}"
            if gang == "b/pg":
                pod = a_pod(pod_name, namespace=ns, pod_group="pg", priority=self.rng.choice([0, 10]))
            else:
                pod = a_pod(pod_name, namespace=ns, gang=name, **GANGS[gang])
            return ("submit", (pod, self.now))
        if r < 0.45 and self.live:
            key = self.rng.choice(self.live)
            return ("member_deleted", (*key.split("/"), self.now))
        if r < 0.65 and self.outstanding:
            attempt = self.rng.choice(sorted(self.outstanding))
            group = self.outstanding[attempt][0]
            if self.rng.random() < 0.6:
                return ("group_placed", (group, attempt, self.now))
            return ("group_unschedulable", (group, attempt, "no capacity", self.now))
        if r < 0.75 and self.admitted:
            key = self.rng.choice(self.admitted)
            return ("member_bound", (*key.split("/"), self.now))
        if r < 0.8 and self.bound:
            key = self.rng.choice(self.bound)
            return (
                self.rng.choice(["member_running", "member_succeeded", "member_failed"]),
                (*key.split("/"), self.now),
            )
        if r < 0.84:
            if self.rng.random() < 0.7:
                return (
                    "apply_pod_group",
                    (a_pod_group("pg", namespace="b", min_member=self.rng.choice([2, 3])),),
                )
            return ("delete_pod_group", ("b", "pg"))
        deadline = engine.next_deadline()
        step = self.rng.choice([1, 5, 20]) * S
        if deadline is not None and self.rng.random() < 0.5:
            self.now = max(self.now, deadline)
        else:
            self.now += step
        return ("on_timer", (self.now,))

    def observe(self, name: str, args: tuple[Any, ...], actions: list[Action], engine: GangEngine) -> None:
        if name == "submit" and not any(type(a).__name__ == "Rejected" for a in actions):
            self.live.append(args[0].key)
        if name == "member_deleted":
            key = f"{args[0]}/{args[1]}"
            self.live = [k for k in self.live if k != key]
            self.admitted = [k for k in self.admitted if k != key]
            self.bound = [k for k in self.bound if k != key]
        if name == "group_placed":
            group, members = self.outstanding.pop(args[1])
            self.ledger |= {(args[1], k) for k in members}  # the allocator committed placements
        if name == "group_unschedulable":
            self.outstanding.pop(args[1])
        if name == "member_bound":
            key = f"{args[0]}/{args[1]}"
            self.ledger = {(a, k) for a, k in self.ledger if k != key}  # the hold became a binding
            self.admitted = [k for k in self.admitted if k != key]
            self.bound.append(key)
        for action in actions:
            if isinstance(action, GroupReady):
                self.outstanding[action.attempt] = (action.group, action.members)
                self.ledger |= {(action.attempt, k) for k in action.members}  # quota admitted the group
            elif isinstance(action, ReleaseHolds):
                self.ledger -= {(action.attempt, k) for k in action.members}
            elif isinstance(action, GroupAdmitted):
                self.admitted.extend(k for k in action.members if k not in self.admitted)


def engine_holds(engine: GangEngine) -> set[tuple[int, str]]:
    state = engine.snapshot()["state"]
    held = {
        (m["attempt"], key)
        for gang in state["gangs"].values()
        for key, m in gang["members"].items()
        if m["state"] in ("held", "admitted")
    }
    in_flight = {
        (group["attempt"], key)
        for group in state["groups"].values()
        if group["state"] == "attempting"
        for key in group["attempt_members"]
    }
    return held | in_flight


def check_admission(before: dict[str, Any], action: GroupAdmitted) -> None:
    state = before["state"]
    group = state["groups"][action.group]
    for gang_id in group["gangs"]:
        gang = state["gangs"][gang_id]
        settings = gang["settings"]
        members = gang["members"]
        waiting = sum(1 for k in action.members if k in members)
        running = sum(1 for m in members.values() if m["state"] in ("admitted", "bound"))
        assert is_satisfied(
            policy=settings["match_policy"],
            min_available=settings["min_available"],
            waiting=waiting,
            running=running,
            once_satisfied=gang["once_satisfied"],
        ), (gang_id, action)


def play(seed: int, steps: int) -> tuple[GangEngine, list[Input], list[list[dict[str, Any]]]]:
    engine = GangEngine(CFG)
    driver = Driver(seed)
    outputs: list[list[dict[str, Any]]] = []
    for _ in range(steps):
        name, args = driver.next_input(engine)
        before = engine.snapshot()
        actions = getattr(engine, name)(*args)
        if name == "apply_pod_group":
            actions = engine.settle(driver.now)  # the result here is a list of field errors, not actions
        elif name == "delete_pod_group":
            actions = actions + engine.settle(driver.now)
        driver.inputs.append((name, args))
        driver.observe(name, args, actions, engine)
        for action in actions:
            if isinstance(action, GroupAdmitted):
                check_admission(before, action)
        assert driver.ledger == engine_holds(engine), (seed, name, args, actions)
        outputs.append([a.to_dict() for a in actions])
    return engine, driver.inputs, outputs


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_keep_holds_exact_and_admissions_satisfied(seed: int) -> None:
    engine, _, outputs = play(seed, 250)
    kinds = {o["type"] for out in outputs for o in out}
    assert "GroupReady" in kinds


def test_the_random_driver_reaches_every_kind_of_action() -> None:
    kinds: set[str] = set()
    for seed in range(40):
        _, _, outputs = play(seed, 250)
        kinds |= {o["type"] for out in outputs for o in out}
    assert kinds == {
        "PassThrough",
        "MemberWaiting",
        "GroupReady",
        "GroupAdmitted",
        "GroupRetryAt",
        "GroupTimedOut",
        "ReleaseHolds",
    }


@pytest.mark.parametrize("seed", [3, 17, 29])
def test_replaying_the_inputs_re_derives_every_action_and_the_state(seed: int) -> None:
    first = GangEngine(CFG)
    driver = Driver(seed)
    recorded: list[tuple[str, tuple[Any, ...], list[dict[str, Any]]]] = []
    for _ in range(300):
        name, args = driver.next_input(first)
        result = getattr(first, name)(*args)
        actions = [] if name == "apply_pod_group" else result
        driver.inputs.append((name, args))
        driver.observe(name, args, actions, first)
        recorded.append((name, args, [a.to_dict() for a in result]))
        if name in ("apply_pod_group", "delete_pod_group"):
            settled = first.settle(driver.now)
            driver.observe("settle", (driver.now,), settled, first)
            recorded.append(("settle", (driver.now,), [a.to_dict() for a in settled]))

    second = GangEngine(GangConfig.from_dict(CFG.to_dict()))
    half = len(recorded) // 2
    for name, args, expected in recorded[:half]:
        assert [a.to_dict() for a in getattr(second, name)(*args)] == expected
    # restart from a snapshot half-way: the continuation is identical
    restored = GangEngine.from_snapshot(json.loads(json.dumps(second.snapshot())))
    assert restored.digest() == second.digest()
    for name, args, expected in recorded[half:]:
        assert [a.to_dict() for a in getattr(restored, name)(*args)] == expected
    assert restored.digest() == first.digest()
    assert restored.snapshot() == first.snapshot()


def test_every_action_round_trips_through_json_without_floats() -> None:
    _, _, outputs = play(5, 300)

    def no_floats(v: object) -> None:
        assert not isinstance(v, float)
        for x in v.values() if isinstance(v, dict) else v if isinstance(v, list) else ():
            no_floats(x)

    for out in outputs:
        for d in out:
            text = json.dumps(d)
            no_floats(json.loads(text))
            assert action_from_dict(json.loads(text)).to_dict() == d


def test_the_digest_does_not_depend_on_annotation_order() -> None:
    def run(reverse: bool) -> str:
        engine = GangEngine()
        for i in range(3):
            manifest = a_pod_manifest(
                f"w-{i}", gang="train", min_available=3, mode="NonStrict", waiting_time="5m"
            )
            if reverse:
                ann = manifest["metadata"]["annotations"]
                manifest["metadata"]["annotations"] = dict(reversed(list(ann.items())))
            pod = parse_pod(manifest, [], [])
            assert pod is not None
            engine.submit(pod, at(i))
        return engine.digest()

    assert run(False) == run(True)
