"""Every kind's metadata is checked as the API server checks any object's: label keys and values, annotation keys.
A Node labelled `zone: "eu west"` is refused at the door, as `kubectl apply` refuses it, instead of being recorded
with a label no selector can match."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from allot_contracts.objects.admission import KINDS, admit

SPECS: dict[str, dict[str, Any]] = {
    "Pod": {"spec": {"containers": [{"name": "c"}]}},
    "Node": {"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}},
    "Device": {"spec": {"devices": []}},
    "NodeResourceTopology": {"topologyPolicies": ["None"], "zones": []},
    "ElasticQuota": {"spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}}},
    "ElasticQuotaProfile": {"spec": {"quotaName": "x", "nodeSelector": {"matchLabels": {"a": "b"}}}},
    "PodGroup": {"spec": {"minMember": 1}},
    "Reservation": {
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}, "owners": [{"object": {"name": "p"}}]}
    },
    "PodMigrationJob": {"spec": {"podRef": {"name": "p", "namespace": "d"}}},
    "NodeMetric": {"status": {}},
    "ClusterColocationProfile": {"spec": {"selector": {}}},
    "ConfigMap": {"data": {}},
    "PriorityClass": {"value": 5},
    "Namespace": {},
}
BAD = [
    ("labels", {"bad key!": "v"}, 'metadata.labels["bad key!"]'),
    ("labels", {"zone": "eu west"}, 'metadata.labels["zone"]'),
    ("annotations", {"bad key!": "v"}, 'metadata.annotations["bad key!"]'),
    ("labels", "zone=eu", "metadata.labels"),
]


def manifest(kind: str) -> dict[str, Any]:
    spec = next(k for k in KINDS if k.kind == kind)
    metadata = {"name": "n1", **({"namespace": "d"} if spec.namespaced else {})}
    return {"apiVersion": spec.api_version, "kind": kind, "metadata": metadata, **copy.deepcopy(SPECS[kind])}


def test_every_kind_is_covered() -> None:
    assert {k.kind for k in KINDS} == set(SPECS)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_bad_labels_and_annotation_keys_are_refused_once_with_their_path_in_every_kind(kind: str) -> None:
    good = admit(manifest(kind))
    assert good.ok, good.issues
    for field, value, path in BAD:
        body = manifest(kind)
        body["metadata"][field] = value
        refused = admit(body)
        assert [issue.path for issue in refused.issues] == [path], (field, value)


@pytest.mark.parametrize(
    ("value", "reason"),
    [(8, "must be a string; quote it"), (True, "must be a string; quote it"), ([], "must be a string")],
)
@pytest.mark.parametrize("kind", ["PodGroup", "Reservation", "ElasticQuotaProfile"])
def test_a_label_value_yaml_reads_as_a_number_or_boolean_is_refused(
    kind: str, value: object, reason: str
) -> None:
    """``tier: 010`` is the number 8 to YAML 1.1: recorded as the label "8" it would match no selector the user
    wrote. ``kubectl apply`` refuses a label that is not a string."""
    body = manifest(kind)
    body["metadata"]["labels"] = {"tier": value}
    [issue] = admit(body).issues
    assert (issue.path, issue.message) == ('metadata.labels["tier"]', reason)


def test_a_nodes_label_of_the_wrong_type_is_refused_once() -> None:
    body = manifest("Node")
    body["metadata"]["labels"] = {"tier": 8}
    assert [(i.path, i.message) for i in admit(body).issues] == [
        ('metadata.labels["tier"]', "must be a string (got int)")
    ]


@pytest.mark.parametrize(
    ("name", "value", "default", "reason"),
    [
        ("system-mine", 2_000_000_000, False, "system-mine is not a known system priority class"),
        ("system-node-critical", 5, False, "value of system-node-critical PriorityClass must be 2000001000"),
        (
            "system-cluster-critical",
            2_000_000_000,
            True,
            "globalDefault of system-cluster-critical PriorityClass must",
        ),
        ("system-cluster-critical", 2_000_000_000, False, ""),
    ],
)
def test_a_system_priority_class_name_is_reserved_for_the_api_servers_own(
    name: str, value: int, default: bool, reason: str
) -> None:
    """Kubernetes' PriorityClass validation: a ``system-`` name must be one of its own classes, as it defines it (a
    user's ``system-mine`` at two billion would outrank every workload and escape the one-billion cap)."""
    body = {**manifest("PriorityClass"), "value": value, "globalDefault": default}
    body["metadata"]["name"] = name
    issues = admit(body).issues
    if not reason:
        assert issues == []
        return
    [issue] = issues
    assert (issue.path, issue.code) == ("metadata.name", "Forbidden")
    assert issue.message.startswith(
        "priority class names with 'system-' prefix are reserved for system use only: "
    )
    assert reason in issue.message


def _slo_config() -> dict[str, Any]:
    from allot_contracts.objects.colocation import CONFIGMAP_NAME, CONFIGMAP_NAMESPACE

    body = manifest("ConfigMap")
    body["metadata"] = {"name": CONFIGMAP_NAME, "namespace": CONFIGMAP_NAMESPACE}
    return body


@pytest.mark.parametrize("kind", [*sorted(SPECS), "slo-controller-config"])
def test_every_kind_reads_its_metadata_once(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The metadata is read whole once per admission, by the kind's parser or after it (never by both), and its
    problems are still reported once (the co-location ConfigMap's too)."""
    import sys

    from allot_contracts.objects import meta

    original = meta.read_meta
    calls: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kind)
        return original(*args, **kwargs)

    for name, module in list(sys.modules.items()):
        if name.startswith("allot_") and getattr(module, "read_meta", None) is original:
            monkeypatch.setattr(module, "read_meta", counted)
    body = _slo_config() if kind == "slo-controller-config" else manifest(kind)
    assert admit(body).ok
    assert len(calls) == 1
    body["metadata"]["labels"] = {"zone": "eu west"}
    assert [issue.path for issue in admit(body).issues] == ['metadata.labels["zone"]']
