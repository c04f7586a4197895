"""The Helm chart (deploy/helm/allot) renders, with the default values and with others, into objects that are valid and
that do what deploy/k8s/base does; its CRDs are structural and accept the objects Allot reads.

The chart is rendered by Helm's own template engine (helm-python-sdk: Helm's Go SDK behind a C ABI, a dev dependency),
offline, as `helm template` would: no cluster is contacted and `lookup` finds nothing, as on a first install. As Helm
does, it takes the bundled PostgreSQL and NATS sub-charts from charts/ and leaves out those whose `condition` is false.
Every rendered object is validated strictly against the Kubernetes KUBE_VERSION OpenAPI schemas of kubernetes-validate,
cert-manager's and the Prometheus Operator's objects against the fields their API types define, and custom resources
against the chart's own CRDs.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import tempfile
import threading
import tomllib
from base64 import b64decode
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "allot"
BASE = REPO / "deploy" / "k8s" / "base"
FIXTURES = Path(__file__).parent / "fixtures"
DECIDERS = {"gang-coordinator", "quota-manager", "reservation-manager", "device-allocator", "binder"}
SINGLETONS = {"relay", "ui"}
LEASED = DECIDERS | {"kube-sync"}  # two replicas on a Lease in lease mode
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}

Obj = dict[str, Any]
Values = dict[str, Any]

SUB_CHARTS = ("postgresql", "nats")
# The bundled sub-charts off, a PostgreSQL and a NATS of the user's.
EXTERNAL: Values = {
    "postgresql": {"enabled": False, "url": "postgresql://allot:secret@postgres.example.internal:5432/allot"},
    "nats": {"enabled": False, "url": "nats://nats.nats.svc:4222"},
}
# The bundled sub-charts (the default) with a value of theirs, and everything else off the defaults: cert-manager with
# its own CA, a ServiceMonitor, advisory locks.
BUNDLED: Values = {
    "postgresql": {"storageClassName": "fast"},
    "certManager": {"enabled": True},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "leaderElection": {"mode": "advisory"},
    "log": {"level": "DEBUG", "format": "text"},
    "extraEnv": {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel:4317"},
    "otel": {"exporter": "otlp"},
    "imagePullSecrets": [{"name": "registry"}],
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
    ],
}
# Another release name and namespace, a Secret of the user's, an issuer of theirs, three replicas, other policies.
CUSTOM: Values = {
    "image": {"repository": "registry.example.com/allot", "tag": "0.2.0", "pullPolicy": "Always"},
    "postgresql": {"enabled": False, "existingSecret": {"name": "pg-credentials", "key": "dsn"}},
    "nats": {"enabled": False, "url": "tls://nats.messaging:4222", "prefix": "sched", "stream": "SCHED"},
    "schedulerName": "gpu-scheduler",
    "leaderElection": {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20, "retryPeriodSeconds": 4},
    "components": {
        "device-allocator": {"replicas": 3, "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}
    },
    "priorityClass": {"create": False, "name": "system-cluster-critical"},
    "podDisruptionBudget": {"maxUnavailable": "50%"},
    "certManager": {"enabled": True, "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
    "webhook": {
        "port": 10443,
        "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]},
        "objectSelector": {"matchLabels": {"allot": "yes"}},
        "validating": {"failurePolicy": "Ignore"},
        "mutating": {"enabled": False},
    },
    "config": {"gang-coordinator": {"defaultTimeout": "10m"}},
    "anchor": {"existingSecret": {"name": "relay-signing", "key": "ed25519.pem"}, "everyEvents": 500},
}
CASES = {
    "defaults": ("allot", "allot-system", {}),
    "external": ("allot", "allot-system", EXTERNAL),
    "bundled": ("allot", "allot-dev", BUNDLED),
    "custom": ("sched", "scheduling", CUSTOM),
}


def render_files(
    values: Values, *, name: str = "allot", namespace: str = "allot-system"
) -> dict[str, list[Obj]]:
    """The objects of each rendered template file, by path (`allot/templates/...`, `allot/charts/<sub-chart>/...`).

    The chart is loaded for each render: rendering prunes the disabled sub-charts from the loaded chart."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values, name=name, namespace=namespace, is_install=True)
    return {
        path: [doc for doc in yaml.safe_load_all(text) if doc]
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
    }


def render(values: Values, *, name: str = "allot", namespace: str = "allot-system") -> list[Obj]:
    return [
        obj for objects in render_files(values, name=name, namespace=namespace).values() for obj in objects
    ]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {case: render(values, name=name, namespace=ns) for case, (name, ns, values) in CASES.items()}


@pytest.fixture(scope="module")
def crds() -> list[Obj]:
    with helm.Chart.load(CHART) as chart:
        return [yaml.safe_load(c["data"]) for c in chart.crds]


def by_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def component(obj: Obj) -> str:
    return str(obj["metadata"]["labels"]["app.kubernetes.io/component"])


def workloads(objects: list[Obj]) -> dict[str, Obj]:
    return {component(o): o for o in objects if o["kind"] in WORKLOADS}


def pod(obj: Obj) -> Obj:
    return dict(obj["spec"]["template"]["spec"])


def env_of(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


# -- rendering and values ------------------------------------------------------------------------------------------


def test_the_chart_is_versioned_with_the_workspace_and_lints_clean(kube_version: str) -> None:
    """The chart and its sub-charts (which lint on their own too) carry the workspace's version."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for chart in [CHART, *(CHART / "charts" / name for name in SUB_CHARTS)]:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        assert meta["version"] == meta["appVersion"] == version, chart
    for chart, values in [
        (CHART, EXTERNAL),
        (CHART, {}),
        *((CHART / "charts" / n, None) for n in SUB_CHARTS),
    ]:
        report = helm.lint(chart, values, strict=True, kube_version=f"v{kube_version}.0")
        assert report["errors"] == [], chart
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], chart


NO_SUB_CHARTS: Values = {"postgresql": {"enabled": False}, "nats": {"enabled": False}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            NO_SUB_CHARTS,
            "postgresql: set exactly one of postgresql.url, postgresql.existingSecret.name or postgresql.enabled (0 given)\n- nats: set nats.url",
        ),
        ({"postgresql": EXTERNAL["postgresql"], "nats": {"enabled": False}}, "nats: set nats.url"),
        (
            {"postgresql": {"url": EXTERNAL["postgresql"]["url"]}, "nats": EXTERNAL["nats"]},
            "set postgresql.enabled=false to use your own server",
        ),
        (
            {**EXTERNAL, "postgresql": {**EXTERNAL["postgresql"], "existingSecret": {"name": "pg"}}},
            "(2 given)",
        ),
        ({"postgresql": EXTERNAL["postgresql"], "nats": {"url": "nats://x:4222"}}, "set nats.enabled=false"),
        ({**EXTERNAL, "postgresql": {"dev": {"enabled": True}}}, "additional properties 'dev' not allowed"),
        ({"nats": {"maxFileStore": "lots"}}, "/nats/maxFileStore"),
        ({"postgresql": {"resources": {"limit": {"cpu": "1"}}}}, "/postgresql/resources"),
        (
            {"priorityClass": {"create": False, "name": "system-cluster-critical"}},
            'set postgresql.priorityClassName="system-cluster-critical"',
        ),
        (
            {"priorityClass": {"name": "allot-high"}, "postgresql": EXTERNAL["postgresql"]},
            'set nats.priorityClassName="allot-high"',
        ),
        ({**EXTERNAL, "leaderElection": {"renewDeadlineSeconds": 15}}, "leaseDurationSeconds (15) >"),
        ({**EXTERNAL, "leaderElection": {"mode": "raft"}}, "/leaderElection/mode"),
        (
            {**EXTERNAL, "components": {"binder": {"replicas": 0, "resources": {}}}},
            "/components/binder/replicas",
        ),
        (
            {**EXTERNAL, "webhook": {"validating": {"failurePolicy": "Maybe"}}},
            "/webhook/validating/failurePolicy",
        ),
        ({**EXTERNAL, "extraEnv": {"PATH": "/bin"}}, "does not match pattern"),
        ({**EXTERNAL, "replicas": 3}, "additional properties 'replicas' not allowed"),
        ({**EXTERNAL, "postgresql": {"enabled": False, "url": "mysql://db/allot"}}, "/postgresql/url"),
    ],
    ids=[
        "no-database",
        "no-nats",
        "url-and-bundled-postgresql",
        "two-databases",
        "url-and-bundled-nats",
        "old-dev-values",
        "sub-chart-value",
        "sub-chart-resources",
        "bundled-priority-class-not-created",
        "bundled-priority-class-renamed",
        "lease-timing",
        "unknown-mode",
        "zero-replicas",
        "failure-policy",
        "non-allot-env",
        "unknown-key",
        "not-postgresql",
    ],
)
def test_bad_values_are_refused_with_what_is_wrong(values: Values, message: str) -> None:
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as caught:
        render(values)
    assert message in str(caught.value)


# -- validity of every rendered object -----------------------------------------------------------------------------

# The fields of cert-manager's and the Prometheus Operator's objects the chart uses, as their API types define them
# (cert-manager.io/v1 Certificate and Issuer, monitoring.coreos.com/v1 ServiceMonitor); anything else is refused.
_S: Obj = {"type": "string"}
_SELECTOR: Obj = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": _S},
        "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"]}},
    },
}
_ISSUER_REF: Obj = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {"name": _S, "kind": _S, "group": _S},
}
_PROM_DURATION: Obj = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}


def _object(kind_schema: Obj) -> Obj:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": _S,
            "kind": _S,
            "metadata": {"type": "object", "required": ["name"]},
            "spec": kind_schema,
        },
    }


EXTERNAL_SCHEMAS: dict[tuple[str, str], Obj] = {
    ("cert-manager.io/v1", "Certificate"): _object(
        {
            "type": "object",
            "required": ["issuerRef", "secretName"],
            "additionalProperties": False,
            "properties": {
                "secretName": _S,
                "commonName": _S,
                "dnsNames": {"type": "array", "items": _S},
                "isCA": {"type": "boolean"},
                "duration": _S,
                "renewBefore": _S,
                "issuerRef": _ISSUER_REF,
                "privateKey": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": {"type": "integer"},
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                    },
                },
            },
        }
    ),
    ("cert-manager.io/v1", "Issuer"): _object(
        {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "selfSigned": {"type": "object"},
                "ca": {
                    "type": "object",
                    "required": ["secretName"],
                    "additionalProperties": False,
                    "properties": {"secretName": _S},
                },
            },
        }
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _object(
        {
            "type": "object",
            "required": ["selector"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": _S,
                "selector": _SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _S}},
                },
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": _S,
                            "path": _S,
                            "interval": _PROM_DURATION,
                            "scrapeTimeout": _PROM_DURATION,
                        },
                    },
                },
            },
        }
    ),
}


def problems(objects: list[Obj], version: str) -> list[str]:
    found = []
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        external = EXTERNAL_SCHEMAS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
        try:
            if external is not None:
                jsonschema.validate(obj, external)
            else:
                kubernetes_validate.validate(obj, version, strict=True)
        except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
            found.append(f"{name}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            found.append(f"{name}: {exc.message}")
    return found


@pytest.mark.parametrize("case", CASES)
def test_every_rendered_object_validates(
    case: str, rendered: dict[str, list[Obj]], kube_version: str
) -> None:
    objects = rendered[case]
    assert len(objects) > 40
    assert problems(objects, kube_version) == []


def test_the_validators_refuse_what_the_api_server_would(
    rendered: dict[str, list[Obj]], kube_version: str
) -> None:
    """Guards the guard: a misplaced field is refused, in a Kubernetes object and in a cert-manager one."""
    objects = rendered["bundled"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and component(o) == "binder"]
    (certificate, *_) = [o for o in objects if o["kind"] == "Certificate"]
    bad_deployment = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    bad_certificate = {**certificate, "spec": {**certificate["spec"], "dnsName": ["x"]}}
    assert problems([deployment, certificate], kube_version) == []
    assert len(problems([bad_deployment, bad_certificate], kube_version)) == 2


def test_objects_are_named_and_labelled_per_release(rendered: dict[str, list[Obj]]) -> None:
    for case, (release, _, _) in CASES.items():
        prefix = "allot" if "allot" in release else f"{release}-allot"
        for obj in rendered[case]:
            meta = obj["metadata"]
            assert meta["name"].startswith(prefix), (case, meta["name"])
            assert meta["labels"]["app.kubernetes.io/part-of"] == "allot", (case, meta["name"])
            assert "namespace" not in meta, "Helm sets the namespace of namespaced objects"
        for obj in workloads(rendered[case]).values():
            if obj["kind"] == "Job":
                continue
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selector["app.kubernetes.io/instance"] == release
            assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()


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


# -- admission webhooks --------------------------------------------------------------------------------------------


def _webhooks(objects: list[Obj]) -> list[tuple[str, Obj]]:
    return [
        (o["kind"], hook)
        for o in objects
        if o["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for hook in o["webhooks"]
    ]


@pytest.mark.parametrize("case", CASES)
def test_webhooks_reach_the_webhook_process(case: str, rendered: dict[str, list[Obj]]) -> None:
    release, namespace, values = CASES[case]
    objects = rendered[case]
    services = by_kind(objects, "Service")
    (container,) = pod(workloads(objects)["webhook"])["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen = next(int(a.split("=", 1)[1]) for a in container["command"] if a.startswith("--port="))
    assert ports["https"] == listen == values.get("webhook", {}).get("port", 9443)
    hooks = _webhooks(objects)
    assert {kind for kind, _ in hooks} == (
        {"ValidatingWebhookConfiguration"}
        if case == "custom"
        else {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    )
    for kind, hook in hooks:
        ref = hook["clientConfig"]["service"]
        service = services[ref["name"]]
        assert ref["namespace"] == namespace
        (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
        assert ports[port["targetPort"]] == listen
        assert (
            service["spec"]["selector"].items()
            <= workloads(objects)["webhook"]["spec"]["template"]["metadata"]["labels"].items()
        )
        assert ref["path"] == ("/mutate" if kind.startswith("Mutating") else "/validate")
        policy = values.get("webhook", {}).get(
            "validating" if kind.startswith("Validating") else "mutating", {}
        )
        assert hook["failurePolicy"] == policy.get("failurePolicy", "Fail")
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
        if hook["rules"][0]["resources"] == ["pods"]:
            # Allot's own namespace (and kube-system) never depend on the webhook being up.
            excluded = [
                e
                for e in hook["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name"
            ]
            assert excluded == [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": [namespace, "kube-system"],
                }
            ]
            assert hook["objectSelector"] == values.get("webhook", {}).get("objectSelector", {})


def test_the_validating_webhook_covers_every_kind_the_webhook_validates(
    rendered: dict[str, list[Obj]], crds: list[Obj]
) -> None:
    from allot_cli.webhook import VALIDATED

    resources = {(c["spec"]["group"], c["spec"]["names"]["plural"]): c["spec"]["names"]["kind"] for c in crds}
    resources[("", "pods")] = "Pod"
    covered = set()
    for kind, hook in _webhooks(rendered["external"]):
        if kind == "ValidatingWebhookConfiguration":
            for rule in hook["rules"]:
                for group in rule["apiGroups"]:
                    for version in rule["apiVersions"]:
                        for resource in rule["resources"]:
                            api_version = f"{group}/{version}" if group else version
                            covered.add((api_version, resources[(group, resource)]))
                if rule["resources"] == ["pods"]:
                    # an update may not change a pod's QoS class or priority: the webhook must see updates
                    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert covered == set(VALIDATED)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_binders_own_writes_are_not_reviewed(case: str, rendered: dict[str, list[Obj]]) -> None:
    """The binder patches Allot's status annotations on every ElasticQuota: the validating webhook is scoped so that
    none of its writes is sent for review (a matchCondition on its ServiceAccount), and no rule names a subresource,
    so status writes (``elasticquotas/status``, ``podgroups/status``, …) are never reviewed either."""
    objects = rendered[case]
    namespace = CASES[case][1]
    account = pod(workloads(objects)["binder"])["serviceAccountName"]
    assert account in by_kind(objects, "ServiceAccount")
    binder = f"system:serviceaccount:{namespace}:{account}"
    for kind, hook in _webhooks(objects):
        if kind != "ValidatingWebhookConfiguration" or hook["name"] != "objects.validate.allot.dev":
            continue
        assert {"name": "not-allot-binder", "expression": f"request.userInfo.username != '{binder}'"} in hook[
            "matchConditions"
        ]
        assert all("/" not in r and "*" not in r for rule in hook["rules"] for r in rule["resources"])


class _TLSServer:
    """A TLS server on loopback with the rendered certificate and key, for one handshake."""

    def __init__(self, cert: bytes, key: bytes) -> None:
        self.dir = tempfile.TemporaryDirectory()
        cert_file, key_file = Path(self.dir.name) / "tls.crt", Path(self.dir.name) / "tls.key"
        cert_file.write_bytes(cert)
        key_file.write_bytes(key)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert_file, key_file)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(10)
        conn, _ = self.sock.accept()
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError):
            pass

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.sock.close()
        self.dir.cleanup()


def _handshake(cert: bytes, key: bytes, ca_bundle: bytes, server_name: str) -> bytes:
    server = _TLSServer(cert, key)
    try:
        client = ssl.create_default_context(cadata=ca_bundle.decode())
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            return tls.recv(2)
    finally:
        server.close()


def test_the_generated_certificate_is_trusted_by_the_webhook_configurations(
    rendered: dict[str, list[Obj]],
) -> None:
    """Without cert-manager: the API server (trusting caBundle) completes a TLS handshake with the webhook's
    certificate under the Service's DNS name, and would refuse another name."""
    objects = rendered["external"]
    (secret,) = [s for s in by_kind(objects, "Secret").values() if s["type"] == "kubernetes.io/tls"]
    volumes = {v["name"]: v for v in pod(workloads(objects)["webhook"])["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    bundles = {hook["clientConfig"]["caBundle"] for _, hook in _webhooks(objects)}
    assert bundles == {secret["data"]["ca.crt"]}
    cert, key, ca = (b64decode(secret["data"][k]) for k in ("tls.crt", "tls.key", "ca.crt"))
    service = "allot-webhook.allot-system.svc"
    assert _handshake(cert, key, ca, service) == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(cert, key, ca, "allot-webhook.elsewhere.svc")
    # The pods roll when the certificate changes (the process reads it at start).
    annotations = workloads(objects)["webhook"]["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/tls" in annotations


@pytest.mark.parametrize("case", ["bundled", "custom"])
def test_with_cert_manager_the_certificate_is_issued_and_its_ca_injected(
    case: str, rendered: dict[str, list[Obj]]
) -> None:
    release, namespace, values = CASES[case]
    objects = rendered[case]
    assert [s for s in by_kind(objects, "Secret").values() if s["type"] == "kubernetes.io/tls"] == []
    certificates = by_kind(objects, "Certificate")
    webhook_volumes = {v["name"]: v for v in pod(workloads(objects)["webhook"])["volumes"]}
    (serving,) = [c for c in certificates.values() if not c["spec"].get("isCA")]
    assert serving["spec"]["secretName"] == webhook_volumes["tls"]["secret"]["secretName"]
    service = next(s for s in by_kind(objects, "Service").values() if component(s) == "webhook")
    assert f"{service['metadata']['name']}.{namespace}.svc" in serving["spec"]["dnsNames"]
    for config in [o for o in objects if o["kind"].endswith("WebhookConfiguration")]:
        annotation = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert annotation == f"{namespace}/{serving['metadata']['name']}"
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])
    issuers = by_kind(objects, "Issuer")
    given = values["certManager"].get("issuerRef")
    if given:
        assert issuers == {} and serving["spec"]["issuerRef"]["name"] == given["name"]
        assert serving["spec"]["issuerRef"]["kind"] == given["kind"]
    else:
        # A self-signed root, a CA Issuer of it, and the serving certificate from that CA.
        ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
        root = certificates[next(c for c in certificates if certificates[c]["spec"].get("isCA"))]
        assert ca_issuer["spec"]["ca"]["secretName"] == root["spec"]["secretName"]
        assert "selfSigned" in issuers[root["spec"]["issuerRef"]["name"]]["spec"]


# -- the bundled PostgreSQL and NATS sub-charts, and metrics -------------------------------------------------------


def test_the_bundled_servers_are_vendored_sub_charts_declared_with_their_condition() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    declared = {d["name"]: d for d in meta["dependencies"]}
    assert set(declared) == set(SUB_CHARTS)
    for name, dependency in declared.items():
        sub_chart = CHART / "charts" / name
        # No repository: Helm (and `helm dependency build`) take the chart from charts/.
        assert dependency == {
            "name": name,
            "version": yaml.safe_load((sub_chart / "Chart.yaml").read_text())["version"],
            "condition": f"{name}.enabled",
        }
        assert (sub_chart / "values.yaml").is_file() and (sub_chart / "values.schema.json").is_file()
    with helm.Chart.load(CHART) as chart:
        assert {d["name"] for d in chart.dependencies} == set(SUB_CHARTS)


@pytest.mark.parametrize("off", [(), ("postgresql",), ("nats",), SUB_CHARTS], ids=str)
def test_the_condition_switches_each_sub_chart_on_and_off(off: tuple[str, ...]) -> None:
    values = {name: EXTERNAL[name] if name in off else {} for name in SUB_CHARTS}
    files = render_files(values)
    for name in SUB_CHARTS:
        from_sub_chart = [
            o for path, objs in files.items() if path.startswith(f"allot/charts/{name}/") for o in objs
        ]
        elsewhere = [
            o for path, objs in files.items() if not path.startswith(f"allot/charts/{name}/") for o in objs
        ]
        assert not [
            o for o in elsewhere if o["metadata"]["labels"].get("app.kubernetes.io/component") == name
        ], "only the sub-chart renders its server"
        if name in off:
            assert from_sub_chart == [], name
        else:
            kinds = {o["kind"] for o in from_sub_chart}
            assert {"Service", "StatefulSet"} <= kinds, name
            assert {component(o) for o in from_sub_chart} == {name}
    objects = [o for objs in files.values() for o in objs]
    (config,) = [c for c in by_kind(objects, "ConfigMap").values() if "ALLOT_NATS_URL" in c["data"]]
    nats_url = EXTERNAL["nats"]["url"] if "nats" in off else "nats://allot-nats:4222"
    assert config["data"]["ALLOT_NATS_URL"] == nats_url
    secret = by_kind(objects, "Secret")["allot-database"]
    if "postgresql" in off:
        assert secret["stringData"] == {"url": EXTERNAL["postgresql"]["url"]}
    else:
        assert "@allot-postgresql:5432/" in secret["stringData"]["url"]


def _fullname(objects: list[Obj]) -> str:
    (relay,) = [o for o in objects if o["kind"] == "Deployment" and component(o) == "relay"]
    return str(relay["metadata"]["name"]).removesuffix("-relay")


@pytest.mark.parametrize(
    "release", ["allot", "sched", "team-allot-dev", "x" * 45], ids=["allot", "other", "contains", "long"]
)
def test_the_sub_charts_objects_are_named_as_the_components_read_them(release: str) -> None:
    """Whatever the release name, the Secret the components take ALLOT_DATABASE_URL from and the Service their
    ALLOT_NATS_URL names are the sub-charts' own, and those Services reach the servers' pods."""
    from allot_eventstore.urls import async_url

    files = render_files({}, name=release, namespace="elsewhere")
    objects = [o for objs in files.values() for o in objs]
    ours = {
        name: [o for path, objs in files.items() if path.startswith(f"allot/charts/{name}/") for o in objs]
        for name in SUB_CHARTS
    }
    fullname = _fullname(objects)
    assert fullname == (release if "allot" in release else f"{release}-allot")[:40]
    assert all(o["metadata"]["name"].startswith(f"{fullname}-") for objs in ours.values() for o in objs)
    # PostgreSQL: every component's secretKeyRef resolves to the sub-chart's Secret, whose URL names its Service.
    secrets = by_kind(ours["postgresql"], "Secret")
    refs = {
        name: _ref(env_of(c)["ALLOT_DATABASE_URL"]["valueFrom"]["secretKeyRef"])
        for name, o in workloads(objects).items()
        for c in pod(o)["containers"]
        if "ALLOT_DATABASE_URL" in env_of(c)
    }
    assert {"relay", "migrate", "binder"} <= set(refs)
    assert set(refs.values()) == {(f"{fullname}-database", "url")}
    url = secrets[f"{fullname}-database"]["stringData"]["url"]
    async_url(url)
    host, port = url.rsplit("@", 1)[1].split("/", 1)[0].split(":")
    _assert_reaches(ours["postgresql"], host, int(port))
    (server,) = pod(workloads(ours["postgresql"])["postgresql"])["containers"]
    password = env_of(server)["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secrets[password["name"]]["stringData"][password["key"]] in url
    # NATS: ALLOT_NATS_URL names the sub-chart's Service, which reaches the server the sub-chart configures.
    (config,) = [c for c in by_kind(objects, "ConfigMap").values() if "ALLOT_NATS_URL" in c["data"]]
    host, port = config["data"]["ALLOT_NATS_URL"].removeprefix("nats://").split(":")
    _assert_reaches(ours["nats"], host, int(port))
    volumes = {v["name"]: v for v in pod(workloads(ours["nats"])["nats"])["volumes"]}
    assert volumes["config"]["configMap"]["name"] in by_kind(ours["nats"], "ConfigMap")


def _ref(ref: Obj) -> tuple[str, str]:
    return str(ref["name"]), str(ref["key"])


def _assert_reaches(objects: list[Obj], host: str, port: int) -> None:
    """`host:port` is a Service of these objects whose selector picks their StatefulSet's pods on a port they open."""
    service = by_kind(objects, "Service")[host]
    (statefulset,) = by_kind(objects, "StatefulSet").values()
    assert (
        service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
    )
    assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
    (target,) = [p["targetPort"] for p in service["spec"]["ports"] if p["port"] == port]
    (container,) = pod(statefulset)["containers"]
    assert port in {p["containerPort"] for p in container["ports"] if p["name"] == target}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({}, "allot-control-plane"),
        (
            {
                "priorityClass": {"create": False, "name": "system-cluster-critical"},
                "postgresql": {"priorityClassName": "system-cluster-critical"},
                "nats": {"priorityClassName": "system-cluster-critical"},
            },
            "system-cluster-critical",
        ),
        (
            {
                "priorityClass": {"create": False},
                "postgresql": {"priorityClassName": ""},
                "nats": {"priorityClassName": ""},
            },
            None,
        ),
    ],
    ids=["created", "existing", "none"],
)
def test_the_bundled_servers_run_under_the_control_planes_priority_class(
    values: Values, expected: str | None
) -> None:
    objects = render(values)
    classes = {name: pod(o).get("priorityClassName") for name, o in workloads(objects).items()}
    assert set(classes.values()) == {expected}, classes
    assert {c["metadata"]["name"] for c in by_kind(objects, "PriorityClass").values()} == (
        {expected} if values.get("priorityClass", {}).get("create", True) else set()
    )


def _notes(values: Values) -> str:
    with helm.Chart.load(CHART) as chart:
        return chart.render(values, name="allot", namespace="allot-system", is_install=True)[
            "allot/templates/NOTES.txt"
        ]


def test_the_notes_warn_of_the_bundled_servers_and_of_their_values_left_unused() -> None:
    bundled = _notes({})
    assert "WARNING: the bundled PostgreSQL" in bundled and "WARNING: the bundled NATS" in bundled
    assert "NOT USED" not in bundled
    external = _notes(EXTERNAL)
    assert "WARNING" not in external and "NOT USED" not in external
    leftover = _notes(
        {
            "postgresql": {**EXTERNAL["postgresql"], "storageClassName": "fast", "image": "postgres:17"},
            "nats": {**EXTERNAL["nats"], "maxFileStore": "2GB"},
        }
    )
    assert "NOT USED: nats.maxFileStore (" in leftover
    assert "NOT USED: postgresql.image, postgresql.storageClassName (" in leftover


def test_the_schema_takes_every_value_of_the_sub_charts() -> None:
    """Each sub-chart's values can be given under its key of the Allot chart, and reach the sub-chart."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    given: Values = {}
    for name in SUB_CHARTS:
        defaults = yaml.safe_load((CHART / "charts" / name / "values.yaml").read_text())
        assert set(defaults) <= set(schema["properties"][name]["properties"]), name
        given[name] = {**defaults, "image": f"registry.example.com/{name}:1", "storage": "7Gi"}
    objects = render(given)
    for name in SUB_CHARTS:
        statefulset = workloads(objects)[name]
        assert pod(statefulset)["containers"][0]["image"] == f"registry.example.com/{name}:1"
        claim = statefulset["spec"]["volumeClaimTemplates"][0]
        assert claim["spec"]["resources"]["requests"]["storage"] == "7Gi"


def test_the_bundled_servers_are_what_allot_is_pointed_at(rendered: dict[str, list[Obj]]) -> None:
    from allot_eventstore.urls import async_url

    objects = rendered["bundled"]
    services = by_kind(objects, "Service")
    secret = by_kind(objects, "Secret")["allot-database"]
    url = secret["stringData"]["url"]
    async_url(url)
    assert "@allot-postgresql:5432/" in url
    assert secret["stringData"]["password"] in url and len(secret["stringData"]["password"]) == 32
    assert 5432 in {p["port"] for p in services["allot-postgresql"]["spec"]["ports"]}
    (container,) = pod(workloads(objects)["relay"])["containers"]
    assert env_of(container)["ALLOT_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "allot-database",
        "key": "url",
    }
    assert by_kind(objects, "ConfigMap")["allot-env"]["data"]["ALLOT_NATS_URL"] == "nats://allot-nats:4222"
    assert 4222 in {p["port"] for p in services["allot-nats"]["spec"]["ports"]}
    for name in ("postgresql", "nats"):
        statefulset = workloads(objects)[name]
        assert statefulset["spec"]["replicas"] == 1
        assert (
            services[f"allot-{name}"]["spec"]["selector"].items()
            <= statefulset["spec"]["template"]["metadata"]["labels"].items()
        )
    claim = workloads(objects)["postgresql"]["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["storageClassName"] == "fast"


def test_the_bundled_nats_fsyncs_every_second_and_nats_server_accepts_its_config(
    rendered: dict[str, list[Obj]],
) -> None:
    from allot_contracts.errors import Unavailable
    from allot_runtime import embedded

    conf = by_kind(rendered["bundled"], "ConfigMap")["allot-nats-config"]["data"]["nats-server.conf"]
    assert "  sync_interval: 1s\n" in conf and "  store_dir: /data\n" in conf
    try:
        binary = embedded.nats_server_binary()
    except Unavailable as exc:
        pytest.skip(f"no nats-server binary to check the config with: {exc}")
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as file:
        file.write(conf)
        file.flush()
        secret = by_kind(rendered["bundled"], "Secret")["allot-nats-auth"]
        result = subprocess.run(
            [str(binary), "-t", "-c", file.name],
            capture_output=True,
            text=True,
            timeout=30,
            env=secret["stringData"],  # the server reads its credentials from its environment
        )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_service_monitor_scrapes_every_allot_component(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["bundled"]
    (monitor,) = by_kind(objects, "ServiceMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    scraped = {
        component(s)
        for s in by_kind(objects, "Service").values()
        if selector <= s["metadata"]["labels"].items()
        and monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in s["spec"]["ports"]}
    }
    long_running = {c for c, o in workloads(objects).items() if o["kind"] != "Job"} - {"postgresql", "nats"}
    assert scraped == long_running
    assert by_kind(rendered["external"], "ServiceMonitor") == {}


# -- CRDs (their shapes, and the objects they must accept: test_crd_shapes.py, test_crd_writes.py) ----------------


def test_the_chart_installs_every_shipped_crd(crds: list[Obj], custom_resources: Any) -> None:
    assert sorted(c["metadata"]["name"] for c in crds) == sorted(
        c["metadata"]["name"] for c in custom_resources.crds
    )
