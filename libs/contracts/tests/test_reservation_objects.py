"""Reservation and PodMigrationJob admission: typed values, defaults, and field-path errors."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.migration import parse_migration_job
from allot_contracts.objects.reservation import (
    DEFAULT_TTL_US,
    OwnerController,
    OwnerObject,
    parse_reservation,
    reserve_pod,
)
from allot_contracts.objects.reservation_pod import parse_pod_reservation
from allot_contracts.objects.times import format_duration, parse_duration_us, parse_timestamp_us


def a_reservation(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "template": {
            "metadata": {"namespace": "web"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]},
        },
        "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
    }
    body.update(spec)
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r1", "uid": "u-r1"},
        "spec": body,
    }


def parse(manifest: dict[str, Any]) -> tuple[Any, list[FieldIssue], list[FieldIssue]]:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    return parse_reservation(manifest, issues, warnings), issues, warnings


def test_defaults_and_requests() -> None:
    r, issues, warnings = parse(a_reservation())
    assert issues == [] and warnings == []
    assert r.requests == {"cpu": 2000, "memory": 4 * 2**30}
    assert r.ttl_us is None and r.expires_us is None
    assert r.allocate_once is True and r.allocate_policy == ""
    assert r.expiry(1_000) == 1_000 + DEFAULT_TTL_US


def test_owners_keep_every_sub_matcher() -> None:
    r, issues, _ = parse(
        a_reservation(
            owners=[
                {"object": {"name": "p", "namespace": "web"}},
                {
                    "controller": {"kind": "ReplicaSet", "name": "rs", "controller": True},
                    "labelSelector": {"matchLabels": {"app": "web"}},
                },
            ]
        )
    )
    assert issues == []
    assert r.owners[0].object == OwnerObject(name="p", namespace="web")
    assert r.owners[1].controller == OwnerController(kind="ReplicaSet", name="rs", controller=True)
    assert r.owners[1].selector == (("app", "In", ("web",)),)


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"owners": []}, "spec.owners"),
        ({"owners": [{}]}, "spec.owners[0]"),
        (
            {"owners": [{"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]}}]},
            "spec.owners[0].labelSelector.matchExpressions[0].operator",
        ),
        ({"template": None}, "spec.template"),
        ({"template": {"spec": {"containers": []}}}, "spec.template.spec.containers"),
        ({"ttl": "soon"}, "spec.ttl"),
        ({"expires": "tomorrow"}, "spec.expires"),
        ({"allocatePolicy": "Default"}, "spec.allocatePolicy"),
        ({"allocatePolicy": ["Aligned"]}, "spec.allocatePolicy"),
        ({"allocatePolicy": False}, "spec.allocatePolicy"),  # was read as the default policy
        ({"allocateOnce": "yes"}, "spec.allocateOnce"),
        ({"taints": [{"key": "k", "effect": "Sometimes"}]}, "spec.taints[0].effect"),
        ({"nodeSelector": {}}, "spec.nodeSelector"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_spec_names_the_field(spec: dict[str, Any], path: str) -> None:
    r, issues, _ = parse(a_reservation(**spec))
    assert r is None
    assert path in [i.path for i in issues]


def test_ttl_expires_and_order() -> None:
    manifest = a_reservation(ttl="0s", allocateOnce=False, allocatePolicy="Restricted")
    manifest["metadata"]["labels"] = {"scheduling.koordinator.sh/reservation-order": "5"}
    manifest["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/reservation-restricted-options": '{"resources": ["cpu"]}'
    }
    r, issues, warnings = parse(manifest)
    assert issues == [] and warnings == []
    assert r.ttl_us == 0 and r.expiry(5) is None
    assert r.order == 5 and r.restricted_resources == ("cpu",) and r.allocate_once is False

    expires = parse_timestamp_us("2026-01-01T00:00:00Z")
    r, issues, warnings = parse(a_reservation(ttl="1h", expires="2026-01-01T00:00:00Z"))
    assert issues == []
    assert r.expiry(0) == 3_600_000_000  # whichever comes first
    assert r.expiry(expires) == expires
    assert [w.path for w in warnings] == ["spec.ttl"]
    r, _, _ = parse(a_reservation(expires="2026-01-01T00:00:00Z"))
    assert r.expiry(0) == expires  # no default ttl when expires is given
    r, _, _ = parse(a_reservation(ttl="0s", expires="2026-01-01T00:00:00Z"))
    assert r.expiry(0) is None  # ttl 0 disables expiry, as upstream's controller


@pytest.mark.parametrize(("ttl", "us"), [("1ns", 1), ("1500ns", 2), ("0.5us", 1)])
def test_a_ttl_below_a_microsecond_is_rounded_up_not_to_never_expires(ttl: str, us: int) -> None:
    r, issues, _ = parse(a_reservation(ttl=ttl))  # upstream's expires at once; read as 0 it never expired
    assert issues == [] and r.ttl_us == us and r.expiry(5) == 5 + us


@pytest.mark.parametrize(
    ("ttl", "message"),
    [
        ("2562048h", "is out of range (a Go duration holds at most about 292 years)"),
        ("-1s", "is negative"),
    ],
)
def test_a_ttl_go_cannot_hold_is_refused(ttl: str, message: str) -> None:
    _, issues, _ = parse(a_reservation(ttl=ttl))
    assert [i.path for i in issues] == ["spec.ttl"] and message in issues[0].message
    job_issues: list[FieldIssue] = []
    assert parse_migration_job(a_job(ttl=ttl), job_issues, []) is None
    assert [i.path for i in job_issues] == ["spec.ttl"] and message in job_issues[0].message


def test_bad_order_label_and_options() -> None:
    manifest = a_reservation()
    manifest["metadata"]["labels"] = {"scheduling.koordinator.sh/reservation-order": "first"}
    manifest["metadata"]["annotations"] = {"scheduling.koordinator.sh/reservation-restricted-options": "{"}
    _, issues, _ = parse(manifest)
    assert sorted(i.path for i in issues) == [
        'metadata.annotations["scheduling.koordinator.sh/reservation-restricted-options"]',
        'metadata.labels["scheduling.koordinator.sh/reservation-order"]',
    ]


def test_pre_allocation_is_a_warning() -> None:
    r, issues, warnings = parse(a_reservation(preAllocation=True))
    assert r is not None and issues == []
    assert [w.path for w in warnings] == ["spec.preAllocation"]


def test_reserve_pod_layers_metadata_and_priority() -> None:
    manifest = a_reservation()
    manifest["metadata"]["labels"] = {"team": "a"}
    manifest["spec"]["template"]["spec"]["nodeName"] = "n2"
    r, _, _ = parse(manifest)
    pod = reserve_pod(r)
    assert pod["metadata"]["name"] == "r1" and pod["metadata"]["namespace"] == "web"
    assert pod["metadata"]["labels"] == {"team": "a"}
    assert pod["metadata"]["annotations"] == {"scheduling.koordinator.sh/reservation-name": "r1"}
    assert pod["spec"]["priority"] == 2**31 - 1 and pod["spec"]["nodeName"] == "n2"
    assert r.node_name == "n2"


def test_pod_side_annotations() -> None:
    issues: list[FieldIssue] = []
    got = parse_pod_reservation(
        {
            "scheduling.koordinator.sh/reservation-affinity": {
                "reservationSelector": {"pool": "a"},
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "reservationSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "Exists"}]}]
                },
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            },
            "scheduling.koordinator.sh/exact-match-reservation": '{"resourceNames": ["cpu", "kubernetes.io/gpu"]}',
            "scheduling.koordinator.sh/reservation-allocated": '{"name": "r1", "uid": "u1"}',
        },
        {
            "scheduling.koordinator.sh/reservation-ignored": "true",
            "scheduling.koordinator.sh/disable-preemptible": "true",
        },
        issues,
    )
    assert issues == []
    assert got.affinity is not None and got.affinity.selector == (("pool", "a"),)
    assert got.affinity.terms == (((("z", "Exists", ()),), ()),)
    assert got.affinity.tolerations == (("dedicated", "Exists", "", ""),)
    assert got.exact_match == ("cpu", "koordinator.sh/gpu")
    assert got.ignored and not got.preemptible and got.allocated == ("r1", "u1")


def test_pod_side_errors_and_empty_affinity() -> None:
    issues: list[FieldIssue] = []
    got = parse_pod_reservation({"scheduling.koordinator.sh/reservation-affinity": ""}, {}, issues)
    assert issues == [] and got.affinity is not None and got.affinity.name == ""
    parse_pod_reservation({"scheduling.koordinator.sh/reservation-affinity": '{"nmae": "r1"}'}, {}, issues)
    assert [i.path for i in issues] == [
        'metadata.annotations["scheduling.koordinator.sh/reservation-affinity"].nmae'
    ]


def a_job(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"podRef": {"namespace": "web", "name": "p1"}}
    body.update(spec)
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "PodMigrationJob",
        "metadata": {"name": "j1", "uid": "u-j1"},
        "spec": body,
    }


def test_migration_job() -> None:
    issues: list[FieldIssue] = []
    warnings: list[FieldIssue] = []
    job = parse_migration_job(a_job(mode="EvictDirectly", ttl="5m", paused=True), issues, warnings)
    assert issues == [] and job is not None
    assert job.mode == "EvictDirectly" and job.ttl_us == 300_000_000 and job.paused
    assert job.pod.key == "web/p1"


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"podRef": {"name": "p1"}}, "spec.podRef.namespace"),
        ({"podRef": None}, "spec.podRef"),
        ({"mode": "Teleport"}, "spec.mode"),
        ({"mode": ["EvictDirectly"]}, "spec.mode"),
        ({"mode": 0}, "spec.mode"),  # was read as the default mode
        ({"ttl": 5}, "spec.ttl"),
        ({"reservationOptions": {"reservationRef": {}}}, "spec.reservationOptions.reservationRef.name"),
        ({"evictionPolicy": "x"}, "spec.evictionPolicy"),
    ],
)
def test_migration_job_errors(spec: dict[str, Any], path: str) -> None:
    issues: list[FieldIssue] = []
    assert parse_migration_job(a_job(**spec), issues, []) is None
    assert path in [i.path for i in issues]


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("24h", 86_400_000_000),
        ("1h30m", 5_400_000_000),
        ("90s", 90_000_000),
        ("1.5s", 1_500_000),
        ("500ms", 500_000),
        ("0s", 0),
        ("0", 0),
        ("1ns", 1),  # rounded up: a positive duration is never 0 (never expires)
        ("1m0.000001s", 60_000_001),
        (".5h", 1_800_000_000),  # as Go reads it
    ],
)
def test_durations(text: str, us: int) -> None:
    assert parse_duration_us(text) == us


def test_duration_and_time_errors_and_format() -> None:
    for bad in ("", "5", "1d", "-1s", "1h 30m"):
        with pytest.raises(ValueError):
            parse_duration_us(bad)
    with pytest.raises(ValueError):
        parse_timestamp_us("2026-01-01T00:00:00")
    assert parse_timestamp_us("1970-01-01T00:00:01.5Z") == 1_500_000
    assert parse_timestamp_us("1970-01-01T01:00:00+01:00") == 0
    assert format_duration(5_400_000_000) == "1h30m" and format_duration(1_500_000) == "1.5s"


def test_labels_are_checked_as_labels_and_a_priority_label_that_is_no_integer_is_not_read() -> None:
    manifest = a_reservation()
    manifest["metadata"]["labels"] = {
        "bad key!!": "x",
        "app": "x y z!",
        "scheduling.koordinator.sh/reservation-order": "\u00b2",
    }
    _, issues, _ = parse(manifest)
    assert sorted(i.path for i in issues) == [
        'metadata.labels["app"]',
        'metadata.labels["bad key!!"]',
        'metadata.labels["scheduling.koordinator.sh/reservation-order"]',
    ]
    manifest["metadata"]["labels"] = {
        "koordinator.sh/priority": "\u00b2"
    }  # not a label value Kubernetes takes
    assert [i.path for i in parse(manifest)[1]] == ['metadata.labels["koordinator.sh/priority"]']
    for text, priority in (("7", 7), ("high", 2**31 - 1), ("9" * 12, 2**31 - 1)):  # 32-bit, as spec.priority
        manifest["metadata"]["labels"] = {"koordinator.sh/priority": text}
        r, issues, _ = parse(manifest)
        assert r is not None and issues == []
        assert reserve_pod(r)["spec"]["priority"] == priority
