"""Kubernetes mode end to end, in one process: the fake API server holds GPU nodes, their Koordinator Devices and
pods for ``allot-scheduler``; kube-sync, node-reporter's watch (one instance per node) and the relay plus the seven
services (binder in Kubernetes mode, with its worker) run against real PostgreSQL and NATS. Every pod gets one
Binding POST carrying its device allocation, and one ``pod.bound``."""

from __future__ import annotations

import asyncio
import collections
import json
import time
from typing import Any

import pytest

from allot_bus.names import BusNames
from allot_kube_sync.sync import KubeSync
from allot_runtime.metrics import Metrics
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_runtime.service import ServiceContext
from allot_runtime.settings import ServiceSettings
from allot_stack.enactment import verify_report as enactment_report
from allot_stack.pipeline import build_instance
from allot_testing.builders import a_gpu_device, a_node, a_pod
from allot_testing.fake_kube import FakeKube
from allot_testing.stack import InProcessStack
from binder.adapters.kube import bind_worker
from binder.adapters.notices import notice_worker
from node_reporter.adapters.kube import kube_watch

pytestmark = pytest.mark.integration

ALLOCATED = "scheduling.koordinator.sh/device-allocated"


def _binder_wrote(record: Any) -> bool:
    """A node.applied of a Node whose capacity holds the device resources only the binder writes there."""
    status = record.payload_dict().get("manifest", {}).get("status") or {}
    return record.type == "node.applied" and "koordinator.sh/gpu-core" in (status.get("capacity") or {})


def pod_for_us(name: str, gpus: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = a_pod(name, gpus=gpus, annotations=annotations)
    del pod["metadata"]["uid"]
    pod["spec"]["schedulerName"] = "allot-scheduler"
    pod["status"] = {"phase": "Pending"}
    return pod


def context(stack: InProcessStack, service: str, instance: str, database_url: str) -> ServiceContext:
    runtime = stack.runtimes[f"{service}@{instance}" if instance else service]
    settings = ServiceSettings(
        service=service, database_url=database_url, kube_mode="kubernetes", instance=instance
    )
    return ServiceContext(
        settings=settings, store=stack.store, nc=None, metrics=Metrics(service), runtime=runtime
    )


def seed_cluster(kube: FakeKube) -> dict[str, int]:
    """Two 4-GPU nodes with their Devices, four pods and a gang of two for us (pod name -> GPUs), and one pod for
    another scheduler."""
    for node in ("n1", "n2"):
        kube.create(a_node(node, gpus=4))
        kube.create(a_gpu_device(node, gpus=4))
    pods = {f"p{i}": 2 if i % 2 else 1 for i in range(4)}
    gang = {"gang.scheduling.koordinator.sh/name": "duo", "gang.scheduling.koordinator.sh/min-available": "2"}
    pods |= {"duo-0": 1, "duo-1": 1}
    for name, gpus in pods.items():
        kube.create(pod_for_us(name, gpus, gang if name.startswith("duo") else None))
    kube.create(
        {
            **pod_for_us("not-ours", 1),
            "spec": {**pod_for_us("not-ours", 1)["spec"], "schedulerName": "default-scheduler"},
        }
    )
    return pods


def start_workers(
    stack: InProcessStack, client: Any, database_url: str, stop: asyncio.Event
) -> list[asyncio.Task[None]]:
    """kube-sync, node-reporter's watch on n1 and n2, and the binder's bind and notice workers."""
    sync = KubeSync(store=stack.store, client=client, watch_timeout=5)
    return [
        asyncio.create_task(kube_watch(context(stack, "node-reporter", "n1", database_url), stop)),
        asyncio.create_task(kube_watch(context(stack, "node-reporter", "n2", database_url), stop)),
        asyncio.create_task(bind_worker(context(stack, "binder", "", database_url), stop)),
        asyncio.create_task(notice_worker(context(stack, "binder", "", database_url), stop)),
        asyncio.create_task(sync.run(stop)),
    ]


def assert_one_binding_per_pod_with_its_devices(kube: FakeKube, pods: dict[str, int]) -> None:
    """One Binding per pod, each with its device allocation, the allocation on the pod, and no GPU handed out
    twice on a node."""
    posted = collections.Counter(b["metadata"]["name"] for b in kube.bindings)
    assert posted == {name: 1 for name in pods}
    for binding in kube.bindings:
        allocation = json.loads(binding["metadata"]["annotations"][ALLOCATED])
        assert len(allocation["gpu"]) == pods[binding["metadata"]["name"]]
        pod = kube.get("Pod", binding["metadata"]["name"])
        assert pod["spec"]["nodeName"] == binding["target"]["name"]
        assert pod["metadata"]["annotations"][ALLOCATED] == binding["metadata"]["annotations"][ALLOCATED]
    minors = collections.Counter(
        (b["target"]["name"], d["minor"])
        for b in kube.bindings
        for d in json.loads(b["metadata"]["annotations"][ALLOCATED])["gpu"]
    )
    assert max(minors.values()) == 1


async def assert_recorded_once(stack: InProcessStack, pods: dict[str, int], log_of: Any) -> None:
    """One pod.bound per pod, by the binder in Kubernetes mode; each node instance recorded its own node and
    kube-sync recorded the pods once, not their binding. (The binder's write of the Node's device capacity comes
    back once per node as a node.applied: its own write, not counted here.)"""
    bound = await log_of(stack.store, types={"pod.bound"})
    assert collections.Counter(s for _, s, _ in bound) == {f"pod:default/{n}": 1 for n in pods}
    assert {p["mode"] for _, _, p in bound} == {"kubernetes"}
    assert {r.producer async for r in stack.store.iterate(types={"pod.bound"})} == {"binder.kube"}
    producers = collections.Counter(
        [
            r.producer
            async for r in stack.store.iterate(
                types={"node.applied", "device.applied", "pod.submitted", "pod.observed"}
            )
            if not _binder_wrote(r)
        ]
    )
    assert producers == {
        "node-reporter@n1.kube": 2,
        "node-reporter@n2.kube": 2,
        "kube-sync": len(pods),
    }


async def assert_binder_replays(database_url: str, pods: dict[str, int]) -> None:
    """The binder's requests re-derive from the log (replay with the binder in Kubernetes mode), and replay
    --verify's enactment line finds every cluster-changing decision with its outcome, however young."""
    from allot_eventstore.postgres import PostgresEventStore

    store = PostgresEventStore.connect(database_url)
    try:
        host = Host(build_instance("binder", "binder", {"mode": "kubernetes"}), name="binder")
        checked, mismatches = await verify_decisions(host, store)
        assert checked > 0 and not mismatches, mismatches[:1]
        head, _ = await store.head()
        reported = await enactment_report(store, until=head, now=time.time_ns() // 1000, bound=0)
        assert reported is not None, "a Kubernetes-mode log"
        line, ledger = reported
        assert ledger["without_outcome"] == [], line
        assert ledger["states"].get("enacted", 0) >= len(pods), line
    finally:
        await store.close()


async def test_pods_in_the_cluster_are_bound_through_the_api_server_with_their_devices(
    kube: FakeKube,
    tmp_path: Any,
    database_url: str,
    nats_server_url: str,
    bus_names: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    client: Any,
    eventually: Any,
    log_of: Any,
) -> None:
    pods = seed_cluster(kube)
    monkeypatch.setenv("ALLOT_KUBECONFIG", kube.kubeconfig(tmp_path))

    stop = asyncio.Event()
    async with InProcessStack(
        database_url,
        nats_server_url,
        BusNames(**bus_names),
        configs={"binder": {"mode": "kubernetes"}},
        instances={"node-reporter": ["n1", "n2"]},
    ) as stack:
        tasks = start_workers(stack, client, database_url, stop)
        try:

            def all_bound() -> bool:
                return all((kube.get("Pod", name) or {}).get("spec", {}).get("nodeName") for name in pods)

            await eventually(all_bound, timeout=40, what="every pod bound in the API server")

            async def recorded() -> bool:
                return len(await log_of(stack.store, types={"pod.bound"})) == len(pods)

            await eventually(recorded, timeout=10, what="pod.bound recorded")
            await asyncio.sleep(0.5)  # anything that would come twice has had its chance

            assert_one_binding_per_pod_with_its_devices(kube, pods)
            await assert_recorded_once(stack, pods, log_of)

            # A pod deleted in the cluster frees its devices.
            kube.delete("Pod", "p1")

            async def released() -> bool:
                return any(
                    s == "pod:default/p1" for _, s, _ in await log_of(stack.store, types={"pod.released"})
                )

            await eventually(released, timeout=15, what="p1 released")
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=15)

    await assert_binder_replays(database_url, pods)
