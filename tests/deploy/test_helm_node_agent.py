"""nodeAgent.enabled: qos-enforcer's DaemonSet applies its plans on each node (cgroups, HAMi-core's CDI specs, caches
and locks, resctrl), as root with the host's directories, behind a NetworkPolicy; off by default. Rendered offline
and validated against the Kubernetes OpenAPI schemas.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

Obj = dict[str, Any]
Render = Callable[..., list[Obj]]
AGENT = {"nodeAgent": {"enabled": True}}


def one(objects: list[Obj], kind: str, component: str) -> Obj:
    (found,) = [
        o
        for o in objects
        if o["kind"] == kind and o["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    return found


def agent_pod(objects: list[Obj]) -> Obj:
    return dict(one(objects, "DaemonSet", "qos-enforcer")["spec"]["template"]["spec"])


def env(container: Obj) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def policies_for(objects: list[Obj], component: str) -> list[Obj]:
    return [
        p
        for p in objects
        if p["kind"] == "NetworkPolicy"
        and p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component") == component
    ]


def test_the_agent_runs_as_root_with_the_host_directories_at_their_own_paths(
    render_chart: Render, kube_version: str
) -> None:
    # Off by default: qos-enforcer decides and records the plans only, non-root and without host paths.
    objects = render_chart({})
    spec = agent_pod(objects)
    (container,) = spec["containers"]
    assert env(container)["ALLOT_QOS_AGENT"] == "off" and "ALLOT_QOS_DRY_RUN" not in env(container)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert not any("hostPath" in v for v in spec["volumes"])
    assert policies_for(objects, "qos-enforcer") == []
    objects = render_chart(
        {"nodeAgent": {"enabled": True, "nodeSelector": {"nvidia.com/gpu.present": "true"}}}
    )
    spec = agent_pod(objects)
    (container,) = spec["containers"]
    assert env(container)["ALLOT_QOS_AGENT"] == "on"
    assert spec["securityContext"]["runAsUser"] == 0 and spec["securityContext"]["runAsNonRoot"] is False
    # Root to write root-owned host files, and nothing more: no privilege, no capability, a read-only root.
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"].get("privileged") is not True
    host = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {v["path"] for v in host.values()} == {
        "/sys/fs/cgroup",
        "/var/run/cdi",
        "/usr/local/vgpu",
        "/tmp/vgpulock",
        "/sys/fs/resctrl",
    }
    for name, volume in host.items():
        assert mounts[name] == volume["path"], name
    assert host["host-cgroup"]["type"] == "Directory" and host["host-cdi"]["type"] == "DirectoryOrCreate"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"operator": "Exists"} in spec["tolerations"]
    # The other per-node agent and the control plane are untouched.
    assert (
        one(objects, "DaemonSet", "node-reporter")["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        == 10001
    )
    problems = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert problems == []


def test_the_host_paths_are_where_qos_enforcer_looks_by_default(render_chart: Render) -> None:
    from qos_enforcer.config import AgentSettings, HamiPaths

    (container,) = agent_pod(render_chart(AGENT))["containers"]
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    agent, hami = AgentSettings(), HamiPaths()
    assert {agent.cgroup_fs_root, agent.cdi_spec_dir, agent.resctrl_root, hami.lock_host_dir} <= mounted
    # HAMi-core's library and the per-container caches the agent creates are below the vgpu directory.
    for path in (hami.libvgpu_host_path, hami.cache_host_dir):
        assert any(path.startswith(f"{m}/") for m in mounted), path


def test_dry_run_and_a_path_left_out(render_chart: Render) -> None:
    spec = agent_pod(
        render_chart({"nodeAgent": {"enabled": True, "dryRun": True, "hostPaths": {"resctrl": ""}}})
    )
    (container,) = spec["containers"]
    assert env(container)["ALLOT_QOS_DRY_RUN"] == "1"
    assert "/sys/fs/resctrl" not in {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}


@pytest.mark.parametrize(
    "values",
    [
        {"nodeAgent": {"enabled": True, "hostPaths": {"cgroup": "sys/fs/cgroup"}}},
        {"nodeAgent": {"enable": True}},
    ],
    ids=["relative-path", "unknown-key"],
)
def test_bad_node_agent_values_are_refused_by_the_schema(render_chart: Render, values: Obj) -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match="nodeAgent"):
        render_chart(values)


def test_the_agents_network_policy_admits_metrics_and_lets_out_only_dns_and_the_servers(
    render_chart: Render,
) -> None:
    objects = render_chart(AGENT)
    (policy,) = policies_for(objects, "qos-enforcer")
    pod_labels = one(objects, "DaemonSet", "qos-enforcer")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["spec"]["ingress"]
    assert ingress == {"ports": [{"protocol": "TCP", "port": 8080}]}
    dns, *servers = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53} and "to" not in dns
    # Each server rule picks the bundled server's pods on the port they listen on.
    for rule in servers:
        (peer,) = rule["to"]
        server = one(
            objects, "StatefulSet", peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        )
        labels = server["spec"]["template"]["metadata"]["labels"]
        assert peer["podSelector"]["matchLabels"].items() <= labels.items()
        (port,) = rule["ports"]
        ports = {
            p["containerPort"] for c in server["spec"]["template"]["spec"]["containers"] for p in c["ports"]
        }
        assert port["port"] in ports
    assert len(servers) == 2
    # The bundled servers' own policies admit the agent (it carries this release's Allot labels).
    for server in ("postgresql", "nats"):
        (theirs,) = policies_for(objects, server)
        selector = theirs["spec"]["ingress"][0]["from"][0]["podSelector"]
        assert selector["matchLabels"].items() <= pod_labels.items()
        assert pod_labels["app.kubernetes.io/component"] not in selector["matchExpressions"][0]["values"]


def test_with_servers_of_yours_the_agent_may_reach_their_ports(render_chart: Render) -> None:
    values = {
        "nodeAgent": {
            "enabled": True,
            "networkPolicy": {
                "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
                "extraEgress": [{"ports": [{"protocol": "TCP", "port": 4318}]}],
            },
        },
        "postgresql": {"enabled": False, "url": "postgresql://u:1234@db.example:6543/allot"},
        "nats": {"enabled": False, "url": "nats://nats.example"},
    }
    (policy,) = policies_for(render_chart(values), "qos-enforcer")
    assert policy["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    ]
    ports = [rule["ports"][0]["port"] for rule in policy["spec"]["egress"][1:]]
    # The URL's port, NATS's default when the URL has none, then the extra rule.
    assert ports == [6543, 4222, 4318]


def test_the_policy_can_be_switched_off(render_chart: Render) -> None:
    objects = render_chart({"nodeAgent": {"enabled": True, "networkPolicy": {"enabled": False}}})
    assert policies_for(objects, "qos-enforcer") == []


def test_the_notes_say_what_the_namespace_needs_only_when_the_agent_is_on() -> None:
    helm = pytest.importorskip("helm_python")
    chart_dir = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "allot"

    def notes(values: Obj) -> str:
        with helm.Chart.load(chart_dir) as chart:
            return str(
                chart.render(values, name="allot", namespace="gpu", is_install=True)[
                    "allot/templates/NOTES.txt"
                ]
            )

    label = "kubectl label namespace gpu pod-security.kubernetes.io/enforce=privileged"
    assert label in notes(AGENT) and label not in notes({})
    assert "in dry run" in notes({"nodeAgent": {"enabled": True, "dryRun": True}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"nodeAgent": {"enabled": True, "hostPaths": {"cdi": "/etc/cdi"}}},
            "config.qos-enforcer.agent.cdiSpecDir is /var/run/cdi, which is not under any of nodeAgent.hostPaths",
        ),
        (
            {
                "nodeAgent": {"enabled": True},
                "config": {"qos-enforcer": {"hamiCore": {"lockHostDir": "/var/lock/v"}}},
            },
            "config.qos-enforcer.hamiCore.lockHostDir is /var/lock/v, which is not under any of nodeAgent.hostPaths",
        ),
        (
            {"nodeAgent": {"enabled": True, "hostPaths": {"vgpu": "/opt/vgpu"}}},
            "config.qos-enforcer.hamiCore.libvgpuHostPath is /usr/local/vgpu/libvgpu.so, which is not under",
        ),
    ],
    ids=["cdi-moved", "lock-elsewhere", "vgpu-moved"],
)
def test_a_path_the_agent_writes_that_is_not_mounted_is_refused(
    render_chart: Render, values: Obj, message: str
) -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render_chart(values)


def test_paths_moved_together_with_the_config_are_mounted(render_chart: Render) -> None:
    values = {
        "nodeAgent": {"enabled": True, "hostPaths": {"cdi": "/etc/cdi", "vgpu": "/opt/vgpu", "resctrl": ""}},
        "config": {
            "qos-enforcer": {
                "agent": {"cdiSpecDir": "/etc/cdi", "resctrlRoot": "/nowhere"},
                "hamiCore": {"libvgpuHostPath": "/opt/vgpu/libvgpu.so", "cacheHostDir": "/opt/vgpu/caches"},
            }
        },
    }
    spec = agent_pod(render_chart(values))
    (container,) = spec["containers"]
    assert {"/etc/cdi", "/opt/vgpu"} <= {m["mountPath"] for m in container["volumeMounts"]}
    # The config reaches the agent where ALLOT_CONFIG_FILE says.
    assert env(container)["ALLOT_CONFIG_FILE"] == "/etc/allot/qos-enforcer.yaml"
