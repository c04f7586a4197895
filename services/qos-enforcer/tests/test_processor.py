"""qos-enforcer's decisions over a log: plans at bind time, new revisions when their inputs change, removal, node
plans from usage samples, memory-pressure evictions; replay re-derives every one of them."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import (
    DevicesReported,
    Event,
    NodeRegistered,
    ObjectRef,
    PodBound,
    PodDeleted,
    PodObserved,
    PodSubmitted,
    TopologyReported,
)
from allot_contracts.events.qos import PodEvictionEnacted, PodUsage, QosApplied, QosUsageSampled
from allot_contracts.objects.inventory import parse_device_cr, parse_node, parse_nrt
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.processor import Host
from allot_runtime.replay import rebuild, verify_decisions
from allot_testing.builders import a_gpu_device, a_node, a_pod
from qos_enforcer.processor import QosEnforcer


def _typed(cls: type, field: str, value: Any) -> dict[str, Any]:
    """The typed object read at the door, when the event contract carries one."""
    return {field: value} if field in cls.__struct_fields__ else {}


def node_registered(manifest: dict[str, Any]) -> NodeRegistered:
    info, _ = parse_node(manifest)
    return NodeRegistered(
        name=manifest["metadata"]["name"],
        manifest=manifest,
        capacity={},
        **_typed(NodeRegistered, "node", info),
    )


def devices_reported(manifest: dict[str, Any]) -> DevicesReported:
    _, inventory, _ = parse_device_cr(manifest)
    return DevicesReported(
        name=manifest["metadata"]["name"],
        manifest=manifest,
        devices={},
        **_typed(DevicesReported, "inventory", inventory),
    )


def topology_reported(manifest: dict[str, Any]) -> TopologyReported:
    _, topology, _ = parse_nrt(manifest)
    return TopologyReported(
        name=manifest["metadata"]["name"], manifest=manifest, **_typed(TopologyReported, "topology", topology)
    )


HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}
GIB = 1 << 30
CONFIG: dict[str, Any] = {
    "scope": {"node": "n1"},
    "resourceUsedThresholdWithBE": {"enable": True},
    "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}},
}


class Log:
    """A log with one qos-enforcer instance deciding as events are appended (as the live service does)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = config or CONFIG
        self.store = InMemoryEventStore()
        self.host = Host(QosEnforcer(self.config), name="qos-enforcer@n1")
        self.count = 0

    async def put(self, event: Event, producer: str = "api") -> list[dict[str, Any]]:
        self.count += 1
        key = (
            getattr(getattr(event, "pod", None), "key", None)
            or getattr(event, "node", None)
            or getattr(event, "name", "x")
        )
        new = NewEvent(
            stream_id=stream_id("t", str(key)),
            event=event,
            event_id=derived_event_id(producer, str(self.count), 0),
        )
        await self.store.append([new], producer=producer)
        [record] = await self.store.read(after=await self._last() - 1)
        if not self.host.wants(record):
            return []
        news = self.host.step(record)
        if news:
            await self.store.append(news, producer=self.host.name)
        return [{"type": n.tag, **msgspec.json.decode(msgspec.json.encode(n.event))} for n in news]

    async def _last(self) -> int:
        return (await self.store.head())[0]


def pod(
    name: str, *, qos: str = "", uid: str = "", labels: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    manifest = a_pod(
        name,
        uid=uid or f"{name}-0001",
        labels={**({"koordinator.sh/qosClass": qos} if qos else {}), **(labels or {})},
        **kw,
    )
    return manifest


async def bind(
    log: Log, manifest: dict[str, Any], node: str = "n1", annotations: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    ref = ObjectRef(namespace="default", name=manifest["metadata"]["name"])
    uid = manifest["metadata"]["uid"]
    await log.put(PodSubmitted(pod=ref, uid=uid, manifest=manifest))
    return await log.put(
        PodBound(pod=ref, uid=uid, attempt=1, node=node, annotations=annotations or {}), producer="binder"
    )


async def cluster(log: Log, cpus: int = 8) -> None:
    await log.put(
        node_registered(a_node("n1", cpu=str(cpus), labels=HAMI)),
        "node-reporter@n1",
    )
    await log.put(devices_reported(a_gpu_device("n1", gpus=2)), "node-reporter@n1")
    nrt = {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {
            "name": "n1",
            "annotations": {
                "node.koordinator.sh/cpu-topology": json.dumps(
                    {"detail": [{"id": i, "core": i, "socket": 0, "node": 0} for i in range(cpus)]}
                )
            },
        },
        "zones": [
            {"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "allocatable": str(cpus)}]}
        ],
    }
    await log.put(topology_reported(nrt), "node-reporter@n1")


async def test_a_bound_pod_gets_its_plan_in_qos_recorded_and_other_nodes_pods_none():
    log = Log()
    await cluster(log)
    [recorded] = await bind(log, pod("ls"))
    assert recorded["type"] == "qos.recorded.v1" and recorded["uid"] == "ls-0001"
    plan = recorded["plan"]
    assert plan["revision"] == 1
    assert plan["cgroups"][0]["settings"] == {
        "cpuset_cpus": "0-7"
    }  # the LS share pool: every CPU, nobody holds any
    assert await bind(log, pod("elsewhere"), node="n2") == []


async def test_a_pod_that_takes_cpus_moves_the_share_pools_and_its_departure_moves_them_back():
    log = Log()
    await cluster(log)
    await bind(log, pod("ls"))
    await bind(log, pod("be", qos="BE"))
    out = await bind(
        log,
        pod("lse", qos="LSE", cpu="2", memory="1Gi"),
        annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"0-1"}'},
    )
    assert [o["type"] for o in out] == ["qos.recorded.v1", "qos.plan_recorded.v1", "qos.plan_recorded.v1"]
    revised = {o["pod"]["name"]: o["plan"] for o in out[1:]}
    assert revised["ls"]["revision"] == 2 and revised["ls"]["cgroups"][0]["settings"]["cpuset_cpus"] == "2-7"
    assert revised["be"]["cgroups"][0]["settings"]["cpuset_cpus"] == "2-7"
    out = await log.put(PodDeleted(pod=ObjectRef(namespace="default", name="lse"), uid="lse-0001"))
    assert [o["type"] for o in out] == ["qos.plan_removed.v1", "qos.plan_recorded.v1", "qos.plan_recorded.v1"]
    assert out[0]["reason"] == "deleted"
    assert all(o["plan"]["cgroups"][0]["settings"]["cpuset_cpus"] == "0-7" for o in out[1:])


async def test_observed_containers_add_container_cgroups_in_a_new_revision():
    log = Log(
        {"scope": {"node": "n1"}, "cpusetSharePools": False, "cpuBurstStrategy": {"policy": "cpuBurstOnly"}}
    )
    await cluster(log)
    manifest = pod("web")
    manifest["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
    [recorded] = await bind(log, manifest)
    assert [t["scope"] for t in recorded["plan"]["cgroups"]] == ["pod"]
    observed = {
        **manifest,
        "spec": {**manifest["spec"], "nodeName": "n1"},
        "status": {"containerStatuses": [{"name": "main", "containerID": "containerd://abcdef"}]},
    }
    [revised] = await log.put(
        PodObserved(pod=ObjectRef(namespace="default", name="web"), uid="web-0001", manifest=observed)
    )
    assert revised["type"] == "qos.plan_recorded.v1" and revised["plan"]["revision"] == 2
    assert [t["scope"] for t in revised["plan"]["cgroups"]] == ["pod", "container"]
    assert revised["plan"]["cgroups"][1]["path"].endswith("/cri-containerd-abcdef.scope")
    assert (
        await log.put(
            PodObserved(pod=ObjectRef(namespace="default", name="web"), uid="web-0001", manifest=observed)
        )
        == []
    )


async def test_an_already_running_pod_observed_on_the_node_gets_a_plan():
    log = Log()
    await cluster(log)
    manifest = {**pod("old"), "spec": {**pod("old")["spec"], "nodeName": "n1"}}
    [planned] = await log.put(
        PodObserved(pod=ObjectRef(namespace="default", name="old"), uid="old-0001", manifest=manifest)
    )
    assert planned["type"] == "qos.plan_recorded.v1" and planned["reason"] == "observed bound"


async def test_a_node_label_change_replans_gpu_isolation():
    log = Log()
    await cluster(log)
    alloc = {
        "scheduling.koordinator.sh/device-allocated": json.dumps(
            {
                "gpu": [
                    {
                        "minor": 0,
                        "resources": {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "8Gi"},
                    }
                ]
            }
        )
    }
    [recorded] = await bind(
        log, pod("gpu", labels=HAMI, extra={"koordinator.sh/gpu-core": "50"}), annotations=alloc
    )
    assert recorded["plan"]["gpu"][0]["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    out = await log.put(node_registered(a_node("n1", cpu="8")), "node-reporter@n1")
    [revised] = [o for o in out if o["type"] == "qos.plan_recorded.v1"]
    assert (
        "gpu" not in revised["plan"]
        and "does not offer HAMi-core" in revised["plan"]["warnings"][0]["message"]
    )


def sample(memory_used: int, pods: dict[str, tuple[int, int]], cpu_used: int = 2000) -> QosUsageSampled:
    return QosUsageSampled(
        node="n1",
        cpu_capacity_milli=8000,
        cpu_used_milli=cpu_used,
        memory_capacity_bytes=32 * GIB,
        memory_used_bytes=memory_used,
        pods={k: PodUsage(cpu_milli=c, memory_bytes=m) for k, (c, m) in pods.items()},
    )


async def test_usage_samples_drive_be_suppression_and_memory_eviction_then_the_pod_goes():
    log = Log()
    await cluster(log)
    await bind(log, pod("ls"))
    await bind(log, pod("be", qos="BE"))
    agent = "qos-enforcer-agent@n1"
    out = await log.put(sample(10 * GIB, {"default/ls": (1000, GIB), "default/be": (500, 4 * GIB)}), agent)
    [node_plan] = out
    assert node_plan["type"] == "qos.node_plan_recorded.v1" and node_plan["revision"] == 2
    assert node_plan["basis"]["be_quota_milli"] == 8000 * 65 // 100 - 1000 - 500  # system = 2000 - 1500
    assert (
        await log.put(sample(10 * GIB, {"default/ls": (1000, GIB), "default/be": (520, 4 * GIB)}), agent)
        == []
    )
    out = await log.put(sample(25 * GIB, {"default/ls": (1000, GIB), "default/be": (500, 4 * GIB)}), agent)
    [evicted] = [o for o in out if o["type"] == "pod.evicted.v1"]
    assert (
        evicted["pod"]["name"] == "be"
        and evicted["cause"] == "MemoryPressure"
        and evicted["uid"] == "be-0001"
    )
    assert evicted["detail"]["pod_memory_bytes"] == 4 * GIB
    # the same pressure again does not evict the pod twice while its deletion is on its way
    assert [
        o
        for o in await log.put(sample(25 * GIB, {"default/be": (1, 4 * GIB)}), agent)
        if o["type"] == "pod.evicted.v1"
    ] == []
    # Kubernetes refused that eviction for good: the pod stays and the next pressure chooses it again
    be = ObjectRef(namespace="default", name="be")
    refused = PodEvictionEnacted(
        pod=be,
        uid="be-0001",
        node="n1",
        cause="MemoryPressure",
        evicted=False,
        message="evicting failed: 422",
    )
    assert await log.put(refused, "binder.kube") == []
    again = await log.put(sample(25 * GIB, {"default/be": (1, 4 * GIB)}), agent)
    assert [o["uid"] for o in again if o["type"] == "pod.evicted.v1"] == ["be-0001"]
    [removed] = await log.put(
        PodDeleted(pod=ObjectRef(namespace="default", name="be"), uid="be-0001"), "binder"
    )
    assert removed["type"] == "qos.plan_removed.v1" and removed["reason"] == "evicted"


async def test_agent_reports_are_folded_and_replay_re_derives_every_decision():
    log = Log()
    await cluster(log)
    [recorded] = await bind(log, pod("ls"))
    await log.put(
        QosApplied(
            node="n1", pod=ObjectRef(namespace="default", name="ls"), uid="ls-0001", revision=1, ok=True
        ),
        "qos-enforcer-agent@n1",
    )
    assert log.host.processor.desired("n1")["default/ls"][3] == 1  # type: ignore[attr-defined]
    await bind(
        log,
        pod("lsr", qos="LSR"),
        annotations={"scheduling.koordinator.sh/resource-status": '{"cpuset":"4"}'},
    )
    await log.put(sample(25 * GIB, {"default/ls": (1, GIB)}), "qos-enforcer-agent@n1")
    checked, mismatches = await verify_decisions(Host(QosEnforcer(CONFIG), name="qos-enforcer@n1"), log.store)
    assert checked >= 8 and mismatches == []
    rebuilt = Host(QosEnforcer(CONFIG), name="qos-enforcer@n1")
    await rebuild(rebuilt, log.store, until=(await log.store.head())[0])
    assert rebuilt.digest() == log.host.digest()


async def test_the_batch_budget_follows_the_newest_allocatable_decision_over_the_node_object():
    from allot_contracts.events import NodeAllocatableUpdated

    log = Log()
    manifest = a_node("n1", cpu="8", labels=HAMI)
    manifest["status"]["allocatable"]["kubernetes.io/batch-cpu"] = (
        "4000"  # the Node's own figure (millicores)
    )
    await log.put(node_registered(manifest), "node-reporter@n1")
    await bind(log, pod("ls"))
    agent = "qos-enforcer-agent@n1"
    [first] = await log.put(sample(10 * GIB, {"default/ls": (1000, GIB)}), agent)
    assert first["basis"]["batch_budget_milli"] == 4000  # no decision yet: the Node's own amount
    computed = NodeAllocatableUpdated(name="n1", allocatable={"kubernetes.io/batch-cpu": "1500"})
    [capped] = await log.put(computed, "device-allocator")
    assert capped["type"] == "qos.node_plan_recorded.v1"
    assert capped["basis"]["batch_budget_milli"] == 1500 and capped["basis"]["be_quota_milli"] == 1500
    # the Node object recorded again (a label edit, or the echo of the binder's own write) does not undo it
    manifest["metadata"]["labels"]["team"] = "a"
    assert [o for o in await log.put(node_registered(manifest), "node-reporter@n1") if "basis" in o] == []
    newer = NodeAllocatableUpdated(name="n1", allocatable={"kubernetes.io/batch-cpu": "2000"})
    [raised] = await log.put(newer, "device-allocator")
    assert raised["basis"]["batch_budget_milli"] == 2000
    # co-location switched off: the decision names no batch-cpu, and the Node's own amount applies again
    [back] = await log.put(NodeAllocatableUpdated(name="n1", allocatable={}), "device-allocator")
    assert back["basis"]["batch_budget_milli"] == 4000
