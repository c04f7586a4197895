"""A field Kubernetes does not know, in any object read from a file, is refused with its path and the nearest known
name (``kubectl apply``'s strict field validation); an object read from an API server is taken as it is."""

from __future__ import annotations

from typing import Any

import pytest

from allot_intake.documents import Document
from allot_intake.manifests import Door
from allot_testing.builders import a_pod


def test_a_field_kubernetes_does_not_know_is_refused_from_a_file_and_taken_from_an_api_server() -> None:
    """``kubectl apply`` refuses ``resouces:`` (strict field validation); read as absent, the pod asked for
    nothing and was placed so. An API server has decoded what it hands over: a newer server's field is taken."""
    pod = a_pod("p")
    pod["spec"]["containers"][0]["resouces"] = pod["spec"]["containers"][0].pop("resources")
    pod["spec"]["nodeSelecter"] = {"a": "b"}
    group = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"minMember": 2, "minMembers": 3},
    }
    for body, expected in (
        (
            pod,
            [
                "spec.nodeSelecter: unknown field; did you mean 'nodeSelector'?",
                "spec.containers[0].resouces: unknown field; did you mean 'resources'?",
            ],
        ),
        (group, ["spec.minMembers: unknown field; did you mean 'minMember'?"]),
    ):
        verdict = Door().check(Document(source="f.yaml", index=0, body=body))
        assert [str(issue) for issue in verdict.issues] == expected
        assert not Door(strict=False).check(Document(source="api", index=0, body=body)).issues


MISSPELT: list[tuple[dict[str, Any], str]] = [
    (
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {
                "template": {"spec": {"containers": [{"name": "c", "resouces": {}}]}},
                "owners": [{"object": {"name": "p"}}],
            },
        },
        "spec.template.spec.containers[0].resouces: unknown field; did you mean 'resources'?",
    ),
    (
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "q", "namespace": "default"},
            "spec": {"min": {"cpu": "4"}, "maxx": {"cpu": "8"}},
        },
        "spec.maxx: unknown field; did you mean 'max'?",
    ),
    (
        {
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": "c"},
            "spec": {"selector": {}, "qosClass": "BE", "prioritClassName": "koord-batch"},
        },
        "spec.prioritClassName: unknown field; did you mean 'priorityClassName'?",
    ),
    (
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": "n"},
            "status": {"updateTim": "2024-01-01T00:00:00Z"},
        },
        "status.updateTim: unknown field; did you mean 'updateTime'?",
    ),
    (
        {
            "apiVersion": "topology.node.k8s.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n"},
            "zone": [],
        },
        "zone: unknown field; did you mean 'zones'?",
    ),
    (
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "4"}, "capacty": {"cpu": "4"}},
        },
        "status.capacty: unknown field; did you mean 'capacity'?",
    ),
    (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "label": {"a": "b"}}},
        "metadata.label: unknown field; did you mean 'labels'?",
    ),
    (
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dta": {"k": "v"}},
        "dta: unknown field; did you mean 'data'?",
    ),
    (
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "p"},
            "valeu": 9,
        },
        "valeu: unknown field; did you mean 'value'?",
    ),
    (
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"replica": 2, "template": {"spec": {"containers": []}}},
        },
        "spec.replica: unknown field; did you mean 'replicas'?",
    ),
    (
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "c", "resouces": {"limits": {"nvidia.com/gpu": 1}}}]}
                }
            },
        },
        "spec.template.spec.containers[0].resouces: unknown field; did you mean 'resources'?",
    ),
    (
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "s"},
            "spec": {"template": {"metadata": {"annotation": {}}, "spec": {"containers": []}}},
        },
        "spec.template.metadata.annotation: unknown field; did you mean 'annotations'?",
    ),
]
MISSPELT_IDS = [
    "reservation-template",
    "elastic-quota",
    "colocation-profile",
    "node-metric-status",
    "topology",
    "node-status",
    "metadata",
    "configmap",
    "priority-class",
    "deployment-spec",
    "job-template-container",
    "statefulset-template-metadata",
]


@pytest.mark.parametrize(("body", "expected"), MISSPELT, ids=MISSPELT_IDS)
def test_a_misspelt_field_of_any_object_read_from_a_file_is_refused_with_the_nearest_name(
    body: dict[str, Any], expected: str
) -> None:
    verdict = Door().check(Document(source="f.yaml", index=0, body=body))
    assert [str(issue) for issue in verdict.issues] == [expected]


def test_a_reservation_template_field_upstream_ignores_is_a_warning_and_a_misspelling_still_refused() -> None:
    """The Reservation CRD keeps its template as written and Koordinator decodes it as a PodTemplateSpec, skipping
    what it does not know: upstream's own sample writes ``spec.template.namespace``, and ``kubectl apply`` takes it.
    Such a field is ignored with a warning; one that is likely a misspelling is still refused."""

    def reservation(template: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r"},
            "spec": {"template": template, "owners": [{"object": {"name": "p", "namespace": "default"}}]},
        }

    containers = [{"name": "c", "resources": {"requests": {"cpu": "1"}}, "stdinOnce": True, "gpuCount": 1}]
    sample = reservation({"namespace": "default", "spec": {"containers": containers}})
    verdict = Door().check(Document(source="f.yaml", index=0, body=sample))
    assert verdict.issues == []
    assert [(str(w), w.code) for w in verdict.warnings] == [
        (
            "spec.template.namespace: unknown field, ignored: Koordinator reads the template as a pod template, "
            "which has no such field (a pod template's namespace is spec.template.metadata.namespace)",
            "Ignored",
        ),
        (
            "spec.template.spec.containers[0].gpuCount: unknown field, ignored: Koordinator reads the template as a "
            "pod template, which has no such field",
            "Ignored",
        ),
    ]
    assert verdict.document.admitted is not None and verdict.document.admitted.ok

    misspelt = reservation({"namespace": "default", "sepc": {"containers": containers}})
    refused = Door().check(Document(source="f.yaml", index=0, body=misspelt))
    assert [str(issue) for issue in refused.issues] == [
        "spec.template.sepc: unknown field; did you mean 'spec'?"
    ]
    assert refused.warnings == []
