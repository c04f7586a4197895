"""Job-level preemption through the chained services (Koordinator v1.6 "Support Job Level Preemption",
docs/proposals/scheduling/20240115-support-job-level-preemption.md): a gang group — or a plain pod, a job of one —
that fits nowhere evicts lower-priority pods so that every member fits, recorded as one decision, or evicts nothing;
the members are placed once the victims are gone, and replay re-derives every step."""

from __future__ import annotations

import asyncio
from typing import Any

from allot_contracts.envelope import NewEvent, stream_id
from allot_contracts.events import ObjectRef, PodEvictionEnacted
from allot_stack.explain import explain, history
from allot_testing.builders import a_node, a_pod, a_quota
from allot_testing.scenario import Scenario

GANG = "gang.scheduling.koordinator.sh/"
KUBE = {"binder": {"mode": "kubernetes"}}


def pod(name: str, cpu: str, priority: int, *, gang: str = "", size: int = 2, **kw: Any) -> dict[str, Any]:
    body = a_pod(name, cpu=cpu, memory="1Gi", **kw)
    body["spec"]["priority"] = priority
    if gang:
        body["metadata"]["annotations"].update({f"{GANG}name": gang, f"{GANG}min-available": str(size)})
    return body


def cluster(s: Scenario, *low: dict[str, Any]) -> Scenario:
    """Two 32-CPU nodes filled by ``low`` (placed in order)."""
    return s.apply(a_node("node-1", cpu="32"), a_node("node-2", cpu="32"), *low)


def four_low(priority: int = 1) -> list[dict[str, Any]]:
    # least-allocated placement puts 1 and 2 on node-1, 3 and 4 on node-2 when applied in this order
    return [pod(f"existing-{i}", "16", priority) for i in (1, 3, 2, 4)]


def evicted(s: Scenario) -> list[str]:
    return sorted(e["pod"]["name"] for e in s.of_type("pod.evicted") if e["cause"] == "Preempted")


def last(s: Scenario, key: str) -> dict[str, Any]:
    return [d for d in s.decisions() if d["pod"] == key][-1]


def test_a_gang_evicts_lower_priority_pods_in_one_decision_and_starts_whole():
    s = cluster(Scenario(), *four_low())
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    [decided] = s.of_type("preemption.decided")
    assert decided["job"] == "default/train" and decided["gang"] is True and decided["priority"] == 1000
    assert decided["nominated"] == {"default/train-0": "node-1", "default/train-1": "node-1"}
    assert [(v["pod"]["name"], v["node"], v["priority"]) for v in decided["victims"]] == [
        ("existing-1", "node-1", 1),
        ("existing-2", "node-1", 1),
    ]
    # the decision and the evictions are one append, right after the failed attempt
    types = s.types()
    at = types.index("preemption.decided")
    assert types[at - 1] == "gang.group_unschedulable" and types[at + 1 : at + 3] == ["pod.evicted"] * 2
    assert evicted(s) == ["existing-1", "existing-2"]
    event = next(e for e in s.of_type("pod.evicted") if e["pod"]["name"] == "existing-1")
    assert event["message"] == "preempted by gang group default/train (priority 1000) to make room on node-1"
    assert event["detail"] == {"preemptor": "default/train", "priority": 1}
    for member in ("default/train-0", "default/train-1"):
        assert last(s, member)["outcome"] == "Scheduled" and last(s, member)["node"] == "node-1"
        assert s.phase(member) == "Bound"
    assert s.phase("default/existing-3") == "Bound" and s.phase("default/existing-4") == "Bound"
    s.assert_replays()


def test_equal_priority_is_never_preempted():
    s = cluster(Scenario(), *four_low(priority=1000))
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    assert s.of_type("preemption.decided") == [] and evicted(s) == []
    assert last(s, "default/train-0")["outcome"] == "Unschedulable"
    s.apply(pod("urgent", "16", 1001))  # one priority step higher is enough
    assert evicted(s) == ["existing-1"]
    s.assert_replays()


def test_all_or_nothing_nothing_is_evicted_when_not_every_member_can_fit():
    s = cluster(Scenario(), pod("low-1", "16", 1), pod("low-2", "16", 1))
    s.apply(pod("high-1", "16", 5000), pod("high-2", "16", 5000))  # one low and one high pod on each node
    s.apply(*[pod(f"train-{i}", "16", 1000, gang="train", size=3) for i in range(3)])
    assert s.of_type("preemption.decided") == [] and evicted(s) == []
    assert {last(s, f"default/train-{i}")["outcome"] for i in range(3)} == {"Unschedulable"}
    assert s.phase("default/low-1") == "Bound" and s.phase("default/low-2") == "Bound"
    # the same room is enough for a gang of two: it evicts both low pods and starts
    s.apply(*[pod(f"pair-{i}", "16", 1000, gang="pair") for i in range(2)])
    assert evicted(s) == ["low-1", "low-2"]
    assert {last(s, f"default/pair-{i}")["outcome"] for i in range(2)} == {"Scheduled"}
    assert {last(s, f"default/train-{i}")["outcome"] for i in range(3)} == {"Unschedulable"}
    s.assert_replays()


def test_disable_preemptible_and_preemption_policy_never_are_honoured():
    protected = {"scheduling.koordinator.sh/disable-preemptible": "true"}
    s = cluster(Scenario(), pod("keep", "16", 1, labels=protected), pod("other", "16", 5000))
    s.apply(pod("low", "16", 2), pod("filler", "16", 5000))
    never = pod("never", "16", 1000)
    never["spec"]["preemptionPolicy"] = "Never"
    s.apply(never)
    assert evicted(s) == [] and s.phase("default/never") == "Unschedulable"
    s.apply(pod("job", "16", 1000))  # a job of one: the protected pod is spared, the next lowest goes
    assert evicted(s) == ["low"]
    assert last(s, "default/job")["outcome"] == "Scheduled"
    [decided] = s.of_type("preemption.decided")
    assert decided["job"] == "default/job" and decided["gang"] is False
    s.assert_replays()


def test_a_gang_victim_goes_whole():
    s = cluster(Scenario(), pod("batch-0", "16", 10, gang="batch"), pod("batch-1", "16", 10, gang="batch"))
    s.apply(pod("keep-1", "16", 5000), pod("keep-2", "16", 5000))  # batch-0 and batch-1 on different nodes
    s.apply(pod("job", "16", 1000))  # one batch member's room is enough, but the gang goes whole
    assert evicted(s) == ["batch-0", "batch-1"]
    [decided] = s.of_type("preemption.decided")
    assert {v["gang"] for v in decided["victims"]} == {"default/batch"}
    assert last(s, "default/job")["outcome"] == "Scheduled"
    s.assert_replays()


def test_a_lower_priority_pod_arriving_meanwhile_does_not_take_the_nominated_room():
    s = cluster(Scenario(), *four_low())
    # a 16-CPU pod of priority 500 arrives just as the gang's victims are being evicted: node-1 is nominated
    s.interleave("preemption.decided", pod("late", "16", 500))
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    assert {last(s, f"default/train-{i}")["node"] for i in range(2)} == {"node-1"}
    late = [d for d in s.decisions() if d["pod"] == "default/late"]
    held = next(d for d in late if "HeldForPreemptor" in d["codes"])
    assert held["message"] == (
        "held back: node node-1 is nominated for default/train (priority 1000), which preempted lower-priority "
        "pods to fit there"
    )
    # once the gang is placed the late pod goes again: node-1 is full, it preempts on node-2 (a job of one)
    assert last(s, "default/late")["node"] == "node-2"
    assert evicted(s) == ["existing-1", "existing-2", "existing-3"]
    assert [e["job"] for e in s.of_type("preemption.decided")] == ["default/train", "default/late"]
    s.assert_replays()


def test_the_gang_waits_for_its_victims_and_does_not_preempt_again():
    s = cluster(Scenario(KUBE), *four_low())  # Kubernetes mode: evictions are enacted by the binder's worker
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    assert evicted(s) == ["existing-1", "existing-2"]
    s.advance(11)  # the gang's retry after backoff, victims still there
    again = s.of_type("gang.group_unschedulable")[-1]
    assert again["attempt"] == 2 and "PreemptionInProgress" in again["codes"]
    assert (
        "waiting for 2 preempted pod(s) to leave: default/existing-1, default/existing-2" in again["message"]
    )
    assert len(s.of_type("preemption.decided")) == 1
    s.delete("Pod", "existing-1").delete("Pod", "existing-2")
    placed = s.of_type("gang.group_placed")
    assert placed and {d["node"] for d in placed[-1]["decisions"].values()} == {"node-1"}
    s.assert_replays()


def test_a_refused_eviction_ends_the_nomination():
    s = cluster(Scenario(KUBE), *four_low())
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    allocator = s.sim.host("device-allocator").processor
    assert "gang:default/train" in allocator.preemptions.jobs
    refusal = PodEvictionEnacted(
        pod=ObjectRef(namespace="default", name="existing-1"),
        uid="uid-default-existing-1",
        node="node-1",
        cause="Preempted",
        evicted=False,
        message="evicting default/existing-1 failed: 422",
    )
    s.sim.store.append_sync(
        [NewEvent(stream_id=stream_id("pod", "default/existing-1"), event=refusal, event_id="refused-1")],
        producer="binder.kube",
    )
    s.sim.pump()
    assert "gang:default/train" not in allocator.preemptions.jobs
    s.advance(11)  # the next attempt preempts again, without the pod whose eviction was refused
    first, second = s.of_type("preemption.decided")
    assert "existing-1" in {v["pod"]["name"] for v in first["victims"]}
    assert "existing-1" not in {v["pod"]["name"] for v in second["victims"]}
    s.assert_replays()


def test_an_attempt_that_fails_at_quota_after_the_victims_left_ends_the_nomination():
    s = cluster(Scenario(KUBE), *four_low())
    # spare capacity nobody can use (tainted) gives the team's quota its runtime
    s.apply(a_node("spare", cpu="64", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]))
    s.apply(a_quota("team", namespace="team", max={"cpu": "64", "memory": "1Ti"}))
    s.apply(*[pod(f"train-{i}", "16", 1000, gang="train", namespace="team") for i in range(2)])
    assert evicted(s) == ["existing-1", "existing-2"]
    s.apply(
        a_quota("team", namespace="team", max={"cpu": "16", "memory": "1Ti"})
    )  # the quota shrinks meanwhile
    s.delete("Pod", "existing-1").delete("Pod", "existing-2")  # the victims are gone: the gang retries
    assert s.of_type("quota.group_waiting"), "the retry fails at quota"
    assert s.sim.host("device-allocator").processor.preemptions.jobs == {}
    s.apply(pod("later", "16", 1))  # node-1 is nobody's any more
    assert last(s, "default/later")["outcome"] == "Scheduled" and last(s, "default/later")["node"] == "node-1"
    s.assert_replays()


def test_preemption_can_be_switched_off():
    s = cluster(Scenario({"device-allocator": {"preemption": False}}), *four_low())
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    assert s.of_type("preemption.decided") == [] and evicted(s) == []


def test_explain_shows_the_preemption_a_waiting_member_counts_on():
    s = cluster(Scenario(KUBE), *four_low())
    s.apply(pod("train-0", "16", 1000, gang="train"), pod("train-1", "16", 1000, gang="train"))
    lines = explain("default/train-0", *asyncio.run(history(s.sim.store, "default/train-0")))
    assert (
        "preempting: gang group default/train (priority 1000) fits once 2 lower-priority pod(s) are evicted: "
        "default/existing-1 on node-1, default/existing-2 on node-1; nominated: default/train-0 on node-1, "
        "default/train-1 on node-1"
    ) in lines
    assert any("preemption.decided" in line for line in lines)


def test_victims_recorded_already_bound_are_deleted_in_standalone_mode():
    s = Scenario().apply(a_node("node-1", cpu="32"))
    for name in ("existing-1", "existing-2"):
        running = pod(name, "16", 1)
        running["spec"]["nodeName"] = "node-1"  # recorded as running (pod.observed), not placed by Allot
        s.apply(running)
    s.apply(pod("job", "16", 1000))
    assert evicted(s) == ["existing-1"]
    deleted = [e for e in s.of_type("pod.deleted") if e["pod"]["name"] == "existing-1"]
    assert deleted and deleted[0]["uid"] == "uid-default-existing-1"
    assert last(s, "default/job")["outcome"] == "Scheduled"
    s.assert_replays()
