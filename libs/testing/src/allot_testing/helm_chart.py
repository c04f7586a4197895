"""Rendering the Helm chart (deploy/helm/allot) for the deployment tests: the value sets they render it with, and
small readers of the rendered objects.

The chart is rendered by Helm's own template engine (helm-python-sdk: Helm's Go SDK behind a C ABI, a dev
dependency), offline, as `helm template` would: no cluster is contacted and `lookup` finds nothing, as on a first
install. As Helm does, it takes the bundled PostgreSQL and NATS sub-charts from charts/ and leaves out those whose
`condition` is false. Reads the chart from the checkout this package is installed from (an editable install).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

__all__ = [
    "BASE",
    "BUNDLED",
    "CASES",
    "CHART",
    "CUSTOM",
    "DECIDERS",
    "EXTERNAL",
    "LEASED",
    "REPO",
    "SINGLETONS",
    "SUB_CHARTS",
    "WORKLOADS",
    "Obj",
    "Values",
    "by_kind",
    "chart_crds",
    "component",
    "env_of",
    "pod",
    "render",
    "render_cases",
    "render_files",
    "workloads",
]

REPO = Path(__file__).resolve().parents[4]
CHART = REPO / "deploy" / "helm" / "allot"
BASE = REPO / "deploy" / "k8s" / "base"
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


def render_cases() -> dict[str, list[Obj]]:
    """The objects of every case of :data:`CASES`, by case."""
    return {case: render(values, name=name, namespace=ns) for case, (name, ns, values) in CASES.items()}


def chart_crds() -> list[Obj]:
    """The CustomResourceDefinitions the chart installs."""
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
