"""RBAC is least privilege per component: exactly the grants below, and no API token where none is needed.

kube-sync list-watches pods, ElasticQuotas, ElasticQuotaProfiles and PodGroups; binder creates Bindings (which carry
the allocation annotations) and patches ElasticQuota status; node-reporter list-watches Nodes, Koordinator Devices
and NodeResourceTopologies. Nothing else in Allot talks to the API server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BASE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"
READ = ("list", "watch")

Obj = dict[str, Any]
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)

EXPECTED: dict[str, set[Grant]] = {
    "allot-kube-sync": {
        *(("", "pods", verb) for verb in READ),
        *(("scheduling.sigs.k8s.io", "elasticquotas", verb) for verb in READ),
        *(("scheduling.sigs.k8s.io", "podgroups", verb) for verb in READ),
        *(("quota.koordinator.sh", "elasticquotaprofiles", verb) for verb in READ),
    },
    "allot-binder": {
        ("", "pods/binding", "create"),
        ("scheduling.sigs.k8s.io", "elasticquotas", "patch"),
        ("scheduling.sigs.k8s.io", "elasticquotas/status", "patch"),
    },
    "allot-node-reporter": {
        *(("", "nodes", verb) for verb in READ),
        *(("scheduling.koordinator.sh", "devices", verb) for verb in READ),
        *(("topology.node.k8s.io", "noderesourcetopologies", verb) for verb in READ),
    },
}


@pytest.fixture(scope="module")
def base(kustomize: Callable[[Path], list[Obj]]) -> list[Obj]:
    return kustomize(BASE)


def named(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def grants(objects: list[Obj]) -> dict[str, set[Grant]]:
    """ServiceAccount name → every (apiGroup, resource, verb) its bindings give it."""
    roles = {("ClusterRole", n): o for n, o in named(objects, "ClusterRole").items()}
    roles |= {("Role", n): o for n, o in named(objects, "Role").items()}
    result: dict[str, set[Grant]] = {}
    for binding in [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]:
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds a role that is not shipped: {ref}"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", subject
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            result.setdefault(subject["name"], set()).add((group, resource, verb))
    return result


def test_each_component_gets_exactly_its_grants(base: list[Obj]) -> None:
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


def test_every_workload_has_its_own_account_and_a_token_only_if_it_has_grants(base: list[Obj]) -> None:
    accounts = named(base, "ServiceAccount")
    granted = set(grants(base))
    seen = set()
    for obj in [o for o in base if o["kind"] in ("Deployment", "DaemonSet", "Job")]:
        spec = obj["spec"]["template"]["spec"]
        account = spec.get("serviceAccountName", "default")
        assert account in accounts and account not in seen, f"{obj['metadata']['name']} shares or lacks an account"
        seen.add(account)
        mounted = spec.get("automountServiceAccountToken", accounts[account].get("automountServiceAccountToken", True))
        assert mounted is (account in granted), f"{obj['metadata']['name']}: token mounted = {mounted}"
    assert granted <= seen, "a role is bound to an account no workload uses"
