"""Allot's NodeMetric CRD (deploy/helm/allot/crds/slo.koordinator.sh_nodemetrics.yaml) is upstream's type, field by
field, as a structural schema the API server accepts; and every NodeMetric the repository holds or writes — the
examples, the conformance cases and test scenarios, the docs, node-reporter's sampler and the manifest writer —
validates against it as `kubectl apply` checks it (field validation Strict: an unknown field is an error).

Upstream's types: koordinator apis/slo/v1alpha1/nodemetric_types.go (NodeMetric, NodeMetricSpec/Status,
NodeMetricInfo, NUMAUsage, AggregatedUsage, PodMetricInfo, HostApplicationMetricInfo, ReclaimableMetric, PeakMetric),
resources.go (ResourceMap), slo_extension.go (ExtensionsMap) and apis/scheduling/v1alpha1/device_types.go
(DeviceInfo)."""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from allot_contracts.objects.nodemetric import nodemetric_manifest, parse_nodemetric
from node_reporter.metrics.cgroups import PodLimits
from node_reporter.metrics.window import PodInfo, Sample, Window

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy" / "helm" / "allot" / "crds" / "slo.koordinator.sh_nodemetrics.yaml"
KUBE_VERSION = "1.32"
KIND = ("slo.koordinator.sh/v1alpha1", "NodeMetric")

# -- upstream's Go types, as (json name -> type) ------------------------------------------------------------------------
# A type is "string", "integer", "boolean", "date-time", "quantity" (resource.Quantity), "free" (schemaless), a dict (an
# object with those properties), ("list", T), ("map", T) (map[string]T), or ("required", [names], dict).
QUANTITIES = ("map", "quantity")  # corev1.ResourceList
CONDITION = (
    "required",
    ["lastTransitionTime", "message", "reason", "status", "type"],
    {
        "lastTransitionTime": "date-time",
        "message": "string",
        "observedGeneration": "integer",
        "reason": "string",
        "status": "string",
        "type": "string",
    },
)
DEVICE_INFO = (
    "required",
    ["health"],
    {
        "type": "string",
        "labels": ("map", "string"),
        "id": "string",
        "minor": "integer",
        "moduleID": "integer",
        "health": "boolean",
        "resources": QUANTITIES,
        "topology": (
            "required",
            ["nodeID", "pcieID", "socketID"],
            {"socketID": "integer", "nodeID": "integer", "pcieID": "string", "busID": "string"},
        ),
        "vfGroups": (
            "list",
            {
                "labels": ("map", "string"),
                "vfs": ("list", ("required", ["minor"], {"minor": "integer", "busID": "string"})),
            },
        ),
        "conditions": ("list", CONDITION),
    },
)
RESOURCE_MAP = {"resources": QUANTITIES, "devices": ("list", DEVICE_INFO)}
AGGREGATED_USAGE = {"usage": ("map", RESOURCE_MAP), "duration": "string"}
NODE_METRIC = {
    "apiVersion": "string",
    "kind": "string",
    "metadata": {},
    "spec": {
        "metricCollectPolicy": {
            "aggregateDurationSeconds": "integer",
            "reportIntervalSeconds": "integer",
            "nodeAggregatePolicy": {"durations": ("list", "string")},
            "nodeMemoryCollectPolicy": "string",
        }
    },
    "status": {
        "updateTime": "date-time",
        "nodeMetric": {
            "nodeUsage": RESOURCE_MAP,
            "aggregatedNodeUsages": ("list", AGGREGATED_USAGE),
            "systemUsage": RESOURCE_MAP,
            "aggregatedSystemUsages": ("list", AGGREGATED_USAGE),
            "numaUsages": (
                "list",
                (
                    "required",
                    ["numaNodeID"],
                    {"numaNodeID": "integer", "nodeUsage": RESOURCE_MAP, "systemUsage": RESOURCE_MAP},
                ),
            ),
        },
        "podsMetric": (
            "list",
            {
                "name": "string",
                "namespace": "string",
                "podUsage": RESOURCE_MAP,
                "priority": "string",
                "qos": "string",
                "extensions": "free",
            },
        ),
        "hostApplicationMetric": (
            "list",
            {"name": "string", "usage": RESOURCE_MAP, "priority": "string", "qos": "string"},
        ),
        "prodReclaimableMetric": {"resource": RESOURCE_MAP},
        "prodPeakMetric": {"resource": RESOURCE_MAP},
    },
}


def _expected(spec: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, what the schema must say there) for upstream's type ``spec``."""
    required: list[str] = []
    if isinstance(spec, tuple) and spec[0] == "required":
        _, required, spec = spec
    if isinstance(spec, dict):
        yield path, f"object required={sorted(required)}"
        for name, sub in spec.items():
            yield from _expected(sub, f"{path}.{name}")
    elif isinstance(spec, tuple) and spec[0] == "list":
        yield path, "array"
        yield from _expected(spec[1], f"{path}[]")
    elif isinstance(spec, tuple) and spec[0] == "map":
        yield path, "map"
        yield from _expected(spec[1], f"{path}{{}}")
    else:
        yield path, spec


def _found(schema: Obj, path: str = "") -> Iterator[tuple[str, str]]:
    """The same for the CRD's schema."""
    if schema.get("x-kubernetes-int-or-string"):
        yield path, "quantity"
    elif schema.get("x-kubernetes-preserve-unknown-fields"):
        yield path, "free"
    elif "additionalProperties" in schema:
        yield path, "map"
        yield from _found(schema["additionalProperties"], f"{path}{{}}")
    elif schema["type"] == "object":
        yield path, f"object required={sorted(schema.get('required', []))}"
        for name, sub in schema.get("properties", {}).items():
            yield from _found(sub, f"{path}.{name}")
    elif schema["type"] == "array":
        yield path, "array"
        yield from _found(schema["items"], f"{path}[]")
    elif schema.get("format") == "date-time":
        yield path, "date-time"
    else:
        yield path, schema["type"]


@pytest.fixture(scope="module")
def crd() -> Obj:
    loaded: Obj = yaml.safe_load(CRD.read_text())
    return loaded


def _schema(crd: Obj) -> Obj:
    (version,) = crd["spec"]["versions"]
    schema: Obj = version["schema"]["openAPIV3Schema"]
    return schema


def test_the_crd_is_upstreams_type_field_by_field(crd: Obj) -> None:
    assert dict(_found(_schema(crd))) == dict(_expected(NODE_METRIC))
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["group"] == "slo.koordinator.sh"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}


def test_the_crd_is_a_structural_schema_the_api_server_accepts(crd: Obj) -> None:
    kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)

    def check(node: Obj, where: str) -> None:
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], where
        elif not node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type") in {"object", "array", "string", "integer", "boolean"}, where
        assert not ("properties" in node and "additionalProperties" in node), where
        assert node.get("type") != "array" or "items" in node, where
        for name, sub in node.get("properties", {}).items():
            check(sub, f"{where}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                check(node[key], f"{where}.{key}")

    check(_schema(crd), "openAPIV3Schema")


def _as_kubectl_checks(schema: Obj) -> Obj:
    """The schema under field validation Strict: an object with declared properties admits no other field."""
    out = copy.deepcopy(schema)
    stack = [out]
    while stack:
        node = stack.pop()
        if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        stack.extend(node.get("properties", {}).values())
        stack.extend(v for k in ("items", "additionalProperties") if isinstance(v := node.get(k), dict))
    return out


@pytest.fixture(scope="module")
def validator(crd: Obj) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_as_kubectl_checks(_schema(crd)))


def _errors(validator: jsonschema.Draft7Validator, obj: Obj) -> list[str]:
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]


# -- every NodeMetric the repository holds ------------------------------------------------------------------------------
def _documents(text: str) -> Iterator[Any]:
    yield from yaml.safe_load_all(text)


def _yaml_in_markdown(text: str) -> Iterator[str]:
    yield from re.findall(r"```yaml\n(.*?)```", text, flags=re.S)


def _yaml_in_python(text: str) -> Iterator[str]:
    """String constants of a test module that hold a NodeMetric (``%(name)s`` placeholders filled in)."""
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "kind: NodeMetric" in node.value
        ):
            yield re.sub(r"%\((\w+)\)s", lambda m: "node-1" if m.group(1) == "name" else "1", node.value)


def repository_nodemetrics() -> list[tuple[str, Obj]]:
    found: list[tuple[str, Obj]] = []
    sources: list[tuple[Path, list[str]]] = []
    for root in ("examples", "tests", "docs"):
        for path in sorted((REPO / root).rglob("*.yaml")):
            sources.append((path, [path.read_text()]))
    for path in sorted((REPO / "docs").rglob("*.md")) + [REPO / "README.md"]:
        sources.append((path, list(_yaml_in_markdown(path.read_text()))))
    for root in ("tests", "libs", "services"):
        for path in sorted((REPO / root).rglob("test_*.py")):
            if ".venv" not in path.parts:
                sources.append((path, list(_yaml_in_python(path.read_text()))))
    for path, texts in sources:
        for text in (t for t in texts if "kind: NodeMetric" in t and "slo.koordinator.sh/" in t):
            for doc in _documents(text):
                if isinstance(doc, dict) and (doc.get("apiVersion"), doc.get("kind")) == KIND:
                    found.append((f"{path.relative_to(REPO)}: {doc['metadata']['name']}", doc))
    return found


NODEMETRICS = repository_nodemetrics()


def test_the_repository_holds_nodemetrics_of_every_kind_of_source() -> None:
    places = {where.split(":")[0] for where, _ in NODEMETRICS}
    assert {
        "examples/colocation/01-load-aware.yaml",
        "examples/descheduling/01-hot-and-idle.yaml",
        "tests/deploy/fixtures/koordinator-objects.yaml",
        "tests/conformance/loadaware/004-filter-exceed-p95-cpu-usage.yaml",
        "tests/unit/test_node_side.py",
        "docs/node-side.md",
    } <= places
    assert len(NODEMETRICS) >= 40


@pytest.mark.parametrize(("where", "obj"), NODEMETRICS, ids=[w for w, _ in NODEMETRICS])
def test_every_nodemetric_in_the_repository_validates(
    validator: jsonschema.Draft7Validator, where: str, obj: Obj
) -> None:
    assert _errors(validator, obj) == []
    assert parse_nodemetric(obj, issues := [], []) is not None, issues  # and Allot reads it


_FLAT_MAP_KEYS = {
    "nodeUsage",
    "systemUsage",
    "podUsage",
    "resource",
}  # the keys whose value is always a ResourceMap


def _dict_literals_of_nodemetrics(text: str) -> Iterator[ast.Dict]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant)
            and k.value == "kind"
            and isinstance(v, ast.Constant)
            and v.value == "NodeMetric"
            for k, v in zip(node.keys, node.values, strict=True)
        ):
            yield node


def test_nodemetrics_written_as_python_literals_in_tests_use_resource_maps() -> None:
    """A test that builds a NodeMetric in code (often with computed quantities) writes every usage as a ResourceMap."""
    checked = 0
    for root in ("tests", "libs", "services"):
        for path in sorted((REPO / root).rglob("test_*.py")):
            for literal in _dict_literals_of_nodemetrics(path.read_text()):
                checked += 1
                for node in ast.walk(literal):
                    if not isinstance(node, ast.Dict):
                        continue
                    for key, value in zip(node.keys, node.values, strict=True):
                        if (
                            isinstance(key, ast.Constant)
                            and key.value in _FLAT_MAP_KEYS
                            and isinstance(value, ast.Dict)
                        ):
                            keys = {k.value for k in value.keys if isinstance(k, ast.Constant)}
                            assert keys <= {"resources", "devices"}, (
                                f"{path.relative_to(REPO)}:{value.lineno}"
                            )
    assert checked >= 4


# -- what Allot writes --------------------------------------------------------------------------------------------------
S = 1_000_000
GiB = 1024**3


def test_what_node_reporters_sampler_records_validates() -> None:
    window = Window(aggregate_s=10, durations_s=(10, 20))
    pods = {
        "uid-guaranteed": PodInfo(uid="uid-guaranteed", qos="guaranteed", limits=PodLimits(2000, 4 * GiB)),
        "uid-besteffort": PodInfo(uid="uid-besteffort", qos="besteffort"),
    }
    for i in range(21):
        usage = {"uid-guaranteed": (500 + 10 * i, GiB // 2), "uid-besteffort": (100, GiB // 4)}
        window.add(Sample(at=1_700_000_000 * S + i * S, cpu=1000 + 100 * i, memory=2 * GiB, pods=usage))
    metric = window.metric("node-a", pods, report_interval_s=5)
    assert metric is not None and metric.aggregated_node_usages and metric.prod_reclaimable is not None
    manifest = nodemetric_manifest(metric)
    validator = jsonschema.Draft7Validator(_as_kubectl_checks(_schema(yaml.safe_load(CRD.read_text()))))
    assert _errors(validator, manifest) == []
    assert {p["extensions"]["allot.dev/pod-uid"] for p in manifest["status"]["podsMetric"]} == set(pods)


def test_every_field_the_writer_knows_validates(validator: jsonschema.Draft7Validator) -> None:
    (_, upstream) = next((w, o) for w, o in NODEMETRICS if w.startswith("tests/deploy/fixtures/"))
    full = copy.deepcopy(upstream)
    status = full["status"]
    status["nodeMetric"]["aggregatedSystemUsages"] = [
        {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "1"}}}}
    ]
    status["hostApplicationMetric"] = [{"name": "nginx", "usage": {"resources": {"cpu": "1"}}, "qos": "LS"}]
    status["prodPeakMetric"] = {"resource": {"resources": {"cpu": "9", "memory": "20Gi"}}}
    metric = parse_nodemetric(full, issues := [], [])
    assert metric is not None, issues
    assert metric.numa_usages and metric.host_apps and metric.prod_peak and metric.aggregated_system_usages
    assert _errors(validator, nodemetric_manifest(metric)) == []


@pytest.mark.parametrize(
    ("status", "where"),
    [
        ({"nodeMetric": {"nodeUsage": {"cpu": "2"}}}, "status.nodeMetric.nodeUsage"),
        ({"podsMetric": [{"name": "a", "podUsage": {"cpu": "1"}}]}, "status.podsMetric.0.podUsage"),
        ({"podsMetric": [{"name": "a", "uid": "u"}]}, "status.podsMetric.0"),
        ({"prodReclaimableMetric": {"resource": {"memory": "1Gi"}}}, "status.prodReclaimableMetric.resource"),
        (
            {"nodeMetric": {"numaUsages": [{"nodeUsage": {"resources": {}}}]}},
            "status.nodeMetric.numaUsages.0",
        ),
    ],
    ids=["flat-node-usage", "flat-pod-usage", "pod-uid-field", "flat-reclaimable", "numa-without-id"],
)
def test_the_crd_refuses_what_upstreams_refuses(
    validator: jsonschema.Draft7Validator, status: Obj, where: str
) -> None:
    obj = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n"},
        "status": status,
    }
    assert where in {".".join(map(str, e.path)) for e in validator.iter_errors(obj)}
    assert parse_nodemetric(obj, [], []) is None  # Allot's door refuses it too
