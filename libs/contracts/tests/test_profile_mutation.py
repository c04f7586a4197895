"""ClusterColocationProfiles applied to a new pod as Koordinator's mutating webhook applies them: the cases of
upstream's TestClusterColocationProfileMutatingPod (pkg/webhook/pod/mutating/cluster_colocation_profile_test.go),
each with the pod upstream expects, field for field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.jsonpatch import diff, field_path
from allot_contracts.objects.colocation_profile import (
    ColocationProfile,
    draw,
    parse_colocation_profile,
)
from allot_contracts.objects.pod_patch import PatchError, merge_pod_patch
from allot_contracts.objects.pod_priority import BUILTIN_PRIORITY_CLASSES, PriorityClassInfo
from allot_contracts.objects.profile_mutation import ProfileMutation, apply_profiles, namespace_labels

QOS, PRIORITY = "koordinator.sh/qosClass", "koordinator.sh/priority"
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
# The test's PriorityClass: value PriorityBatchValueMax, a preemption policy of its own.
PRIORITY_CLASSES = {
    **BUILTIN_PRIORITY_CLASSES,
    "koordinator-batch": PriorityClassInfo(name="koordinator-batch", value=5999, preemption_policy="Never"),
}
NAMESPACE = namespace_labels("default", {"enable-koordinator-colocation": "true"})


def resources(cpu: str, memory: str, *, requests: bool = True, limits: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = {"cpu": cpu, "memory": memory}
    if requests:
        out["requests"] = {"cpu": cpu, "memory": memory}
    return out


def upstream_pod(**labels: str) -> dict[str, Any]:
    """The test's pod: an init container, a container, an overhead, priority 5999, another scheduler."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "default",
            "name": "test-pod-1",
            "labels": {"koordinator-colocation-pod": "true", **labels},
        },
        "spec": {
            "initContainers": [{"name": "test-init-container-a", "resources": resources("500m", "1Gi")}],
            "containers": [{"name": "test-container-a", "resources": resources("1", "4Gi")}],
            "overhead": {"cpu": "1", "memory": "2Gi"},
            "schedulerName": "nonExistSchedulerName",
            "priority": 5999,
        },
    }


def upstream_profile(metadata: dict[str, Any] | None = None, **spec: Any) -> ColocationProfile:
    body = {
        "namespaceSelector": {"matchLabels": {"enable-koordinator-colocation": "true"}},
        "selector": {"matchLabels": {"koordinator-colocation-pod": "true"}},
        "labels": {"testLabelA": "valueA"},
        "annotations": {"testAnnotationA": "valueA"},
        "schedulerName": "koordinator-scheduler",
        "qosClass": "BE",
        "priorityClassName": "koordinator-batch",
        "koordinatorPriority": 1111,
        "patch": {
            "metadata": {
                "labels": {"test-patch-label": "patch-a"},
                "annotations": {"test-patch-annotation": "patch-b"},
            }
        },
        **spec,
    }
    issues: list[FieldIssue] = []
    profile = parse_colocation_profile(
        {
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": "test-profile", **(metadata or {})},
            "spec": body,
        },
        issues,
        [],
    )
    assert issues == [] and profile is not None
    return profile


def mutated(pod: dict[str, Any], *profiles: ColocationProfile) -> ProfileMutation:
    result = apply_profiles(pod, profiles, namespace=NAMESPACE, priority_classes=PRIORITY_CLASSES)
    assert result.issues == []
    return result


def batch(cpu: str, memory: str, *, requests: bool = True, limits: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = {BATCH_CPU: cpu, BATCH_MEMORY: memory}
    if requests:
        out["requests"] = {BATCH_CPU: cpu, BATCH_MEMORY: memory}
    return out


def expected_pod(*, profile_applied: bool = True, moved: bool = True, **labels: str) -> dict[str, Any]:
    pod = upstream_pod(**labels)
    if profile_applied:
        pod["metadata"]["labels"].update(
            {"testLabelA": "valueA", "test-patch-label": "patch-a", QOS: "BE", PRIORITY: "1111"}
        )
        pod["metadata"]["annotations"] = {"testAnnotationA": "valueA", "test-patch-annotation": "patch-b"}
        pod["spec"].update(
            schedulerName="koordinator-scheduler",
            priority=5999,
            priorityClassName="koordinator-batch",
            preemptionPolicy="Never",
        )
    if moved:
        pod["spec"]["initContainers"][0]["resources"] = batch("500", "1Gi")
        pod["spec"]["containers"][0]["resources"] = batch("1k", "4Gi")
        pod["spec"]["overhead"] = {BATCH_CPU: "1k", BATCH_MEMORY: "2Gi"}
    return pod


def test_mutating_pod() -> None:
    result = mutated(upstream_pod(), upstream_profile())
    assert result.manifest == expected_pod()
    assert result.applied == ["test-profile"]
    notices = [str(w) for w in result.warnings]
    assert notices[0].startswith("ClusterColocationProfile test-profile set: ")
    assert 'metadata.labels["koordinator.sh/qosClass"]=BE' in notices[0]
    assert "spec.priorityClassName=koordinator-batch" in notices[0]
    assert notices[1].startswith(
        "ClusterColocationProfile test-profile: a koord-batch pod: cpu to kubernetes.io/batch-cpu and memory to "
        "kubernetes.io/batch-memory in spec.containers[0].resources.limits, "
    )
    assert result.set_by['metadata.labels["koordinator.sh/qosClass"]'] == "test-profile"


def test_the_pod_given_is_not_modified() -> None:
    pod = upstream_pod()
    before = copy.deepcopy(pod)
    mutated(pod, upstream_profile())
    assert pod == before


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (resources("1", "4Gi", requests=False), batch("1k", "4Gi")),  # "set default request to the limit"
        (resources("1", "4Gi", limits=False), batch("1k", "4Gi", limits=False)),  # "keep limit unset"
    ],
    ids=["set default request to the limit", "keep limit unset"],
)
def test_requests_and_limits(given: dict[str, Any], expected: dict[str, Any]) -> None:
    pod = upstream_pod()
    del pod["spec"]["initContainers"], pod["spec"]["overhead"]
    pod["spec"]["containers"][0]["resources"] = given
    result = mutated(pod, upstream_profile()).manifest
    assert result["spec"]["containers"][0]["resources"] == expected


def test_percent_100_applies_and_percent_0_leaves_the_profile_out_but_moves_the_resources() -> None:
    assert mutated(upstream_pod(), upstream_profile(probability=100)).manifest == expected_pod()
    assert mutated(upstream_pod(), upstream_profile(probability="100%")).manifest == expected_pod()
    skipped = mutated(upstream_pod(), upstream_profile(probability=0))
    # "mutating pod, percent 0": nothing of the profile, but the pod's priority 5999 is koord-batch.
    assert skipped.manifest == expected_pod(profile_applied=False)
    assert skipped.applied == []
    assert [w.code for w in skipped.warnings] == ["Skipped", "Mutated"]


def test_percent_50_is_drawn_from_the_pod_and_the_profile() -> None:
    """Upstream draws rand.Intn(100) ("percent 50, rand=70" / "rand=30"); Allot draws from the pod's identity."""
    profile = upstream_profile(probability="50%")
    outcomes = {}
    for i in range(40):
        pod = upstream_pod()
        pod["metadata"]["name"] = f"test-pod-{i}"
        result = mutated(pod, profile)
        drawn = draw("test-profile", f"default/test-pod-{i}")
        assert (result.applied == ["test-profile"]) == (drawn < 50)
        assert mutated(pod, profile).manifest == result.manifest  # the same pod, the same answer
        outcomes[i] = bool(result.applied)
    assert set(outcomes.values()) == {True, False}
    pod = upstream_pod()
    pod["metadata"]["uid"] = "3f1d"
    assert bool(mutated(pod, profile).applied) == (draw("test-profile", "3f1d") < 50)


def test_skip_update_resource_by_profile_annotation() -> None:
    profile = upstream_profile({"annotations": {"config.koordinator.sh/skip-update-resources": "true"}})
    assert mutated(upstream_pod(), profile).manifest == expected_pod(moved=False)


def test_label_and_annotation_keys_mapping_and_suffixes() -> None:
    # "mutate pod labels with labels and suffixes"
    profile = upstream_profile(
        labels={"testLabelA": "valueA", "koordinator.sh/scheduler-name": "koordinator-scheduler"},
        labelKeysMapping={
            "label-key-to-load": "label-key-to-store",
            "label-key-to-load-not-exist": "label-key-to-store-not-exist",
        },
        labelSuffixes={
            "label-key-1": "suffix",
            "label-key-to-store": "suffix-0",
            "suffix-label-key-1": "suffix-1",
        },
        schedulerName=None,
    )
    pod = upstream_pod(**{"label-key-to-load": "test-label-value", "label-key-1": "label-value-1"})
    result = mutated(pod, profile).manifest
    assert result["metadata"]["labels"] == {
        "koordinator-colocation-pod": "true",
        "label-key-1": "label-value-1suffix",
        "testLabelA": "valueA",
        "test-patch-label": "patch-a",
        "label-key-to-load": "test-label-value",
        "label-key-to-store": "test-label-valuesuffix-0",
        "label-key-to-store-not-exist": "",
        QOS: "BE",
        PRIORITY: "1111",
        "koordinator.sh/scheduler-name": "koordinator-scheduler",
    }
    assert result["spec"]["schedulerName"] == "nonExistSchedulerName"
    # "mutate pod annotations according to annotations"
    profile = upstream_profile(annotationKeysMapping={"annotation-key-to-load": "annotation-key-to-store"})
    pod = upstream_pod()
    pod["metadata"]["annotations"] = {"annotation-key-to-load": "test-annotation-value"}
    assert mutated(pod, profile).manifest["metadata"]["annotations"] == {
        "testAnnotationA": "valueA",
        "test-patch-annotation": "patch-b",
        "annotation-key-to-load": "test-annotation-value",
        "annotation-key-to-store": "test-annotation-value",
    }


def test_selectors_decide_which_pods_and_profiles_apply_in_name_order() -> None:
    profile = upstream_profile()
    other_namespace = apply_profiles(
        upstream_pod(),
        [profile],
        namespace=namespace_labels("default", {}),
        priority_classes=PRIORITY_CLASSES,
    )
    assert other_namespace.manifest == upstream_pod() and other_namespace.warnings == []
    unlabelled = upstream_pod()
    unlabelled["metadata"]["labels"] = {}
    assert mutated(unlabelled, profile).manifest == unlabelled
    # By name: b sets the label after a; both were chosen against the pod as it was sent.
    issues: list[FieldIssue] = []
    first, second = (
        parse_colocation_profile(
            {"metadata": {"name": name}, "spec": {"labels": {"tier": name}, "selector": selector}}, issues, []
        )
        for name, selector in (("b", None), ("a", {"matchLabels": {"tier": "x"}}))
    )
    assert first is not None and second is not None and issues == []
    pod = upstream_pod(tier="x")
    result = mutated(pod, first, second)
    assert result.applied == ["a", "b"]
    assert result.manifest["metadata"]["labels"]["tier"] == "b"


def test_a_profile_naming_a_priority_class_that_does_not_exist_refuses_the_pod() -> None:
    result = apply_profiles(
        upstream_pod(), [upstream_profile()], namespace=NAMESPACE, priority_classes=BUILTIN_PRIORITY_CLASSES
    )
    assert [(i.path, i.code) for i in result.issues] == [("spec.priorityClassName", "NotFound")]
    assert "test-profile: no PriorityClass with name koordinator-batch" in result.issues[0].message


def test_a_mid_pod_asks_for_mid_resources() -> None:
    profile = upstream_profile(priorityClassName="koord-mid", qosClass="LS", patch=None)
    result = mutated(upstream_pod(), profile).manifest
    assert result["spec"]["priority"] == 7000
    assert result["spec"]["containers"][0]["resources"]["requests"] == {
        "kubernetes.io/mid-cpu": "1k",
        "kubernetes.io/mid-memory": "4Gi",
    }


def test_issues_about_a_field_a_profile_set_name_the_profile() -> None:
    result = mutated(upstream_pod(), upstream_profile())
    qos = FieldIssue(path='metadata.labels["koordinator.sh/qosClass"]', message="Forbidden: no")
    other = FieldIssue(path="spec.nodeName", message="bad")
    assert [str(i) for i in result.attribute([qos, other])] == [
        'metadata.labels["koordinator.sh/qosClass"]: Forbidden: no (set by ClusterColocationProfile test-profile)',
        "spec.nodeName: bad",
    ]


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"probability": "50"}, "spec.probability"),
        ({"probability": 150}, "spec.probability"),
        ({"qosClass": "GOLD"}, "spec.qosClass"),
        ({"koordinatorPriority": 2**31}, "spec.koordinatorPriority"),
        ({"labelSuffixes": {"a": 1}}, "spec.labelSuffixes"),
        ({"patch": "spec: {}"}, "spec.patch"),
        ({"patch": {"spec": {"$retainKeys": ["a"]}}}, "spec.patch.spec.$retainKeys"),
        ({"patch": {"spec": {"$patch": "explode"}}}, "spec.patch.spec.$patch"),
    ],
)
def test_a_profile_allot_cannot_apply_is_refused_with_its_path(spec: dict[str, Any], path: str) -> None:
    issues: list[FieldIssue] = []
    assert parse_colocation_profile({"metadata": {"name": "p"}, "spec": spec}, issues, []) is None
    assert path in {i.path for i in issues}


def test_strategic_merge_patch_merges_lists_by_their_key() -> None:
    pod = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "main", "image": "x", "env": [{"name": "A", "value": "1"}]}],
            "tolerations": [{"key": "t"}],
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b", "a"]},
        "spec": {
            "containers": [
                {"name": "main", "env": [{"name": "B", "value": "2"}]},
                {"name": "sidecar", "image": "y"},
            ],
            "tolerations": [{"key": "u"}],
            "volumes": [{"name": "w", "$patch": "delete"}],
            "terminationGracePeriodSeconds": 30,
            "nodeSelector": None,
        },
    }
    assert merge_pod_patch(pod, patch) == {
        "metadata": {"finalizers": ["a", "b"]},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                },
                {"name": "sidecar", "image": "y"},
            ],
            "tolerations": [{"key": "u"}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "terminationGracePeriodSeconds": 30,
        },
    }
    replaced = merge_pod_patch(pod, {"spec": {"containers": [{"$patch": "replace"}, {"name": "only"}]}})
    assert replaced["spec"]["containers"] == [{"name": "only"}]
    with pytest.raises(PatchError) as caught:
        merge_pod_patch(pod, {"spec": {"containers": [{"image": "z"}]}})
    assert caught.value.path == "spec.patch.spec.containers[0]"
    assert "merge key: name" in caught.value.message


def test_a_json_patch_turns_the_pod_into_the_mutated_one() -> None:
    before = upstream_pod()
    after = mutated(before, upstream_profile()).manifest
    ops = diff(before, after)
    assert {"op": "add", "path": "/metadata/labels/koordinator.sh~1qosClass", "value": "BE"} in ops
    assert {"op": "remove", "path": "/spec/containers/0/resources/requests/cpu"} in ops
    assert field_path("/spec/containers/0/resources/requests/kubernetes.io~1batch-cpu") == (
        "spec.containers[0].resources.requests[kubernetes.io/batch-cpu]"
    )
    assert diff(before, before) == []
