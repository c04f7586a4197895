"""Upstream shapes only: the CRDs Allot ships are structural and upstream's, and every object of their kinds that
Allot shows, reads or writes is one upstream's API server would accept.

- Each shipped CRD (deploy/helm/allot/crds, any under deploy/k8s) is a valid, structural CustomResourceDefinition:
  a type on every node (or int-or-string, or unknown fields preserved), an object node says what it holds, value
  validation only in anyOf/allOf/oneOf/not, defaults that validate, the group, scope, versions and status
  subresource of upstream's types.
- Every document of those kinds in examples/, tests/ (fixtures, conformance cases), deploy/ and the YAML blocks of
  docs/ and the READMEs validates against the CRD version it names, as the API server validates it (defaults and
  null pruning first, unknown fields refused, formats checked). A document a scenario's ``.expected.yaml`` lists
  as ``refused`` is exempt: it shows what Allot refuses.
- Upstream's own samples and user-manual objects (tests/deploy/fixtures/upstream, each file naming its source)
  validate against OUR CRDs, so a user's objects copied from Koordinator's docs are accepted, and Allot's door
  admits every one of them without an issue.
- Changes upstream's schema refuses (a wrong enum, type, format or quantity, a missing required field, a label
  that is not a string) are refused.

The objects Allot writes are checked in test_crd_writes.py.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
UPSTREAM_FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
BASE = REPO / "deploy" / "k8s" / "base"

Obj = dict[str, Any]

# Per kind, as upstream's API types declare it (kubebuilder markers): group, scope, served versions (the storage
# version last) and whether status is a subresource. ElasticQuota and PodGroup follow scheduler-plugins' types, which
# declare the status subresource (Koordinator's vendored copy of them omits the marker).
UPSTREAM: dict[str, tuple[str, str, tuple[str, ...], bool]] = {
    "Device": ("scheduling.koordinator.sh", "Cluster", ("v1alpha1",), False),
    "Reservation": ("scheduling.koordinator.sh", "Cluster", ("v1alpha1",), True),
    "PodMigrationJob": ("scheduling.koordinator.sh", "Cluster", ("v1alpha1",), True),
    "ElasticQuota": ("scheduling.sigs.k8s.io", "Namespaced", ("v1alpha1",), True),
    "PodGroup": ("scheduling.sigs.k8s.io", "Namespaced", ("v1alpha1",), True),
    "ElasticQuotaProfile": ("quota.koordinator.sh", "Namespaced", ("v1alpha1",), False),
    "ClusterColocationProfile": ("config.koordinator.sh", "Cluster", ("v1alpha1",), True),
    "NodeMetric": ("slo.koordinator.sh", "Cluster", ("v1alpha1",), True),
    "NodeResourceTopology": ("topology.node.k8s.io", "Cluster", ("v1alpha1", "v1alpha2"), False),
}
JUNCTORS = ("anyOf", "allOf", "oneOf")
# Only these may appear in a value-validation branch (anyOf/allOf/oneOf/not) of a structural schema.
FORBIDDEN_IN_JUNCTORS = ("type", "description", "default", "additionalProperties", "nullable")

# -- the CRDs --------------------------------------------------------------------------------------------------------


def _crd_id(crd: Obj) -> str:
    return str(crd["metadata"]["name"])


INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def _subschemas(schema: Obj) -> Iterator[Obj]:
    """The schema and every schema inside it."""
    yield schema
    for sub in schema.get("properties", {}).values():
        yield from _subschemas(sub)
    for key in ("additionalProperties", "items", "not"):
        if isinstance(schema.get(key), dict):
            yield from _subschemas(schema[key])
    for key in JUNCTORS:
        for sub in schema.get(key, []):
            yield from _subschemas(sub)


def _junctor_problems(schema: Obj, where: str) -> Iterator[str]:
    """Types, descriptions, defaults... inside anyOf/allOf/oneOf/not (but int-or-string's own anyOf)."""
    int_or_string = schema.get("x-kubernetes-int-or-string") and schema.get("anyOf") == INT_OR_STRING
    branches = [b for key in JUNCTORS if not (key == "anyOf" and int_or_string) for b in schema.get(key, [])]
    if "not" in schema:
        branches.append(schema["not"])
    for node in (n for branch in branches for n in _subschemas(branch)):
        for key in FORBIDDEN_IN_JUNCTORS:
            if key in node:
                yield f"{where}: {key!r} inside a value-validation branch"


def _node_problems(path: str, node: Obj) -> Iterator[str]:
    where = path or "."
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    typed = node.get("type") in ("object", "array", "string", "integer", "number", "boolean")
    if node.get("x-kubernetes-int-or-string"):
        if node.get("anyOf") != INT_OR_STRING or "type" in node:
            yield f"{where}: int-or-string without exactly anyOf [integer, string] and no type"
    elif not typed and not preserve:
        yield f"{where}: no type"
    if preserve is False:
        yield f"{where}: x-kubernetes-preserve-unknown-fields must be true or left out"
    if node.get("type") == "object" and path != ".metadata":
        if "properties" in node and "additionalProperties" in node:
            yield f"{where}: both properties and additionalProperties"
        if not ({"properties", "additionalProperties"} & set(node) or preserve):
            yield f"{where}: an object that says neither what it holds nor to keep it (pruned empty)"
    if node.get("type") == "array" and "items" not in node:
        yield f"{where}: an array without items"
    missing = set(node.get("required", [])) - set(node.get("properties", {}))
    if missing and not preserve:
        yield f"{where}: required {sorted(missing)} are not properties"
    if node.get("x-kubernetes-list-type") not in (None, "atomic", "set", "map"):
        yield f"{where}: unknown x-kubernetes-list-type"
    if node.get("x-kubernetes-map-type") not in (None, "atomic", "granular"):
        yield f"{where}: unknown x-kubernetes-map-type"
    yield from _junctor_problems(node, where)


def structural_problems(schema: Obj, walk: Callable[[Obj], Iterator[tuple[str, Obj]]]) -> list[str]:
    """What makes ``schema`` not structural (apiextensions' rules), or loses data silently (an object node that
    says neither what it holds nor that it keeps anything: the API server prunes it empty)."""
    found = []
    if schema.get("type") != "object":
        found.append("the root is not an object")
    meta = schema.get("properties", {}).get("metadata", {})
    if set(meta) - {"type", "properties"} or set(meta.get("properties", {})) - {"name", "generateName"}:
        found.append(".metadata: only name and generateName may be restricted")
    for path, node in walk(schema):
        found += _node_problems(path, node)
    return found


def built_in(api_version: str, kind: str, kube_version: str) -> bool:
    """Whether Kubernetes serves the kind itself (kubernetes-validate has its schema)."""
    try:
        kubernetes_validate.validate({"apiVersion": api_version, "kind": kind}, kube_version)
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError:
        pass
    return True


def test_every_kind_allot_reads_has_a_shipped_crd(custom_resources: Any, kube_version: str) -> None:
    """The kinds Allot admits (allot_contracts.objects.admission.KINDS) that are custom resources are the kinds
    the CRDs ship, and this module knows upstream's facts for each."""
    from allot_contracts.objects.admission import KINDS

    read = {k.kind for k in KINDS if not built_in(k.api_version, k.kind, kube_version)}
    assert read == set(custom_resources.by_kind) == set(UPSTREAM)
    for spec in KINDS:
        if spec.kind in read:
            assert (spec.api_version, spec.kind) in custom_resources.validators, spec
            assert custom_resources.namespaced(spec.kind) == spec.namespaced, spec.kind


def test_every_custom_resource_allot_lists_and_watches_has_its_crd(
    custom_resources: Any, kustomize: Callable[[Path], list[Obj]]
) -> None:
    """What kube-sync and node-reporter list and watch is shipped; ClusterColocationProfile is read from the
    co-location configuration's documents, not watched."""
    shipped = {_crd_id(c) for c in custom_resources.crds}
    read = {
        f"{resource}.{group}"
        for role in kustomize(BASE)
        if role["kind"] == "ClusterRole"
        for rule in role["rules"]
        if "watch" in rule["verbs"]
        for group in rule["apiGroups"]
        if group
        for resource in rule["resources"]
    }
    assert read - shipped == set()
    assert shipped - read == {"clustercolocationprofiles.config.koordinator.sh"}


def test_the_crds_are_valid_custom_resource_definitions(custom_resources: Any, kube_version: str) -> None:
    problems = []
    for crd in custom_resources.crds:
        try:
            kubernetes_validate.validate(crd, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{_crd_id(crd)}: {'.'.join(map(str, exc.path))}: {exc.message}")
    assert problems == []


@pytest.mark.parametrize("kind", sorted(UPSTREAM))
def test_the_crd_has_upstreams_group_scope_versions_and_subresources(
    custom_resources: Any, kind: str
) -> None:
    group, scope, versions, status = UPSTREAM[kind]
    crd = custom_resources.by_kind[kind]
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == (group, scope)
    assert _crd_id(crd) == f"{spec['names']['plural']}.{group}"
    assert spec["names"]["listKind"] == f"{kind}List"
    if group.endswith(".k8s.io"):  # a protected group: the API server wants the approval annotation
        assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"].startswith("https://")
    assert tuple(v["name"] for v in spec["versions"]) == versions
    assert all(v["served"] for v in spec["versions"])
    assert [v["name"] for v in spec["versions"] if v["storage"]] == [versions[-1]]
    for version in spec["versions"]:
        assert ("status" in version.get("subresources", {})) == status, version["name"]
        has_status = "status" in version["schema"]["openAPIV3Schema"].get("properties", {})
        assert has_status or not status, f"{version['name']}: a status subresource without a status field"


@pytest.mark.parametrize("kind", sorted(UPSTREAM))
def test_the_crd_schema_is_structural(custom_resources: Any, walk_schema: Any, kind: str) -> None:
    import jsonschema

    for version in custom_resources.by_kind[kind]["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        problems = structural_problems(schema, walk_schema)
        assert not problems, f"{version['name']}:\n" + "\n".join(problems)
        for path, node in walk_schema(schema):
            if "default" in node:  # a default must itself be valid, or every object gets an invalid value
                sub = {k: v for k, v in node.items() if k != "default"}
                assert list(jsonschema.Draft4Validator(sub).iter_errors(node["default"])) == [], path


def test_the_structural_check_finds_what_the_api_server_refuses(walk_schema: Any) -> None:
    bad: Obj = {
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {
                "type": "object",
                "properties": {
                    "untyped": {"description": "no type"},
                    "quantity": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
                    "empty": {"type": "object"},
                    "typed": {"type": "string", "anyOf": [{"type": "string", "description": "x"}]},
                },
                "required": ["absent"],
            },
        },
    }
    found = "\n".join(structural_problems(bad, walk_schema))
    for expected in (
        ".metadata: only name",
        ".spec.untyped: no type",
        ".spec.quantity: no type",
        ".spec.both: both properties",
        ".spec.empty: an object that says neither",
        ".spec.typed: 'type' inside",
        ".spec: required ['absent']",
    ):
        assert expected in found


# -- the documents -----------------------------------------------------------------------------------------------

FENCE = re.compile(r"^([ \t]*)```+[ \t]*(ya?ml)?[^\n]*\n(.*?)^\1```", re.S | re.M)
KIND_LINE = re.compile(r"^\s*kind:\s*[\"']?(\w+)", re.M)


class Found(NamedTuple):
    where: str  # file, or file:line for a block in Markdown
    doc: Obj


def _parse(text: str, where: str, kinds: set[str]) -> list[Found]:
    """The documents of ``kinds`` in one YAML text. Text that does not parse fails when it names one of the kinds
    (a broken example of them), and is skipped otherwise (shell transcripts, templates, other formats)."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        if set(KIND_LINE.findall(text)) & kinds:
            pytest.fail(f"{where}: does not parse as YAML: {exc}")
        return []
    return [Found(where, d) for d in docs if isinstance(d, dict) and d.get("kind") in kinds]


def markdown_documents(text: str, where: str, kinds: set[str]) -> list[Found]:
    """The documents of ``kinds`` in the fenced blocks of a Markdown text (indented blocks in lists included),
    each found at ``where:<line of the block>``."""
    found = []
    for match in FENCE.finditer(text):
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(3).splitlines())
        line = text.count("\n", 0, match.start()) + 1
        found += _parse(body, f"{where}:{line}", kinds)
    return found


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(
        p
        for p in root.glob(pattern)
        if p.is_file()
        and "templates" not in p.relative_to(REPO).parts  # Helm templates are not YAML until rendered
        and UPSTREAM_FIXTURES not in p.parents
    )


SOURCES = [
    *_files(REPO, "examples/**/*.yaml"),
    *_files(REPO, "tests/**/*.yaml"),
    *_files(REPO, "deploy/**/*.yaml"),
    *_files(REPO, "services/*/tests/**/*.yaml"),
    *_files(REPO, "libs/*/tests/**/*.yaml"),
    *_files(REPO, "*.md"),
    *_files(REPO, "docs/**/*.md"),
    *_files(REPO, "examples/**/*.md"),
    *_files(REPO, "deploy/**/*.md"),
]


@functools.cache
def _documents(path: Path) -> tuple[Found, ...]:
    kinds = set(UPSTREAM)
    if path.suffix == ".md":
        return tuple(markdown_documents(path.read_text(), str(path.relative_to(REPO)), kinds))
    return tuple(_parse(path.read_text(), str(path.relative_to(REPO)), kinds))


def documents(path: Path, kinds: set[str]) -> list[Found]:
    """The documents of ``kinds`` (shipped kinds) in a YAML or Markdown file of the repository."""
    return [found for found in _documents(path) if found.doc["kind"] in kinds]


def refused_here(path: Path) -> set[str]:
    """``<Kind> <namespace/name or name>`` of the documents a scenario's expected file says the door refuses."""
    expected = path.with_name(path.name.removesuffix(".yaml") + ".expected.yaml")
    if path.suffix != ".yaml" or not expected.exists():
        return set()
    return set((yaml.safe_load(expected.read_text()) or {}).get("refused") or {})


def document_key(custom_resources: Any, doc: Obj) -> str:
    meta = doc.get("metadata") or {}
    name = str(meta.get("name", ""))
    if custom_resources.namespaced(doc["kind"]):
        name = f"{meta.get('namespace') or 'default'}/{name}"
    return f"{doc['kind']} {name}"


def repository_documents(custom_resources: Any) -> dict[Path, list[Found]]:
    kinds = set(custom_resources.by_kind)
    out = {}
    for path in SOURCES:
        refused = refused_here(path)
        found = [f for f in documents(path, kinds) if document_key(custom_resources, f.doc) not in refused]
        if found:
            out[path] = found
    return out


@pytest.fixture(scope="module")
def in_repository(custom_resources: Any) -> dict[Path, list[Found]]:
    return repository_documents(custom_resources)


def test_documents_of_every_kind_and_version_are_checked(
    in_repository: dict[Path, list[Found]], custom_resources: Any
) -> None:
    seen = {(f.doc.get("apiVersion"), f.doc["kind"]) for found in in_repository.values() for f in found}
    assert set(custom_resources.validators) - seen <= {
        ("topology.node.k8s.io/v1alpha2", "NodeResourceTopology")
    }
    where = {p.relative_to(REPO).parts[0] for p in in_repository}
    assert {"examples", "tests", "docs"} <= where


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_document_in_the_repository_validates(
    path: Path, in_repository: dict[Path, list[Found]], custom_resources: Any
) -> None:
    problems = []
    for found in in_repository.get(path, []):
        for problem in custom_resources.problems(found.doc):
            problems.append(f"{found.where}: {document_key(custom_resources, found.doc)}: {problem}")
    assert not problems, "\n".join(problems)


def test_markdown_blocks_are_found_wherever_they_are_indented() -> None:
    text = (
        "1. Apply:\n\n   ```yaml\n   apiVersion: scheduling.sigs.k8s.io/v1alpha1\n   kind: PodGroup\n"
        "   metadata:\n     name: g\n   ```\n\n```bash\n$ kubectl get pg\n```\n\n```\nkind: PodGroup\n```\n"
    )
    found = markdown_documents(text, "x.md", {"PodGroup"})
    assert [(f.where, f.doc.get("metadata")) for f in found] == [("x.md:3", {"name": "g"}), ("x.md:14", None)]
    assert markdown_documents(text, "x.md", {"Device"}) == []
    with pytest.raises(pytest.fail.Exception, match="x.md:1: does not parse"):
        markdown_documents("```yaml\nkind: PodGroup\n\tmetadata: {}\n```\n", "x.md", {"PodGroup"})


# -- upstream's own objects against our CRDs -----------------------------------------------------------------------

UPSTREAM_FILES = sorted(UPSTREAM_FIXTURES.glob("*.yaml"))
OURS = Path(__file__).parent / "fixtures" / "koordinator-objects.yaml"  # upstream-shaped, written here


@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: p.name)
def test_upstreams_objects_validate_against_our_crds(path: Path, custom_resources: Any) -> None:
    assert path.read_text().startswith("# Source: "), "name the upstream file the objects come from"
    found = documents(path, set(custom_resources.by_kind))
    assert found, f"{path.name} holds no object of a shipped kind"
    problems = [
        f"{document_key(custom_resources, f.doc)}: {p}"
        for f in found
        for p in custom_resources.problems(f.doc)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", UPSTREAM_FILES, ids=lambda p: p.name)
def test_allots_door_admits_upstreams_objects(path: Path, custom_resources: Any) -> None:
    """What upstream accepts, Allot reads: no field of upstream's objects is refused (what Allot reads but does not
    act on is a warning, not an issue)."""
    from allot_contracts.objects.admission import admit

    issues = [
        f"{document_key(custom_resources, f.doc)}: {i.path}: {i.message}"
        for f in documents(path, set(custom_resources.by_kind))
        for i in admit(f.doc).issues
    ]
    assert not issues, "\n".join(issues)


def test_upstream_objects_of_every_kind_are_checked(custom_resources: Any) -> None:
    kinds = set(custom_resources.by_kind)
    seen = {f.doc["kind"] for path in UPSTREAM_FILES for f in documents(path, kinds)}
    assert kinds - seen <= {"NodeMetric"}  # NodeMetric's upstream objects are checked with its CRD


# -- what the CRDs refuse ------------------------------------------------------------------------------------------

REFUSED = [
    ("Device", lambda o: o["spec"]["devices"][0].update(health="yes"), "spec.devices.0.health"),
    ("Device", lambda o: o["spec"]["devices"][0].update(gpuIndex=0), "spec.devices.0"),
    ("Device", lambda o: o["spec"]["devices"][0]["topology"].pop("pcieID"), "spec.devices.0.topology"),
    (
        "Device",
        lambda o: o["spec"]["devices"][0]["conditions"][0].update(type="is ok"),
        "spec.devices.0.conditions.0.type",
    ),
    (
        "Device",
        lambda o: o["spec"]["devices"][0]["conditions"][0].pop("message"),
        "spec.devices.0.conditions.0",
    ),
    ("ElasticQuota", lambda o: o["spec"]["max"].update(cpu="lots"), "spec.max.cpu"),
    ("PodGroup", lambda o: o["spec"].update(minMember=0), "spec.minMember"),
    ("PodGroup", lambda o: o["spec"].update(minMember=2**31), "spec.minMember"),
    ("Reservation", lambda o: o["spec"].update(owners=[]), "spec.owners"),
    ("Reservation", lambda o: o["spec"].update(allocatePolicy="Loose"), "spec.allocatePolicy"),
    ("Reservation", lambda o: o["spec"]["owners"].insert(0, {}), "spec.owners.0"),
    ("Reservation", lambda o: o["spec"].update(expires="tomorrow"), "spec.expires"),
    ("PodMigrationJob", lambda o: o["spec"].pop("podRef"), "spec"),
    ("PodMigrationJob", lambda o: o["spec"].update(ttl=300), "spec.ttl"),
    ("ClusterColocationProfile", lambda o: o["spec"].update(qosClass="GOLD"), "spec.qosClass"),
    ("ElasticQuotaProfile", lambda o: o["spec"].pop("nodeSelector"), "spec"),
    ("NodeResourceTopology", lambda o: o.pop("zones"), "."),
    ("NodeResourceTopology", lambda o: o.pop("topologyPolicies"), "."),  # required in v1alpha1 only
    (
        "NodeResourceTopology",
        lambda o: o["zones"][0]["costs"][0].update(value="near"),
        "zones.0.costs.0.value",
    ),
    ("NodeResourceTopology", lambda o: o["zones"][0]["resources"][0].pop("available"), "zones.0.resources.0"),
    ("NodeResourceTopology", lambda o: o["zones"][0].update(numaID=0), "zones.0"),
    (
        "NodeMetric",
        lambda o: o["status"]["nodeMetric"]["nodeUsage"].update(cpu="1"),
        "status.nodeMetric.nodeUsage",
    ),
    ("PodGroup", lambda o: o["metadata"].update(labels={"size": 4}), "metadata.labels.size"),
    ("PodGroup", lambda o: o["metadata"].pop("name"), "metadata"),
]


@pytest.mark.parametrize(
    ("kind", "change", "where"), REFUSED, ids=[f"{k}-{w.strip('.') or 'root'}" for k, _, w in REFUSED]
)
def test_the_crds_refuse_what_upstream_refuses(
    custom_resources: Any, kind: str, change: Callable[[Obj], Any], where: str
) -> None:
    ours = [
        REPO / "tests/deploy/fixtures/koordinator-objects.yaml",
        *sorted((REPO / "examples").rglob("*.yaml")),
    ]
    candidates = [f.doc for path in [*UPSTREAM_FILES, *ours] for f in documents(path, {kind})]
    for obj in candidates:
        bad = copy.deepcopy(obj)
        try:
            change(bad)
        except (KeyError, IndexError, TypeError, AttributeError):
            continue  # this object lacks the part the change is about; the next one has it
        break
    else:
        pytest.fail(f"no {kind} to change")
    assert custom_resources.problems(obj) == []
    paths = {".".join(map(str, e.path)) or "." for e in custom_resources.errors(bad)}
    assert where in paths, paths


def test_the_doors_table_of_known_fields_is_the_shipped_crds(custom_resources: Any) -> None:
    """``allot apply`` refuses a field a custom resource's CRD does not have (``allot_intake.known_fields``): its
    tables of top-level, spec and status fields are the CRDs' own, version by version."""
    from allot_intake.known_fields import CUSTOM, STATUS

    assert set(CUSTOM) == set(custom_resources.versions)
    for key, schema in custom_resources.versions.items():
        properties = schema["properties"]
        top, spec = CUSTOM[key]
        assert top == set(properties), key
        assert spec == set(properties.get("spec", {}).get("properties", {})), key
        if key in STATUS:
            assert STATUS[key] == set(properties["status"]["properties"]), key
