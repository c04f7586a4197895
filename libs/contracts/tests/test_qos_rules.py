"""The raw QoS class and priority class, and what an update of a pod may not change, as Koordinator's validating pod
webhook reads them (pkg/webhook/pod/validating/cluster_colocation_profile_test.go; apis/extension/priority.go)."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.objects.qos_rules import (
    immutable_issues,
    koord_priority_of,
    priority_class_raw,
    qos_class_raw,
)

QOS = "koordinator.sh/qosClass"
PC = "koordinator.sh/priority-class"
SUB = "koordinator.sh/priority"


def pod(labels: dict[str, str] | None = None, priority: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {} if priority is None else {"priority": priority}
    return {"metadata": {"labels": dict(labels or {})}, "spec": spec}


@pytest.mark.parametrize(
    ("labels", "priority", "expected"),
    [
        ({}, None, ""),
        ({}, 0, ""),
        ({}, 9999, "koord-prod"),
        ({}, 7000, "koord-mid"),
        ({}, 5999, "koord-batch"),
        ({}, 3000, "koord-free"),
        ({}, 6666, ""),
        ({}, 10000, ""),
        ({PC: "koord-batch"}, 9000, "koord-batch"),  # the label wins
        ({PC: ""}, 9000, ""),  # present but empty: upstream reads the label, which names no class
    ],
)
def test_the_raw_priority_class_is_the_label_else_the_band_of_spec_priority(
    labels: dict[str, str], priority: int | None, expected: str
) -> None:
    assert priority_class_raw(labels, priority) == expected


def test_the_raw_qos_class_is_the_label_only_and_defaults_fill_what_is_missing() -> None:
    assert qos_class_raw({QOS: "LSR"}) == "LSR"
    assert qos_class_raw({}) == "" and qos_class_raw({QOS: "Gold"}) == ""
    assert koord_priority_of({}, None, "LS") == "koord-prod"
    assert koord_priority_of({}, 0, "BE") == "koord-batch"
    assert koord_priority_of({}, 7000, "LSE") == "koord-mid"


# (upstream test name, old pod, new pod, field path, reason)
UPDATES = [
    (
        "validate immutable QoS",
        pod({QOS: "BE"}),
        pod({QOS: "LS"}),
        'metadata.labels["koordinator.sh/qosClass"]',
        'Invalid value: "LS": field is immutable',
    ),
    (
        "validate remove QoS",
        pod({QOS: "BE"}),
        pod(),
        'metadata.labels["koordinator.sh/qosClass"]',
        'Invalid value: "": field is immutable',
    ),
    (
        "validate immutable priorityClass",
        pod(priority=5000),
        pod(priority=9999),
        "spec.priority",
        'Invalid value: "koord-prod": field is immutable',
    ),
    (
        "validate remove priorityClass",
        pod(priority=5000),
        pod(),
        "spec.priority",
        'Invalid value: "": field is immutable',
    ),
    (
        "validate koordinator priority with defaultSkipValidatingPriority=false",
        pod({SUB: "9999"}),
        pod({SUB: "8888"}),
        'metadata.labels["koordinator.sh/priority"]',
        'Invalid value: "8888": field is immutable',
    ),
    (
        "validate remove koordinator priority",
        pod({SUB: "9999"}),
        pod(),
        'metadata.labels["koordinator.sh/priority"]',
        'Invalid value: "": field is immutable',
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "path", "reason"), [u[1:] for u in UPDATES], ids=[u[0] for u in UPDATES]
)
def test_an_update_may_not_change_the_qos_or_the_priority(
    old: dict[str, Any], new: dict[str, Any], path: str, reason: str
) -> None:
    (issue,) = immutable_issues(old, new)
    assert issue.path == path and issue.message.startswith(reason) and issue.code == "FieldImmutable"


def test_an_update_that_keeps_them_passes() -> None:
    old = pod({QOS: "BE", PC: "koord-batch", SUB: "1000"}, priority=5000)
    new = pod({QOS: "BE", PC: "koord-batch", SUB: "1000", "team": "etl"}, priority=5000)
    assert immutable_issues(old, new) == []
    # the same raw priority class from another value of the same band is no change
    assert immutable_issues(pod(priority=5000), pod(priority=5999)) == []


def test_the_priority_bands_are_one_table_read_by_the_label_check_the_band_lookup_and_the_builtin_classes() -> (
    None
):
    from allot_contracts.objects import names as n
    from allot_contracts.objects.pod_priority import BUILTIN_PRIORITY_CLASSES
    from allot_contracts.objects.qos_rules import priority_class_raw

    assert {name for name, _, _ in n.PRIORITY_BANDS} == n.PRIORITY_CLASSES
    for name, low, high in n.PRIORITY_BANDS:
        assert priority_class_raw({}, low) == priority_class_raw({}, high) == name
        assert priority_class_raw({}, low - 1) != name and priority_class_raw({}, high + 1) != name
        assert priority_class_raw({n.LABEL_PRIORITY_CLASS: name}, None) == name
        assert BUILTIN_PRIORITY_CLASSES[name].value == low
