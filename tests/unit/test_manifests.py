"""Admission of YAML documents: every problem is named with the document, the field path and the reason."""

from __future__ import annotations

import pytest

from allot_intake.documents import Document
from allot_intake.manifests import admit_all, to_input
from allot_testing.builders import a_node, a_pod


def problems(body: dict) -> list[str]:
    return list(admit_all([Document(source="f.yaml", index=0, body=body)]))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}},
            "kind: unsupported apiVersion/kind v1 Service",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {"containers": [{}]}},
            "metadata.name: is required",
        ),
        (
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
            "spec.containers: at least one",
        ),
        (a_pod("p", extra={"cpu": "lots"}), "spec.containers[0].resources.requests[cpu]"),
        (a_pod("p", extra={"nvidia.com/gpu": "-1"}), "must be greater than or equal to 0"),
        (a_pod("p", extra={"koordinator.sh/gpu-core": "101"}), "koordinator.sh/gpu-core"),
        (
            a_pod(
                "p",
                annotations={
                    "gang.scheduling.koordinator.sh/min-available": "two",
                    "gang.scheduling.koordinator.sh/name": "g",
                },
            ),
            'metadata.annotations["gang.scheduling.koordinator.sh/min-available"]',
        ),
        (
            a_pod("p", annotations={"scheduling.koordinator.sh/device-allocate-hint": "{not json"}),
            "scheduling.koordinator.sh/device-allocate-hint",
        ),
        (
            {**a_pod("p"), "metadata": {"name": "p", "labels": {"a": "x\x00y"}}},
            "metadata.labels.a: must not contain NUL",
        ),
        (a_node("n", cpu="-4"), "status.allocatable[cpu]"),
        (
            {"apiVersion": "allot.dev/v1", "kind": "Delete", "spec": {"kind": "Secret", "name": "x"}},
            "spec.kind: must be one of",
        ),
        ({"apiVersion": "allot.dev/v1", "kind": "AdvanceClock", "spec": {"seconds": -1}}, "spec.seconds"),
        (
            {
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                "kind": "ElasticQuota",
                "metadata": {"name": "q"},
                "spec": {"max": {"cpu": "1"}, "min": {"cpu": "2"}},
            },
            "spec.min[cpu]",
        ),
        (
            {
                "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "g"},
                "spec": {"minMember": -3},
            },
            "spec.minMember",
        ),
    ],
    ids=[
        "unknown-kind",
        "no-name",
        "no-containers",
        "bad-quantity",
        "negative",
        "gpu-core-alone",
        "gang-min-not-int",
        "hint-not-json",
        "nul-char",
        "node-negative-cpu",
        "delete-unknown-kind",
        "negative-clock",
        "quota-min-over-max",
        "podgroup-negative",
    ],
)
def test_invalid_documents_are_refused_with_the_field(body, expected):
    found = problems(body)
    assert found, "should have been refused"
    assert any(expected in line for line in found), found
    assert all(line.startswith("f.yaml document 1 (") for line in found)


def test_valid_documents_become_input_events():
    pod = to_input(Document(source="f", index=0, body=a_pod("p", namespace="ns")))
    ((stream, event),) = pod.events
    assert stream == "pod:ns/p" and event.__struct_config__.tag == "pod.submitted.v2"
    bound = a_pod("q")
    bound["spec"]["nodeName"] = "n1"
    ((_, observed),) = to_input(Document(source="f", index=1, body=bound)).events
    assert observed.__struct_config__.tag == "pod.observed.v2"
    clock = to_input(
        Document(
            source="f",
            index=2,
            body={"apiVersion": "allot.dev/v1", "kind": "AdvanceClock", "spec": {"seconds": 30}},
        )
    )
    assert clock.advance_seconds == 30 and not clock.events
    ignored = to_input(
        Document(
            source="f",
            index=3,
            body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
        )
    )
    assert ignored.ignored and ignored.events[0][1].__struct_config__.tag == "object.ignored.v1"


def _set(path: str, value):
    """A mutation that puts ``value`` at a dotted path (``[i]`` for list items) of a deep copy."""

    def mutate(body: dict) -> dict:
        import copy

        body = copy.deepcopy(body)
        *parents, last = path.replace("[", ".").replace("]", "").split(".")
        target = body
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
        return body

    return mutate


@pytest.mark.parametrize(
    ("base", "path", "value", "expected"),
    [
        ("pod", "metadata.labels", ["a"], "metadata.labels"),
        ("pod", "metadata.annotations", ["a"], "metadata.annotations"),
        ("pod", "spec", [], "spec: must be an object"),
        ("pod", "status", ["x"], "status: must be an object"),
        ("pod", "spec.containers", ["x"], "spec.containers[0]: must be a container object"),
        ("pod", "spec.containers[0].resources", "x", "spec.containers[0].resources: must be an object"),
        (
            "pod",
            "spec.containers[0].resources.requests",
            ["x"],
            "spec.containers[0].resources.requests: must be a",
        ),
        (
            "pod",
            "spec.containers[0].resources.limits",
            {"nvidia.com/gpu": "-1"},
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
        ),
        ("pod", "spec.initContainers", "x", "spec.initContainers: must be a list"),
        ("pod", "spec.overhead", ["x"], "spec.overhead: must be a mapping"),
        ("pod", "spec.affinity", "x", "spec.affinity: must be an object"),
        ("pod", "spec.nodeName", 5, "spec.nodeName: must be a string"),
        ("node", "metadata.labels", ["a"], "metadata.labels"),
        ("node", "metadata.annotations", ["a"], "metadata.annotations"),
        ("node", "spec.unschedulable", "yes", "spec.unschedulable: must be true or false"),
        ("device", "spec.devices[0].topology", "x", "spec.devices[0].topology: must be a mapping"),
        (
            "device",
            "spec.devices[0].topology.nodeID",
            "abc",
            "spec.devices[0].topology.nodeID: must be an integer",
        ),
        ("device", "spec.devices[0].vfGroups", "x", "spec.devices[0].vfGroups: must be a list"),
        ("device", "metadata.name", 5, "metadata.name: must be a string"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_malformed_shapes_are_refused_with_the_field_never_a_crash(base, path, value, expected):
    from allot_testing.builders import a_gpu_device

    bodies = {"pod": a_pod("p", gpus=1), "node": a_node("n1", gpus=2), "device": a_gpu_device("n1", gpus=2)}
    found = problems(_set(path, value)(bodies[base]))
    assert any(expected in line for line in found), found


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        # scheduler-plugins' own sample (manifests/capacityscheduling/elasticquota-example.yaml) is in its newer
        # group, which Koordinator does not watch
        (
            "scheduling.x-k8s.io/v1alpha1",
            "ElasticQuota",
            "apiVersion: unsupported apiVersion 'scheduling.x-k8s.io/v1alpha1' for ElasticQuota; accepted: "
            "scheduling.sigs.k8s.io/v1alpha1",
        ),
        ("apps/v1", "Pod", "apiVersion: unsupported apiVersion 'apps/v1' for Pod; accepted: v1"),
        (  # a workload kind, read by the door itself
            "extensions/v1beta1",
            "Deployment",
            "apiVersion: unsupported apiVersion 'extensions/v1beta1' for Deployment; accepted: apps/v1",
        ),
        (
            "batch/v1beta1",
            "Job",
            "apiVersion: unsupported apiVersion 'batch/v1beta1' for Job; accepted: batch/v1",
        ),
    ],
)
def test_a_known_kind_under_another_api_version_is_refused_naming_the_one_accepted(
    api_version: str, kind: str, expected: str
) -> None:
    body = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {},
    }
    [problem] = problems(body)
    assert problem.startswith(f"f.yaml document 1 ({kind} ") and problem.endswith(f"x): {expected}"), problem
