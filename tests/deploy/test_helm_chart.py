"""The Helm chart (deploy/helm/allot) renders, with the default values and with others, into objects that are valid:
the values are checked, and every rendered object is validated strictly against the Kubernetes KUBE_VERSION OpenAPI
schemas of kubernetes-validate, cert-manager's and the Prometheus Operator's objects against the fields their API
types define, and custom resources against the chart's own CRDs. The other topics: test_helm_workloads.py (what
deploy/k8s/base does), test_helm_webhooks.py, test_helm_servers.py (the bundled sub-charts, metrics, CRDs).

The chart is rendered offline by Helm's own template engine (:mod:`allot_testing.helm_chart`); the fixtures
``rendered`` (every case of ``CASES``) and ``crds`` are in conftest.py.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from allot_testing.helm_chart import (
    CASES,
    CHART,
    EXTERNAL,
    REPO,
    SUB_CHARTS,
    Obj,
    Values,
    component,
    render,
    workloads,
)

FIXTURES = Path(__file__).parent / "fixtures"


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
