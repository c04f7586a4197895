"""Quantities no machine can have are refused with the field path and the maximum, at every door: ``allot apply``
(the Door), ``allot webhook`` (its verdict), kube-sync (its Door) and the node agent's reports (node-reporter reads a
NodeMetric with the same parser). The maxima are documented in docs/limits.md."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from allot_contracts.events import NodeMetricRejected, NodeMetricReported
from allot_contracts.issues import FieldIssue
from allot_contracts.quantity_limits import CPU_NODE_MAX_MILLI, NODE_MAX, maximum, range_issue
from allot_intake.documents import Document
from allot_intake.manifests import Door
from allot_kube_sync.sync import _document as kube_sync_document
from allot_webhook.server import verdict as webhook_verdict
from node_reporter.metrics.report import nodemetric_decision


def _apply(body: dict[str, Any]) -> list[FieldIssue]:
    return Door(quotas=set()).check(Document(source="f.yaml", index=0, body=body)).issues


def _webhook(body: dict[str, Any]) -> list[FieldIssue]:
    return webhook_verdict(body)[0]


def _kube_sync(body: dict[str, Any]) -> list[FieldIssue]:
    admitted = kube_sync_document(body).admitted
    assert admitted is not None
    return list(admitted.issues)


DOORS: dict[str, Callable[[dict[str, Any]], list[FieldIssue]]] = {
    "apply": _apply,
    "webhook": _webhook,
    "kube-sync": _kube_sync,
}


def nodemetric(cpu: object, memory: object = "1Gi") -> dict[str, Any]:
    return {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n1"},
        "status": {
            "updateTime": "2026-01-01T00:00:00Z",
            "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": memory}}},
        },
    }


def node(cpu: object, memory: object = "64Gi") -> dict[str, Any]:
    res = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {"capacity": dict(res), "allocatable": dict(res)},
    }


def pod(requests: dict[str, object], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": dict(labels or {})},
        "spec": {"containers": [{"name": "main", "resources": {"requests": dict(requests)}}]},
    }


def quota(cpu: object) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "default"},
        "spec": {"min": {"cpu": "1"}, "max": {"cpu": cpu}},
    }


NODEMETRIC_CPU = "status.nodeMetric.nodeUsage.resources[cpu]"

# (id, manifest, field path of the refusal, part of the reason)
REFUSED = [
    ("nodemetric cpu 1e30", nodemetric("1e30"), NODEMETRIC_CPU, "must be at most 1000000 cores"),
    ("nodemetric cpu just over", nodemetric("1000001"), NODEMETRIC_CPU, "must be at most 1000000 cores"),
    ("nodemetric cpu negative", nodemetric("-1"), NODEMETRIC_CPU, "must be greater than or equal to 0"),
    (
        "nodemetric memory 1Ei",
        nodemetric("1", "1Ei"),
        "status.nodeMetric.nodeUsage.resources[memory]",
        "must be at most 9007199254740992 (8Pi)",
    ),
    ("nodemetric cpu NaN", nodemetric("NaN"), NODEMETRIC_CPU, "not a valid quantity"),
    (
        "nodemetric cpu float inf",
        nodemetric(float("inf")),
        "status.nodeMetric.nodeUsage.resources.cpu",
        "must be a finite number",
    ),
    ("node capacity 2M cores", node("2000000"), "status.capacity[cpu]", "must be at most 1000000 cores"),
    ("node memory 9Pi", node("64", "9Pi"), "status.capacity[memory]", "must be at most 9007199254740992"),
    (
        "pod requests 2M cores",
        pod({"cpu": "2000000"}),
        "spec.containers[0].resources.requests[cpu]",
        "must be at most 1000000 cores",
    ),
    (
        "pod requests batch-cpu beyond a node",
        pod(
            {"kubernetes.io/batch-cpu": "1e12"},
            {"koordinator.sh/qosClass": "BE", "koordinator.sh/priority-class": "koord-batch"},
        ),
        "spec.containers[0].resources.requests[kubernetes.io/batch-cpu]",
        "counted in millicores",
    ),
    ("quota max beyond int64", quota("1e30"), "spec.max[cpu]", "must be at most 9223372036854775807"),
    ("quota max negative", quota("-2"), "spec.max", "q quota.Spec.Max's value < 0, in dimensions :[cpu]"),
]

ACCEPTED = [
    ("nodemetric cpu at the maximum", nodemetric("1000000")),
    ("nodemetric memory at the maximum", nodemetric("1", "8Pi")),
    ("node capacity of a large machine", node("1920", "48Ti")),
    ("pod requests 1M cores", pod({"cpu": "1000000"})),
    ("quota max of a large cluster", quota("10000000")),
]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(
    ("body", "path", "reason"), [c[1:] for c in REFUSED], ids=[str(c[0]) for c in REFUSED]
)
def test_a_value_no_machine_can_have_is_refused_at_every_door_with_its_path(
    door: str, body: dict[str, Any], path: str, reason: str
) -> None:
    issues = DOORS[door](copy.deepcopy(body))
    assert [i for i in issues if i.path == path and reason in i.message], issues


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("body", [c[1] for c in ACCEPTED], ids=[str(c[0]) for c in ACCEPTED])
def test_values_up_to_the_maximum_are_accepted(door: str, body: dict[str, Any]) -> None:
    assert DOORS[door](copy.deepcopy(body)) == []


def test_the_node_agent_report_of_an_impossible_usage_is_rejected_not_acted_on() -> None:
    """node-reporter reads what kube-sync or the node agent recorded: the same parser, the same refusal."""
    event = nodemetric_decision("n1", nodemetric("1e30"), at=0)
    assert isinstance(event, NodeMetricRejected)
    assert [e.path for e in event.errors] == [NODEMETRIC_CPU]
    assert isinstance(nodemetric_decision("n1", nodemetric("12"), at=0), NodeMetricReported)


def test_the_maxima_by_kind_and_scale() -> None:
    assert maximum("cpu") == maximum("kubernetes.io/mid-cpu") == CPU_NODE_MAX_MILLI == 10**9
    assert maximum("memory") == maximum("nvidia.com/gpu") == NODE_MAX == 2**53
    assert maximum("cpu", "cluster") == 2**63 - 1
    assert range_issue("cpu", CPU_NODE_MAX_MILLI, "p", "1000000") is None
    issue = range_issue("cpu", CPU_NODE_MAX_MILLI + 1, "p", "1000000001m")
    assert issue is not None and issue.path == "p" and issue.code == "InvalidQuantity"


@pytest.mark.parametrize("door", DOORS)
def test_batch_resources_without_qos_be_are_refused_with_upstreams_reason_and_mid_resources_are_not(
    door: str,
) -> None:
    """Koordinator's pod webhook (validateRequiredQoSClass) requires QoS BE for batch-cpu/batch-memory only; it has
    no rule for mid-cpu/mid-memory, which koord-mid pods of any QoS class use."""
    batch = pod({"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"})
    issues = DOORS[door](batch)
    assert [i.path for i in issues] == ['metadata.labels["koordinator.sh/qosClass"]']
    assert "must specify koordinator QoS BE with koordinator colocation resources" in issues[0].message
    mid = pod(
        {"kubernetes.io/mid-cpu": "1000", "kubernetes.io/mid-memory": "1Gi"},
        {"koordinator.sh/qosClass": "LS", "koordinator.sh/priority-class": "koord-mid"},
    )
    assert DOORS[door](mid) == []


def test_a_reservation_template_asking_for_more_than_any_node_has_is_refused() -> None:
    reservation = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1e30"}}}]}},
            "owners": [{"object": {"name": "p", "namespace": "default"}}],
        },
    }
    for door in DOORS.values():
        issues = door(copy.deepcopy(reservation))
        assert [i.path for i in issues] == ["spec.template.spec.containers[0].resources.requests[cpu]"], (
            issues
        )
        assert "must be at most 1000000 cores" in issues[0].message
