"""What the Kubernetes workloads do: which processes run where, probed how, configured with what, with which rights.

All checks read the kustomize output (kubectl renders it; without kubectl they are skipped), because that is what
reaches the cluster: generated ConfigMap names, the namespace, the image tag and the common labels only exist there.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
BASE, DEV = K8S / "base", K8S / "overlays" / "dev"
NAMESPACE = "allot-system"
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
SINGLETONS = {"relay", "ui"}
LEASED_SERVICES = {
    "kube-sync"
}  # not a decider, but writes the log: two replicas on a Lease like the deciders

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def base(kustomize: Callable[[Path], list[Obj]]) -> list[Obj]:
    return kustomize(BASE)


@pytest.fixture(scope="module")
def dev(kustomize: Callable[[Path], list[Obj]]) -> list[Obj]:
    return kustomize(DEV)


def workloads(objects: list[Obj], *, allot_only: bool = True) -> list[Obj]:
    return [
        o
        for o in objects
        if o["kind"] in WORKLOAD_KINDS
        and (not allot_only or o["metadata"]["labels"].get("app.kubernetes.io/name") == "allot")
    ]


def component(obj: Obj) -> str:
    return str(obj["metadata"]["labels"]["app.kubernetes.io/component"])


def pod(obj: Obj) -> Obj:
    return dict(obj["spec"]["template"]["spec"])


def containers(obj: Obj) -> list[Obj]:
    return [*pod(obj).get("initContainers", []), *pod(obj)["containers"]]


def by_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def long_running(objects: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """(workload, container) of every Allot service and the relay (not the migration Job)."""
    for obj in workloads(objects):
        if obj["kind"] != "Job":
            for container in pod(obj)["containers"]:
                yield obj, container


def secret_templates() -> dict[str, Obj]:
    """The Secrets the user creates (deploy/k8s/*-secret.example.yaml), by name: never applied by the manifests."""
    templates = [yaml.safe_load(p.read_text()) for p in sorted(K8S.glob("*-secret.example.yaml"))]
    return {t["metadata"]["name"]: t for t in templates}


def environment(objects: list[Obj], container: Obj) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom ConfigMaps and Secrets (the user's, from their
    templates), then env (secrets as refs)."""
    config_maps = by_kind(objects, "ConfigMap")
    secrets = secret_templates()
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            name = source["secretRef"]["name"]
            assert name in secrets, f"envFrom refers to a Secret {name} with no template in deploy/k8s"
            env.update({key: f"secret:{name}/{key}" for key in secrets[name]["stringData"]})
            continue
        name = source["configMapRef"]["name"]
        assert name in config_maps, f"envFrom refers to a missing ConfigMap {name}"
        env.update(config_maps[name]["data"])
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        env[var["name"]] = f"secret:{ref['name']}/{ref['key']}" if ref else str(var.get("value", ""))
    return env


# -- which processes, where ------------------------------------------------------------------------------------------


def test_deciders_are_deployments_and_agents_are_daemonsets(
    base: list[Obj], service_names: frozenset[str], node_agents: frozenset[str]
) -> None:
    kinds: dict[str, set[str]] = {}
    for obj in workloads(base):
        kinds.setdefault(obj["kind"], set()).add(component(obj))
    assert kinds == {
        "Deployment": (service_names - node_agents) | {"relay", "kube-sync", "ui"},
        "DaemonSet": set(node_agents),
        "Job": {"migrate"},
    }


def test_each_workload_runs_its_own_real_process(
    base: list[Obj], service_names: frozenset[str], check_argv: Callable[[list[str]], str | None]
) -> None:
    expected = {name: [f"allot-{name}"] for name in service_names} | {
        "relay": ["allot-relay"],
        "ui": ["allot-ui", "--host", "0.0.0.0", "--port", "8080"],
        "kube-sync": ["allot-kube-sync"],
        "migrate": ["allot", "migrate"],
    }
    for obj in workloads(base):
        (container,) = containers(obj)
        argv = [*container.get("command", []), *container.get("args", [])]
        assert check_argv(argv) is None, check_argv(argv)
        assert argv == expected[component(obj)], component(obj)


def test_deciders_run_two_replicas_on_their_lease_and_the_singletons_one(
    base: list[Obj], service_names: frozenset[str], node_agents: frozenset[str]
) -> None:
    deciders = service_names - node_agents
    lease_roles = [
        o for o in base if o["kind"] == "Role" and o["rules"][0]["apiGroups"] == ["coordination.k8s.io"]
    ]
    granted = {
        name for role in lease_roles for rule in role["rules"] for name in rule.get("resourceNames", [])
    }
    for obj in workloads(base):
        if obj["kind"] != "Deployment":
            continue
        (container,) = containers(obj)
        env = {e["name"]: e for e in container.get("env", [])}
        if component(obj) in SINGLETONS:
            # Exactly one: Recreate, so a rollout never runs the old and the new relay at once.
            assert obj["spec"]["replicas"] == 1, component(obj)
            assert obj["spec"]["strategy"]["type"] == "Recreate", component(obj)
            assert "ALLOT_LEADER_ELECTION" not in env, component(obj)
            continue
        assert component(obj) in deciders | LEASED_SERVICES, component(obj)
        assert obj["spec"]["replicas"] == 2, component(obj)
        # A rollout starts the new replica before it stops an old one: a standby is always there.
        assert obj["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }, component(obj)
        assert env["ALLOT_LEADER_ELECTION"]["value"] == "lease", component(obj)
        # The Lease the process takes is the one its Role lets it renew, in the pod's own namespace.
        assert env["ALLOT_LEASE_NAME"]["value"] == obj["metadata"]["name"] in granted, component(obj)
        assert env["ALLOT_LEASE_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert {component(o) for o in workloads(base) if o["kind"] == "Deployment"} == (
        deciders | LEASED_SERVICES | SINGLETONS
    )


def test_replicated_deployments_have_a_disruption_budget_and_singletons_none(base: list[Obj]) -> None:
    budgets = [o for o in base if o["kind"] == "PodDisruptionBudget"]
    covered = set()
    for obj in workloads(base):
        labels = obj["spec"]["template"]["metadata"]["labels"]
        matching = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        if obj["kind"] == "Deployment" and obj["spec"]["replicas"] > 1:
            (budget,) = matching
            # One replica at a time, and a replica that is not ready never blocks a drain.
            assert budget["spec"]["maxUnavailable"] == 1, component(obj)
            assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", component(obj)
            covered.add(budget["metadata"]["name"])
        else:
            # A budget on a single replica would block every drain of its node.
            assert matching == [], component(obj)
    assert covered == {b["metadata"]["name"] for b in budgets}


def test_every_pod_runs_at_the_control_plane_priority(base: list[Obj]) -> None:
    (priority,) = by_kind(base, "PriorityClass").values()
    assert priority["value"] > 0 and priority["globalDefault"] is False
    for obj in workloads(base):
        assert pod(obj)["priorityClassName"] == priority["metadata"]["name"], component(obj)


def test_node_agents_run_on_every_node(base: list[Obj]) -> None:
    for obj in workloads(base):
        if obj["kind"] == "DaemonSet":
            assert {"operator": "Exists"} in pod(obj).get("tolerations", []), component(obj)


def test_the_migration_job_runs_to_completion(base: list[Obj]) -> None:
    (job,) = [o for o in workloads(base) if o["kind"] == "Job"]
    assert pod(job)["restartPolicy"] in {"OnFailure", "Never"}
    assert job["spec"].get("backoffLimit", 6) > 0
    # A finished Job is removed, so a later apply with a new image can create it again.
    assert job["spec"].get("ttlSecondsAfterFinished") is not None


# -- one image -------------------------------------------------------------------------------------------------------


def test_every_allot_container_runs_the_one_image_at_the_workspace_version(base: list[Obj]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    images = {c["image"] for obj in workloads(base) for c in containers(obj)}
    assert images == {f"allot:{version}"}


def test_the_dev_overlay_runs_the_image_compose_builds(dev: list[Obj]) -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    # The CLI image (the Dockerfile's default target), which runs every process; compose's migration runs it.
    compose_image = compose["services"]["migrate"]["image"]
    assert {c["image"] for obj in workloads(dev) for c in containers(obj)} == {compose_image}


# -- probes, ports, security, resources ------------------------------------------------------------------------------


def test_probes_check_healthz_and_readyz_on_the_http_port(base: list[Obj]) -> None:
    for obj, container in long_running(base):
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        http_port = int(environment(base, container).get("ALLOT_HTTP_PORT", "8080"))
        paths = {}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = container.get(probe, {}).get("httpGet")
            assert get, f"{component(obj)} has no HTTP {probe}"
            port = ports.get(get["port"], get["port"])
            assert port == http_port, (
                f"{component(obj)}: {probe} probes {port}, the process listens on {http_port}"
            )
            paths[probe] = get["path"]
        # A decider on a Lease is ready once alive: its standby builds its projection only when it leads, so
        # waiting for /readyz would hold every rollout and drain on the standby.
        leased = any(
            e["name"] == "ALLOT_LEADER_ELECTION" and e.get("value") == "lease"
            for e in container.get("env", [])
        )
        ready = "/healthz" if leased else "/readyz"
        assert paths == {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": ready}


def _effective(pod_spec: Obj, container: Obj, key: str) -> Any:
    return container.get("securityContext", {}).get(key, pod_spec.get("securityContext", {}).get(key))


@pytest.mark.parametrize("overlay", [BASE, DEV], ids=["base", "dev"])
def test_every_container_runs_as_non_root_without_privileges(
    overlay: Path, kustomize: Callable[[Path], list[Obj]]
) -> None:
    for obj in workloads(kustomize(overlay), allot_only=False):
        spec = pod(obj)
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], obj["metadata"]["name"]
        for container in containers(obj):
            where = f"{obj['metadata']['name']}/{container['name']}"
            assert _effective(spec, container, "runAsNonRoot") is True, where
            assert _effective(spec, container, "runAsUser") not in (0, None), where
            assert (_effective(spec, container, "seccompProfile") or {}).get("type") == "RuntimeDefault", (
                where
            )
            context = container.get("securityContext", {})
            assert context.get("allowPrivilegeEscalation") is False, where
            assert not context.get("privileged"), where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            assert context.get("readOnlyRootFilesystem") is True, where


def test_pods_run_as_the_user_the_image_creates(base: list[Obj]) -> None:
    user = re.search(r"^USER\s+(\d+)", (REPO / "Dockerfile").read_text(), flags=re.MULTILINE)
    assert user, "the Dockerfile sets no numeric USER"
    for obj in workloads(base):
        assert pod(obj)["securityContext"]["runAsUser"] == int(user.group(1)), component(obj)


def test_the_namespace_enforces_the_restricted_pod_security_standard(base: list[Obj]) -> None:
    (namespace,) = by_kind(base, "Namespace").values()
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for obj in base:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == NAMESPACE, obj["metadata"]["name"]


def test_every_container_has_requests_and_limits(dev: list[Obj]) -> None:
    for obj in workloads(dev, allot_only=False):
        for container in containers(obj):
            resources = container.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{obj['metadata']['name']}: {kind}"


# -- configuration ---------------------------------------------------------------------------------------------------


def test_only_variables_the_settings_accept(base: list[Obj], accepted_env: frozenset[str]) -> None:
    for obj in workloads(base):
        for container in containers(obj):
            unknown = [
                k for k in environment(base, container) if k.startswith("ALLOT_") and k not in accepted_env
            ]
            assert unknown == [], component(obj)


def test_every_process_gets_the_database_url_from_the_secret(base: list[Obj]) -> None:
    for obj in workloads(base):
        for container in containers(obj):
            url = environment(base, container).get("ALLOT_DATABASE_URL", "")
            assert url.startswith("secret:"), f"{component(obj)}: ALLOT_DATABASE_URL must come from a Secret"


def test_the_relay_signs_with_the_key_in_the_anchor_secret(base: list[Obj]) -> None:
    from allot_eventstore.anchor import CheckpointPolicy

    (relay,) = [o for o in workloads(base) if component(o) == "relay"]
    (container,) = containers(relay)
    env = environment(base, container)
    CheckpointPolicy.from_env(env)  # the intervals are ones the relay accepts
    mount = {m["name"]: m for m in container["volumeMounts"]}["anchor-key"]
    secret = {v["name"]: v for v in pod(relay)["volumes"]}["anchor-key"]["secret"]
    assert env["ALLOT_ANCHOR_KEY_FILE"] == f"{mount['mountPath']}/{secret['items'][0]['path']}"
    assert secret["defaultMode"] == 0o440 and pod(relay)["securityContext"]["fsGroup"] == 10001
    example = yaml.safe_load((K8S / "anchor-key-secret.example.yaml").read_text())
    assert (example["metadata"]["name"], set(example["stringData"])) == (
        secret["secretName"],
        {secret["items"][0]["key"]},
    )
    assert not any(o["kind"] == "Secret" for o in base), "the base never carries a key"


def test_long_running_processes_get_the_shared_settings(base: list[Obj]) -> None:
    for obj, container in long_running(base):
        env = environment(base, container)
        assert env.get("ALLOT_NATS_URL", "").startswith("nats://"), component(obj)


def test_processes_that_talk_to_the_api_server_run_in_kubernetes_mode(base: list[Obj]) -> None:
    modes = {
        component(obj): environment(base, c).get("ALLOT_KUBE_MODE", "standalone")
        for obj, c in long_running(base)
    }
    assert {name for name, mode in modes.items() if mode == "kubernetes"} == {
        "binder",
        "node-reporter",
        "reservation-manager",
    }
    # kube-sync only exists for Kubernetes: it has no standalone mode to choose.
    assert "ALLOT_KUBE_MODE" not in environment(base, containers(_one(base, "kube-sync"))[0])


def test_kube_sync_watches_the_scheduler_name_pods_use(base: list[Obj]) -> None:
    from allot_kube_sync.sync import DEFAULT_SCHEDULER_NAME

    (container,) = containers(_one(base, "kube-sync"))
    assert (
        environment(base, container).get("ALLOT_SCHEDULER_NAME", DEFAULT_SCHEDULER_NAME) == "allot-scheduler"
    )


def _one(objects: list[Obj], name: str) -> Obj:
    (obj,) = [o for o in workloads(objects) if component(o) == name]
    return obj


def test_config_files_are_mounted_and_valid_for_their_service(
    base: list[Obj], build_processor: Callable[[str, dict[str, Any]], object]
) -> None:
    config_maps = by_kind(base, "ConfigMap")
    configured = set()
    for obj, container in long_running(base):
        path = environment(base, container).get("ALLOT_CONFIG_FILE")
        if not path:
            continue
        volumes = {v["name"]: v for v in pod(obj)["volumes"]}
        for mount in container.get("volumeMounts", []):
            if Path(path).is_relative_to(mount["mountPath"]):
                config_map = config_maps[volumes[mount["name"]]["configMap"]["name"]]
                text = config_map["data"][str(Path(path).relative_to(mount["mountPath"]))]
                build_processor(component(obj), yaml.safe_load(text) or {})
                configured.add(component(obj))
        assert component(obj) in configured, f"{component(obj)}: {path} is not in a mounted ConfigMap"
    assert configured == {"device-allocator", "quota-manager"}


def test_config_maps_and_volumes_refer_to_objects_that_exist(dev: list[Obj]) -> None:
    config_maps = by_kind(dev, "ConfigMap")
    for obj in workloads(dev, allot_only=False):
        for volume in pod(obj).get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, volume


# -- labels and Services ---------------------------------------------------------------------------------------------


def test_common_labels(dev: list[Obj]) -> None:
    for obj in dev:
        assert obj["metadata"]["labels"].get("app.kubernetes.io/part-of") == "allot", obj["metadata"]["name"]
    for obj in workloads(dev, allot_only=False):
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert {"app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/part-of"} <= set(
            labels
        )
        assert obj["spec"].get("selector", {}).get("matchLabels", labels).items() <= labels.items()


def test_every_long_running_workload_has_a_metrics_service(dev: list[Obj]) -> None:
    services = by_kind(dev, "Service")
    pods = [
        (obj, obj["spec"]["template"]["metadata"]["labels"])
        for obj in workloads(dev, allot_only=False)
        if obj["kind"] != "Job"
    ]
    covered = set()
    for service in services.values():
        selector = service["spec"]["selector"].items()
        matches = [o for o, labels in pods if selector <= labels.items()]
        assert len(matches) == 1, f"Service {service['metadata']['name']} selects {len(matches)} workloads"
        obj = matches[0]
        port_names = {p.get("name") for c in containers(obj) for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{service['metadata']['name']}: {port['targetPort']}"
        covered.add(obj["metadata"]["name"])
    assert covered == {o["metadata"]["name"] for o, _ in pods}


# -- the dev overlay's NATS ------------------------------------------------------------------------------------------


def test_the_dev_nats_is_a_single_server_that_fsyncs_every_second(dev: list[Obj]) -> None:
    (nats,) = by_kind(dev, "StatefulSet").values()
    assert nats["spec"]["replicas"] == 1
    config_maps = by_kind(dev, "ConfigMap")
    (volume,) = [v for v in pod(nats)["volumes"] if "configMap" in v]
    (conf,) = config_maps[volume["configMap"]["name"]]["data"].values()
    assert re.search(r"^\s*sync_interval:\s*1s\s*$", conf, flags=re.MULTILINE)
    # The store is on the claim, not in the container's (read-only) filesystem.
    store = re.search(r"^\s*store_dir:\s*\"?([^\"\n]+)", conf, flags=re.MULTILINE)
    (container,) = containers(nats)
    claims = {t["metadata"]["name"] for t in nats["spec"]["volumeClaimTemplates"]}
    assert store and any(
        m["mountPath"] == store.group(1) and m["name"] in claims for m in container["volumeMounts"]
    )


def test_the_dev_overlay_points_allot_at_its_nats(dev: list[Obj]) -> None:
    services = by_kind(dev, "Service")
    for obj, container in long_running(dev):
        url = urlsplit(environment(dev, container)["ALLOT_NATS_URL"])
        assert url.hostname in services, f"{component(obj)}: no Service {url.hostname}"
        assert url.port in {p["port"] for p in services[url.hostname]["spec"]["ports"]}
