"""The binder's notices worker against the fake API server and a real PostgreSQL: what ``kubectl describe`` shows
for recorded decisions — Events (series, aggregation, spam filter), ``PodScheduled``, PodGroup status — and the
Node's device capacity."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import (
    DevicesRemoved,
    DevicesReported,
    Event,
    FieldIssue,
    GangMemberWaiting,
    NodeAllocatableUpdated,
    ObjectRef,
    PodBindFailed,
    PodBound,
    PodDeleted,
    PodGroupApplied,
    PodPhaseObserved,
    PodSubmitted,
    PodUnschedulable,
    QuotaEvicted,
    QuotaRejected,
    QuotaWaiting,
    ReservationAccepted,
    ReservationPlaced,
    ReservationRejected,
    ReservationUnschedulable,
)
from allot_testing.builders import a_gpu_device, a_node, a_pod
from allot_testing.fake_kube import FakeKube
from binder.adapters.events import EventRecorder
from binder.adapters.notices import CHECKPOINT, NoticeWorker
from binder.notices import Notice, Regarding, device_capacity

pytestmark = pytest.mark.integration

UNSCHEDULABLE = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu."
)


async def record(store: Any, *events: Event, key: str = "t") -> None:
    await store.append(
        [
            NewEvent(stream_id=stream_id("x", key), event=e, event_id=derived_event_id("test", key, i))
            for i, e in enumerate(events)
        ],
        producer="test",
    )


def pod_ref(name: str, namespace: str = "default") -> ObjectRef:
    return ObjectRef(namespace=namespace, name=name)


def events_of(kube: FakeKube, name: str) -> list[dict[str, Any]]:
    return [
        o
        for (plural, _, _), o in sorted(kube.objects.items())
        if plural == "events" and o["regarding"]["name"] == name
    ]


def condition(kube: FakeKube, name: str) -> dict[str, Any] | None:
    pod = kube.get("Pod", name) or {}
    found = [c for c in (pod.get("status") or {}).get("conditions", []) if c.get("type") == "PodScheduled"]
    return found[0] if found else None


async def test_a_pending_pod_shows_failed_scheduling_and_pod_scheduled_false(
    kube: FakeKube, store: Any, client: Any
) -> None:
    pod = kube.create(a_pod("p"))
    kube.update(
        "Pod",
        "p",
        lambda o: (
            o.setdefault("status", {})
            .setdefault("conditions", [])
            .append({"type": "Initialized", "status": "True"})
        ),
    )
    uid = pod["metadata"]["uid"]
    await record(
        store,
        PodSubmitted(pod=pod_ref("p"), uid=uid, manifest=a_pod("p", uid=uid)),
        PodUnschedulable(
            pod=pod_ref("p"), uid=uid, attempt=1, message=UNSCHEDULABLE, codes=[], decision=_unschedulable()
        ),
    )
    worker = NoticeWorker(store=store, client=client)
    await worker.step()

    (event,) = events_of(kube, "p")
    assert (event["type"], event["reason"], event["action"], event["note"]) == (
        "Warning",
        "FailedScheduling",
        "Scheduling",
        UNSCHEDULABLE,
    )
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "default",
        "uid": uid,
    }
    assert event["reportingController"] == "allot-scheduler"
    scheduled = condition(kube, "p")
    assert scheduled is not None
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False",
        "Unschedulable",
        UNSCHEDULABLE,
    )
    kinds = [c["type"] for c in kube.get("Pod", "p")["status"]["conditions"]]
    assert kinds == ["Initialized", "PodScheduled"]  # a strategic merge: the kubelet's conditions stay
    assert await store.get_checkpoint(CHECKPOINT) == 2

    # The same decision recorded again (the next attempt) becomes a series, not a second Event.
    await record(
        store,
        PodUnschedulable(
            pod=pod_ref("p"), uid=uid, attempt=2, message=UNSCHEDULABLE, codes=[], decision=_unschedulable()
        ),
        key="again",
    )
    await worker.step()
    (event,) = events_of(kube, "p")
    assert event["series"]["count"] == 2

    # Bound: Normal Scheduled, and no stale PodScheduled=False written after the binding.
    kube.update(
        "Pod",
        "p",
        lambda o: o["status"]["conditions"].__setitem__(1, {"type": "PodScheduled", "status": "True"}),
    )
    await record(
        store,
        QuotaWaiting(
            pod=pod_ref("p"), uid=uid, attempt=3, quota="q", message="Insufficient quotas, quotaName: q"
        ),
        PodBound(pod=pod_ref("p"), uid=uid, attempt=3, node="n1", mode="kubernetes"),
        key="bound",
    )
    await worker.step()
    notes = [(e["reason"], e["note"]) for e in events_of(kube, "p")]
    assert ("Scheduled", "Successfully assigned default/p to n1") in notes
    assert ("FailedScheduling", "Insufficient quotas, quotaName: q") in notes
    assert condition(kube, "p")["status"] == "True"


async def test_bind_failure_eviction_and_rejected_quota(kube: FakeKube, store: Any, client: Any) -> None:
    uid = kube.create(a_pod("p"))["metadata"]["uid"]
    await record(
        store,
        PodSubmitted(pod=pod_ref("p"), uid=uid, manifest=a_pod("p", uid=uid)),
        PodBindFailed(pod=pod_ref("p"), uid=uid, attempt=1, node="n1", message="pod p is being deleted"),
        QuotaEvicted(
            pod=pod_ref("p"), uid=uid, quota="q", cause="Preempted", message="Preempted by default/vip"
        ),
        QuotaRejected(
            quota=ObjectRef(namespace="team", name="q"),
            errors=[FieldIssue(path="spec.min.cpu", message="min 10 > max 5")],
        ),
    )
    await NoticeWorker(store=store, client=client).step()
    reasons = {(e["type"], e["reason"], e["note"]) for e in events_of(kube, "p")}
    assert reasons == {
        ("Warning", "FailedScheduling", "Binding rejected: pod p is being deleted"),
        ("Normal", "Preempted", "Preempted by default/vip"),
    }
    assert condition(kube, "p")["reason"] == "SchedulerError"
    (rejected,) = events_of(kube, "q")
    assert rejected["regarding"]["kind"] == "ElasticQuota"
    assert (rejected["metadata"]["namespace"], rejected["note"]) == ("team", "spec.min.cpu: min 10 > max 5")


async def test_pod_group_status_follows_its_members(kube: FakeKube, store: Any, client: Any) -> None:
    group = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"minMember": 2},
    }
    kube.create(group)
    worker = NoticeWorker(store=store, client=client)
    await record(store, PodGroupApplied(group=ObjectRef(namespace="ml", name="llm"), manifest=group))
    await worker.step()
    assert kube.get("PodGroup", "llm", "ml")["status"] == counts("Pending")

    waiting = [
        GangMemberWaiting(
            pod=pod_ref(f"w{i}", "ml"),
            gang="ml/llm",
            group="ml/llm",
            present=i + 1,
            min_available=2,
            reason="gang-incomplete",
        )
        for i in range(2)
    ]
    await record(store, *waiting, key="members")
    await worker.step()
    assert kube.get("PodGroup", "llm", "ml")["status"]["phase"] == "PreScheduling"
    note = events_of(kube, "w0")[0]["note"]
    assert note == 'gang "ml/llm" has 1/2 members, waiting for more (gang-incomplete)'

    await record(store, PodBound(pod=pod_ref("w0", "ml"), attempt=1, node="n1", mode="kubernetes"), key="b0")
    await worker.step()
    assert kube.get("PodGroup", "llm", "ml")["status"] == counts("Scheduling", scheduled=1)
    await record(store, PodBound(pod=pod_ref("w1", "ml"), attempt=1, node="n2", mode="kubernetes"), key="b1")
    await worker.step()
    assert kube.get("PodGroup", "llm", "ml")["status"] == counts("Scheduled", scheduled=2)

    # The pods' phases as kube-sync records them: Scheduled -> Running -> Finished.
    seen = []
    for i, (pod, phase) in enumerate(
        [("w0", "Running"), ("w1", "Running"), ("w0", "Succeeded"), ("w1", "Succeeded")]
    ):
        events: list[Event] = [PodPhaseObserved(pod=pod_ref(pod, "ml"), uid="", phase=phase)]
        if phase == "Succeeded":
            events.append(PodDeleted(pod=pod_ref(pod, "ml")))  # finished: kube-sync frees its resources
        await record(store, *events, key=f"phase{i}")
        await worker.step()
        seen.append(kube.get("PodGroup", "llm", "ml")["status"])
    assert seen == [
        counts("Scheduled", scheduled=2, running=1),
        counts("Running", scheduled=2, running=2),
        counts("Running", scheduled=2, running=1, succeeded=1),
        counts("Finished", scheduled=2, succeeded=2),
    ]


def counts(phase: str, **kw: int) -> dict[str, Any]:
    return {"phase": phase, "scheduled": 0, "running": 0, "succeeded": 0, "failed": 0, **kw}


async def test_a_failed_member_fails_its_pod_group_and_a_restart_keeps_the_phase(
    kube: FakeKube, store: Any, client: Any
) -> None:
    group = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "ml"},
        "spec": {"minMember": 2},
    }
    kube.create(group)
    members = [pod_ref(f"j{i}", "ml") for i in range(2)]
    await record(
        store,
        PodGroupApplied(group=ObjectRef(namespace="ml", name="job"), manifest=group),
        *(
            GangMemberWaiting(
                pod=pod,
                gang="ml/job",
                group="ml/job",
                present=i + 1,
                min_available=2,
                reason="gang-incomplete",
            )
            for i, pod in enumerate(members)
        ),
        *(PodBound(pod=pod, attempt=1, node="n1", mode="kubernetes") for pod in members),
        *(PodPhaseObserved(pod=pod, uid="", phase="Running") for pod in members),
    )
    worker = NoticeWorker(store=store, client=client)
    await worker.step()
    assert kube.get("PodGroup", "job", "ml")["status"] == counts("Running", scheduled=2, running=2)

    await record(
        store,
        PodPhaseObserved(pod=members[1], uid="", phase="Failed"),
        PodDeleted(pod=members[1]),
        key="failed",
    )
    await worker.step()
    assert kube.get("PodGroup", "job", "ml")["status"] == counts("Failed", scheduled=2, running=1, failed=1)

    # A new worker (a restart) folds the log up to its checkpoint first: the group is still Failed (final), even
    # when its other member succeeds afterwards, and the status written before is written again, not lost.
    kube.update("PodGroup", "job", lambda o: o.pop("status"), "ml")
    await record(store, PodPhaseObserved(pod=members[0], uid="", phase="Succeeded"), key="later")
    restarted = NoticeWorker(store=store, client=client)
    restarted.position = await store.get_checkpoint(CHECKPOINT)
    await restarted.warm_up()
    await restarted.step()
    assert kube.get("PodGroup", "job", "ml")["status"] == counts("Failed", scheduled=2, succeeded=1, failed=1)


async def test_device_capacity_is_written_to_the_node(kube: FakeKube, store: Any, client: Any) -> None:
    kube.create(a_node("gpu-1"))
    device = a_gpu_device("gpu-1", gpus=2, memory="80Gi")
    device["spec"]["devices"].append(
        {"type": "rdma", "minor": 0, "health": True, "resources": {"koordinator.sh/rdma": "100"}}
    )
    await record(store, DevicesReported(name="gpu-1", manifest=device, inventory=_inventory(device)))
    worker = NoticeWorker(store=store, client=client)
    await worker.step()
    status = kube.get("Node", "gpu-1")["status"]
    expected = {
        "koordinator.sh/gpu-core": "200",
        "koordinator.sh/gpu-memory": "160Gi",
        "koordinator.sh/gpu-memory-ratio": "200",
        "koordinator.sh/rdma": "100",
    }
    for key in ("capacity", "allocatable"):
        assert {k: v for k, v in status[key].items() if k.startswith("koordinator.sh/")} == expected
    assert status["allocatable"]["cpu"] == a_node("gpu-1")["status"]["allocatable"]["cpu"]  # the rest stays

    device["spec"]["devices"] = device["spec"]["devices"][:1]
    device["spec"]["devices"][0]["health"] = True
    await record(
        store, DevicesReported(name="gpu-1", manifest=device, inventory=_inventory(device)), key="shrunk"
    )
    await worker.step()
    resources = {
        k for k in kube.get("Node", "gpu-1")["status"]["allocatable"] if k.startswith("koordinator.sh/")
    }
    assert resources == {
        "koordinator.sh/gpu-core",
        "koordinator.sh/gpu-memory",
        "koordinator.sh/gpu-memory-ratio",
    }
    await record(store, DevicesRemoved(name="gpu-1"), key="gone")
    await worker.step()
    assert not any(
        k.startswith("koordinator.sh/") for k in kube.get("Node", "gpu-1")["status"]["allocatable"]
    )


async def test_batch_and_mid_resources_are_written_to_the_node(
    kube: FakeKube, store: Any, client: Any
) -> None:
    kube.create(a_node("gpu-1"))
    device = a_gpu_device("gpu-1", gpus=1, memory="80Gi")
    await record(store, DevicesReported(name="gpu-1", manifest=device, inventory=_inventory(device)))
    computed = {
        "kubernetes.io/batch-cpu": "25000",
        "kubernetes.io/batch-memory": "48Gi",
        "kubernetes.io/mid-cpu": "4000",
        "kubernetes.io/mid-memory": "8Gi",
        "cpu": "60",  # amplified: the scheduler's view, not a Node resource
    }
    await record(
        store,
        NodeAllocatableUpdated(name="gpu-1", allocatable=computed, cpu_normalization_ratio="1.20"),
        key="computed",
    )
    worker = NoticeWorker(store=store, client=client)
    await worker.step()
    status = kube.get("Node", "gpu-1")["status"]
    for key in ("capacity", "allocatable"):
        resources = {
            k: v for k, v in status[key].items() if k.startswith(("kubernetes.io/", "koordinator.sh/"))
        }
        assert resources == {
            "kubernetes.io/batch-cpu": "25000",
            "kubernetes.io/batch-memory": "48Gi",
            "kubernetes.io/mid-cpu": "4000",
            "kubernetes.io/mid-memory": "8Gi",
            "koordinator.sh/gpu-core": "100",
            "koordinator.sh/gpu-memory": "80Gi",
            "koordinator.sh/gpu-memory-ratio": "100",
        }
    assert status["allocatable"]["cpu"] == a_node("gpu-1")["status"]["allocatable"]["cpu"]  # the kubelet's

    # Degraded (a stale NodeMetric): batch resets to 0, mid is no longer computed and goes away; devices stay.
    await record(
        store,
        NodeAllocatableUpdated(
            name="gpu-1",
            allocatable={"kubernetes.io/batch-cpu": "0", "kubernetes.io/batch-memory": "0"},
            degraded=True,
        ),
        key="degraded",
    )
    await worker.step()
    allocatable = kube.get("Node", "gpu-1")["status"]["allocatable"]
    assert {k: v for k, v in allocatable.items() if k.startswith("kubernetes.io/")} == {
        "kubernetes.io/batch-cpu": "0",
        "kubernetes.io/batch-memory": "0",
    }
    assert allocatable["koordinator.sh/gpu-core"] == "100"

    # No strategy applies any more: the resources are removed.
    await record(store, NodeAllocatableUpdated(name="gpu-1", allocatable={}), key="none")
    await worker.step()
    status = kube.get("Node", "gpu-1")["status"]
    for key in ("capacity", "allocatable"):
        assert not any(k.startswith("kubernetes.io/") for k in status[key])
        assert status[key]["koordinator.sh/gpu-core"] == "100"


async def test_cpu_normalization_ratio_and_raw_allocatable_are_written_as_node_annotations(
    kube: FakeKube, store: Any, client: Any
) -> None:
    kube.create(a_node("cpu-1"))
    amplified = NodeAllocatableUpdated(
        name="cpu-1",
        allocatable={"cpu": "60", "kubernetes.io/batch-cpu": "20000"},
        cpu_normalization_ratio="1.20",
        amplification={"cpu": "1.50"},
        inputs={"allocatable": {"cpu": 40000, "memory": 64 * 2**30}},
    )
    await record(store, amplified)
    worker = NoticeWorker(store=store, client=client)
    await worker.step()
    node = kube.get("Node", "cpu-1")
    annotations = node["metadata"].get("annotations") or {}
    assert annotations["node.koordinator.sh/cpu-normalization-ratio"] == "1.20"
    assert annotations["node.koordinator.sh/raw-allocatable"] == '{"cpu":"40","memory":"64Gi"}'
    assert node["status"]["allocatable"]["kubernetes.io/batch-cpu"] == "20000"  # in the same patch
    assert node["status"]["allocatable"]["cpu"] == a_node("cpu-1")["status"]["allocatable"]["cpu"]
    (path, patch) = [(p, b) for p, b in kube.patches if "/nodes/" in p][-1]
    assert path == "/api/v1/nodes/cpu-1/status" and set(patch) == {"metadata", "status"}

    # Amplification turned off: the raw allocatable goes away, the ratio stays as recorded; others' stay.
    kube.update("Node", "cpu-1", lambda o: o["metadata"]["annotations"].update({"team": "a"}))
    await record(
        store,
        NodeAllocatableUpdated(
            name="cpu-1", allocatable={"kubernetes.io/batch-cpu": "20000"}, cpu_normalization_ratio="1.20"
        ),
        key="plain",
    )
    await worker.step()
    annotations = kube.get("Node", "cpu-1")["metadata"]["annotations"]
    assert "node.koordinator.sh/raw-allocatable" not in annotations
    assert annotations["node.koordinator.sh/cpu-normalization-ratio"] == "1.20"
    assert annotations["team"] == "a"
    (_, patch) = [(p, b) for p, b in kube.patches if "/nodes/" in p][-1]
    assert patch["metadata"] == {
        "annotations": {
            "node.koordinator.sh/raw-allocatable": None,  # removed; nothing else of others' is named
            "node.koordinator.sh/cpu-normalization-ratio": "1.20",
        }
    }


def _accepted(name: str, job: str = "") -> ReservationAccepted:
    return ReservationAccepted(
        reservation=ObjectRef(namespace="", name=name),
        uid=f"uid-{name}",
        manifest={},
        pod={},
        requests={"cpu": 1000},
        job=job,
    )


async def test_reservations_show_their_scheduling_as_events(kube: FakeKube, store: Any, client: Any) -> None:
    reservation = ObjectRef(namespace="", name="r1")
    await record(
        store,
        _accepted("r1"),
        ReservationUnschedulable(reservation=reservation, uid="uid-r1", message=UNSCHEDULABLE, codes=[]),
        ReservationPlaced(reservation=reservation, uid="uid-r1", node="n1", decision={}),
        ReservationRejected(
            reservation=ObjectRef(namespace="", name="bad"),
            uid="uid-bad",
            errors=[FieldIssue(path="spec.ttl", code="Invalid", message="must be a duration")],
            message="invalid",
        ),
        # A PodMigrationJob's own reservation is not a cluster object: nothing is written about it.
        _accepted("job-r", job="pmj-1"),
        ReservationUnschedulable(
            reservation=ObjectRef(namespace="", name="job-r"), uid="uid-job-r", message="0/1", codes=[]
        ),
    )
    await NoticeWorker(store=store, client=client).step()

    written = [
        (e["type"], e["reason"], e["action"], e["note"], e["metadata"]["namespace"])
        for e in events_of(kube, "r1")
    ]
    assert sorted(written) == [
        ("Normal", "Scheduled", "Binding", "Successfully assigned r1 to n1", "default"),
        ("Warning", "FailedScheduling", "Scheduling", UNSCHEDULABLE, "default"),
    ]
    assert events_of(kube, "r1")[0]["regarding"] == {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "name": "r1",
        "uid": "uid-r1",
    }
    (rejected,) = events_of(kube, "bad")
    assert (rejected["reason"], rejected["note"]) == ("Rejected", "spec.ttl: must be a duration")
    assert events_of(kube, "job-r") == []


def test_unhealthy_devices_count_for_nothing() -> None:
    device = a_gpu_device("n", gpus=3)
    device["spec"]["devices"][1]["health"] = False
    assert device_capacity(device)["koordinator.sh/gpu-core"] == "200"


async def test_aggregation_and_the_spam_filter() -> None:
    sent: list[tuple[str, str, dict[str, Any]]] = []
    now = [1000.0]

    async def send(method: str, path: str, body: dict[str, Any], content_type: str) -> Any:
        sent.append((method, path, body))
        return body

    recorder = EventRecorder(send=send, clock=lambda: now[0], wall=lambda: 1.7e9)
    pod = Regarding(api_version="v1", kind="Pod", namespace="ns", name="p", uid="u")

    def notice(note: str) -> Notice:
        return Notice(
            regarding=pod, type="Warning", reason="FailedScheduling", action="Scheduling", note=note
        )

    results = [
        await recorder.record(notice(f"0/{n} nodes are available."), at=1.7e9 + n) for n in range(1, 13)
    ]
    assert results == ["created"] * 12
    notes = [body["note"] for method, _, body in sent if method == "POST"]
    assert notes[:10] == [f"0/{n} nodes are available." for n in range(1, 11)]
    assert notes[10:] == [
        "(combined from similar events): 0/11 nodes are available.",
        "(combined from similar events): 0/12 nodes are available.",
    ]
    results = [await recorder.record(notice("same"), at=1.7e9) for _ in range(20)]
    assert results[:13] == ["created"] + ["series"] * 12  # 25 at once: 12 used above, 13 left
    assert results[13:] == ["dropped"] * 7
    now[0] += 5 * 60  # one more token every 5 minutes
    assert await recorder.record(notice("same"), at=1.7e9) == "series"
    assert await recorder.record(notice("same"), at=1.7e9) == "dropped"


async def test_event_notes_and_names_fit_the_api_servers_limits(kube: FakeKube, client: Any) -> None:
    """An Event's note is at most 1024 bytes (not characters) and its name a DNS subdomain of at most 253
    characters: the fake API server refuses more with 422, as the real one does. A long note in a multi-byte script,
    aggregated notes and a pod with the longest name there is are all written."""
    from allot_runtime.kube.client import call

    async def send(method: str, path: str, body: dict[str, Any], content_type: str) -> Any:
        return await call(client, method, path, body, content_type=content_type)

    recorder = EventRecorder(send=send, wall=lambda: 1.7e9)
    pod = Regarding(api_version="v1", kind="Pod", namespace="ns", name="p" * 253, uid="u")
    results = [
        await recorder.record(
            Notice(
                regarding=pod,
                type="Warning",
                reason="FailedScheduling",
                action="Scheduling",
                note=f"{n} " + "é" * 1000,
            ),
            at=1.7e9 + n,
        )
        for n in range(12)  # the last ones are aggregated: "(combined from similar events): …"
    ]
    assert results == ["created"] * 12
    events = [o for (plural, _, _), o in kube.objects.items() if plural == "events"]
    assert len(events) == 12
    for event in events:
        assert len(event["note"].encode()) <= 1024 and event["note"].endswith("...")
        assert len(event["metadata"]["name"]) <= 253 and event["regarding"]["name"] == "p" * 253
    assert sum(e["note"].startswith("(combined from similar events): ") for e in events) == 2


def _inventory(device: dict[str, Any]) -> Any:
    from allot_contracts.objects.inventory import parse_device_cr

    _, inventory, errors = parse_device_cr(device)
    assert inventory is not None and not errors
    return inventory


def _unschedulable() -> Any:
    from allot_contracts.decisions.placement import Decision

    return Decision(pod="default/p", outcome="Unschedulable", message=UNSCHEDULABLE)
