"""Reservations and PodMigrationJobs in Kubernetes mode, against the fake API server and a real PostgreSQL: kube-sync
records them; the binder's worker evicts through the Eviction API (once per request, PodDisruptionBudgets
respected); reservation-manager writes their status back and deletes what it garbage-collected."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import MigrationEvictionRequested, ObjectRef, PodObserved
from allot_kube_sync.sync import PRODUCER, KubeSync
from allot_reservation.testing import Driver, a_job_manifest, a_pod_manifest, a_reservation_manifest
from allot_runtime.processor import Host
from allot_testing.builders import a_node, a_pod
from allot_testing.fake_kube import FakeKube
from binder.adapters.kube import PRODUCER as BINDER_KUBE
from reservation_manager.adapters.kube import StatusWriter, wanted_statuses

pytestmark = pytest.mark.integration

ALLOCATED = "scheduling.koordinator.sh/reservation-allocated"


async def request_eviction(store: Any, kube: FakeKube, job: str, pod: str) -> str:
    manifest = a_pod_manifest(pod, node="n1")
    del manifest["metadata"]["uid"]  # the API server assigns it
    uid = kube.create(manifest)["metadata"]["uid"]
    event = MigrationEvictionRequested(
        job=ObjectRef(name=job),
        uid=f"uid-{job}",
        pod=ObjectRef(namespace="default", name=pod),
        pod_uid=uid,
        node="n1",
        delete_options={"gracePeriodSeconds": 0},
    )
    await store.append(
        [
            NewEvent(
                stream_id=stream_id("migration", job), event=event, event_id=derived_event_id("t", job, 0)
            )
        ],
        producer="reservation-manager",
    )
    return uid


async def answers(store: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(r.type, json.loads(r.payload)) async for r in store.iterate(producer=BINDER_KUBE)]


async def test_the_binder_evicts_once_through_the_eviction_api(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    uid = await request_eviction(store, kube, "j1", "web-0")
    binding = kube_binder
    await binding.feed()
    worker = binding.worker(client)
    await worker.step()
    assert kube.evictions == [
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "web-0", "namespace": "default"},
            "deleteOptions": {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
        }
    ]
    assert kube.get("Pod", "web-0", "default") is None
    got = await answers(store)
    assert [t for t, _ in got] == ["migration.evicted"]
    assert got[0][1]["mode"] == "kubernetes" and got[0][1]["pod_uid"] == uid
    await worker.step()  # answered: nothing is sent twice, even before the answer reaches the projection
    await binding.feed()
    await worker.step()
    assert len(kube.evictions) == 1 and len(await answers(store)) == 1
    assert binding.host.processor.evictions.outstanding() == []


async def test_a_disruption_budget_holds_the_eviction_until_it_allows_it(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    await request_eviction(store, kube, "j1", "web-0")
    kube.disruption_blocked.add("default/web-0")
    binding = kube_binder
    await binding.feed()
    worker = binding.worker(client)
    await worker.step()
    assert await answers(store) == [] and kube.get("Pod", "web-0", "default") is not None
    kube.disruption_blocked.clear()
    await asyncio.sleep(0.1)  # past the backoff
    await worker.step()
    assert [t for t, _ in await answers(store)] == ["migration.evicted"]


def a_budget(name: str, disruptions_allowed: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {}},  # an empty selector selects every pod of the namespace
        "status": {"disruptionsAllowed": disruptions_allowed, "currentHealthy": 2, "desiredHealthy": 1},
    }


async def test_a_pod_under_two_disruption_budgets_is_given_up_with_the_reason(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    """The Eviction API answers 500 "This pod has more than one PodDisruptionBudget, which the eviction subresource
    does not support." whatever the budgets allow: a final answer, recorded once as the job's failed eviction with
    that reason, not a server error retried forever."""
    await request_eviction(store, kube, "j1", "web-0")
    kube.create(a_budget("web", 1))
    kube.create(a_budget("everything", 1))
    binding = kube_binder
    await binding.feed()
    worker = binding.worker(client)
    await worker.step()
    ((kind, payload),) = await answers(store)
    assert kind == "migration.eviction_failed"
    assert "more than one PodDisruptionBudget" in payload["message"]
    assert kube.get("Pod", "web-0", "default") is not None
    await asyncio.sleep(0.1)  # past any backoff
    await worker.step()
    await binding.feed()
    await worker.step()
    assert len(kube.evictions) == 1 and len(await answers(store)) == 1


async def test_one_disruption_budget_is_spent_by_the_eviction(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    await request_eviction(store, kube, "j1", "web-0")
    kube.create(a_budget("web", 0))
    binding = kube_binder
    await binding.feed()
    worker = binding.worker(client)
    await worker.step()
    assert await answers(store) == []  # 429: held back, retried
    kube.update(
        "PodDisruptionBudget", "web", lambda o: o["status"].update({"disruptionsAllowed": 1}), "default"
    )
    await asyncio.sleep(0.1)  # past the backoff
    await worker.step()
    assert [t for t, _ in await answers(store)] == ["migration.evicted"]
    assert kube.get("PodDisruptionBudget", "web", "default")["status"]["disruptionsAllowed"] == 0


async def test_a_refused_eviction_is_recorded_as_failed(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    await request_eviction(store, kube, "j1", "web-0")
    kube.fail("POST", r"/pods/web-0/eviction$", status=422, message="invalid delete options")
    binding = kube_binder
    await binding.feed()
    await binding.worker(client).step()
    ((kind, payload),) = await answers(store)
    assert kind == "migration.eviction_failed" and "invalid delete options" in payload["message"]


async def test_kube_sync_records_reservations_and_jobs(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, log_of: Any
) -> None:
    reservation = a_reservation_manifest("r1")
    del reservation["metadata"]["uid"]
    kube.create(reservation)
    job = a_job_manifest("j1", pod="default/web-0")
    del job["metadata"]["uid"]
    kube.create(job)
    sync = KubeSync(store=store, client=client, watch_timeout=2, backoff=(0.05, 0.2), absent_retry=0.5)
    runner = running(sync.run)

    async def recorded() -> set[tuple[str, str]]:
        return {(t, s) for t, s, _ in await log_of(store, producer=PRODUCER)}

    await eventually(
        lambda: _has(
            recorded, {("reservation.applied", "reservation:r1"), ("migration.applied", "migration:j1")}
        ),
        what="both recorded",
    )
    # status written back by Allot is not an input
    kube.update("Reservation", "r1", lambda o: o.setdefault("status", {}).update(phase="Available"))
    kube.delete("PodMigrationJob", "j1")
    await eventually(lambda: _has(recorded, {("migration.deleted", "migration:j1")}), what="deletion")
    assert [t for t, s, _ in await log_of(store, producer=PRODUCER) if s == "reservation:r1"] == [
        "reservation.applied"
    ]
    await runner.close()


async def _has(recorded: Any, wanted: set[tuple[str, str]]) -> bool:
    return wanted <= await recorded()


async def test_status_is_written_back_and_collected_objects_deleted(kube: FakeKube, client: Any) -> None:
    reservation = a_reservation_manifest("r1", ttl="1h")
    kube.create(reservation)
    kube.create(a_job_manifest("j1", pod="default/web-0", mode="EvictDirectly"))
    d = Driver({"mode": "kubernetes", "migration": {"evictAllBarePods": True}})
    d.node("n1")
    d.node("n2")
    d.reservation(reservation)
    d.placed_reservation("r1", "n2")
    d.feed(
        PodObserved(
            pod=ObjectRef(namespace="default", name="web-0"),
            uid="u1",
            manifest=a_pod_manifest("web-0", uid="u1", node="n1"),
        )
    )
    d.job(a_job_manifest("j1", pod="default/web-0", mode="EvictDirectly"))
    writer = StatusWriter(client)
    await writer.step(wanted_statuses(d.engine))
    status = kube.get("Reservation", "r1")["status"]  # type: ignore[index]
    assert status["phase"] == "Available" and status["nodeName"] == "n2"
    assert status["allocatable"] == {"cpu": "2", "memory": "4Gi"}
    assert status["conditions"][0]["type"] == "Scheduled" and status["conditions"][0][
        "lastTransitionTime"
    ].endswith("Z")
    job = kube.get("PodMigrationJob", "j1")["status"]  # type: ignore[index]
    assert job["phase"] == "Running" and job["status"] == "Eviction"
    patches = len(kube.patches)
    await writer.step(wanted_statuses(d.engine))
    assert len(kube.patches) == patches  # unchanged: nothing written

    d.tick(3600)  # expired
    await writer.step(wanted_statuses(d.engine))
    assert kube.get("Reservation", "r1")["status"]["phase"] == "Failed"  # type: ignore[index]
    d.tick(3600 + 86400)  # garbage-collected: the object goes too
    await writer.step(wanted_statuses(d.engine))
    assert kube.get("Reservation", "r1") is None


def _for_us(body: dict[str, Any]) -> dict[str, Any]:
    del body["metadata"]["uid"]  # the API server assigns it
    body["spec"]["schedulerName"] = "allot-scheduler"
    body["status"] = {"phase": "Pending"}
    return body


@contextlib.asynccontextmanager
async def kube_stack(
    kube: FakeKube,
    client: Any,
    database_url: str,
    nats_server_url: str,
    bus_names: dict[str, str],
    nodes: list[str],
    configs: dict[str, dict[str, Any]] | None = None,
) -> AsyncIterator[Any]:
    """The relay and the seven services in Kubernetes mode (binder and reservation-manager with their workers:
    Bindings, evictions, status write-back), kube-sync and node-reporter's watch, against the fake API server."""
    from allot_bus.names import BusNames
    from allot_runtime.metrics import Metrics
    from allot_runtime.service import ServiceContext
    from allot_runtime.settings import ServiceSettings
    from allot_testing.stack import InProcessStack
    from binder.adapters.kube import bind_worker
    from node_reporter.adapters.kube import kube_watch
    from reservation_manager.adapters.kube import status_worker

    modes = {"binder": {"mode": "kubernetes"}, "reservation-manager": {"mode": "kubernetes"}}
    for service, extra in (configs or {}).items():
        modes[service] = {**modes.get(service, {}), **extra}

    def context(stack: InProcessStack, service: str, instance: str = "") -> ServiceContext:
        settings = ServiceSettings(
            service=service, database_url=database_url, kube_mode="kubernetes", instance=instance
        )
        runtime = stack.runtimes[f"{service}@{instance}" if instance else service]
        return ServiceContext(
            settings=settings, store=stack.store, nc=None, metrics=Metrics(service), runtime=runtime
        )

    stop = asyncio.Event()
    async with InProcessStack(
        database_url,
        nats_server_url,
        BusNames(**bus_names),
        configs=modes,
        instances={"node-reporter": nodes},
    ) as stack:
        sync = KubeSync(store=stack.store, client=client, watch_timeout=5)
        tasks = [
            *(asyncio.create_task(kube_watch(context(stack, "node-reporter", n), stop)) for n in nodes),
            asyncio.create_task(bind_worker(context(stack, "binder"), stop)),
            asyncio.create_task(status_worker(context(stack, "reservation-manager"), stop, poll=0.1)),
            asyncio.create_task(sync.run(stop)),
        ]
        try:
            yield stack
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)


def _status(kube: FakeKube, kind: str, name: str) -> dict[str, Any]:
    return dict((kube.get(kind, name) or {}).get("status") or {})


def _node_of(kube: FakeKube, pod: str) -> str:
    return str(((kube.get("Pod", pod) or {}).get("spec") or {}).get("nodeName") or "")


async def test_a_reservation_in_the_cluster_is_used_by_its_owner_through_the_binding(
    kube: FakeKube,
    tmp_path: Any,
    database_url: str,
    nats_server_url: str,
    bus_names: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    client: Any,
    eventually: Any,
) -> None:
    """The v0.6 example in Kubernetes mode: kube-sync records the Reservation, it is placed and its status written
    back (Available); the filler cannot take the reserved node; the owner's Binding carries reservation-allocated,
    and the Reservation's status ends Succeeded with the owner in currentOwners."""
    for node in ("n1", "n2"):
        kube.create(a_node(node, cpu="4", memory="8Gi"))
    reservation = a_reservation_manifest("reserve-web", cpu="3", memory="4Gi")
    del reservation["metadata"]["uid"]
    reservation["spec"]["template"]["spec"]["nodeName"] = "n1"
    kube.create(reservation)
    monkeypatch.setenv("ALLOT_KUBECONFIG", kube.kubeconfig(tmp_path))

    async with kube_stack(kube, client, database_url, nats_server_url, bus_names, ["n1", "n2"]):

        def phase() -> str:
            return str(_status(kube, "Reservation", "reserve-web").get("phase"))

        await eventually(lambda: phase() == "Available", timeout=40, what="the reservation Available")
        status = _status(kube, "Reservation", "reserve-web")
        assert status["nodeName"] == "n1" and status["allocatable"] == {"cpu": "3", "memory": "4Gi"}
        uid = kube.get("Reservation", "reserve-web")["metadata"]["uid"]  # type: ignore[index]

        kube.create(_for_us(a_pod("filler", cpu="3", memory="1Gi")))
        await eventually(lambda: bool(_node_of(kube, "filler")), timeout=30, what="the filler bound")
        assert _node_of(kube, "filler") == "n2"
        kube.create(_for_us(a_pod("web", cpu="3", memory="2Gi", labels={"app": "web"})))
        await eventually(lambda: bool(_node_of(kube, "web")), timeout=30, what="the owner bound")
        (binding,) = [b for b in kube.bindings if b["metadata"]["name"] == "web"]
        assert binding["target"]["name"] == "n1"
        allocated = json.loads(binding["metadata"]["annotations"][ALLOCATED])
        assert allocated == {"name": "reserve-web", "uid": uid}
        await eventually(lambda: phase() == "Succeeded", timeout=20, what="the reservation Succeeded")
        status = _status(kube, "Reservation", "reserve-web")
        assert [o["name"] for o in status["currentOwners"]] == ["web"]
        assert status["allocated"] == {"cpu": "3", "memory": "2Gi"}


async def test_a_reservation_first_migration_in_the_cluster(
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
    """A PodMigrationJob in Kubernetes mode, for a pod Allot scheduled: reserve on another node, evict through the Eviction API, the pod its
    ReplicaSet re-creates (played here) lands in the job's reservation with reservation-allocated in its Binding, and
    the job's status ends Succeeded in the API server; replay re-derives every decision."""
    from allot_runtime.replay import verify_decisions

    for node in ("n1", "n2"):
        kube.create(a_node(node, cpu="8", memory="16Gi"))
    # web-a is scheduled by Allot first: every service knows its life before the job evicts it
    kube.create(_for_us(a_pod_manifest("web-a", controller=("ReplicaSet", "web"), labels={"app": "web"})))
    monkeypatch.setenv("ALLOT_KUBECONFIG", kube.kubeconfig(tmp_path))
    configs = {"reservation-manager": {"migration": {"skipCheckExpectedReplicas": True}}}

    async with kube_stack(
        kube, client, database_url, nats_server_url, bus_names, ["n1", "n2"], configs
    ) as stack:
        await eventually(lambda: bool(_node_of(kube, "web-a")), timeout=40, what="web-a bound")
        source = _node_of(kube, "web-a")
        job = a_job_manifest("move-web-a", pod="default/web-a", mode="ReservationFirst")
        del job["metadata"]["uid"]
        kube.create(job)
        await eventually(lambda: kube.get("Pod", "web-a") is None, timeout=40, what="web-a evicted")
        (eviction,) = kube.evictions
        assert eviction["metadata"]["name"] == "web-a"
        # its ReplicaSet re-creates it under another name
        kube.create(_for_us(a_pod_manifest("web-b", controller=("ReplicaSet", "web"), labels={"app": "web"})))
        await eventually(lambda: bool(_node_of(kube, "web-b")), timeout=30, what="web-b bound")
        assert _node_of(kube, "web-b") not in ("", source)
        (binding,) = [b for b in kube.bindings if b["metadata"]["name"] == "web-b"]
        allocated = json.loads(binding["metadata"]["annotations"][ALLOCATED])
        job_uid = kube.get("PodMigrationJob", "move-web-a")["metadata"]["uid"]  # type: ignore[index]
        assert allocated["name"] == job_uid  # the job's reservation, named after the job
        await eventually(
            lambda: _status(kube, "PodMigrationJob", "move-web-a").get("phase") == "Succeeded",
            timeout=30,
            what="the job Succeeded in the API server",
        )
        status = _status(kube, "PodMigrationJob", "move-web-a")
        assert status["message"] == f'Bind Pod "default/web-b" in Reservation "{job_uid}"'
        assert kube.get("Reservation", job_uid) is None  # the job's reservation lives in the log only
        from allot_stack.pipeline import build_instance

        for service in ("reservation-manager", "device-allocator", "binder"):
            config = {**configs.get(service, {})}
            if service != "device-allocator":
                config["mode"] = "kubernetes"
            host = Host(build_instance(service, service, config), name=service)
            checked, mismatches = await verify_decisions(host, stack.store)
            assert checked > 0 and not mismatches, (service, mismatches[:1])
