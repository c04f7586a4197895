"""The Helm chart's workloads do what deploy/k8s/base does: the same control plane, real commands, environments the
settings accept, replicas, budgets, priority, leases and the relay's signing key.

The chart is rendered offline by Helm's own template engine (:mod:`allot_testing.helm_chart`); the fixtures
``rendered`` (every case of ``CASES``) and ``crds`` are in conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from allot_testing.helm_chart import (
    BASE,
    CASES,
    LEASED,
    SINGLETONS,
    Obj,
    by_kind,
    component,
    env_of,
    pod,
    workloads,
)

FIXTURES = Path(__file__).parent / "fixtures"


# -- the same control plane as deploy/k8s/base ---------------------------------------------------------------------


def _strip_instance(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "app.kubernetes.io/instance"}


def test_the_chart_installs_what_the_kustomize_base_does(
    rendered: dict[str, list[Obj]],
    kustomize: Callable[[Path], list[Obj]],
    grants_of: Callable[[list[Obj]], dict[str, set[tuple[str, str, str]]]],
) -> None:
    """Release "allot" in allot-system with default values: the same workloads, commands, replicas, strategies,
    probes, security, resources, variables, RBAC grants, Services, budgets and priority as deploy/k8s/base."""
    chart, base = rendered["external"], kustomize(BASE)
    chart_grants = grants_of(chart)
    # The webhook (chart only) lists ElasticQuotas to check a quota against its tree, and what applying the
    # ClusterColocationProfiles to a new pod needs; nothing else.
    assert chart_grants.pop("allot-webhook") == {
        ("scheduling.sigs.k8s.io", "elasticquotas", "list"),
        ("config.koordinator.sh", "clustercolocationprofiles", "list"),
        ("", "namespaces", "get"),
        ("scheduling.k8s.io", "priorityclasses", "list"),
    }
    assert chart_grants == grants_of(base)
    chart_workloads = {c: o for c, o in workloads(chart).items() if c != "webhook"}
    base_workloads = workloads(base)
    assert set(chart_workloads) == set(base_workloads)
    for name, ours in chart_workloads.items():
        theirs = base_workloads[name]
        assert ours["kind"] == theirs["kind"], name
        for key in ("replicas", "strategy", "backoffLimit", "ttlSecondsAfterFinished"):
            assert ours["spec"].get(key) == theirs["spec"].get(key), (name, key)
        ours_pod, theirs_pod = pod(ours), pod(theirs)
        for key in (
            "serviceAccountName",
            "automountServiceAccountToken",
            "securityContext",
            "restartPolicy",
            "priorityClassName",
            "tolerations",
        ):
            assert ours_pod.get(key) == theirs_pod.get(key), (name, key)
        spread = [
            {**t, "labelSelector": {"matchLabels": _strip_instance(t["labelSelector"]["matchLabels"])}}
            for t in ours_pod.get("topologySpreadConstraints", [])
        ]
        assert spread == theirs_pod.get("topologySpreadConstraints", []), name
        (our_container,) = ours_pod["containers"]
        (their_container,) = theirs_pod["containers"]
        for key in (
            "name",
            "command",
            "ports",
            "resources",
            "securityContext",
            "startupProbe",
            "livenessProbe",
            "readinessProbe",
        ):
            assert our_container.get(key) == their_container.get(key), (name, key)
        # The variables: the base leaves the lease timings at their defaults, the chart says them.
        timings = {"ALLOT_LEASE_DURATION_S", "ALLOT_LEASE_RENEW_DEADLINE_S", "ALLOT_LEASE_RETRY_PERIOD_S"}
        ours_env = {k: v for k, v in env_of(our_container).items() if k not in timings}
        theirs_env = env_of(their_container)
        assert ours_env.keys() == theirs_env.keys(), name
        for key, var in ours_env.items():
            if "value" in var:
                assert var == theirs_env[key], (name, key)
    base_env = [c for c in by_kind(base, "ConfigMap").values() if "ALLOT_NATS_PREFIX" in c["data"]][0]["data"]
    chart_env = by_kind(chart, "ConfigMap")["allot-env"]["data"]
    assert chart_env.keys() == base_env.keys()
    assert {k: v for k, v in chart_env.items() if k != "ALLOT_NATS_URL"} == {
        k: v for k, v in base_env.items() if k != "ALLOT_NATS_URL"
    }
    base_config = [c for c in by_kind(base, "ConfigMap").values() if "quota-manager.yaml" in c["data"]][0][
        "data"
    ]
    chart_config = by_kind(chart, "ConfigMap")["allot-service-config"]["data"]
    assert {k: yaml.safe_load(v) for k, v in chart_config.items()} == {
        k: yaml.safe_load(v) for k, v in base_config.items()
    }
    for kind in ("PodDisruptionBudget", "Service"):
        ours_specs = {
            n: {
                **o["spec"],
                "selector": _strip_instance(o["spec"]["selector"].get("matchLabels", o["spec"]["selector"])),
            }
            for n, o in by_kind(chart, kind).items()
            if component(o) != "webhook"
        }
        theirs_specs = {
            n: {**o["spec"], "selector": o["spec"]["selector"].get("matchLabels", o["spec"]["selector"])}
            for n, o in by_kind(base, kind).items()
        }
        assert ours_specs == theirs_specs, kind
    (ours_priority,) = by_kind(chart, "PriorityClass").values()
    (theirs_priority,) = by_kind(base, "PriorityClass").values()
    assert {k: v for k, v in ours_priority.items() if k not in ("metadata", "description")} == {
        k: v for k, v in theirs_priority.items() if k not in ("metadata", "description")
    }
    assert ours_priority["metadata"]["name"] == theirs_priority["metadata"]["name"]


def test_every_container_runs_a_real_command_with_variables_the_settings_accept(
    rendered: dict[str, list[Obj]],
    check_argv: Callable[[list[str]], str | None],
    accepted_env: frozenset[str],
) -> None:
    for case, objects in rendered.items():
        for name, obj in workloads(objects).items():
            if name in ("postgresql", "nats"):
                continue
            for container in pod(obj)["containers"]:
                assert check_argv(container["command"]) is None, (case, check_argv(container["command"]))
                names = set(env_of(container))
                for source in container.get("envFrom", []):
                    names |= set(env_from(objects, source))
                unknown = {n for n in names if n.startswith("ALLOT_")} - accepted_env
                assert unknown == set(), (case, name)
                assert {n for n in names if not n.startswith(("ALLOT_", "OTEL_"))} == set(), (case, name)


def env_from(objects: list[Obj], source: Obj) -> dict[str, str]:
    """The variables one ``envFrom`` entry brings: a rendered ConfigMap's data, a rendered Secret's stringData, or
    for a Secret the user creates (nats.existingSecret) the NATS credentials it is documented to hold."""
    if "configMapRef" in source:
        return dict(by_kind(objects, "ConfigMap")[source["configMapRef"]["name"]]["data"])
    name = source["secretRef"]["name"]
    secret = by_kind(objects, "Secret").get(name)
    if secret is not None:
        return dict(secret["stringData"])
    return {"ALLOT_NATS_USER": "allot", "ALLOT_NATS_PASSWORD": f"from the Secret {name}"}


def _environment(objects: list[Obj], obj: Obj, container: Obj, namespace: str) -> dict[str, str]:
    """The container's environment as the kubelet builds it (Secrets and the downward API filled in)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(env_from(objects, source))
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "secretKeyRef" in source:
            env[var["name"]] = "postgresql://allot@db:5432/allot"
        elif "fieldRef" in source:
            env[var["name"]] = {"metadata.namespace": namespace, "spec.nodeName": "node-1"}[
                source["fieldRef"]["fieldPath"]
            ]
        else:
            env[var["name"]] = var["value"]
    return env


@pytest.mark.parametrize("case", CASES)
def test_the_settings_load_from_each_rendered_environment(case: str, rendered: dict[str, list[Obj]]) -> None:
    """The runtime's own settings loader reads every service's rendered environment, and the deciders elect their
    leader the way the values say, on the Lease their Role lets them renew."""
    from allot_runtime import settings

    release, namespace, values = CASES[case]
    objects = rendered[case]
    lease_mode = values.get("leaderElection", {}).get("mode", "lease") == "lease"
    roles = by_kind(objects, "Role")
    for name, obj in workloads(objects).items():
        if name in SINGLETONS | {"migrate", "webhook", "postgresql", "nats"}:
            continue
        (container,) = pod(obj)["containers"]
        loaded = settings.load(name, _environment(objects, obj, container, namespace))
        nats_url = values.get("nats", {}).get("url") or f"nats://{release}-nats:4222"
        assert loaded.nats_url == nats_url, (case, name)
        if name in LEASED and lease_mode:
            assert loaded.leader_election == "lease", (case, name)
            assert loaded.lease_namespace == namespace
            role = roles[f"{obj['metadata']['name']}-lease"]
            assert [loaded.lease_name] == role["rules"][1]["resourceNames"], (case, name)
            timing = values.get("leaderElection", {})
            assert loaded.lease_duration_s == timing.get("leaseDurationSeconds", 15)
            assert loaded.lease_renew_deadline_s == timing.get("renewDeadlineSeconds", 10)
            assert loaded.lease_retry_period_s == timing.get("retryPeriodSeconds", 2)
        else:
            assert loaded.leader_election == "advisory", (case, name)


def test_advisory_mode_runs_one_replica_per_decider_without_leases(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["bundled"]
    assert by_kind(objects, "Role") == {}
    for name in LEASED:
        obj = workloads(objects)[name]
        assert obj["spec"]["replicas"] == 1 and obj["spec"]["strategy"] == {"type": "Recreate"}, name
        (container,) = pod(obj)["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", name
    budgets = {component(b) for b in by_kind(objects, "PodDisruptionBudget").values()}
    assert budgets == {"webhook"}
    accounts = by_kind(objects, "ServiceAccount")
    for name in ("gang-coordinator", "quota-manager", "device-allocator"):
        assert accounts[f"allot-{name}"]["automountServiceAccountToken"] is False, name


def test_replicas_budgets_and_priority_follow_the_values(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["custom"]
    allocator = workloads(objects)["device-allocator"]
    assert allocator["spec"]["replicas"] == 3
    # Values merge into the defaults: the requests given, the default limits kept.
    assert pod(allocator)["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    budgets = {component(b): b["spec"] for b in by_kind(objects, "PodDisruptionBudget").values()}
    assert set(budgets) == LEASED | {"webhook"}
    assert {spec["maxUnavailable"] for spec in budgets.values()} == {"50%"}
    assert by_kind(objects, "PriorityClass") == {}
    assert {pod(o).get("priorityClassName") for o in workloads(objects).values()} == {
        "system-cluster-critical"
    }
    images = {c["image"] for o in workloads(objects).values() for c in pod(o)["containers"]}
    assert images == {"registry.example.com/allot:0.2.0"}
    # A config for a service that has none by default is mounted where ALLOT_CONFIG_FILE says.
    (container,) = pod(workloads(objects)["gang-coordinator"])["containers"]
    assert env_of(container)["ALLOT_CONFIG_FILE"]["value"] == "/etc/allot/gang-coordinator.yaml"
    config = by_kind(objects, "ConfigMap")["sched-allot-service-config"]["data"]
    assert yaml.safe_load(config["gang-coordinator.yaml"]) == {"defaultTimeout": "10m"}
    # kube-sync and the webhook agree on the scheduler's name.
    for name in ("kube-sync", "webhook"):
        (container,) = pod(workloads(objects)[name])["containers"]
        assert env_of(container)["ALLOT_SCHEDULER_NAME"]["value"] == "gpu-scheduler"
    # The user's Secret and key.
    (container,) = pod(workloads(objects)["relay"])["containers"]
    assert env_of(container)["ALLOT_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "pg-credentials",
        "key": "dsn",
    }
    # The user's anchor key, mounted where the relay reads it; the chart generates none.
    assert {v["name"]: v for v in pod(workloads(objects)["relay"])["volumes"]}["anchor-key"]["secret"] == {
        "secretName": "relay-signing",
        "defaultMode": 0o440,
        "items": [{"key": "ed25519.pem", "path": "key.pem"}],
    }
    assert env_of(container)["ALLOT_ANCHOR_EVERY_EVENTS"]["value"] == "500"
    assert by_kind(objects, "Secret") == {}


def test_by_default_the_relay_signs_with_a_key_the_chart_generates_once(
    rendered: dict[str, list[Obj]], tmp_path: Path
) -> None:
    from allot_eventstore.anchor_keys import load_signing_key

    objects = rendered["defaults"]
    secret = by_kind(objects, "Secret")["allot-anchor-key"]
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    key = tmp_path / "key.pem"
    key.write_text(secret["stringData"]["key.pem"])
    load_signing_key(key)  # an Ed25519 private key the relay can use
    relay = pod(workloads(objects)["relay"])
    (container,) = relay["containers"]
    mount = {m["name"]: m for m in container["volumeMounts"]}["anchor-key"]
    volume = {v["name"]: v for v in relay["volumes"]}["anchor-key"]
    assert volume["secret"]["secretName"] == "allot-anchor-key"
    path = f"{mount['mountPath']}/{volume['secret']['items'][0]['path']}"
    assert env_of(container)["ALLOT_ANCHOR_KEY_FILE"]["value"] == path
    assert relay["securityContext"]["fsGroup"] == relay["securityContext"]["runAsGroup"], (
        "readable by the relay"
    )
