"""Gang input read at the door: every malformed annotation is refused with its field path and reason (decision 13);
values Koordinator tolerates are accepted with a warning."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.gang import parse_pod_group
from allot_contracts.objects.pod import parse_pod
from allot_gang import GangEngine
from allot_gang.testing import a_pod_group_manifest as a_pod_group
from allot_gang.testing import a_pod_manifest as a_pod

ANN = 'metadata.annotations["gang.scheduling.koordinator.sh/{}"]'
LABEL = 'metadata.labels["{}"]'
MIN = ANN.format("min-available")


def _errors(manifest: dict[str, Any]) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    parse_pod(manifest, issues, [])
    return issues


def _warnings(manifest: dict[str, Any]) -> list[FieldIssue]:
    warnings: list[FieldIssue] = []
    parse_pod(manifest, [], warnings)
    return warnings


VALID_PODS = [
    pytest.param(a_pod("p"), None, id="plain pod"),
    pytest.param(a_pod("p", gang="train", min_available=4), "default/train", id="annotation gang, min only"),
    pytest.param(
        a_pod(
            "p",
            labels={
                "pod-group.scheduling.sigs.k8s.io": "train",
                "pod-group.scheduling.sigs.k8s.io/min-available": "2",
            },
        ),
        "default/train",
        id="label-only gang with label min-available",
    ),
    pytest.param(a_pod("p", pod_group="pg", namespace="ml"), "ml/pg", id="references a PodGroup by label"),
    pytest.param(
        a_pod("p", labels={"pod-group.scheduling.sigs.k8s.io/name": "pg"}),
        "default/pg",
        id="PodGroup /name label",
    ),
    pytest.param(
        a_pod(
            "p",
            namespace="a",
            gang="g",
            min_available=2,
            total_number=5,
            mode="NonStrict",
            waiting_time="1h30m",
            groups=["a/g", "b/h"],
            match_policy="waiting-and-running",
        ),
        "a/g",
        id="every setting",
    ),
    pytest.param(
        a_pod("p", gang="g", min_available=1, waiting_time="72h"), "default/g", id="72h waiting-time: no cap"
    ),
    pytest.param(
        a_pod(
            "p",
            gang="g",
            min_available=1,
            labels={"pod-group.scheduling.sigs.k8s.io/match-policy": "only-waiting"},
        ),
        "default/g",
        id="match-policy alias as label",
    ),
    pytest.param(
        a_pod("p", gang="g", pod_group="g", min_available=2),
        "default/g",
        id="name annotation and label agree",
    ),
    pytest.param(
        a_pod("p", gang="g", min_available=2, sub_priority=5, priority=9000), "default/g", id="priorities"
    ),
]


@pytest.mark.parametrize(("manifest", "gang"), VALID_PODS)
def test_valid_pods(manifest: dict[str, Any], gang: str | None) -> None:
    issues: list[FieldIssue] = []
    pod = parse_pod(manifest, issues, [])
    assert issues == [] and pod is not None
    assert GangEngine.gang_of(pod) == gang


INVALID_PODS = [
    ("min-available not a number", a_pod("p", gang="g", min_available="four"), MIN, "must be a whole number"),
    ("min-available zero", a_pod("p", gang="g", min_available=0), MIN, "must be >= 1"),
    ("min-available negative", a_pod("p", gang="g", min_available="-2"), MIN, "must be a whole number"),
    ("min-available with spaces", a_pod("p", gang="g", min_available=" 3"), MIN, "must be a whole number"),
    (
        "min-available annotation and label disagree",
        a_pod("p", gang="g", min_available=2, labels={"pod-group.scheduling.sigs.k8s.io/min-available": "3"}),
        LABEL.format("pod-group.scheduling.sigs.k8s.io/min-available"),
        "gives min-available '3' but",
    ),
    (
        "total-number below min",
        a_pod("p", gang="g", min_available=4, total_number=2),
        ANN.format("total-number"),
        "must be >= min-available (4)",
    ),
    (
        "total-number not a number",
        a_pod("p", gang="g", min_available=4, total_number="many"),
        ANN.format("total-number"),
        "must be a whole number",
    ),
    (
        "waiting-time without unit",
        a_pod("p", gang="g", min_available=1, waiting_time="600"),
        ANN.format("waiting-time"),
        "every number needs a unit",
    ),
    (
        "waiting-time days",
        a_pod("p", gang="g", min_available=1, waiting_time="2d"),
        ANN.format("waiting-time"),
        "must be a Go duration",
    ),
    (
        "waiting-time zero",
        a_pod("p", gang="g", min_available=1, waiting_time="0s"),
        ANN.format("waiting-time"),
        "must be greater than 0",
    ),
    (
        "waiting-time negative",
        a_pod("p", gang="g", min_available=1, waiting_time="-5m"),
        ANN.format("waiting-time"),
        "must be greater than 0",
    ),
    (
        "groups not JSON",
        a_pod("p", gang="g", min_available=1, groups="[default/g"),
        ANN.format("groups"),
        "must be a JSON list",
    ),
    (
        "groups an object",
        a_pod("p", gang="g", min_available=1, groups='{"a": 1}'),
        ANN.format("groups"),
        "non-empty JSON list",
    ),
    (
        "groups empty",
        a_pod("p", gang="g", min_available=1, groups=[]),
        ANN.format("groups"),
        "non-empty JSON list",
    ),
    (
        "groups without self",
        a_pod("p", gang="g", min_available=1, groups=["default/h"]),
        ANN.format("groups"),
        "must include this gang's own id 'default/g'",
    ),
    (
        "groups duplicate",
        a_pod("p", gang="g", min_available=1, groups=["default/g", "default/g"]),
        ANN.format("groups"),
        "more than once",
    ),
    (
        "groups entry not ns/name",
        a_pod("p", gang="g", min_available=1, groups=["default/g", "h"]),
        ANN.format("groups"),
        "entry 1 ('h')",
    ),
    (
        "match-policy unknown",
        a_pod("p", gang="g", min_available=1, match_policy="always"),
        ANN.format("match-policy"),
        "must be one of once-satisfied, only-waiting, waiting-and-running",
    ),
    (
        "match-policy alias unknown",
        a_pod("p", gang="g", min_available=1, labels={"pod-group.scheduling.sigs.k8s.io/match-policy": "x"}),
        LABEL.format("pod-group.scheduling.sigs.k8s.io/match-policy"),
        "must be one of",
    ),
    (
        "typo in a gang key",
        a_pod(
            "p", gang="g", min_available=1, annotations={"gang.scheduling.koordinator.sh/min-availabe": "3"}
        ),
        ANN.format("min-availabe"),
        "unknown gang annotation",
    ),
    (
        "legacy timeout key",
        a_pod("p", gang="g", min_available=1, annotations={"gang.scheduling.koordinator.sh/timeout": "10s"}),
        ANN.format("timeout"),
        "use gang.scheduling.koordinator.sh/waiting-time",
    ),
    (
        "gang name not a DNS name",
        a_pod("p", gang="Train_1", min_available=1),
        ANN.format("name"),
        "lowercase RFC 1123 subdomain",
    ),
    (
        "gang name annotation and label disagree",
        a_pod("p", gang="g", pod_group="h", min_available=1),
        LABEL.format("pod-group.scheduling.sigs.k8s.io"),
        "gives gang name 'h' but",
    ),
    ("settings without a gang name", a_pod("p", min_available=3), MIN, "the pod names no gang"),
    (
        "settings without min-available",
        a_pod("p", gang="g", mode="NonStrict"),
        ANN.format("mode"),
        "need min-available",
    ),
    (
        "sub-priority not an int",
        a_pod("p", sub_priority="high"),
        LABEL.format("koordinator.sh/priority"),
        "must be a 32-bit integer",
    ),
    (
        "annotation value not a string",
        a_pod("p", gang="g", annotations={"gang.scheduling.koordinator.sh/min-available": 3}),
        MIN,
        "must be a string",
    ),
    ("no pod name", {"metadata": {"namespace": "a"}}, "metadata.name", "is required"),
]


@pytest.mark.parametrize(
    ("manifest", "path", "reason"), [p[1:] for p in INVALID_PODS], ids=[p[0] for p in INVALID_PODS]
)
def test_invalid_pods_are_refused_with_path_and_reason(
    manifest: dict[str, Any], path: str, reason: str
) -> None:
    errors = _errors(manifest)
    assert any(e.path == path and reason in e.message for e in errors), errors


@pytest.mark.parametrize("mode", ["strict", "Lenient", ""])
def test_a_mode_koordinator_tolerates_is_strict_with_a_warning(mode: str) -> None:
    manifest = a_pod("p", gang="g", min_available=1, mode=mode)
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    pod = parse_pod(manifest, issues, warnings)
    assert issues == [] and pod is not None and pod.gang is not None
    assert [(e.field, e.value) for e in pod.gang.explicit if e.field == "mode"] == [("mode", "Strict")]
    assert [(w.path, w.code) for w in warnings] == [(ANN.format("mode"), "Defaulted")]


@pytest.mark.parametrize("key", ["network-topology-spec", "network-topology-index"])
def test_network_topology_annotations_are_accepted_and_reported_as_not_acted_on(key: str) -> None:
    manifest = a_pod(
        "p",
        gang="g",
        min_available=1,
        annotations={f"gang.scheduling.koordinator.sh/{key}": '{"gatherStrategy": []}'},
    )
    assert _errors(manifest) == []
    [warning] = _warnings(manifest)
    assert warning.path == ANN.format(key) and warning.code == "Ignored" and "not acted on" in warning.message


def test_spec_priority_must_be_an_integer() -> None:
    pod = a_pod("p")
    pod["spec"]["priority"] = "high"
    assert [e.path for e in _errors(pod)] == ["spec.priority"]


def test_every_problem_is_reported_at_once() -> None:
    errors = _errors(a_pod("p", gang="g", min_available="x", match_policy="loose", waiting_time="soon"))
    assert sorted(e.path for e in errors) == sorted(
        [MIN, ANN.format("match-policy"), ANN.format("waiting-time")]
    )


INVALID_POD_GROUPS = [
    (
        "wrong apiVersion",
        {**a_pod_group("pg"), "apiVersion": "scheduling.x-k8s.io/v1alpha1"},
        "apiVersion",
        "must be scheduling.sigs.k8s.io/v1alpha1",
    ),
    ("wrong kind", {**a_pod_group("pg"), "kind": "Job"}, "kind", "must be PodGroup"),
    ("minMember missing", a_pod_group("pg", min_member=None), "spec.minMember", "is required"),
    ("minMember zero", a_pod_group("pg", min_member=0), "spec.minMember", "must be an integer >= 1"),
    (
        "scheduleTimeoutSeconds zero",
        a_pod_group("pg", schedule_timeout_seconds=0),
        "spec.scheduleTimeoutSeconds",
        "must be an integer >= 1",
    ),
    (
        "minResources bad quantity",
        a_pod_group("pg", min_resources={"cpu": "lots"}),
        'spec.minResources["cpu"]',
        "not a valid quantity",
    ),
    (
        "minResources negative",
        a_pod_group("pg", min_resources={"nvidia.com/gpu": -1}),
        'spec.minResources["nvidia.com/gpu"]',
        "must be greater than or equal to 0",
    ),
    (
        "waiting-time annotation on a PodGroup",
        a_pod_group("pg", annotations={"gang.scheduling.koordinator.sh/waiting-time": "5m"}),
        ANN.format("waiting-time"),
        "set spec.scheduleTimeoutSeconds",
    ),
    (
        "min-available annotation on a PodGroup",
        a_pod_group("pg", annotations={"gang.scheduling.koordinator.sh/min-available": "5"}),
        ANN.format("min-available"),
        "set spec.minMember",
    ),
    (
        "groups without self",
        a_pod_group("pg", groups=["default/other"]),
        ANN.format("groups"),
        "must include this gang's own id 'default/pg'",
    ),
    (
        "total-number below minMember",
        a_pod_group("pg", min_member=4, total_number=3),
        ANN.format("total-number"),
        "must be >= min-available (4)",
    ),
]


@pytest.mark.parametrize(
    ("manifest", "path", "reason"),
    [p[1:] for p in INVALID_POD_GROUPS],
    ids=[p[0] for p in INVALID_POD_GROUPS],
)
def test_invalid_pod_groups(manifest: dict[str, Any], path: str, reason: str) -> None:
    errors: list[FieldIssue] = []
    assert parse_pod_group(manifest, errors, []) is None
    assert any(e.path == path and reason in e.message for e in errors), errors


def _group(manifest: dict[str, Any]) -> Any:
    group = parse_pod_group(manifest, [], [])
    assert group is not None
    return group


def test_valid_pod_group_is_recorded_with_its_settings() -> None:
    engine = GangEngine()
    assert (
        engine.apply_pod_group(
            _group(
                a_pod_group(
                    "pg",
                    namespace="ml",
                    min_member=3,
                    schedule_timeout_seconds=7200,
                    min_resources={"cpu": "500m", "nvidia.com/gpu": 8},
                    mode="NonStrict",
                    total_number=4,
                )
            )
        )
        == []
    )
    status = engine.status("ml/pg")
    assert (status["minMember"], status["totalNumber"], status["mode"], status["waitingTimeUs"]) == (
        3,
        4,
        "NonStrict",
        7200 * 10**6,
    )
    assert status["minResources"] == {"cpu": "500m", "nvidia.com/gpu": "8"}
    assert status["source"] == "PodGroup"
