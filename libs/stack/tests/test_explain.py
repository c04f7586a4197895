"""``allot explain pod``: the latest life of the pod, where it stands now, and why."""

from __future__ import annotations

import asyncio

from allot_stack.explain import explain, history
from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario


def explained(s: Scenario, key: str) -> list[str]:
    return explain(key, *asyncio.run(history(s.sim.store, key)))


def section(lines: list[str], prefix: str) -> list[str]:
    return [line for line in lines if line.startswith(prefix)]


def test_a_placed_pod_shows_its_timeline_and_placement():
    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_pod("p", gpus=1))
    lines = explained(s, "default/p")
    timeline = [line.split()[2] for line in lines if line.startswith("  #")]
    assert timeline[:2] == ["pod.submitted", "quota.admitted"] and "pod.bound" in timeline
    assert section(lines, "placement:") == [
        next(line for line in lines if line.startswith("placement: node n1"))
    ]
    assert section(lines, "why not:") == []
    (quota,) = section(lines, "quota:")
    assert "max cpu=unlimited" in quota, quota  # the default quota's no-limit value, in words


def test_a_pod_now_waiting_for_quota_shows_the_quota_reason_not_an_old_node_reason():
    s = Scenario()
    s.apply(
        a_node("n1", gpus=2), a_gpu_device("n1", gpus=2), a_node("n1b", gpus=2), a_gpu_device("n1b", gpus=2)
    )
    s.apply(a_quota("team", namespace="team", max={"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "6"}))
    s.apply(a_pod("a", namespace="team", gpus=4))  # admitted, but no node has 4 GPUs
    s.apply(a_pod("b", namespace="team", gpus=2), a_pod("c", namespace="team", gpus=2))
    s.apply(a_node("n2", gpus=4), a_gpu_device("n2", gpus=4))  # a is retried: the quota is full by now
    assert s.phase("team/a") == "Waiting"
    lines = explained(s, "team/a")
    assert section(lines, "why not:") == [], lines
    assert section(lines, "quota:") and "Insufficient quotas" in section(lines, "quota:")[0]


def test_only_the_latest_life_of_a_re_created_pod_is_explained():
    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_pod("p", gpus=1, uid="first"))
    s.delete("Pod", "p")
    s.apply(a_pod("p", gpus=8, uid="second"))  # cannot fit
    lines = explained(s, "default/p")
    assert any("1 earlier life" in line for line in lines)
    timeline = [line.split()[2] for line in lines if line.startswith("  #")]
    assert timeline.count("pod.submitted") == 1 and "pod.bound" not in timeline
    assert section(lines, "why not:")


def test_the_member_that_completes_a_gang_sees_its_groups_events():
    s = Scenario()
    s.apply(a_node("n1", gpus=4), a_gpu_device("n1", gpus=4))
    gang = {"gang.scheduling.koordinator.sh/name": "job", "gang.scheduling.koordinator.sh/min-available": "2"}
    s.apply(a_pod("w-0", gpus=2, annotations=gang), a_pod("w-1", gpus=2, annotations=gang))
    lines = explained(s, "default/w-1")  # the second member never waited: the gang was complete on arrival
    timeline = [line.split()[2] for line in lines if line.startswith("  #")]
    assert "gang.group_ready" in timeline and "gang.group_placed" in timeline
    assert section(lines, "placement: node n1")


def test_a_gang_that_does_not_fit_shows_why_even_after_its_holds_are_given_back():
    s = Scenario()
    s.apply(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8))
    gang = {
        "gang.scheduling.koordinator.sh/name": "train",
        "gang.scheduling.koordinator.sh/min-available": "4",
    }
    s.apply(*(a_pod(f"t{i}", gpus=4, annotations=gang) for i in range(4)))
    lines = explained(s, "default/t0")
    assert section(lines, "why not:") and "needs 4 GPU(s) on one node" in section(lines, "why not:")[0]
    assert section(lines, "placement:") == []


def test_what_the_door_read_but_does_not_act_on_is_shown():
    s = Scenario()
    s.apply(a_node("n1"))
    pod = a_pod("p")
    pod["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    s.apply(pod)
    lines = explained(s, "default/p")
    assert [line for line in section(lines, "not acted on:") if "podAffinity" in line], lines


def test_a_recorded_pod_phase_shows_in_the_timeline():
    from allot_contracts.envelope import stream_id
    from allot_contracts.events import ObjectRef, PodPhaseObserved
    from allot_intake.documents import Document
    from allot_intake.manifests import Input

    s = Scenario()
    s.apply(a_node("n1", gpus=2), a_gpu_device("n1", gpus=2))
    s.apply(a_pod("p", gpus=1, uid="u1"))
    ref = ObjectRef(namespace="default", name="p")
    event = PodPhaseObserved(pod=ref, uid="u1", phase="Running")
    document = Document(source="test", index=0, body={"kind": "Pod", "metadata": {"name": "p"}})
    s.sim.apply(Input(document=document, events=[(stream_id("pod", ref.key), event)]))
    lines = explained(s, "default/p")
    (line,) = [line for line in lines if "pod.phase_observed" in line]
    assert line.endswith("phase Running")
