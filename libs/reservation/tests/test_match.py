"""Owner matching, reservation affinity, taints, unschedulable, exact-match and reservation-ignored (§5.3)."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.issues import FieldIssue
from allot_contracts.objects.reservation import Reservation, parse_reservation
from allot_reservation.facts import facts_of
from allot_reservation.match import PodFacts, exact_match, match_reservation
from allot_reservation.testing import a_pod_manifest, a_reservation_manifest


def reservation(**kw: Any) -> Reservation:
    issues: list[FieldIssue] = []
    got = parse_reservation(a_reservation_manifest("r1", **kw), issues, [])
    assert got is not None, issues
    return got


def pod(**kw: Any) -> PodFacts:
    facts, issues = facts_of(a_pod_manifest("web-0", **kw))
    assert issues == [], issues
    return facts


WEB = {"app": "web"}
RS = ("ReplicaSet", "web-rs")


@pytest.mark.parametrize(
    ("owners", "pod_kw", "matched"),
    [
        ([{"labelSelector": {"matchLabels": {"app": "web"}}}], {"labels": WEB}, True),
        ([{"labelSelector": {"matchLabels": {"app": "web"}}}], {"labels": {"app": "db"}}, False),
        ([{"object": {"name": "web-0", "namespace": "default"}}], {}, True),
        ([{"object": {"name": "web-0", "namespace": "other"}}], {}, False),
        ([{"object": {"uid": "uid-default-web-0"}}], {}, True),
        ([{"object": {"uid": "another"}}], {}, False),
        ([{"controller": {"kind": "ReplicaSet", "name": "web-rs"}}], {"controller": RS}, True),
        (
            [{"controller": {"kind": "ReplicaSet", "name": "web-rs", "controller": True}}],
            {"controller": RS},
            True,
        ),
        ([{"controller": {"kind": "StatefulSet", "name": "web-rs"}}], {"controller": RS}, False),
        ([{"controller": {"name": "web-rs", "namespace": "other"}}], {"controller": RS}, False),
        ([{"controller": {"name": "web-rs"}}], {}, False),
        # all sub-matchers of one owner must match
        (
            [{"controller": {"name": "web-rs"}, "labelSelector": {"matchLabels": {"app": "db"}}}],
            {"controller": RS, "labels": WEB},
            False,
        ),
        # owners are ORed
        (
            [{"labelSelector": {"matchLabels": {"app": "db"}}}, {"object": {"name": "web-0"}}],
            {"labels": WEB},
            True,
        ),
    ],
    ids=[
        "selector",
        "selector-miss",
        "object-name",
        "object-namespace-miss",
        "object-uid",
        "object-uid-miss",
        "controller",
        "controller-flag",
        "controller-kind-miss",
        "controller-namespace-miss",
        "controller-none",
        "owner-entry-anded",
        "owners-ored",
    ],
)
def test_owner_matching(owners: list[dict[str, Any]], pod_kw: dict[str, Any], matched: bool) -> None:
    ok, why = match_reservation(reservation(owners=owners), "n1", {}, pod(**pod_kw))
    assert ok is matched
    assert why == ""  # a reservation that is not the pod's is not reported


AFFINITY = "scheduling.koordinator.sh/reservation-affinity"


@pytest.mark.parametrize(
    ("r_kw", "annotations", "node_labels", "matched", "reason"),
    [
        ({}, {AFFINITY: '{"name": "r1"}'}, {}, True, ""),
        ({}, {AFFINITY: '{"name": "r2"}'}, {}, False, "reservation affinity names another reservation"),
        ({"labels": {"pool": "a"}}, {AFFINITY: '{"reservationSelector": {"pool": "a"}}'}, {}, True, ""),
        (
            {"labels": {"pool": "b"}},
            {AFFINITY: '{"reservationSelector": {"pool": "a"}}'},
            {},
            False,
            "reservation affinity does not match the reservation",
        ),
        # terms see node labels ∪ reservation labels
        (
            {},
            {
                AFFINITY: {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "reservationSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                        ]
                    }
                }
            },
            {"zone": "z1"},
            True,
            "",
        ),
        (
            {},
            {
                AFFINITY: {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "reservationSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                        ]
                    }
                }
            },
            {"zone": "z2"},
            False,
            "reservation affinity does not match the reservation",
        ),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {AFFINITY: {}},
            {},
            False,
            "reservation(s) had untolerated taint {dedicated: ml}",
        ),
        # without a reservation affinity the pod has no tolerations to check: upstream checks taints only through it
        ({"taints": [{"key": "dedicated", "value": "ml", "effect": "NoExecute"}]}, {}, {}, True, ""),
        (
            {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            {AFFINITY: {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}]}},
            {},
            True,
            "",
        ),
        ({"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]}, {}, {}, True, ""),
        ({"unschedulable": True}, {}, {}, False, "reservation is unschedulable"),
        (
            {"unschedulable": True},
            {AFFINITY: {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}},
            {},
            True,
            "",
        ),
        # a name in the affinity skips the unschedulable and taint checks (upstream)
        ({"unschedulable": True}, {AFFINITY: '{"name": "r1"}'}, {}, True, ""),
    ],
    ids=[
        "name",
        "name-other",
        "selector",
        "selector-miss",
        "terms-node-labels",
        "terms-miss",
        "taint",
        "taint-without-affinity",
        "taint-tolerated",
        "prefer-no-schedule",
        "unschedulable",
        "unschedulable-tolerated",
        "name-overrides-unschedulable",
    ],
)
def test_affinity_taints_unschedulable(
    r_kw: dict[str, Any], annotations: dict[str, Any], node_labels: dict[str, str], matched: bool, reason: str
) -> None:
    ok, why = match_reservation(
        reservation(**r_kw), "n1", node_labels, pod(labels=WEB, annotations=annotations)
    )
    assert (ok, why) == (matched, reason)


EXACT = "scheduling.koordinator.sh/exact-match-reservation"


@pytest.mark.parametrize(
    ("names", "pod_cpu", "matched"),
    [
        (["cpu"], "2", True),
        (["cpu"], "3", False),
        (["cpu", "memory"], "2", True),
        # decision 9: absent on both sides counts as equal and checking goes on (upstream would stop here)
        (["nvidia.com/gpu", "cpu"], "3", False),
        (["nvidia.com/gpu", "cpu"], "2", True),
    ],
)
def test_exact_match(names: list[str], pod_cpu: str, matched: bool) -> None:
    import json

    facts = pod(labels=WEB, cpu=pod_cpu, annotations={EXACT: json.dumps({"resourceNames": names})})
    ok, why = match_reservation(reservation(), "n1", {}, facts)
    assert ok is matched
    assert why == ("" if matched else "reservation allocatable does not exactly match the pod request")


def test_exact_match_function() -> None:
    assert exact_match({"cpu": 1}, {"cpu": 1}, ["cpu", "gpu"])
    assert not exact_match({"cpu": 1}, {"cpu": 1, "gpu": 1}, ["gpu"])
    assert not exact_match({"cpu": 1, "gpu": 1}, {"cpu": 1}, ["gpu"])


def test_reservation_ignored_matches_every_reservation() -> None:
    facts = pod(labels={"app": "db", "scheduling.koordinator.sh/reservation-ignored": "true"})
    assert match_reservation(reservation(), "n1", {}, facts) == (True, "")
