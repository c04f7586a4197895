"""ClusterColocationProfiles at the doors: ``allot sim run`` and ``allot apply`` mutate a new pod with the profiles
and Namespaces known before it (earlier in the input, or recorded earlier in the log), before admission, as
Koordinator's mutating webhook runs before its validating one; kube-sync records pods as the API server holds them
(its webhook applied the profiles). The webhook door is tested in tests/kube/test_webhook.py."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_contracts.envelope import NewEvent
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_kube_sync import sync
from allot_sim.scenario import run
from allot_stack.apply import door_for
from allot_stack.explain import explain, history

PROFILE: dict[str, Any] = {
    "apiVersion": "config.koordinator.sh/v1alpha1",
    "kind": "ClusterColocationProfile",
    "metadata": {"name": "colocation-profile-example"},
    "spec": {
        "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
        "selector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
        "qosClass": "BE",
        "priorityClassName": "koord-batch",
        "koordinatorPriority": 1000,
        "schedulerName": "koord-scheduler",
        "labels": {"koordinator.sh/mutated": "true"},
        "annotations": {"koordinator.sh/intercepted": "true"},
        "patch": {"spec": {"terminationGracePeriodSeconds": 30}},
    },
}
NAMESPACE = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "spark", "labels": {"koordinator.sh/enable-colocation": "true"}},
}
# Room for batch pods only: 1 CPU of its own, 8 cores of batch-cpu.
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "node-1"},
    "status": {
        "allocatable": {
            "cpu": "1",
            "memory": "4Gi",
            "pods": "110",
            "kubernetes.io/batch-cpu": "8000",
            "kubernetes.io/batch-memory": "16Gi",
        }
    },
}


def a_pod(name: str, *, namespace: str = "spark", resources: dict[str, Any] | None = None) -> dict[str, Any]:
    """The manual's test-pod (cpu 1, memory 3456Mi), labelled for the profile."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"koordinator.sh/enable-colocation": "true"},
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.15.1",
                    "resources": resources
                    or {
                        "limits": {"cpu": "2", "memory": "3456Mi"},
                        "requests": {"cpu": "2", "memory": "3456Mi"},
                    },
                }
            ]
        },
    }


def simulate(
    tmp_path: Path, *bodies: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], int]:
    """(the recorded pod.submitted payloads by pod, the last decision type by pod, documents refused)."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all(bodies))
    sim, _, refused = run(str(path), config={})
    submitted = {
        r.stream_id.removeprefix("pod:"): r.payload_dict()
        for r in sim.store.events
        if r.type == "pod.submitted"
    }
    decided = {
        r.stream_id.removeprefix("pod:"): r.type
        for r in sim.store.events
        if r.type in ("pod.placed", "pod.unschedulable", "pod.rejected")
    }
    return submitted, decided, refused


def test_the_simulator_applies_a_profile_before_admission_and_records_the_mutated_pod(tmp_path: Path) -> None:
    submitted, decided, refused = simulate(tmp_path, NAMESPACE, PROFILE, NODE, a_pod("test-pod"))
    assert refused == 0
    pod = submitted["spark/test-pod"]
    manifest = pod["manifest"]
    assert manifest["metadata"]["labels"] == {
        "koordinator.sh/enable-colocation": "true",
        "koordinator.sh/mutated": "true",
        "koordinator.sh/qosClass": "BE",
        "koordinator.sh/priority": "1000",
    }
    assert manifest["metadata"]["annotations"] == {"koordinator.sh/intercepted": "true"}
    assert manifest["spec"]["priorityClassName"] == "koord-batch"
    assert manifest["spec"]["priority"] == 5000
    assert manifest["spec"]["schedulerName"] == "koord-scheduler"
    assert manifest["spec"]["terminationGracePeriodSeconds"] == 30
    assert manifest["spec"]["containers"][0]["resources"] == {
        "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "3456Mi"},
        "requests": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "3456Mi"},
    }
    assert pod["spec"]["koord_qos"] == "BE" and pod["spec"]["koord_priority"] == "koord-batch"
    notices = [w["message"] for w in pod["warnings"] if w["code"] == "Mutated"]
    assert notices[0].startswith("ClusterColocationProfile colocation-profile-example set: ")
    assert "a koord-batch pod: cpu to kubernetes.io/batch-cpu" in notices[1]
    assert decided["spark/test-pod"] == "pod.placed"  # on the node's batch resources


def test_explain_shows_what_the_profile_did(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump_all([NAMESPACE, PROFILE, NODE, a_pod("test-pod")]))
    sim, _, _ = run(str(path), config={})
    lines = explain("spark/test-pod", *asyncio.run(history(sim.store, "spark/test-pod")))
    profile = [line for line in lines if line.startswith("profile:")]
    assert profile[0].startswith("profile:   ClusterColocationProfile colocation-profile-example set: ")
    assert "a koord-batch pod: cpu to kubernetes.io/batch-cpu" in profile[1]
    assert not [
        line for line in lines if line.startswith("not acted on:") and "ClusterColocationProfile" in line
    ]


def test_a_pod_that_relies_on_a_profile_for_its_qos_class_is_admitted(tmp_path: Path) -> None:
    """Batch resources without a QoS label: refused alone ("must specify koordinator QoS BE"), admitted when a profile
    makes it BE, as upstream's validating webhook sees the pod after the mutating one."""
    batch = {"requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}}
    profile = {**PROFILE, "spec": {**PROFILE["spec"], "patch": None, "schedulerName": None}}
    submitted, decided, refused = simulate(
        tmp_path, NAMESPACE, profile, NODE, a_pod("relies", resources=batch)
    )
    assert refused == 0 and decided["spark/relies"] == "pod.placed"
    alone, _, refused = simulate(tmp_path, NODE, a_pod("relies", resources=batch))
    assert refused == 1 and alone == {}


def test_only_what_came_before_the_pod_applies(tmp_path: Path) -> None:
    """A profile after the pod, a pod in a namespace without the label, a deleted profile: not mutated (the pod then
    asks for cpu the node does not have)."""
    delete = {
        "apiVersion": "allot.dev/v1",
        "kind": "Delete",
        "spec": {"kind": "ClusterColocationProfile", "name": "colocation-profile-example"},
    }
    submitted, decided, refused = simulate(
        tmp_path,
        NAMESPACE,
        NODE,
        a_pod("before"),
        PROFILE,
        a_pod("elsewhere", namespace="default"),
        a_pod("during"),
        delete,
        a_pod("after"),
    )
    assert refused == 0
    mutated = {
        k for k, p in submitted.items() if "koordinator.sh/qosClass" in p["manifest"]["metadata"]["labels"]
    }
    assert mutated == {"spark/during"}
    assert decided == {
        "spark/before": "pod.unschedulable",
        "default/elsewhere": "pod.unschedulable",
        "spark/during": "pod.placed",
        "spark/after": "pod.unschedulable",
    }


def test_the_pods_of_a_workload_are_mutated_too(tmp_path: Path) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "spark"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "koordinator.sh/enable-colocation": "true"}},
                "spec": a_pod("template")["spec"],
            },
        },
    }
    submitted, decided, refused = simulate(tmp_path, NAMESPACE, PROFILE, NODE, deployment)
    assert refused == 0 and len(submitted) == 2
    for pod in submitted.values():
        assert pod["manifest"]["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
        assert any("colocation-profile-example" in w["message"] for w in pod["warnings"])
    assert set(decided.values()) == {"pod.placed"}


def test_a_profile_naming_a_missing_priority_class_refuses_the_pod(tmp_path: Path) -> None:
    profile = {**PROFILE, "spec": {**PROFILE["spec"], "priorityClassName": "koordinator-batch"}}
    submitted, _, refused = simulate(tmp_path, NAMESPACE, profile, NODE, a_pod("p"))
    assert refused == 1 and submitted == {}


def test_kube_sync_records_the_pod_as_the_api_server_holds_it() -> None:
    """kube-sync's door never applies profiles: the pod it lists went through the API server's mutating webhook."""
    sync._document(PROFILE)
    sync._document(NAMESPACE)
    pod = a_pod("test-pod")
    ((stream, event),) = to_input(sync._document(pod)).events
    assert event.manifest["metadata"]["labels"] == pod["metadata"]["labels"]  # type: ignore[attr-defined]
    assert event.manifest["spec"] == pod["spec"]  # type: ignore[attr-defined]
    assert sync._DOOR.profiles is None


@pytest.mark.integration
def test_allot_apply_applies_the_profiles_and_namespaces_recorded_before(database_url: str) -> None:
    async def record(*bodies: dict[str, Any]) -> None:
        store = PostgresEventStore.connect(database_url)
        try:
            news = [
                NewEvent(stream_id=stream, event=event, event_id=str(uuid.uuid4()))
                for i, body in enumerate(bodies)
                for stream, event in to_input(Document(source="earlier.yaml", index=i, body=body)).events
            ]
            await store.append(news, producer="api")
        finally:
            await store.close()

    def door_verdict(name: str) -> dict[str, Any]:
        door = asyncio.run(door_for(database_url))
        doc = Document(source="pods.yaml", index=0, body=a_pod(name))
        verdict = door.check(doc)
        assert verdict.issues == []
        return doc.body

    assert "koordinator.sh/qosClass" not in door_verdict("first")["metadata"]["labels"]
    asyncio.run(record(NAMESPACE, PROFILE))
    body = door_verdict("second")
    assert body["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert body["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"] == "2k"
    asyncio.run(
        record(
            {
                "apiVersion": "allot.dev/v1",
                "kind": "Delete",
                "spec": {"kind": "ClusterColocationProfile", "name": "colocation-profile-example"},
            }
        )
    )
    assert "koordinator.sh/qosClass" not in door_verdict("third")["metadata"]["labels"]
