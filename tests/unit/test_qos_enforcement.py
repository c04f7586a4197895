"""Node-side enforcement through the whole pipeline (the simulator): a HAMi-core pod is bound with the annotation that
requests its CDI device and gets a plan naming that device; memory pressure evicts a BE pod and the binder deletes
it; ``allot get pods -o wide`` and ``allot explain`` show the plan and how the node agent applied it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import Event, ObjectRef
from allot_contracts.events.qos import PodUsage, QosApplied, QosDriftCorrected, QosUsageSampled, WriteOutcome
from allot_stack.explain import explain, history
from allot_stack.listing import pods_rows
from allot_testing.builders import a_gpu_device, a_node, a_pod
from allot_testing.scenario import Scenario

HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}
AGENT = "qos-enforcer-agent@n1"
GIB = 1 << 30


def agent_records(s: Scenario, *events: Event) -> None:
    """What the node agent would append (it is IO, so the simulator does not run it)."""
    s.sim.store.append_sync(
        [
            NewEvent(
                stream_id=stream_id(
                    "pod" if getattr(e, "pod", None) else "qos", getattr(getattr(e, "pod", None), "key", "n1")
                ),
                event=e,
                event_id=derived_event_id(AGENT, f"{len(s.events)}/{i}", 0),
            )
            for i, e in enumerate(events)
        ],
        producer=AGENT,
    )
    s.sim.pump()


def explained(s: Scenario, key: str) -> list[str]:
    return explain(key, *asyncio.run(history(s.sim.store, key)))


def hami_pod(name: str) -> dict[str, Any]:
    return a_pod(
        name, labels=HAMI, extra={"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}
    )


def test_a_hami_core_pod_asks_for_its_cdi_device_at_bind_time_and_its_plan_builds_it():
    s = Scenario()
    s.apply(a_node("n1", gpus=2, labels=HAMI), a_gpu_device("n1", gpus=2))
    s.apply(hami_pod("train"))
    [bound] = s.of_type("pod.bound")
    uid = s.of_type("pod.submitted")[0]["uid"]
    key = "cdi-devices.noderesource.dev/container.main"
    assert bound["annotations"][key] == f"- allot.dev/gpu={uid}-main\n"
    [recorded] = s.of_type("qos.recorded")
    [gpu] = recorded["plan"]["gpu"]
    assert gpu["device"] == f"allot.dev/gpu={uid}-main" and gpu["annotations"] == {
        key: bound["annotations"][key]
    }
    assert gpu["env"]["CUDA_DEVICE_SM_LIMIT"] == "50" and gpu["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "40960m"
    assert gpu["env"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-n1-0"
    # a pod that does not ask for isolation gets no annotation
    s.apply(a_pod("plain", gpus=1))
    assert not any(
        k.startswith("cdi-devices")
        for b in s.of_type("pod.bound")
        if b["pod"]["name"] == "plain"
        for k in b["annotations"]
    )
    s.assert_replays()


def test_memory_pressure_evicts_a_be_pod_and_the_binder_deletes_it():
    s = Scenario({"qos-enforcer": {"resourceUsedThresholdWithBE": {"enable": True}}})
    s.apply(a_node("n1", cpu="8", memory="32Gi"))
    s.apply(
        a_pod("web", cpu="1", memory="1Gi"),
        a_pod(
            "batch",
            cpu="1",
            memory="1Gi",
            labels={"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-batch"},
        ),
    )
    assert s.phase("default/batch") == "Bound"
    agent_records(
        s,
        QosUsageSampled(
            node="n1",
            cpu_capacity_milli=8000,
            cpu_used_milli=3000,
            memory_capacity_bytes=32 * GIB,
            memory_used_bytes=30 * GIB,
            pods={
                "default/web": PodUsage(cpu_milli=1000, memory_bytes=20 * GIB),
                "default/batch": PodUsage(cpu_milli=500, memory_bytes=8 * GIB),
            },
        ),
    )
    [evicted] = s.of_type("pod.evicted")
    assert evicted["pod"]["name"] == "batch" and evicted["cause"] == "MemoryPressure"
    deleted = [r for r in s.events if r.type == "pod.deleted"]
    assert [(r.payload_dict()["pod"]["name"], r.producer) for r in deleted] == [("batch", "binder")]
    assert [r["pod"]["name"] for r in s.of_type("pod.released")] == ["batch"]
    assert [r["reason"] for r in s.of_type("qos.plan_removed")] == ["evicted"]
    assert "default/batch" not in s.view().pods and s.phase("default/web") == "Bound"
    [node_plan] = s.of_type("qos.node_plan_recorded")
    assert node_plan["basis"]["non_be_used_milli"] == 1000
    s.assert_replays()


def test_get_wide_and_explain_show_the_plan_and_how_it_was_applied():
    s = Scenario({"qos-enforcer": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}})
    node = a_node("n1")
    node["status"]["allocatable"]["kubernetes.io/batch-cpu"] = node["status"]["capacity"][
        "kubernetes.io/batch-cpu"
    ] = "8000"
    s.apply(node)
    be = a_pod("be", labels={"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-batch"})
    be["spec"]["containers"][0]["resources"] = {"limits": {"kubernetes.io/batch-cpu": "500"}}
    s.apply(be)
    [row] = pods_rows(s.view())
    assert row["enforcement"] == "r1 not applied yet"
    assert "idle=true" in row["enforced"] and "quota=500m" in row["enforced"]
    ref = ObjectRef(namespace="default", name="be")
    uid = s.of_type("pod.submitted")[0]["uid"]
    target = "/sys/fs/cgroup/cpu/kubepods.slice/x/cpu.cfs_quota_us"
    agent_records(
        s,
        QosApplied(
            node="n1",
            pod=ref,
            uid=uid,
            revision=1,
            ok=True,
            results=[
                WriteOutcome(kind="cgroup", target=target, outcome="applied", value="50000"),
                WriteOutcome(
                    kind="cgroup",
                    target="kubepods.slice/x cpu_bvt_warp_ns",
                    outcome="unsupported",
                    error="cpu.bvt_warp_ns: controller file missing",
                ),
            ],
        ),
        QosDriftCorrected(
            node="n1",
            pod=ref,
            uid=uid,
            revision=1,
            corrected=[
                WriteOutcome(kind="cgroup", target=target, outcome="applied", value="50000", found="-1")
            ],
        ),
    )
    [row] = pods_rows(s.view())
    assert row["enforcement"] == "r1 applied, 1 unsupported, 1 drift corrected"
    lines = explained(s, "default/be")
    start = lines.index(next(line for line in lines if line.startswith("enforcement: plan r1 on node n1")))
    body = lines[start:]
    assert any(line.strip().startswith("cpu_idle = True  <- resourceQOSStrategy BE cpuQOS") for line in body)
    assert any("cpu_quota = " in line and "kubernetes.io/batch-cpu limit 500m" in line for line in body)
    assert any(line.startswith("  applied: r1 ok by qos-enforcer-agent@n1") for line in body)
    assert any(line.strip().startswith("unsupported: kubepods.slice/x cpu_bvt_warp_ns") for line in body)
    assert any("drift corrected" in line and "found '-1'" in line for line in body)
    timeline = [line.split()[2] for line in lines if line.startswith("  #")]
    assert timeline[-3:] == ["qos.recorded", "qos.applied", "qos.drift_corrected"]
    assert json.dumps(row)  # the JSON output carries the same fields
