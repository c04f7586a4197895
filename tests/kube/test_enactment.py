"""The enactment ledger against the fake API server and a real PostgreSQL: every cluster-changing decision the
binder's worker carries out gets one recorded outcome (``*.enacted`` / ``*.enactment_failed``), with the decision
as its causation; ``quota.evicted`` goes through the Eviction API (a PodDisruptionBudget's refusal recorded with the
API server's reason)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.decisions.placement import Decision
from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import (
    DevicesReported,
    Event,
    NodeAllocatableUpdated,
    ObjectRef,
    PodDeleted,
    PodPlaced,
    PodUnschedulable,
    PreemptionDecided,
    PreemptionVictim,
    QuotaEvicted,
    QuotaStatusSynced,
)
from allot_contracts.objects.inventory import parse_device_cr
from allot_reservation.testing import a_pod_manifest
from allot_stack.explain import explain, history
from allot_testing.builders import a_gpu_device, a_node, a_quota
from allot_testing.fake_kube import FakeKube
from binder.adapters.kube import PRODUCER
from binder.adapters.notices import NoticeWorker

pytestmark = pytest.mark.integration

RUNTIME = "quota.scheduling.koordinator.sh/runtime"


async def outcomes(store: Any) -> list[tuple[str, dict[str, Any], str, str | None]]:
    return [
        (r.type, json.loads(r.payload), r.event_id, r.causation_id)
        async for r in store.iterate(producer=PRODUCER)
    ]


async def published(store: Any) -> dict[str, str]:
    """quota key -> event id of its latest quota.status_published."""
    return {
        json.loads(r.payload)["quota"]["name"]: r.event_id
        async for r in store.iterate(types={"quota.status_published"})
    }


async def sync(store: Any, patches: dict[str, Any], index: int = 0) -> None:
    await store.append(
        [
            NewEvent(
                stream_id=stream_id("quota", "status"),
                event_id=derived_event_id("t", "sync", index),
                event=QuotaStatusSynced(patches=patches),
            )
        ],
        producer="quota-manager",
    )


def a_patch(cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {RUNTIME: f'{{"cpu":"{cpu}"}}'}},
        "status": {"used": {"cpu": cpu}},
    }


async def test_each_quota_status_patch_gets_one_outcome_naming_its_decision(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any, eventually: Any
) -> None:
    kube.create(a_quota("q", namespace="team"))
    await sync(store, {"team/q": a_patch("2"), "team/gone": a_patch("2")})
    await kube_binder.feed()
    kube.fail("PATCH", r"/elasticquotas/q/status$", status=503)  # transient: retried with backoff
    worker = kube_binder.worker(client)

    async def answered() -> bool:
        await worker.step()
        return len(await outcomes(store)) == 2

    await eventually(answered, what="both quotas answered")
    decisions = await published(store)
    got = {
        payload["quota"]["name"]: (kind, payload, event_id, cause)
        for kind, payload, event_id, cause in await outcomes(store)
    }
    kind, payload, event_id, cause = got["q"]
    assert kind == "quota.status_enacted"
    assert payload["decision"] == cause == decisions["q"] and payload["attempts"] == 2
    assert event_id == derived_event_id(PRODUCER, decisions["q"], 0)
    kind, payload, _, cause = got["gone"]
    assert kind == "quota.status_enactment_failed" and cause == decisions["gone"]
    assert (
        payload["reason"] == "NotFound"
        and payload["status_written"] is False
        and "gone" in payload["message"]
    )
    for _ in range(3):
        await worker.step()
    assert len(await outcomes(store)) == 2  # one outcome per decision, however often the worker passes


async def test_a_refused_annotation_patch_is_recorded_with_the_status_written(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    kube.create(a_quota("q", namespace="team"))
    denied = 'admission webhook "objects.validate.allot.dev" denied the request'
    kube.fail("PATCH", r"/elasticquotas/q$", status=422, message=denied)
    await sync(store, {"team/q": a_patch("2")})
    await kube_binder.feed()
    worker = kube_binder.worker(client)
    await worker.step()
    [(kind, payload, _, _)] = await outcomes(store)
    assert kind == "quota.status_enactment_failed"
    assert payload["status_written"] is True and denied in payload["message"] and payload["reason"]
    await sync(store, {"team/q": a_patch("3")}, index=1)  # the next patch is enacted in full
    await kube_binder.feed()
    await worker.step()
    assert [k for k, _, _, _ in await outcomes(store)] == [
        "quota.status_enactment_failed",
        "quota.status_enacted",
    ]


async def evict_for_quota(store: Any, kube: FakeKube, name: str) -> tuple[str, str]:
    """A running pod in the cluster and quota-manager's quota.evicted of it: (pod uid, decision id)."""
    manifest = a_pod_manifest(name, node="n1")
    del manifest["metadata"]["uid"]  # the API server assigns it
    uid = kube.create(manifest)["metadata"]["uid"]
    event_id = derived_event_id("t", name, 0)
    event = QuotaEvicted(
        pod=ObjectRef(namespace="default", name=name),
        uid=uid,
        quota="default/borrower",
        cause="Preempted",
        message="quota default/lender takes back its min",
    )
    await store.append(
        [NewEvent(stream_id=stream_id("pod", f"default/{name}"), event=event, event_id=event_id)],
        producer="quota-manager",
    )
    return uid, event_id


async def test_quota_evicted_goes_through_the_eviction_api_once(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    uid, decision = await evict_for_quota(store, kube, "borrowed-0")
    await kube_binder.feed()
    worker = kube_binder.worker(client)
    await worker.step()
    assert kube.evictions == [
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "borrowed-0", "namespace": "default"},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
    ]
    assert kube.get("Pod", "borrowed-0", "default") is None
    [(kind, payload, _, cause)] = await outcomes(store)
    assert kind == "quota.eviction_enacted" and cause == payload["decision"] == decision
    assert payload["uid"] == uid and payload["quota"] == "default/borrower"
    await worker.step()  # answered: not sent again before the answer reaches the projection
    await kube_binder.feed()
    await worker.step()
    assert len(kube.evictions) == 1 and len(await outcomes(store)) == 1
    assert kube_binder.host.processor.evictions.outstanding_quota() == []


async def test_a_disruption_budget_refusal_is_recorded_with_the_api_servers_reason(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    await evict_for_quota(store, kube, "borrowed-0")
    kube.disruption_blocked.add("default/borrowed-0")
    await kube_binder.feed()
    worker = kube_binder.worker(client)
    await worker.step()
    [(kind, payload, _, _)] = await outcomes(store)
    assert kind == "quota.eviction_enactment_failed" and payload["reason"] == "TooManyRequests"
    assert "disruption budget" in payload["message"]
    assert kube.get("Pod", "borrowed-0", "default") is not None  # still running, and the log says so
    await kube_binder.feed()
    kube.disruption_blocked.clear()
    await worker.step()
    assert len(kube.evictions) == 1 and len(await outcomes(store)) == 1  # a final answer: not retried
    # allot explain pod shows the refusal, in the timeline and under "enacted:"
    lines = explain("default/borrowed-0", *await history(store, "default/borrowed-0"))
    (timeline,) = [line for line in lines if "quota.eviction_enactment_failed binder.kube" in line]
    assert "REFUSED by the API server: TooManyRequests" in timeline
    start = lines.index("enacted:   in the cluster (Kubernetes mode)")
    assert "quota.evicted: refused by quota.eviction_enactment_failed: TooManyRequests" in lines[start + 1]


async def test_node_status_decisions_get_their_outcome_once(kube: FakeKube, store: Any, client: Any) -> None:
    """device.reported and node.allocatable_updated change the Node: each latest one is answered once the Node's
    patch is written (also when it changes nothing), a superseded one is not, a Node missing in the cluster is
    NotFound."""
    kube.create(a_node("gpu-1"))
    device = a_gpu_device("gpu-1", gpus=1, memory="80Gi")
    decisions = [
        (
            "device:gpu-1",
            DevicesReported(name="gpu-1", manifest=device, inventory=parse_device_cr(device)[1]),
        ),
        ("node:gpu-1", NodeAllocatableUpdated(name="gpu-1", allocatable={"kubernetes.io/batch-cpu": "1000"})),
        ("node:gpu-1", NodeAllocatableUpdated(name="gpu-1", allocatable={"kubernetes.io/batch-cpu": "2000"})),
        ("node:gpu-9", NodeAllocatableUpdated(name="gpu-9", allocatable={"kubernetes.io/batch-cpu": "1000"})),
    ]
    ids = [derived_event_id("t", "node", i) for i in range(len(decisions))]
    await store.append(
        [NewEvent(stream_id=s, event=e, event_id=i) for (s, e), i in zip(decisions, ids, strict=True)],
        producer="device-allocator",
    )
    worker = NoticeWorker(store=store, client=client)
    await worker.step()
    got = [(kind, payload["decision"], cause) for kind, payload, _, cause in await outcomes(store)]
    assert sorted(got) == sorted(
        [
            ("node.status_enacted", ids[0], ids[0]),
            ("node.status_enacted", ids[2], ids[2]),  # the first allocatable update was superseded
            ("node.status_enactment_failed", ids[3], ids[3]),
        ]
    )
    failed = next(p for k, p, _, _ in await outcomes(store) if k == "node.status_enactment_failed")
    assert failed["reason"] == "NotFound" and failed["node"] == "gpu-9"
    same = NodeAllocatableUpdated(
        name="gpu-1", allocatable={"kubernetes.io/batch-cpu": "2000"}, reason="again"
    )
    await store.append(
        [NewEvent(stream_id="node:gpu-1", event=same, event_id=derived_event_id("t", "node", 9))],
        producer="device-allocator",
    )
    patches = len(kube.patches)
    await worker.step()
    await worker.step()
    assert len(kube.patches) == patches  # nothing new to write, yet the decision is answered, once
    assert [
        k for k, p, _, _ in await outcomes(store) if p["decision"] == derived_event_id("t", "node", 9)
    ] == ["node.status_enacted"]


def a_preemption(job: str, victim: str) -> PreemptionDecided:
    return PreemptionDecided(
        job=f"default/{job}",
        attempt=1,
        priority=100,
        members=[f"default/{job}"],
        nominated={f"default/{job}": "n1"},
        victims=[PreemptionVictim(pod=ObjectRef(namespace="default", name=victim), node="n1")],
        message=f"preempting default/{victim} on n1",
    )


async def test_a_preemptor_is_nominated_until_it_is_placed_or_gives_up(
    kube: FakeKube, store: Any, client: Any
) -> None:
    for name in ("vip", "vip2"):
        manifest = a_pod_manifest(name)
        del manifest["metadata"]["uid"]
        kube.create(manifest)
    vip, vip2 = ObjectRef(namespace="default", name="vip"), ObjectRef(namespace="default", name="vip2")
    placed = Decision(pod="default/vip", outcome="Scheduled", node="n1")
    steps: list[list[Event]] = [
        [a_preemption("vip", "low"), a_preemption("vip2", "low2")],
        [PodPlaced(pod=vip, attempt=2, node="n1", decision=placed)],  # placed: cleared
        # vip2 fails while its victim is still leaving (kept), then again with every victim gone (it gives up)
        [PodUnschedulable(pod=vip2, attempt=2, message="x", codes=["PreemptionInProgress"], decision=placed)],
        [
            PodDeleted(pod=ObjectRef(namespace="default", name="low2")),
            PodUnschedulable(pod=vip2, attempt=3, message="x", codes=[], decision=placed),
        ],
    ]
    worker = NoticeWorker(store=store, client=client)
    seen = []
    for index, events in enumerate(steps):
        await store.append(
            [
                NewEvent(stream_id=f"x:{index}", event=e, event_id=derived_event_id("t", f"n{index}", i))
                for i, e in enumerate(events)
            ],
            producer="device-allocator",
        )
        await worker.step()
        seen.append(
            tuple(
                (kube.get("Pod", n, "default") or {}).get("status", {}).get("nominatedNodeName")
                for n in ("vip", "vip2")
            )
        )
    assert seen == [("n1", "n1"), (None, "n1"), (None, "n1"), (None, None)]
