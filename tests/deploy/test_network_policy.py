"""NetworkPolicies admit only Allot's own pods to the servers Allot ships: NATS in the kustomize dev overlay, NATS and
PostgreSQL in the Helm chart's bundled sub-charts.

Each policy is evaluated as the network plugin would: label selectors (matchLabels and matchExpressions) against the
rendered pod templates. The server's pod must be selected (so its ingress is restricted), every Allot pod that needs
it admitted, and anything else refused: a pod of another application, a pod of another release, the other server.
Ports must be the server's own. The objects themselves are validated with the others (test_k8s_schema.py,
test_helm_chart.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEV = REPO / "deploy" / "k8s" / "overlays" / "dev"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job")

Obj = dict[str, Any]
Render = Callable[..., list[Obj]]


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector applied to ``labels`` (an empty selector selects everything)."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def pod_labels(objects: list[Obj]) -> dict[str, dict[str, str]]:
    """Workload name → the labels of its pods."""
    return {
        o["metadata"]["name"]: dict(o["spec"]["template"]["metadata"]["labels"])
        for o in objects
        if o["kind"] in WORKLOADS
    }


def admitted(policy: Obj, labels: dict[str, str], port: int, named: dict[str, int]) -> bool:
    """Whether ``policy`` lets a pod with ``labels`` in the same namespace reach ``port`` of the selected pods."""
    for rule in policy["spec"].get("ingress", []):
        peers = rule.get("from", [])
        assert all(set(peer) == {"podSelector"} for peer in peers), (
            "only same-namespace pod selectors expected"
        )
        ports = {named.get(p["port"], p["port"]) for p in rule.get("ports", [])}
        if port in ports and any(selects(peer["podSelector"], labels) for peer in peers):
            return True
    return False


def container_ports(workload: Obj) -> dict[str, int]:
    return {
        p["name"]: p["containerPort"]
        for c in workload["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    }


def check_fence(objects: list[Obj], server: str, allot: set[str], ports: set[int]) -> None:
    """The one policy selecting ``server``'s pods admits exactly the workloads ``allot`` on ``ports``."""
    labels = pod_labels(objects)
    policies = [
        p
        for p in objects
        if p["kind"] == "NetworkPolicy" and selects(p["spec"]["podSelector"], labels[server])
    ]
    assert len(policies) == 1, f"{server}: {len(policies)} NetworkPolicies select its pods"
    (policy,) = policies
    assert "Ingress" in policy["spec"]["policyTypes"]
    assert [n for n, lab in labels.items() if selects(policy["spec"]["podSelector"], lab)] == [server]
    workload = next(o for o in objects if o["kind"] in WORKLOADS and o["metadata"]["name"] == server)
    named = container_ports(workload)
    assert ports <= set(named.values()), f"{server} does not listen on {ports}"
    outsiders = {
        "another application": {"app.kubernetes.io/name": "curl"},
        "no labels": {},
        "another release": {**labels[sorted(allot)[0]], "app.kubernetes.io/instance": "someone-else"},
    }
    for port in ports:
        for name in allot:
            assert admitted(policy, labels[name], port, named), f"{name} cannot reach {server}:{port}"
        for name in set(labels) - allot - {server}:
            assert not admitted(policy, labels[name], port, named), f"{name} reaches {server}:{port}"
        for what, outsider in outsiders.items():
            if what == "another release" and "app.kubernetes.io/instance" not in labels[server]:
                continue  # kustomize has no release label: the namespace is the boundary
            assert not admitted(policy, outsider, port, named), f"{what} reaches {server}:{port}"
    unlisted = max(ports) + 1
    assert not any(admitted(policy, labels[n], unlisted, named) for n in allot), "a port beyond the server's"


def test_the_dev_overlay_admits_only_allot_pods_to_nats(kustomize: Callable[[Path], list[Obj]]) -> None:
    objects = kustomize(DEV)
    allot = {n for n, lab in pod_labels(objects).items() if lab.get("app.kubernetes.io/name") == "allot"}
    assert {"allot-relay", "allot-quota-manager", "allot-node-reporter"} <= allot
    check_fence(objects, "nats", allot, {4222, 8222})


@pytest.mark.parametrize("release", ["allot", "sched"])
def test_the_chart_admits_only_its_own_allot_pods_to_the_bundled_servers(
    release: str, render_chart: Render
) -> None:
    objects = render_chart({}, name=release)
    fullname = release if "allot" in release else f"{release}-allot"
    servers = {f"{fullname}-postgresql": {5432}, f"{fullname}-nats": {4222, 8222}}
    allot = set(pod_labels(objects)) - set(servers)
    assert {
        f"{fullname}-relay",
        f"{fullname}-migrate-1",
        f"{fullname}-binder",
        f"{fullname}-webhook",
    } <= allot
    for server, ports in servers.items():
        check_fence(objects, server, allot, ports)


def test_no_policy_for_servers_the_chart_does_not_run_and_each_can_be_turned_off(
    render_chart: Render,
) -> None:
    external = render_chart(
        {
            "postgresql": {"enabled": False, "url": "postgresql://allot:pw@db.example:5432/allot"},
            "nats": {"enabled": False, "url": "nats://nats.example:4222"},
        }
    )
    assert [o for o in external if o["kind"] == "NetworkPolicy"] == []
    no_nats_policy = render_chart({"nats": {"networkPolicy": {"enabled": False}}})
    names = {o["metadata"]["name"] for o in no_nats_policy if o["kind"] == "NetworkPolicy"}
    assert names == {"allot-postgresql"}


def test_the_selector_evaluation_can_fail() -> None:
    """Guards the guard: each operator refuses what it should."""
    labels = {"app": "allot", "component": "relay"}
    assert selects({}, labels)
    assert not selects({"matchLabels": {"app": "other"}}, labels)
    assert not selects(
        {"matchExpressions": [{"key": "component", "operator": "In", "values": ["nats"]}]}, labels
    )
    assert not selects(
        {"matchExpressions": [{"key": "component", "operator": "NotIn", "values": ["relay"]}]}, labels
    )
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, labels)
