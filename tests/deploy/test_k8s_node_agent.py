"""deploy/k8s/overlays/node-agent: the kustomize base with qos-enforcer as the node agent, the same as the Helm chart's
nodeAgent.enabled (pod security, environment, host directories, NetworkPolicy), and the namespace admitting it while
still warning about every other pod. test_k8s_schema.py validates the overlay's objects with every kustomization."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Obj = dict[str, Any]
OVERLAY = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "overlays" / "node-agent"
# The chart with servers of the user's on the default ports, as the kustomize base expects them.
CHART_VALUES = {
    "nodeAgent": {"enabled": True},
    "postgresql": {"enabled": False, "url": "postgresql://allot:pw@postgres:5432/allot"},
    "nats": {"enabled": False, "url": "nats://nats:4222"},
}


def agent(objects: list[Obj]) -> tuple[Obj, Obj]:
    """(the qos-enforcer DaemonSet's pod spec, its NetworkPolicy's spec)."""

    def of(kind: str) -> Obj:
        (found,) = [
            o
            for o in objects
            if o["kind"] == kind
            and o["metadata"]["labels"].get("app.kubernetes.io/component") == "qos-enforcer"
        ]
        return found

    return dict(of("DaemonSet")["spec"]["template"]["spec"]), dict(of("NetworkPolicy")["spec"])


def host_mounts(spec: Obj) -> dict[str, tuple[str, str]]:
    """mount path → (host path, hostPath type) of every hostPath volume."""
    (container,) = spec["containers"]
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    return {
        m["mountPath"]: (volumes[m["name"]]["path"], volumes[m["name"]].get("type", ""))
        for m in container["volumeMounts"]
        if m["name"] in volumes
    }


@pytest.fixture(scope="module")
def overlay(kustomize: Callable[[Path], list[Obj]]) -> list[Obj]:
    return kustomize(OVERLAY)


def test_the_overlay_runs_the_agent_as_the_chart_does(
    overlay: list[Obj], render_chart: Callable[..., Any]
) -> None:
    ours, our_policy = agent(overlay)
    chart, chart_policy = agent(render_chart(CHART_VALUES))
    (container,) = ours["containers"]
    (chart_container,) = chart["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ALLOT_QOS_AGENT"] == "on"
    assert ours["securityContext"] == chart["securityContext"]
    assert container["securityContext"] == chart_container["securityContext"]
    assert host_mounts(ours) == host_mounts(chart) and len(host_mounts(ours)) == 5
    assert {path for path, (host, _) in host_mounts(ours).items() if path != host} == set()
    assert our_policy["policyTypes"] == chart_policy["policyTypes"]
    assert our_policy["ingress"] == chart_policy["ingress"]
    assert our_policy["egress"] == chart_policy["egress"]
    assert our_policy["podSelector"]["matchLabels"].items() <= ours_labels(overlay).items()


def ours_labels(objects: list[Obj]) -> Obj:
    (daemonset,) = [
        o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "allot-qos-enforcer"
    ]
    return dict(daemonset["spec"]["template"]["metadata"]["labels"])


def test_the_namespace_admits_the_agent_and_still_reports_the_rest(overlay: list[Obj]) -> None:
    (namespace,) = [o for o in overlay if o["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert (
        labels["pod-security.kubernetes.io/warn"]
        == labels["pod-security.kubernetes.io/audit"]
        == "restricted"
    )
    assert {o["metadata"].get("namespace") for o in overlay if o["kind"] == "NetworkPolicy"} == {
        "allot-system"
    }
