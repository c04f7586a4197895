"""The node agent on the real stack and this machine's real cgroups: a BE pod bound to n1 gets its plan from
qos-enforcer@n1, the agent writes it into a pod cgroup created for the test (cgroup v1, under a dedicated
``--cgroup-root``), records the read-back outcome in PostgreSQL, restores a value changed behind its back and records
the drift, samples real usage and writes the BE suppression quota it decides into the real BestEffort cgroup; replay
re-derives every decision of the instance.

In Kubernetes mode a ``pod.evicted`` decision (memory pressure) is carried out by the binder's worker through the
Eviction API of the fake API server, against a real PostgreSQL: once, with the pod's uid as precondition, held back
by a disruption budget, and answered by ``pod.eviction_enacted``."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from allot_bus.names import BusNames
from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import ObjectRef, PodEvicted
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_stack.apply import record
from allot_stack.explain import explain, history
from allot_stack.pipeline import build_instance
from allot_testing.builders import a_node, a_pod
from allot_testing.fake_kube import FakeKube
from allot_testing.stack import InProcessStack
from binder.adapters.kube import BinderMetrics, BindWorker, View
from binder.processor import Binder
from qos_enforcer.adapters.agent import Agent
from qos_enforcer.cgroups.mode import CgroupError, detect
from qos_enforcer.config import AgentSettings, parse_config
from qos_enforcer.processor import QosEnforcer

pytestmark = pytest.mark.integration


def _v1_layout() -> Any:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    try:
        layout = detect()
    except CgroupError as error:
        pytest.skip(f"no cgroup hierarchy: {error}")
    if layout.version != 1 or not {"cpu", "cpuset", "memory"} <= set(layout.v1):
        pytest.skip(f"needs cgroup v1 cpu, cpuset and memory (this machine: {layout.mode})")
    return layout


async def _wait_for_node_quota(store: PostgresEventStore, timeout: float = 30) -> None:
    """Until a node plan with a BE quota has been applied."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        plans = {
            r.payload_dict()["revision"]
            for r in await store.read(types=["qos.node_plan_recorded"])
            if r.payload_dict()["basis"].get("be_quota_milli")
        }
        applied = {
            a["revision"]
            for r in await store.read(types=["qos.applied"])
            if not (a := r.payload_dict()).get("pod")
        }
        if plans & applied:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("no node plan with a BE quota was applied")


def _read(path: Path) -> str:
    return path.read_text().strip()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class _Context:
    def __init__(self, stack: InProcessStack, name: str) -> None:
        self.runtime = stack.runtimes[name]
        self.lock = self.runtime.lock
        self.ready = self.runtime.consumer.ready
        self.store = stack.store

    def processor(self) -> QosEnforcer:
        processor = self.runtime.host.processor
        assert isinstance(processor, QosEnforcer)
        return processor


async def _wait_for(
    store: PostgresEventStore, type_: str, count: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = [r.payload_dict() for r in await store.read(types=[type_])]
        if len(found) >= count or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.2)


async def test_the_agent_enforces_on_real_cgroups_and_restores_drift(
    database_url, nats_server_url, bus_names
):
    layout = _v1_layout()
    root = f"allot-test-{uuid.uuid4().hex[:10]}"
    uid = str(uuid.uuid4())
    pod_dir = f"{root}/kubepods/besteffort/pod{uid}"
    created: list[Path] = []
    config: dict[str, Any] = {
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": root,
        "cpusetSharePools": False,
        "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}},
        # BE suppression from the agent's real usage samples (no eviction: the machine's memory use is not ours)
        "resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": 100},
    }
    try:
        for controller in [c for c in ("cpu", "cpuacct", "cpuset", "memory") if c in layout.v1]:
            base = Path(layout.v1[controller])
            for part in Path(pod_dir).parts:
                base = base / part
                base.mkdir()
                created.append(base)
                if controller == "cpuset":
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (base / knob).write_text((base.parent / knob).read_text().strip() or "0")
        node = a_node("n1", cpu="8", memory="32Gi")
        node["status"]["allocatable"]["kubernetes.io/batch-cpu"] = "8000"
        pod = a_pod(
            "batch",
            uid=uid,
            labels={"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-batch"},
        )
        pod["spec"]["containers"][0]["resources"] = {"limits": {"kubernetes.io/batch-cpu": "500"}}
        inputs = [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate([node, pod])]
        stack = InProcessStack(
            database_url,
            nats_server_url,
            BusNames(**bus_names),
            configs={"qos-enforcer": config},
            instances={"qos-enforcer": ["n1"]},
        )
        async with stack:
            with tempfile.TemporaryDirectory() as tmp:
                settings = AgentSettings(
                    cdi_spec_dir=f"{tmp}/cdi",
                    poll_seconds=0.1,
                    reconcile_seconds=0.5,
                    sample_seconds=0.2,
                    resctrl_root=f"{tmp}/no-resctrl",
                )
                agent = Agent("n1", _Context(stack, "qos-enforcer@n1"), parse_config(config), settings)
                stop = asyncio.Event()
                task = asyncio.create_task(agent.run(stop))
                try:
                    await record(database_url, inputs, wait=False, wait_each=True, timeout=60)
                    applied = [a for a in await _wait_for(stack.store, "qos.applied", 2) if a.get("pod")]
                    assert applied and applied[0]["ok"] and applied[0]["revision"] == 1, applied
                    quota = Path(layout.v1["cpu"], pod_dir, "cpu.cfs_quota_us")
                    assert _read(quota) == "50000"
                    assert _read(Path(layout.v1["cpu"], pod_dir, "cpu.idle")) == "1"
                    _write(quota, "-1")  # behind the agent's back
                    [drift] = await _wait_for(stack.store, "qos.drift_corrected")
                    assert [(c["outcome"], c["found"]) for c in drift["corrected"]] == [("applied", "-1")]
                    assert _read(quota) == "50000"
                    # BE suppression: real usage sampled and recorded, the node plan's quota decided from it and
                    # written to the real BestEffort QoS cgroup
                    assert await _wait_for(stack.store, "qos.usage_sampled")
                    await _wait_for_node_quota(stack.store)
                    stop.set()
                    await task
                    plans = {p["revision"]: p for p in await _wait_for(stack.store, "qos.node_plan_recorded")}
                    done = [a for a in await _wait_for(stack.store, "qos.applied") if not a.get("pod")]
                    last = plans[done[-1]["revision"]]
                    [be] = last["cgroups"]
                    assert last["basis"]["be_quota_milli"] >= 1000  # cpuSuppressMinMilli
                    quota_us = be["settings"]["cpu_quota"]["quota_us"]
                    be_dir = Path(layout.v1["cpu"], root, "kubepods", "besteffort")
                    assert _read(be_dir / "cpu.cfs_quota_us") == str(quota_us) and done[-1]["ok"]
                finally:
                    stop.set()
                    await task
        store = PostgresEventStore.connect(database_url)
        try:
            host = Host(build_instance("qos-enforcer", "qos-enforcer@n1", config), name="qos-enforcer@n1")
            checked, mismatches = await verify_decisions(host, store)
            assert checked > 0 and not mismatches, mismatches[:1]
        finally:
            await store.close()
    finally:
        for path in reversed(created):
            if path.exists():
                path.rmdir()
    assert not any(p.exists() for p in created)


# --- Kubernetes mode: the binder carries out the eviction ----------------------------------------------------------


class _KubeBinder:
    """The binder's processor in Kubernetes mode over the real log, and its worker against the fake API server."""

    def __init__(self, store: PostgresEventStore, client: Any) -> None:
        from prometheus_client import CollectorRegistry

        self.store = store
        self.host = Host(Binder({"mode": "kubernetes"}), name="binder")
        self.position = 0
        self.worker = BindWorker(
            store=store,
            client=client,
            view=self.view,
            backoff=(0.01, 0.05),
            metrics=BinderMetrics.of(CollectorRegistry()),
        )

    async def feed(self) -> None:
        async for recorded in self.store.iterate(after=self.position, types=self.host.interests):
            self.position = recorded.position
            if recorded.producer != self.host.name:
                news = self.host.step(recorded)
                if news:
                    await self.store.append(news, producer=self.host.name)

    async def view(self) -> View:
        p = self.host.processor
        return View(
            ready=True,
            requests=p.outstanding(),
            patches=p.quota_patches(),
            pod_evictions=p.evictions.outstanding_pods(),
        )

    async def answers(self) -> list[dict[str, Any]]:
        return [r.payload_dict() async for r in self.store.iterate(producer="binder.kube")]


async def _evict_decided(store: PostgresEventStore, kube: FakeKube, name: str, *, uid: str = "") -> str:
    manifest = a_pod(name)
    manifest["spec"]["nodeName"] = "n1"
    manifest["metadata"].pop("uid", None)  # the API server assigns it
    live = str(kube.create(manifest)["metadata"]["uid"])
    event = PodEvicted(
        pod=ObjectRef(namespace="default", name=name),
        uid=uid or live,
        node="n1",
        cause="MemoryPressure",
        message="node memory 94% >= memoryEvictThresholdPercent 70%: evicting BE pod",
    )
    await store.append(
        [
            NewEvent(
                stream_id=stream_id("pod", event.pod.key),
                event=event,
                event_id=derived_event_id("t", name, 0),
            )
        ],
        producer="qos-enforcer@n1",
    )
    return live


async def test_in_kubernetes_mode_the_binder_evicts_once_through_the_eviction_api(database_url, tmp_path):
    from allot_runtime.kube import api_client

    store = PostgresEventStore.connect(database_url)
    try:
        async with FakeKube() as kube:
            client = await api_client(kube.kubeconfig(tmp_path))
            try:
                binder = _KubeBinder(store, client)
                uid = await _evict_decided(store, kube, "batch")
                kube.disruption_blocked.add("default/batch")
                await binder.feed()
                await binder.worker.step()  # a budget allows no disruption now: held back, nothing recorded
                assert await binder.answers() == [] and kube.get("Pod", "batch", "default") is not None
                kube.disruption_blocked.clear()
                await asyncio.sleep(0.1)  # past the backoff
                await binder.worker.step()
                assert kube.evictions[-1] == {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": "batch", "namespace": "default"},
                    "deleteOptions": {"preconditions": {"uid": uid}},
                }
                assert kube.get("Pod", "batch", "default") is None
                [answer] = await binder.answers()
                assert (answer["evicted"], answer["uid"], answer["cause"]) == (True, uid, "MemoryPressure")
                sent = len(kube.evictions)
                await binder.worker.step()  # answered: not sent again, even before the answer is folded
                await binder.feed()
                await binder.worker.step()
                assert len(kube.evictions) == sent and len(await binder.answers()) == 1
                assert binder.host.processor.evictions.outstanding_pods() == []
                lines = explain("default/batch", *await history(store, "default/batch"))
                assert "  Kubernetes: evicted through the Eviction API: evicted" in lines
                assert any("pod.eviction_enacted" in line and "binder.kube" in line for line in lines)

                # a decision about an earlier life of a re-created pod: the uid precondition fails, nothing is
                # evicted, and the eviction is answered (that life is gone)
                await _evict_decided(store, kube, "again", uid="an-earlier-life")
                await binder.feed()
                await binder.worker.step()
                assert kube.get("Pod", "again", "default") is not None
                answer = (await binder.answers())[-1]
                assert answer["evicted"] and "already gone" in answer["message"]

                # refused for good: recorded once as not evicted
                await _evict_decided(store, kube, "stuck")
                kube.fail("POST", r"/pods/stuck/eviction$", status=422, message="invalid delete options")
                await binder.feed()
                await binder.worker.step()
                answer = (await binder.answers())[-1]
                assert not answer["evicted"] and "invalid delete options" in answer["message"]
                await binder.feed()
                assert binder.host.processor.evictions.outstanding_pods() == []
            finally:
                await client.close()
    finally:
        await store.close()
