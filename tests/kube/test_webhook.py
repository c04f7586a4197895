"""The admission webhooks over real TLS on loopback: a CA and a server certificate made here (as the Helm chart's
self-signed CA would be), AdmissionReviews as the API server sends them, verified against the CA bundle."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from allot_testing.builders import a_pod, a_quota
from allot_testing.fake_kube import RESOURCES, FakeKube, FakeResource
from allot_testing.fake_kube_rules import json_patch
from allot_testing.tls import serving
from allot_webhook.server import Webhook, cluster_profiles, cluster_quotas

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs the openssl command to make a CA"
)


@pytest.fixture
async def endpoint(tmp_path: Path, unused_tcp_port: int) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    async for served in _serve(Webhook(), tmp_path, unused_tcp_port):
        yield served


@pytest.fixture
async def tree_endpoint(
    tmp_path: Path, unused_tcp_port: int, client: Any
) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    """The webhook listing the fake API server's ElasticQuotas, as ``allot webhook`` does in a cluster."""
    async for served in _serve(Webhook(quotas=cluster_quotas(client)), tmp_path, unused_tcp_port):
        yield served


async def _serve(webhook: Webhook, tmp_path: Path, port: int) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    async with serving(webhook, tmp_path, port) as served:
        yield served


def ours(name: str, scheduler: str = "allot-scheduler", **kwargs: Any) -> dict[str, Any]:
    pod = a_pod(name, **kwargs)
    pod["spec"]["schedulerName"] = scheduler
    return pod


def review(kind: tuple[str, str, str], obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    group, version, name = kind
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": group, "version": version, "kind": name},
            "resource": {"group": group, "version": version, "resource": name.lower() + "s"},
            "namespace": (obj.get("metadata") or {}).get("namespace", "default"),
            "operation": operation,
            "object": obj,
            "userInfo": {"username": "alice"},
        },
    }


async def post(endpoint: tuple[str, ssl.SSLContext], path: str, body: dict[str, Any]) -> dict[str, Any]:
    url, trust = endpoint
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}{path}", json=body, ssl=trust) as answer,
    ):
        assert answer.status == 200
        reply = await answer.json()
    assert reply["kind"] == "AdmissionReview"
    assert reply["response"]["uid"] == body["request"]["uid"]
    return dict(reply["response"])


POD = ("", "v1", "Pod")
QUOTA = ("scheduling.sigs.k8s.io", "v1alpha1", "ElasticQuota")


async def test_an_invalid_device_request_is_refused_with_its_field_path(endpoint: Any) -> None:
    pod = ours("bad", extra={"koordinator.sh/gpu-core": "50"})
    response = await post(endpoint, "/validate", review(POD, pod))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["message"].startswith("Pod bad is invalid: ")
    causes = response["status"]["details"]["causes"]
    assert causes and all(c["field"] and c["message"] for c in causes)
    assert any("gpu" in c["message"] or "gpu" in c["field"] for c in causes)


async def test_valid_objects_pass_and_other_schedulers_pods_are_not_judged(endpoint: Any) -> None:
    good = ours("ok", gpus=1)
    assert (await post(endpoint, "/validate", review(POD, good)))["allowed"] is True
    theirs = ours("theirs", "default-scheduler", extra={"koordinator.sh/gpu-core": "50"})
    assert (await post(endpoint, "/validate", review(POD, theirs)))["allowed"] is True
    assert (
        await post(endpoint, "/validate", review(QUOTA, a_quota("q", min={"cpu": "1"}, max={"cpu": "4"})))
    )["allowed"] is True


async def test_an_elastic_quota_with_min_above_max_is_refused(endpoint: Any) -> None:
    quota = a_quota("q", min={"cpu": "10"}, max={"cpu": "5"})
    response = await post(endpoint, "/validate", review(QUOTA, quota))
    assert response["allowed"] is False
    assert any("cpu" in c["message"] or "cpu" in c["field"] for c in response["status"]["details"]["causes"])
    deleting = await post(endpoint, "/validate", review(QUOTA, quota, operation="DELETE"))
    assert deleting["allowed"] is True


async def test_pods_are_routed_to_allot_unless_they_chose_a_scheduler(endpoint: Any) -> None:
    plain = a_pod("p")
    plain["spec"].pop("schedulerName", None)
    response = await post(endpoint, "/mutate", review(POD, plain))
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": "allot-scheduler"}]
    chosen = ours("v", "volcano")
    response = await post(endpoint, "/mutate", review(POD, chosen))
    assert "patch" not in response
    assert response["warnings"] == [
        "spec.schedulerName: kept 'volcano'; Allot schedules pods of 'allot-scheduler'"
    ]
    updated = await post(endpoint, "/mutate", review(POD, plain, operation="UPDATE"))
    assert updated == {"uid": updated["uid"], "allowed": True}


async def test_a_client_that_does_not_trust_the_ca_cannot_talk_to_it(endpoint: Any) -> None:
    url, _ = endpoint
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.post(f"{url}/validate", json={}, ssl=ssl.create_default_context())


TREE = "quota.scheduling.koordinator.sh/"


def member(name: str, parent: str = "", *, is_parent: bool = False, cpu_min: str = "1") -> dict[str, Any]:
    labels = {TREE + "is-parent": "true"} if is_parent else {}
    if parent:
        labels[TREE + "parent"] = parent
    return a_quota(name, min={"cpu": cpu_min}, max={"cpu": "20"}, labels=labels)


async def test_elastic_quota_trees_are_checked_against_the_clusters_quotas(
    tree_endpoint: Any, kube: FakeKube
) -> None:
    kube.create(member("team", is_parent=True, cpu_min="10"))
    kube.create(member("a", "team", cpu_min="6"))

    # The brothers' min would exceed their parent's: refused, as quota-manager would.
    response = await post(tree_endpoint, "/validate", review(QUOTA, member("b", "team", cpu_min="6")))
    assert response["allowed"] is False
    (cause,) = response["status"]["details"]["causes"]
    assert cause["field"] == "spec.min"
    assert "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: team" in cause["message"]
    fits = await post(tree_endpoint, "/validate", review(QUOTA, member("b", "team", cpu_min="4")))
    assert fits["allowed"] is True

    # A parent that does not exist, or is not a parent.
    orphan = await post(tree_endpoint, "/validate", review(QUOTA, member("o", "nope")))
    assert orphan["allowed"] is False
    assert "the parent quota nope does not exist" in orphan["status"]["message"]
    under_leaf = await post(tree_endpoint, "/validate", review(QUOTA, member("c", "a")))
    assert "IsParent is false" in under_leaf["status"]["message"]

    # Updating the parent: its min may not drop below its children's.
    shrunk = await post(
        tree_endpoint, "/validate", review(QUOTA, member("team", is_parent=True, cpu_min="5"), "UPDATE")
    )
    assert shrunk["allowed"] is False
    assert "all children's MinQuota > current MinQuota" in shrunk["status"]["message"]

    # Deleting a quota with children is refused; a leaf goes.
    parent_deleted = review(QUOTA, {}, "DELETE")
    parent_deleted["request"].update(object=None, oldObject=member("team", is_parent=True), name="team")
    refused = await post(tree_endpoint, "/validate", parent_deleted)
    assert refused["allowed"] is False
    assert "quota team has 1 child quotas" in refused["status"]["message"]
    leaf_deleted = review(QUOTA, {}, "DELETE")
    leaf_deleted["request"].update(object=None, oldObject=member("a", "team"), name="a")
    assert (await post(tree_endpoint, "/validate", leaf_deleted))["allowed"] is True


async def test_a_quota_list_that_fails_leaves_the_answer_to_the_failure_policy(
    tree_endpoint: Any, kube: FakeKube
) -> None:
    kube.fail("GET", "elasticquotas", status=503)
    url, trust = tree_endpoint
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/validate", json=review(QUOTA, member("x")), ssl=trust) as answer,
    ):
        assert answer.status == 500
        assert "could not check the ElasticQuota tree" in (await answer.json())["message"]
    # Pods never need the list.
    assert (await post(tree_endpoint, "/validate", review(POD, ours("ok"))))["allowed"] is True


def koord_pod(name: str, qos: str, priority_class: str, value: int, cpu: str = "1") -> dict[str, Any]:
    """A pod as the API server sends it to the webhook: ``spec.priority`` resolved from ``priorityClassName``."""
    pod = ours(name, cpu=cpu, labels={"koordinator.sh/qosClass": qos})
    pod["spec"].update(priorityClassName=priority_class, priority=value)
    return pod


@pytest.mark.parametrize(
    ("qos", "priority_class", "value", "reason"),
    [
        ("BE", "koord-prod", 9000, "koordinator.sh/qosClass=BE and priorityClass=koord-prod"),
        ("BE", "default-priority", 0, "koordinator.sh/qosClass=BE and priorityClass= cannot"),
        ("LSR", "koord-batch", 5000, "koordinator.sh/qosClass=LSR and priorityClass=koord-batch"),
        ("LSR", "koord-mid", 7000, "koordinator.sh/qosClass=LSR and priorityClass=koord-mid"),
    ],
)
async def test_a_forbidden_qos_and_priority_combination_is_refused_with_upstreams_reason(
    endpoint: Any, qos: str, priority_class: str, value: int, reason: str
) -> None:
    response = await post(endpoint, "/validate", review(POD, koord_pod("p", qos, priority_class, value)))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    (cause,) = response["status"]["details"]["causes"]
    assert cause["field"] == 'metadata.labels["koordinator.sh/qosClass"]'
    assert cause["message"].startswith(f"Forbidden: {reason}")
    assert "cannot be used in combination" in response["status"]["message"]


async def test_allowed_qos_and_priority_combinations_pass(endpoint: Any) -> None:
    for pod in (
        koord_pod("ls", "LS", "koord-batch", 5000),
        koord_pod("be", "BE", "koord-batch", 5000),
        koord_pod("lsr", "LSR", "koord-prod", 9000, cpu="2"),
        koord_pod("lse", "LSE", "koord-mid", 7000, cpu="2"),
    ):
        response = await post(endpoint, "/validate", review(POD, pod))
        assert response["allowed"] is True, response


def updated(old: dict[str, Any], **labels: str) -> dict[str, Any]:
    """The AdmissionReview of an update of ``old`` that sets ``labels``."""
    new = json.loads(json.dumps(old))
    new["metadata"]["labels"].update(labels)
    request = review(POD, new, "UPDATE")
    request["request"]["oldObject"] = old
    return request


async def test_an_update_may_not_change_the_qos_class_or_the_priority(endpoint: Any) -> None:
    old = koord_pod("p", "BE", "koord-batch", 5000)
    response = await post(endpoint, "/validate", updated(old, **{"koordinator.sh/qosClass": "LS"}))
    assert response["allowed"] is False
    (cause,) = response["status"]["details"]["causes"]
    assert cause["field"] == 'metadata.labels["koordinator.sh/qosClass"]'
    assert cause["message"].startswith('Invalid value: "LS": field is immutable')

    response = await post(endpoint, "/validate", updated(old, **{"koordinator.sh/priority": "1000"}))
    assert response["allowed"] is False
    assert response["status"]["details"]["causes"][0]["field"] == 'metadata.labels["koordinator.sh/priority"]'

    assert (await post(endpoint, "/validate", updated(old, team="etl")))["allowed"] is True


# -- ClusterColocationProfiles on /mutate ------------------------------------------------------------------------------
PROFILE_RESOURCES = (
    *RESOURCES,
    FakeResource(
        "config.koordinator.sh/v1alpha1", "ClusterColocationProfile", "clustercolocationprofiles", False
    ),
    FakeResource("v1", "Namespace", "namespaces", False),
    FakeResource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False),
)


@pytest.fixture
async def profiled(tmp_path: Path, unused_tcp_port: int) -> AsyncIterator[tuple[Any, FakeKube]]:
    """The webhook applying the fake API server's ClusterColocationProfiles, as ``allot webhook`` does in a cluster:
    (endpoint, the fake API server)."""
    from allot_runtime.kube import api_client

    async with FakeKube(PROFILE_RESOURCES) as kube:
        api = await api_client(kube.kubeconfig(tmp_path))
        try:
            async for served in _serve(Webhook(profiles=cluster_profiles(api)), tmp_path, unused_tcp_port):
                yield served, kube
        finally:
            await api.close()


def colocation_profile(name: str, **spec: Any) -> dict[str, Any]:
    """The user manual's profile (docs/user-manuals/colocation-profile.md), without its schedulerName."""
    return {
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
            "selector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
            "qosClass": "BE",
            "priorityClassName": "koord-batch",
            "koordinatorPriority": 1000,
            "labels": {"koordinator.sh/mutated": "true"},
            "annotations": {"koordinator.sh/intercepted": "true"},
            "patch": {"spec": {"terminationGracePeriodSeconds": 30}},
            **spec,
        },
    }


def manual_pod() -> dict[str, Any]:
    """The manual's test-pod, as the API server sends it to a mutating webhook (no namespace in the object)."""
    return {
        "metadata": {"name": "test-pod", "labels": {"koordinator.sh/enable-colocation": "true"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1.15.1",
                    "resources": {
                        "limits": {"cpu": "1", "memory": "3456Mi"},
                        "requests": {"cpu": "1", "memory": "3456Mi"},
                    },
                }
            ],
            "priority": 0,
        },
    }


def pod_review(pod: dict[str, Any], namespace: str = "spark") -> dict[str, Any]:
    body = review(POD, pod)
    body["request"]["namespace"] = namespace
    return body


async def test_the_mutating_webhook_applies_the_clusters_colocation_profiles(profiled: Any) -> None:
    endpoint, kube = profiled
    kube.create(
        {
            "kind": "Namespace",
            "metadata": {"name": "spark", "labels": {"koordinator.sh/enable-colocation": "true"}},
        }
    )
    kube.create({"kind": "Namespace", "metadata": {"name": "other"}})
    kube.create(
        {
            "kind": "PriorityClass",
            "metadata": {"name": "koord-batch"},
            "value": 5000,
            "preemptionPolicy": "PreemptLowerPriority",
        }
    )
    kube.create(colocation_profile("colocation-profile-example"))
    pod = manual_pod()
    response = await post(endpoint, "/mutate", pod_review(pod))
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    mutated = json_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert mutated["metadata"] == {
        "name": "test-pod",
        "labels": {
            "koordinator.sh/enable-colocation": "true",
            "koordinator.sh/mutated": "true",
            "koordinator.sh/qosClass": "BE",
            "koordinator.sh/priority": "1000",
        },
        "annotations": {"koordinator.sh/intercepted": "true"},
    }
    spec = mutated["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["terminationGracePeriodSeconds"]) == (
        "koord-batch",
        5000,
        30,
    )
    assert spec["schedulerName"] == "allot-scheduler"  # then routed to Allot
    assert spec["containers"][0]["resources"] == {
        "limits": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "3456Mi"},
        "requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "3456Mi"},
    }
    assert response["warnings"][0].startswith("ClusterColocationProfile colocation-profile-example set: ")
    # The validating webhook, called after it, sees a BE koord-batch pod on batch resources: allowed.
    validated = await post(
        endpoint,
        "/validate",
        pod_review({**mutated, "metadata": {**mutated["metadata"], "namespace": "spark"}}),
    )
    assert validated["allowed"] is True, validated

    # Another namespace: only routed.
    response = await post(endpoint, "/mutate", pod_review(manual_pod(), "other"))
    patch = json.loads(base64.b64decode(response["patch"]))
    assert patch == [{"op": "add", "path": "/spec/schedulerName", "value": "allot-scheduler"}]
    assert "warnings" not in response


async def test_a_profile_that_cannot_apply_refuses_the_pod_and_a_failed_list_is_the_webhooks_error(
    profiled: Any,
) -> None:
    endpoint, kube = profiled
    kube.create(
        {
            "kind": "Namespace",
            "metadata": {"name": "spark", "labels": {"koordinator.sh/enable-colocation": "true"}},
        }
    )
    kube.create(colocation_profile("needs-a-class", priorityClassName="koordinator-batch"))
    response = await post(endpoint, "/mutate", pod_review(manual_pod()))
    assert response["allowed"] is False
    (cause,) = response["status"]["details"]["causes"]
    assert cause["field"] == "spec.priorityClassName"
    assert cause["message"] == (
        "ClusterColocationProfile needs-a-class: no PriorityClass with name koordinator-batch was found"
    )
    kube.fail("GET", "clustercolocationprofiles", status=503)
    url, trust = endpoint
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/mutate", json=pod_review(manual_pod()), ssl=trust) as answer,
    ):
        assert answer.status == 500
        assert "could not list the ClusterColocationProfiles" in (await answer.json())["message"]


async def test_a_max_lowered_below_what_is_in_use_is_refused_with_upstreams_reason(
    tree_endpoint: Any, kube: FakeKube
) -> None:
    """``used`` as quota-manager published it (``status.used``, written by the binder) is what is in use: a strict
    key's max may not drop below it; other keys and a max above it pass."""
    strict = {TREE + "max-strict-check-resource-keys": '["cpu"]'}

    def quota(cpu_max: str, memory_max: str = "64Gi") -> dict[str, Any]:
        q = a_quota("q", min={"cpu": "1"}, max={"cpu": cpu_max, "memory": memory_max})
        q["metadata"].setdefault("annotations", {}).update(strict)
        return q

    kube.create({**quota("20"), "status": {"used": {"cpu": "8", "memory": "32Gi"}}})
    lowered = await post(tree_endpoint, "/validate", review(QUOTA, quota("4"), "UPDATE"))
    assert lowered["allowed"] is False
    (cause,) = lowered["status"]["details"]["causes"]
    assert cause["field"] == "spec.max[cpu]"
    assert "resourceKey cpu of quota q max 4 < used 8" in cause["message"]
    assert (await post(tree_endpoint, "/validate", review(QUOTA, quota("10"), "UPDATE")))["allowed"] is True
    # memory is not a strict key: its max may go below what is in use (quota-manager revokes the over-use)
    below = await post(tree_endpoint, "/validate", review(QUOTA, quota("10", "16Gi"), "UPDATE"))
    assert below["allowed"] is True
