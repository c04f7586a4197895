"""The job-level preemption victim search on its own (device_allocator.preemption): every member fits or nothing is
evicted; the victims are the fewest, lowest-priority, preemptible pods; a gang goes whole; the engine is left as it
was. Upstream: koordinator-sh/koordinator pkg/scheduler/plugins/coscheduling/core/preemption.go (dryRunPreemption,
selectVictims, sortVictims)."""

from __future__ import annotations

import json
from typing import Any

from allot_contracts.objects.pod import Pod
from allot_placement.testing import a_node, a_pod, admit, bound, engine_with
from device_allocator.preemption import job_priority, may_preempt, search, units

GANG = "gang.scheduling.koordinator.sh/"


def running(name: str, node: str, cpu: str, priority: int, **kw: Any) -> dict[str, Any]:
    return bound(a_pod(name, cpu=cpu, memory="1Gi", priority=priority, **kw), node)


def member(name: str, cpu: str, priority: int = 1000, **kw: Any) -> Pod:
    return admit(a_pod(name, cpu=cpu, memory="1Gi", priority=priority, **kw))


def gang_of(gang: str, size: int) -> dict[str, str]:
    return {f"{GANG}name": gang, f"{GANG}min-available": str(size)}


def plan_for(docs: list[dict[str, Any]], members: list[Pod]) -> tuple[Any, list[str], str, str]:
    """(plan, candidate unit keys, engine digest before, after)."""
    eng = engine_with(*docs)
    pods = {p.key: p for p in (admit(d) for d in docs if d["kind"] == "Pod")}
    placed = {k: p.node_name for k, p in pods.items()}
    candidates = units(pods, placed, job_priority(members), [m.key for m in members])
    before = eng.digest()
    plan = search(eng, members, {}, candidates)
    return plan, [u.key for u in candidates], before, eng.digest()


def victims(plan: Any) -> list[str]:
    return sorted(p for u in plan.victims for p in u.pods)


NODES = [a_node("node-1", cpu="32", memory="64Gi"), a_node("node-2", cpu="32", memory="64Gi")]


def two_by_two(names: list[str], priorities: list[int]) -> list[dict[str, Any]]:
    """Both nodes, each full with two 16-CPU pods: the first two on node-1, the others on node-2."""
    nodes = ["node-1", "node-1", "node-2", "node-2"]
    return [*NODES, *(running(n, node, "16", p) for n, node, p in zip(names, nodes, priorities, strict=True))]


def test_every_member_fits_once_the_fewest_lowest_priority_pods_go():
    docs = two_by_two(["p10", "p20", "p30", "p40"], [10, 20, 30, 40])
    plan, _, before, after = plan_for(docs, [member("m-0", "16"), member("m-1", "16")])
    assert victims(plan) == ["default/p10", "default/p20"]
    assert plan.nominated == {"default/m-0": "node-1", "default/m-1": "node-1"}
    assert before == after, "the dry run must leave the engine exactly as it was"
    one, _, _, _ = plan_for(docs, [member("m-0", "16")])
    assert victims(one) == ["default/p10"], "one member needs one victim, the lowest-priority one"


def test_upstream_preempt_success_evicts_both_pods_of_one_node():
    # koordinator preemption_test.go "preempt success": 4 equal low-priority pods of 16 CPUs on two 32-CPU nodes,
    # a gang of two 16-CPU pods: existing-pod-1 and existing-pod-2 on node-1 are the victims, both members go there
    docs = two_by_two([f"existing-pod-{i}" for i in range(1, 5)], [1, 1, 1, 1])
    plan, _, _, _ = plan_for(docs, [member("pending-pod-1", "16"), member("pending-pod-2", "16")])
    assert victims(plan) == ["default/existing-pod-1", "default/existing-pod-2"]
    assert set(plan.nominated.values()) == {"node-1"}


def test_all_or_nothing_no_victim_when_only_some_members_could_fit():
    docs = two_by_two(["low-1", "high-1", "low-2", "high-2"], [10, 2000, 10, 2000])
    # evicting both low pods frees room for two members; the third fits nowhere: nothing is evicted
    plan, candidates, before, after = plan_for(docs, [member(f"m-{i}", "16") for i in range(3)])
    assert candidates == ["default/low-1", "default/low-2"]
    assert plan is None and before == after


def test_only_strictly_lower_priority_preemptible_pods_are_candidates():
    docs = [
        *NODES,
        running("equal", "node-1", "8", 1000),
        running("higher", "node-1", "8", 1001),
        running(
            "protected", "node-1", "8", 1, labels={"scheduling.koordinator.sh/disable-preemptible": "true"}
        ),
        running(
            "non-preemptible",
            "node-2",
            "8",
            1,
            labels={"quota.scheduling.koordinator.sh/preemptible": "false"},
        ),
        running("low", "node-2", "8", 999),
    ]
    _, candidates, _, _ = plan_for(docs, [member("m-0", "16")])
    assert candidates == ["default/low"]


def test_a_gang_is_a_victim_whole_or_not_at_all():
    docs = [
        *NODES,
        running("h-0", "node-1", "16", 10, annotations=gang_of("h", 2)),
        running("keep-1", "node-1", "16", 5000),
        running("h-1", "node-2", "16", 10, annotations=gang_of("h", 2)),
        running("keep-2", "node-2", "16", 5000),
    ]
    plan, candidates, _, _ = plan_for(docs, [member("m-0", "16")])
    assert candidates == ["default/h"]
    assert victims(plan) == ["default/h-0", "default/h-1"], "the gang's other member goes with it"
    assert [(u.kind, u.key) for u in plan.victims] == [("gang", "default/h")]
    # a gang with a member that may not be preempted is no victim at all
    docs[4] = running(
        "h-1",
        "node-2",
        "16",
        10,
        annotations=gang_of("h", 2),
        labels={"scheduling.koordinator.sh/disable-preemptible": "true"},
    )
    plan, candidates, _, _ = plan_for(docs, [member("m-0", "16")])
    assert candidates == [] and plan is None


def test_at_equal_priority_a_plain_pod_goes_before_a_gang():
    docs = [
        *NODES,
        running("g-0", "node-1", "16", 10, annotations=gang_of("g", 2)),
        running("g-1", "node-1", "16", 10, annotations=gang_of("g", 2)),
        running("solo", "node-2", "16", 10),
        running("keep", "node-2", "16", 5000),
    ]
    plan, _, _, _ = plan_for(docs, [member("m-0", "16")])
    assert victims(plan) == ["default/solo"]


def test_preemption_policy_never_preempts_nothing():
    never = a_pod("m-0", cpu="16", priority=1000)
    never["spec"]["preemptionPolicy"] = "Never"
    assert not may_preempt([admit(never), member("m-1", "16")])
    assert may_preempt([member("m-1", "16")])
    assert json.loads(json.dumps(job_priority([member("a", "1", 5), member("b", "1", 7)]))) == 5
