"""binder's Kubernetes worker against the fake API server and a real PostgreSQL: Bindings carry the allocation
annotations, retries are idempotent, failures are recorded once, quota status is patched."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allot_contracts.decisions.placement import Decision
from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import ObjectRef, PodPlaced, PodSubmitted, QuotaStatusSynced
from allot_testing.builders import a_pod, a_quota
from allot_testing.fake_kube import FakeKube
from binder.adapters.kube import PRODUCER, BindWorker, View
from binder.processor import BindRequest

pytestmark = pytest.mark.integration

ALLOCATED = {"gpu": [{"minor": 1, "resources": {"koordinator.sh/gpu-core": "100"}}]}
STATUS = {"cpuset": "0-3"}


async def place(store: Any, name: str, uid: str, node: str = "n1", attempt: int = 1) -> None:
    pod = ObjectRef(namespace="default", name=name)
    events = [
        PodSubmitted(pod=pod, uid=uid, manifest=a_pod(name, uid=uid)),
        PodPlaced(
            pod=pod,
            attempt=attempt,
            node=node,
            decision=Decision(
                pod=pod.key,
                outcome="Scheduled",
                node=node,
                annotations={
                    "scheduling.koordinator.sh/device-allocated": ALLOCATED,
                    "scheduling.koordinator.sh/resource-status": STATUS,
                },
            ),
        ),
    ]
    await store.append(
        [
            NewEvent(
                stream_id=stream_id("pod", pod.key),
                event=event,
                event_id=derived_event_id("test", f"{uid}/{attempt}", index),
            )
            for index, event in enumerate(events)
        ],
        producer="api",
    )


async def outcomes(store: Any) -> list[tuple[str, dict[str, Any], str, str | None]]:
    return [
        (r.type, json.loads(r.payload), r.event_id, r.causation_id)
        async for r in store.iterate(producer=PRODUCER)
    ]


async def settle_worker(binding: Any, worker: BindWorker, eventually: Any) -> None:
    """Run passes until nothing is outstanding (outcomes fed back to the processor)."""

    async def done() -> bool:
        await worker.step()
        await binding.feed()
        return not binding.host.processor.outstanding()

    await eventually(done, timeout=10, what="every request answered")


async def test_a_binding_carries_the_annotations_and_is_recorded_once(
    kube: FakeKube, store: Any, client: Any, eventually: Any, kube_binder: Any
) -> None:
    pod = kube.create(a_pod("p"))
    uid = pod["metadata"]["uid"]
    await place(store, "p", uid)
    binding = kube_binder
    await binding.feed()
    (request,) = binding.host.processor.outstanding()
    worker = binding.worker(client)
    await settle_worker(binding, worker, eventually)

    (sent,) = kube.bindings
    assert sent == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "uid": uid,
            "annotations": {
                "scheduling.koordinator.sh/device-allocated": json.dumps(
                    ALLOCATED, separators=(",", ":"), sort_keys=True
                ),
                "scheduling.koordinator.sh/resource-status": '{"cpuset":"0-3"}',
            },
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }
    bound = kube.get("Pod", "p")
    assert bound["spec"]["nodeName"] == "n1"
    assert (
        json.loads(bound["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"])
        == ALLOCATED
    )
    ((kind, payload, event_id, causation),) = await outcomes(store)
    requested = [r async for r in store.iterate(types={"pod.bind_requested"})]
    assert kind == "pod.bound" and payload["mode"] == "kubernetes" and payload["node"] == "n1"
    assert payload["annotations"] == request.annotations
    assert (
        event_id == derived_event_id(PRODUCER, requested[0].event_id, 0)
        and causation == requested[0].event_id
    )
    for _ in range(3):  # nothing outstanding: nothing sent again
        await worker.step()
    assert len(kube.bindings) == 1


async def test_a_lost_answer_is_retried_and_the_conflict_on_the_same_node_is_success(
    kube: FakeKube, store: Any, client: Any, eventually: Any, kube_binder: Any
) -> None:
    pod = kube.create(a_pod("p"))
    await place(store, "p", pod["metadata"]["uid"])
    kube.fail("POST", r"/pods/p/binding$", after=True)  # bound, but the answer never arrives
    kube.fail("POST", r"/pods/p/binding$", status=503)  # then the API server is briefly unavailable
    binding = kube_binder
    await binding.feed()
    await settle_worker(binding, binding.worker(client), eventually)
    assert len(kube.bindings) == 2  # the first (effective) one, the second refused as already assigned
    assert kube.count("POST", r"/pods/p/binding$") == 3
    assert [(k, p["node"]) for k, p, _, _ in await outcomes(store)] == [("pod.bound", "n1")]


@pytest.mark.parametrize("case", ["deleted", "other-node", "recreated", "being-deleted", "gated"])
async def test_final_refusals_are_recorded_as_bind_failed_once(
    case: str, kube: FakeKube, store: Any, client: Any, eventually: Any, kube_binder: Any
) -> None:
    pod = kube.create(a_pod("p"))
    uid = pod["metadata"]["uid"]
    if case == "deleted":
        kube.delete("Pod", "p")
    elif case == "other-node":
        kube.update("Pod", "p", lambda o: o["spec"].update({"nodeName": "n2"}))
    elif case == "recreated":
        kube.delete("Pod", "p")
        kube.create(a_pod("p", uid="another-life"))  # same name, new uid: the uid precondition fails
    elif case == "being-deleted":
        kube.update("Pod", "p", lambda o: o["metadata"].update({"deletionTimestamp": "2026-01-01T00:00:00Z"}))
    else:
        kube.update("Pod", "p", lambda o: o["spec"].update({"schedulingGates": [{"name": "g"}]}))
    await place(store, "p", uid)
    binding = kube_binder
    await binding.feed()
    await settle_worker(binding, binding.worker(client), eventually)
    ((kind, payload, _, _),) = await outcomes(store)
    assert kind == "pod.bind_failed"
    expected = {
        "deleted": "not found",
        "other-node": 'already assigned to node "n2"',
        "recreated": "Precondition failed",
        "being-deleted": "is being deleted",
        "gated": "schedulingGates",
    }[case]
    assert expected in payload["message"]
    assert binding.host.processor.bound == {}
    assert len(kube.bindings) == 1


async def test_nothing_is_bound_before_the_request_is_committed_or_while_rbac_refuses(
    kube: FakeKube, store: Any, client: Any, eventually: Any, kube_binder: Any
) -> None:
    kube.create(a_pod("p"))
    uncommitted = BindRequest(pod=ObjectRef(namespace="default", name="p"), uid="u", attempt=1, node="n1")

    async def view() -> View:
        return View(ready=True, requests=[uncommitted], patches={})

    worker = BindWorker(store=store, client=client, view=view)
    await worker.step()
    assert kube.bindings == []

    pod = kube.get("Pod", "p")
    await place(store, "p", pod["metadata"]["uid"])
    binding = kube_binder
    await binding.feed()
    kube.fail("POST", r"/binding$", status=403, message='pods "p" is forbidden', times=1)
    worker = binding.worker(client)
    await worker.step()
    assert await outcomes(store) == []  # a refusal by RBAC is not an outcome: it is retried
    await settle_worker(binding, worker, eventually)
    assert [k for k, _, _, _ in await outcomes(store)] == ["pod.bound"]


async def test_quota_status_is_merge_patched_onto_the_elastic_quota(
    kube: FakeKube, store: Any, client: Any, eventually: Any, kube_binder: Any
) -> None:
    kube.create(a_quota("q", namespace="team"))
    binding = kube_binder
    patch = {
        "metadata": {"annotations": {"quota.scheduling.koordinator.sh/runtime": '{"cpu":"4"}'}},
        "status": {"used": {"cpu": "2"}},
    }
    await store.append(
        [
            NewEvent(
                stream_id=stream_id("quota", "status"),
                event_id=derived_event_id("t", "q", 0),
                event=QuotaStatusSynced(patches={"team/q": patch, "team/gone": patch}),
            )
        ],
        producer="quota-manager",
    )
    await binding.feed()
    kube.fail("PATCH", r"/elasticquotas/q$", status=503)  # unavailable once: retried with backoff
    worker = binding.worker(client)

    async def written() -> bool:
        await worker.step()
        return "annotations" in kube.get("ElasticQuota", "q", "team")["metadata"]

    await eventually(written, what="the quota patched")
    assert kube.count("PATCH", r"/elasticquotas/q$") == 2
    quota = kube.get("ElasticQuota", "q", "team")
    assert quota["metadata"]["annotations"]["quota.scheduling.koordinator.sh/runtime"] == '{"cpu":"4"}'
    assert quota["status"] == {"used": {"cpu": "2"}}  # through the status subresource
    base = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team/elasticquotas"
    assert [p for p, _ in kube.patches] == [
        f"{base}/gone/status",  # 404: the quota is missing (the status subresource is not known yet)
        f"{base}/gone",
        f"{base}/q/status",  # then the object's patch: 503 (not handled, so not kept here), retried
        f"{base}/q/status",
        f"{base}/q",
    ]
    # Status goes through the status subresource only: the object's own patches (the ones admission webhooks
    # review) carry the annotations alone.
    assert [body for path, body in kube.patches if path == f"{base}/q"] == [{"metadata": patch["metadata"]}]
    await worker.step()
    assert len(kube.patches) == 5  # applied once; a missing quota is not retried


async def test_a_quota_whose_annotations_are_refused_still_gets_its_status(
    kube: FakeKube, store: Any, client: Any, kube_binder: Any
) -> None:
    """A validating webhook refusing the annotation patch (422) does not stop the quota's status: it is written
    first, on the status subresource, which webhooks scoped to the object never see; the next status is written
    too."""
    kube.create(a_quota("q", namespace="team"))
    binding = kube_binder

    async def publish(used: str, index: int) -> None:
        patch = {
            "metadata": {"annotations": {"quota.scheduling.koordinator.sh/runtime": f'{{"cpu":"{used}"}}'}},
            "status": {"used": {"cpu": used}},
        }
        await store.append(
            [
                NewEvent(
                    stream_id=stream_id("quota", "status"),
                    event_id=derived_event_id("t", "q", index),
                    event=QuotaStatusSynced(patches={"team/q": patch}),
                )
            ],
            producer="quota-manager",
        )
        await binding.feed()

    denied = 'admission webhook "objects.validate.allot.dev" denied the request'
    kube.fail("PATCH", r"/elasticquotas/q$", status=422, message=denied, times=2)
    worker = binding.worker(client)
    await publish("2", 0)
    await worker.step()
    assert kube.get("ElasticQuota", "q", "team")["status"] == {"used": {"cpu": "2"}}
    await publish("3", 1)
    await worker.step()
    quota = kube.get("ElasticQuota", "q", "team")
    assert quota["status"] == {"used": {"cpu": "3"}} and "annotations" not in quota["metadata"]
    await worker.step()
    assert kube.count("PATCH", r"/elasticquotas/q$") == 2  # refused for good: not retried until it changes


async def test_the_generated_client_misreads_the_binding_reply(kube: FakeKube, client: Any) -> None:
    """Why the worker reads replies raw: the API server answers a Binding with a Status, and the generated
    ``create_namespaced_binding`` fails to deserialise it although the pod is bound."""
    from kubernetes_asyncio import client as k

    pod = kube.create(a_pod("p"))
    body = k.V1Binding(
        metadata=k.V1ObjectMeta(name="p", uid=pod["metadata"]["uid"]),
        target=k.V1ObjectReference(kind="Node", name="n1"),
    )
    with pytest.raises(ValueError, match="target"):
        await k.CoreV1Api(client).create_namespaced_binding("default", body)
    assert kube.get("Pod", "p")["spec"]["nodeName"] == "n1"
