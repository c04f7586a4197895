"""Quota decisions beyond admission: preemption node by node (victims only where the preemptor then fits), and pods
no quota governs."""

from __future__ import annotations

from typing import Any

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import ObjectRef
from allot_contracts.events.enactment import QuotaEvictionEnactmentFailed
from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario, borrowed_quota


def prioritized(name: str, priority: int, gpus: int) -> dict:
    pod = a_pod(name, namespace="team", gpus=gpus)
    pod["spec"]["priority"] = priority
    return pod


def test_nothing_is_evicted_when_no_node_could_take_the_preemptor_afterwards():
    s = Scenario()
    s.apply(
        a_node("n1", gpus=1), a_gpu_device("n1", gpus=1), a_node("n2", gpus=1), a_gpu_device("n2", gpus=1)
    )
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "2"}))
    s.apply(prioritized("low", 1000, gpus=1))
    s.apply(prioritized("high", 9000, gpus=2))  # needs 2 GPUs on one node: no node has them
    assert s.of_type("quota.evicted") == []
    assert s.phase("team/low") == "Bound"
    assert s.phase("team/high") == "Waiting"
    s.assert_replays()


def test_the_victim_is_chosen_on_the_node_where_the_preemptor_then_fits():
    s = Scenario()
    s.apply(
        a_node("n1", gpus=1), a_gpu_device("n1", gpus=1), a_node("n2", gpus=2), a_gpu_device("n2", gpus=2)
    )
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "3"}))
    s.apply(prioritized("least", 100, gpus=1))  # the least important pod, but on the 1-GPU node
    s.apply(prioritized("lesser", 500, gpus=1))
    placed = {e["pod"]["name"]: e["node"] for e in s.of_type("pod.placed")}
    assert placed == {"least": "n1", "lesser": "n2"}, placed
    s.apply(prioritized("high", 9000, gpus=2))
    evicted = [e["pod"]["name"] for e in s.of_type("quota.evicted")]
    assert evicted == ["lesser"], "evicting the pod on n1 would not give high two GPUs on one node"
    assert s.phase("team/high") == "Bound"
    assert s.view().pods["team/high"].node == "n2"
    s.assert_replays()


def test_with_the_default_quota_disabled_pods_outside_every_quota_run_uncharged():
    s = Scenario({"quota-manager": {"featureGates": {"DisableDefaultQuota": True}}})
    s.apply(a_node("n1", gpus=4), a_gpu_device("n1", gpus=4))
    s.apply(a_pod("p", namespace="dev", gpus=1))
    gang = {"gang.scheduling.koordinator.sh/name": "g", "gang.scheduling.koordinator.sh/min-available": "2"}
    s.apply(
        a_pod("g0", namespace="dev", gpus=1, annotations=gang),
        a_pod("g1", namespace="dev", gpus=1, annotations=gang),
    )
    assert [s.phase(f"dev/{name}") for name in ("p", "g0", "g1")] == ["Bound"] * 3
    assert {e["quota"] for e in s.of_type("quota.admitted")} == {""}
    s.assert_replays()


def test_a_waiting_pod_is_recorded_again_when_the_numbers_it_waits_for_change():
    s = Scenario()
    s.apply(a_quota("team", namespace="team", max={"cpu": "10"}))
    s.apply(a_pod("big", namespace="team", cpu="6"))  # no node yet: the runtime is 0
    first = s.of_type("quota.waiting")[-1]["message"]
    assert "runtime: cpu:0," in first, first
    s.apply(a_node("n1", cpu="4"))  # the quota may now use 4 cpu: still too little, for another reason
    waits = s.of_type("quota.waiting")
    assert len(waits) == 2 and "runtime: cpu:4," in waits[-1]["message"], waits
    s.apply(a_node("n2", cpu="1"))  # 5 cpu now: the message changes again
    assert "runtime: cpu:5," in s.of_type("quota.waiting")[-1]["message"]
    s.apply(a_quota("team", namespace="team", max={"cpu": "10"}))  # nothing changed: nothing recorded
    assert len(s.of_type("quota.waiting")) == 3
    s.apply(a_node("n3", cpu="8"))
    assert s.phase("team/big") == "Bound"
    s.assert_replays()


def test_a_release_that_only_changes_used_does_not_record_the_waiting_pods_again():
    s = Scenario()
    s.apply(a_node("n1", cpu="8"), a_quota("team", namespace="team", max={"cpu": "4"}))
    s.apply(a_pod("a", namespace="team", cpu="1"), a_pod("b", namespace="team", cpu="3"))
    s.apply(a_pod("c", namespace="team", cpu="2"))
    assert len(s.of_type("quota.waiting")) == 1
    s.delete("Pod", "a", namespace="team")  # used 4 -> 3; c still does not fit the same runtime (4)
    assert len(s.of_type("quota.waiting")) == 1
    assert s.phase("team/c") == "Waiting"
    s.assert_replays()


def refuse(s: Scenario, decision: Any) -> None:
    """The binder's Eviction API call for ``decision`` (a recorded ``quota.evicted``) refused by a disruption budget:
    its outcome recorded as the binder's worker records it."""
    payload = decision.payload_dict()
    refused = QuotaEvictionEnactmentFailed(
        pod=ObjectRef(namespace=payload["pod"]["namespace"], name=payload["pod"]["name"]),
        uid=payload.get("uid", ""),
        quota=payload["quota"],
        decision=decision.event_id,
        reason="TooManyRequests",
        message="Cannot evict pod as it would violate the pod's disruption budget.",
    )
    new = NewEvent(
        stream_id=decision.stream_id,
        event=refused,
        event_id=derived_event_id("binder.kube", decision.event_id, 0),
        causation_id=decision.event_id,
    )
    s.sim.store.append_sync([new], producer="binder.kube")
    s.sim.pump()


def test_an_eviction_kubernetes_refuses_charges_the_victim_again_and_it_is_not_chosen_again():
    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "2"}))
    s.apply(prioritized("low", 100, gpus=1), prioritized("lower", 50, gpus=1))
    s.apply(prioritized("high", 9000, gpus=1))
    [decision] = [e for e in s.events if e.type == "quota.evicted"]
    assert decision.payload_dict()["pod"]["name"] == "lower"
    refuse(s, decision)  # a PodDisruptionBudget keeps the pod
    [blocked] = s.of_type("quota.reclaim_blocked")
    assert blocked["pod"]["name"] == "lower" and blocked["cause"] == "Preempted"
    assert blocked["reason"] == "TooManyRequests" and "disruption budget" in blocked["message"]
    assert blocked["used"]["nvidia.com/gpu"] == "3"  # low, lower (still running) and high
    # A later preemption in the same quota picks another victim, never the pod Kubernetes keeps.
    s.apply(prioritized("urgent", 9500, gpus=1))
    victims = [e["pod"]["name"] for e in s.of_type("quota.evicted")]
    assert victims == ["lower", "low", "high"], victims  # used 3 of max 2: two others make room
    s.assert_replays()
    # allot explain pod says why the pod still runs.
    from allot_stack.explain import explain

    own = [e for e in s.events if e.stream_id == stream_id("pod", "team/lower")]
    text = "\n".join(explain("team/lower", own, []))
    assert "  blocked: the eviction (Preempted) was refused by the API server" in text, text
    assert "TooManyRequests: Cannot evict pod" in text


def test_over_use_revoke_takes_another_pod_in_place_of_one_kubernetes_keeps():
    s = borrowed_quota()  # a borrows 8 of b's min; b wants it back
    s.advance(180)
    first = [e for e in s.events if e.type == "quota.evicted"]
    assert len(first) == 2 and {e.payload_dict()["cause"] for e in first} == {"OverUseRevoke"}
    kept = first[0].payload_dict()["pod"]["name"]
    refuse(s, first[0])
    [blocked] = s.of_type("quota.reclaim_blocked")
    assert blocked["pod"]["name"] == kept and blocked["cause"] == "OverUseRevoke"
    s.advance(180)  # a is over its runtime again (the kept pod runs): after the delay another pod goes
    again = [e["pod"]["name"] for e in s.of_type("quota.evicted")][2:]
    assert len(again) == 1 and kept not in again, again
    s.assert_replays()
