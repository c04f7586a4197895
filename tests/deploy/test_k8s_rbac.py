"""RBAC is least privilege per component: exactly the grants below, and no API token where none is needed.

kube-sync list-watches pods, ElasticQuotas, ElasticQuotaProfiles, PodGroups, Reservations and PodMigrationJobs;
binder creates Bindings (which carry the allocation annotations) and Evictions (PodMigrationJobs), patches
ElasticQuota status, writes Events, PodScheduled (pods/status), PodGroup status
and the Nodes' device capacity (nodes/status); node-reporter list-watches Nodes, Koordinator Devices
and NodeResourceTopologies; reservation-manager writes Reservation and PodMigrationJob status and deletes the ones it
garbage-collected. Every decider and kube-sync (two replicas, Lease-based leader election) creates, reads and renews
its own Lease in allot-system. Nothing else in Allot talks to the API server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BASE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"
READ = ("list", "watch")

Obj = dict[str, Any]
Grant = tuple[str, str, str]  # (apiGroup, resource, verb); a rule limited to names gives "resource[name]"
DECIDERS = ("gang-coordinator", "quota-manager", "reservation-manager", "device-allocator", "binder")
LEASED = (*DECIDERS, "kube-sync")


def lease(decider: str) -> set[Grant]:
    """Leader election: create a Lease (RBAC cannot limit create to a name), read and renew only its own."""
    own = f"leases[allot-{decider}]"
    return {
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", own, "get"),
        ("coordination.k8s.io", own, "update"),
    }


EXPECTED: dict[str, set[Grant]] = {
    "allot-kube-sync": {
        *(("", "pods", verb) for verb in READ),
        *(("scheduling.sigs.k8s.io", "elasticquotas", verb) for verb in READ),
        *(("scheduling.sigs.k8s.io", "podgroups", verb) for verb in READ),
        *(("quota.koordinator.sh", "elasticquotaprofiles", verb) for verb in READ),
        *(("scheduling.koordinator.sh", "reservations", verb) for verb in READ),
        *(("scheduling.koordinator.sh", "podmigrationjobs", verb) for verb in READ),
    },
    "allot-binder": {
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("scheduling.sigs.k8s.io", "elasticquotas", "patch"),
        ("scheduling.sigs.k8s.io", "elasticquotas/status", "patch"),
        ("events.k8s.io", "events", "create"),
        ("events.k8s.io", "events", "patch"),
        ("", "pods/status", "patch"),
        ("", "nodes/status", "patch"),
        ("scheduling.sigs.k8s.io", "podgroups/status", "patch"),
    },
    "allot-reservation-manager": {
        ("scheduling.koordinator.sh", "reservations/status", "patch"),
        ("scheduling.koordinator.sh", "podmigrationjobs/status", "patch"),
        ("scheduling.koordinator.sh", "reservations", "delete"),
        ("scheduling.koordinator.sh", "podmigrationjobs", "delete"),
        ("scheduling.koordinator.sh", "podmigrationjobs", "create"),
        ("scheduling.koordinator.sh", "podmigrationjobs", "get"),
    },
    "allot-node-reporter": {
        *(("", "nodes", verb) for verb in READ),
        *(("scheduling.koordinator.sh", "devices", verb) for verb in READ),
        *(("topology.node.k8s.io", "noderesourcetopologies", verb) for verb in READ),
        *(("slo.koordinator.sh", "nodemetrics", verb) for verb in READ),
    },
}
for _decider in LEASED:
    EXPECTED[f"allot-{_decider}"] = EXPECTED.get(f"allot-{_decider}", set()) | lease(_decider)


@pytest.fixture(scope="module")
def base(kustomize: Callable[[Path], list[Obj]]) -> list[Obj]:
    return kustomize(BASE)


def named(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


@pytest.fixture(scope="module")
def grants(
    grants_of: Callable[[list[Obj]], dict[str, set[Grant]]],
) -> Callable[[list[Obj]], dict[str, set[Grant]]]:
    """ServiceAccount name → every (apiGroup, resource, verb) the base's roles give it (conftest.rbac_grants)."""
    return grants_of


def test_each_component_gets_exactly_its_grants(
    base: list[Obj], grants: Callable[[list[Obj]], dict[str, set[Grant]]]
) -> None:
    assert grants(base) == EXPECTED


def test_no_rule_uses_wildcards_or_resource_names_it_does_not_need(base: list[Obj]) -> None:
    for role in [o for o in base if o["kind"] in ("ClusterRole", "Role")]:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{role['metadata']['name']}: wildcard in {key}"
            assert "nonResourceURLs" not in rule


def test_bindings_name_service_accounts_that_exist_in_the_namespace(base: list[Obj]) -> None:
    accounts = {(o["metadata"]["namespace"], name) for name, o in named(base, "ServiceAccount").items()}
    for binding in [o for o in base if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]:
        for subject in binding["subjects"]:
            assert (subject.get("namespace"), subject["name"]) in accounts, subject


def test_every_workload_has_its_own_account_and_a_token_only_if_it_has_grants(
    base: list[Obj], grants: Callable[[list[Obj]], dict[str, set[Grant]]]
) -> None:
    accounts = named(base, "ServiceAccount")
    granted = set(grants(base))
    seen = set()
    for obj in [o for o in base if o["kind"] in ("Deployment", "DaemonSet", "Job")]:
        spec = obj["spec"]["template"]["spec"]
        account = spec.get("serviceAccountName", "default")
        assert account in accounts and account not in seen, (
            f"{obj['metadata']['name']} shares or lacks an account"
        )
        seen.add(account)
        mounted = spec.get(
            "automountServiceAccountToken", accounts[account].get("automountServiceAccountToken", True)
        )
        assert mounted is (account in granted), f"{obj['metadata']['name']}: token mounted = {mounted}"
    assert granted <= seen, "a role is bound to an account no workload uses"


def test_leases_are_granted_in_the_namespace_only(base: list[Obj]) -> None:
    """A leased process's Lease rights come from a Role in allot-system, never from a ClusterRole."""
    for role in [o for o in base if o["kind"] == "ClusterRole"]:
        assert not [r for r in role["rules"] if "coordination.k8s.io" in r["apiGroups"]], role["metadata"][
            "name"
        ]
    lease_roles = [
        o for o in base if o["kind"] == "Role" and "coordination.k8s.io" in o["rules"][0]["apiGroups"]
    ]
    assert {o["metadata"]["namespace"] for o in lease_roles} == {"allot-system"}
    assert len(lease_roles) == len(LEASED)
