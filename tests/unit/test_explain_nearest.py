"""``allot explain pod`` / ``allot describe pod``: the nearest miss of an unschedulable pod (the closest node and the
smallest change that lets it fit) and where a pending pod waits in the queue, computed from the log."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from allot_cli.commands.describe import run_describe
from allot_stack.explain import cluster, explain, history
from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


def explained(s: Scenario, key: str) -> list[str]:
    return explain(key, *asyncio.run(history(s.sim.store, key)), asyncio.run(cluster(s.sim.store)))


def block(lines: list[str], prefix: str) -> list[str]:
    """The line starting with ``prefix`` and the indented lines under it."""
    start = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def with_priority(pod: dict[str, Any], priority: int) -> dict[str, Any]:
    pod["spec"]["priority"] = priority
    return pod


def test_a_pod_missing_one_gpu_on_the_best_node_is_told_to_free_one_gpu_there():
    s = Scenario()
    s.apply(
        a_node("n1", gpus=2),
        a_gpu_device("n1", gpus=2, memory="40Gi"),
        a_node("n2", gpus=4, taints=[TAINT]),
        a_gpu_device("n2", gpus=4, memory="40Gi"),
    )
    s.apply(a_pod("holder", gpus=1))
    s.apply(a_pod("p", gpus=2))
    assert s.phase("default/p") == "Unschedulable"
    assert block(explained(s, "default/p"), "nearest:") == [
        "nearest:   node n1 (1 failing check(s): Insufficient nvidia.com/gpu)",
        "  change: free 1 GPU(s) (whole 40Gi each) on node n1 (held by default/holder)",
    ]


def test_a_pod_blocked_only_by_a_taint_is_told_to_remove_it():
    s = Scenario()
    s.apply(
        a_node("n1", cpu="32", gpus=2),
        a_gpu_device("n1", gpus=2),
        a_node("n2", cpu="64", gpus=4, taints=[TAINT]),
        a_gpu_device("n2", gpus=4),
    )
    s.apply(a_pod("p", cpu="40", gpus=4))  # n1: short of cpu and GPUs; n2: only the taint
    lines = explained(s, "default/p")
    assert block(lines, "nearest:") == [
        "nearest:   node n2 (1 failing check(s): node(s) had untolerated taint {dedicated: infer})",
        "  change: remove taint {dedicated: infer} from node n2 (or tolerate it)",
    ], lines


def test_the_smaller_shortfall_wins_between_nodes_failing_as_many_checks():
    s = Scenario()
    s.apply(a_node("a", cpu="8"), a_node("b", cpu="30"))
    s.apply(a_pod("p", cpu="32"))  # a misses 24 cpu, b misses 2: b is closer although a sorts first
    assert block(explained(s, "default/p"), "nearest:") == [
        "nearest:   node b (1 failing check(s): Insufficient cpu)",
        "  change: free 2 cpu on node b",
    ]


def team_quota(gpus: int) -> Scenario:
    """An 8-GPU node and the quota ``team`` of ``gpus`` GPUs for namespace team."""
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
    s.apply(
        a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": str(gpus)})
    )
    return s


def quota_changes(lines: list[str]) -> list[str]:
    return [line for line in block(lines, "quota:") if "change:" in line]


def test_a_pod_blocked_by_quota_is_told_how_much_to_raise_it():
    s = team_quota(2)
    s.apply(a_pod("q", namespace="team", gpus=6))
    lines = explained(s, "team/q")
    assert quota_changes(lines) == [
        "  change: raise quota team by 4 nvidia.com/gpu (limit 2, used 0, the pod requests 6), "
        "or free that much of its use"
    ]
    assert block(lines, "queue:")[:2] == [
        "queue:     stage quota, attempt 1, position 1 of 1 (priority 0, then arrival)",
        "  waits for: its quota to have room (pods of the quota finishing, or a larger quota)",
    ]


def test_a_pod_queued_behind_two_higher_priority_pods_is_third_of_three():
    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_pod("early-low", gpus=4))  # arrives first, but priority 0
    s.apply(with_priority(a_pod("high-1", gpus=4), 100), with_priority(a_pod("high-2", gpus=4), 100))
    lines = explained(s, "default/early-low")
    assert block(lines, "queue:") == [
        "queue:     stage placement, attempt 1, position 3 of 3 (priority 0, then arrival)",
        "  waits for: capacity on a node that fits (a capacity change sends it back)",
        "  ahead: default/high-1 (priority 100), default/high-2 (priority 100)",
    ]
    assert block(explained(s, "default/high-2"), "queue:")[0].endswith(
        "position 2 of 3 (priority 100, then arrival)"
    )


def test_a_placed_pod_has_no_nearest_miss_and_no_queue_place():
    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_pod("p", gpus=1))
    lines = explained(s, "default/p")
    assert not [line for line in lines if line.startswith(("nearest:", "queue:"))]


def test_the_simulator_run_of_an_example_with_an_unschedulable_pod_shows_it_in_describe():
    s = Scenario()
    s.apply_yaml((ROOT / "examples" / "placement" / "06-hami-shared-gpu.yaml").read_text())
    assert s.phase("ai/sixty") == "Unschedulable"
    args = argparse.Namespace(what="pod", name="ai/sixty", namespace=None)
    lines = asyncio.run(run_describe(args, s.sim.store, now=1_767_225_600_000_000))
    explain_part = [line.strip() for line in lines[lines.index("Explain:") + 1 :]]
    assert "nearest:   node n-hami (1 failing check(s): Insufficient koordinator.sh/gpu-core)" in explain_part
    assert "change: free 1 GPU(s) (60% of 14.4Gi each) on node n-hami (held by ai/half-c)" in explain_part
    assert any(
        line.startswith("queue:     stage placement, attempt 1, position 1 of 1") for line in explain_part
    )


def test_a_pod_whose_preemption_is_under_way_waits_in_the_preemption_stage():
    s = Scenario(
        {"binder": {"mode": "kubernetes"}}
    )  # evictions are enacted later: the victims are still there
    low = [with_priority(a_pod(f"low-{i}", cpu="16"), 1) for i in (1, 3, 2, 4)]
    s.apply(a_node("node-1", cpu="32"), a_node("node-2", cpu="32"), *low)
    s.apply(with_priority(a_pod("big", cpu="32"), 1000))
    lines = explained(s, "default/big")
    assert block(lines, "queue:")[:2] == [
        "queue:     stage preemption-nominated, attempt 1, position 1 of 1 (priority 1000, then arrival)",
        "  waits for: its preemption victims to leave the nominated node(s)",
    ]
    # the victims' share is no longer counted as held: nothing is missing on the closest node any more
    assert block(lines, "nearest:")[1] == (
        "  change: none for cpu: node node-1 has enough free now (pods left or were evicted since the decision)"
    )


def test_a_pod_needing_gpus_on_one_pcie_switch_is_told_which_switch_to_free():
    s = Scenario()
    s.apply(a_node("n1", gpus=4), a_gpu_device("n1", gpus=4))  # PCIe switch 0: GPUs 0-1, switch 1: GPUs 2-3
    for name in "abcd":
        s.apply(a_pod(name, gpus=1))  # GPUs 0, 1, 2, 3 in order
    s.delete("Pod", "b").delete("Pod", "c")  # two GPUs free, one on each switch
    hint = {"scheduling.koordinator.sh/device-allocate-hint": '{"gpu": {"requiredTopologyScope": "PCIe"}}'}
    s.apply(a_pod("pair", gpus=2, annotations=hint))
    assert block(explained(s, "default/pair"), "nearest:") == [
        "nearest:   node n1 (1 failing check(s): Insufficient Topology Scoped GPU Devices)",
        "  change: free 1 GPU(s) (whole 80Gi each) on PCIe switch 0 of node n1 (held by default/a)",
    ]


def test_no_freeing_is_suggested_where_no_switch_is_large_enough():
    s = Scenario()
    s.apply_yaml((ROOT / "examples" / "placement" / "02-gpus-one-pcie.yaml").read_text())
    assert block(explained(s, "ml/quad"), "nearest:")[1] == (
        "  change: none: no PCIe switch of node n1 holds 4 GPU(s) (the largest holds 2)"
    )


def test_a_gang_is_told_what_its_failing_member_misses_counting_the_members_before_it():
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8), a_node("n2", gpus=8, taints=[TAINT]))
    s.apply(a_gpu_device("n2", gpus=8))
    s.apply(a_pod("other", gpus=2))
    gang = {
        "gang.scheduling.koordinator.sh/name": "train",
        "gang.scheduling.koordinator.sh/min-available": "2",
    }
    s.apply(a_pod("t0", gpus=1, annotations=gang), a_pod("t1", gpus=6, annotations=gang))  # 1 + 6 of 6 free
    assert block(explained(s, "default/t0"), "nearest:") == [
        "nearest:   node n1 (1 failing check(s): Insufficient nvidia.com/gpu) for gang member default/t1, "
        "counting the 1 member(s) before it on the same node",
        "  change: free 1 GPU(s) (whole 80Gi each) on node n1 (held by default/other)",
    ]


def test_a_gang_that_does_not_fit_its_quota_whole_is_told_how_much_to_raise_it():
    s = team_quota(4)
    gang = {
        "gang.scheduling.koordinator.sh/name": "train",
        "gang.scheduling.koordinator.sh/min-available": "2",
    }
    s.apply(*(a_pod(f"t{i}", namespace="team", gpus=3, annotations=gang) for i in range(2)))
    assert quota_changes(explained(s, "team/t0")) == [
        "  change: raise quota team by 2 nvidia.com/gpu (limit 4, used 0, the 2 members request 6), "
        "or free that much of its use"
    ]


def test_a_simulator_run_with_a_pod_refused_every_reservation_waits_in_the_reservation_stage():
    from allot_sim.scenario import run

    sim, _, _ = run(str(ROOT / "examples" / "reservation" / "03-affinity-taints-exact-match.yaml"), config={})
    key = "ml/intolerant"
    lines = explain(key, *asyncio.run(history(sim.store, key)), asyncio.run(cluster(sim.store)))
    assert block(lines, "nearest:")[1] == (
        "  change: create a Reservation on node n1 that matches the pod's reservation affinity (or change it)"
    )
    assert block(lines, "queue:")[:2] == [
        "queue:     stage reservation, attempt 1, position 1 of 2 (priority 0, then arrival)",
        "  waits for: a reservation it may use to fit or be placed",
    ]
