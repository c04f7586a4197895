"""Fixtures for the static checks of the deployment artefacts (Dockerfile, docker-compose.yml, deploy/).

Nothing here needs Docker or a cluster. The ground truth the artefacts are checked against is the workspace
itself: the console scripts declared in the pyproject files, the ``allot`` CLI's own parser, and the environment
variables the settings loader reads.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import io
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

# The Kubernetes version the manifests are validated against (kubernetes-validate ships its schemas).
KUBE_VERSION = "1.32"

# The per-node agents; every other service is a cluster-wide decider.
NODE_AGENTS = frozenset({"node-reporter", "qos-enforcer"})

Argv = list[str]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kube_version() -> str:
    return KUBE_VERSION


@pytest.fixture(scope="session")
def node_agents() -> frozenset[str]:
    return NODE_AGENTS


@pytest.fixture(scope="session")
def console_scripts() -> dict[str, str]:
    """Every ``[project.scripts]`` entry of the workspace: name → ``module:function``."""
    scripts: dict[str, str] = {}
    for pyproject in [
        REPO / "pyproject.toml",
        *sorted(REPO.glob("libs/*/pyproject.toml")),
        *sorted(REPO.glob("services/*/pyproject.toml")),
    ]:
        scripts.update(tomllib.loads(pyproject.read_text()).get("project", {}).get("scripts", {}))
    return scripts


@pytest.fixture(scope="session")
def service_names(console_scripts: dict[str, str]) -> frozenset[str]:
    """The seven services (the members of services/ with a processor; the relay is a server), named as their console
    scripts without the ``allot-`` prefix."""
    services = {
        tomllib.loads(p.read_text())["project"]["name"].removeprefix("allot-")
        for p in REPO.glob("services/*/pyproject.toml")
        if any(p.parent.glob("src/*/processor.py"))
    }
    assert {f"allot-{s}" for s in services} <= set(console_scripts)
    return frozenset(services)


@pytest.fixture(scope="session")
def check_argv(console_scripts: dict[str, str]) -> Callable[[Argv], str | None]:
    """A checker of process command lines: ``None`` when the argv runs a real command, else what is wrong.

    ``allot …`` is parsed by the CLI's own parser, so an unknown subcommand or option is caught, and so are the
    servers that take flags (``allot-ui``, ``allot-kube-sync``, ``allot-webhook``: the same flags as ``allot ui``,
    ``allot kube-sync``, ``allot webhook``). A service's console script takes no arguments (it reads the
    environment), so any argument after it is a mistake.
    """
    from allot_cli.main import parser_for
    from allot_kube_sync.main import parser as kube_sync_parser
    from allot_ui.main import parser as ui_parser
    from allot_webhook.main import parser as webhook_parser

    with_flags = {
        "allot": parser_for,
        "allot-ui": lambda _: ui_parser(),
        "allot-kube-sync": lambda _: kube_sync_parser(),
        "allot-webhook": lambda _: webhook_parser(),
    }

    def check(argv: Argv) -> str | None:
        if not argv:
            return "empty command"
        program, args = argv[0], argv[1:]
        if program not in console_scripts:
            return f"{program!r} is not a console script of this workspace ({sorted(console_scripts)})"
        if program not in with_flags:
            return f"{program} takes no arguments, got {args}" if args else None
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                with_flags[program](args).parse_args(args)
        except SystemExit as exc:
            if exc.code != 0:
                return f"`{program} {' '.join(args)}` does not parse: {err.getvalue().strip()}"
        return None

    return check


@pytest.fixture(scope="session")
def accepted_env() -> frozenset[str]:
    """The ALLOT_* variables some Allot process reads.

    The service settings (which the relay reads a subset of), ALLOT_MIGRATIONS_DIR, which ``allot migrate``
    honours (checked by behaviour rather than taken on trust), and the variables of ``allot kube-sync``
    (ALLOT_SCHEDULER_NAME, ALLOT_KUBECONFIG; tests/kube runs the process with both set and checks their effect), and
    qos-enforcer's node agent switches (ALLOT_QOS_AGENT, ALLOT_QOS_DRY_RUN; services/qos-enforcer/tests check them),
    and the relay's anchor settings (ALLOT_ANCHOR_*; libs/stack/tests/test_anchor_settings.py and services/relay/tests check them).
    """
    from allot_eventstore import migrate
    from allot_kube_sync.process import ENVIRONMENT as KUBE_SYNC
    from allot_relay.settings import ENVIRONMENT as RELAY
    from allot_runtime import settings
    from qos_enforcer.config import ENVIRONMENT as QOS_AGENT

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ALLOT_MIGRATIONS_DIR", "/somewhere/else")
        assert migrate.migrations_dir() == Path("/somewhere/else")
    return frozenset({*settings._FIELDS.values(), "ALLOT_MIGRATIONS_DIR", *KUBE_SYNC, *QOS_AGENT, *RELAY})


@pytest.fixture(scope="session")
def build_processor() -> Callable[[str, dict[str, Any]], object]:
    """Build a service's processor with a decision config, through the service's real ``main`` wiring.

    Each ``main()`` hands its processor factory (and what it adds to the config, ``prepare``) to ``service_main``; we
    capture them instead of running the service, then build with the config exactly as the service does at start
    (where a bad config exits with 2).
    """
    import importlib

    def build(service: str, config: dict[str, Any]) -> object:
        module = importlib.import_module(f"{service.replace('-', '_')}.main")
        captured: list[tuple[Callable[[dict[str, Any]], object], Any]] = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(
                module,
                "service_main",
                lambda name, factory, prepare=None, **_: captured.append((factory, prepare)),
            )
            module.main()
        assert len(captured) == 1, f"{service}.main did not call service_main once"
        factory, prepare = captured[0]
        return factory(prepare(config) if prepare is not None else config)

    return build


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="session")
def read_yaml_documents() -> Callable[[Path], list[dict[str, Any]]]:
    return load_yaml_documents


@pytest.fixture(scope="session")
def kustomize() -> Iterator[Callable[[Path], list[dict[str, Any]]]]:
    """``kubectl kustomize DIR`` as a list of objects (cached); skips when kubectl is not on PATH."""
    kubectl = shutil.which("kubectl")
    cache: dict[Path, list[dict[str, Any]]] = {}

    def render(directory: Path) -> list[dict[str, Any]]:
        if kubectl is None:
            pytest.skip("kubectl is not on PATH: the kustomize output cannot be rendered here")
        if directory not in cache:
            result = subprocess.run(
                [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
            )
            assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
            cache[directory] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[directory]

    yield render


Grant = tuple[str, str, str]  # (apiGroup, resource, verb); a rule limited to names gives "resource[name]"


def rbac_grants(objects: list[dict[str, Any]]) -> dict[str, set[Grant]]:
    """ServiceAccount name → every (apiGroup, resource, verb) the shipped roles and bindings give it."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    result: dict[str, set[Grant]] = {}
    for binding in [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]:
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], ref["name"]))
        assert role is not None, f"{binding['metadata']['name']} binds a role that is not shipped: {ref}"
        if ref["kind"] == "Role":
            assert role["metadata"].get("namespace") == binding["metadata"].get("namespace"), ref
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount", subject
            for rule in role["rules"]:
                names = rule.get("resourceNames")
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        targets = [f"{resource}[{n}]" for n in names] if names else [resource]
                        for target in targets:
                            for verb in rule["verbs"]:
                                result.setdefault(subject["name"], set()).add((group, target, verb))
    return result


@pytest.fixture(scope="session")
def grants_of() -> Callable[[list[dict[str, Any]]], dict[str, set[Grant]]]:
    return rbac_grants


# -- custom resources, checked against the shipped CRDs as the API server checks them ------------------------------

CRD_DIRECTORIES = (REPO / "deploy" / "helm" / "allot" / "crds", REPO / "deploy" / "k8s")

# What ObjectMeta must look like for the API server to accept an object (the rest of metadata is its own business).
OBJECT_META: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "namespace": {"type": "string"},
        "labels": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        "annotations": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
    },
    "required": ["name"],
}
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
# date-time as the API server checks it; int32/int64 beyond what the API server checks (it stores any integer), as
# upstream's controllers read them: a value outside its Go type's range is an object they cannot decode.
FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("date-time")
def _date_time(value: object) -> bool:
    return not isinstance(value, str) or RFC3339.match(value) is not None


@FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def shipped_crds() -> list[dict[str, Any]]:
    """Every CustomResourceDefinition Allot ships: the chart's crds/ and any under deploy/k8s."""
    return [
        doc
        for directory in CRD_DIRECTORIES
        for path in sorted(directory.rglob("*.yaml"))
        for doc in load_yaml_documents(path)
        if doc.get("kind") == "CustomResourceDefinition"
    ]


def schema_nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every node of a structural schema with its path (``.field``, ``[*]`` for a map's values, ``[]`` for a list's
    items). The value-validation branches (``anyOf``, ``allOf``, ``oneOf``, ``not``) are not nodes."""
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from schema_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from schema_nodes(schema["additionalProperties"], f"{path}[*]")
    if isinstance(schema.get("items"), dict):
        yield from schema_nodes(schema["items"], f"{path}[]")


def as_validated(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the API server applies it on create and update with field validation Strict (kubectl's
    default): an unknown field is an error where unknown fields are not preserved, ``nullable`` admits null,
    ``x-kubernetes-list-type: set`` items are unique, and metadata is checked as ObjectMeta."""
    out = copy.deepcopy(schema)
    for _, node in schema_nodes(out):
        if node.get("type") == "object" and not node.get("x-kubernetes-preserve-unknown-fields"):
            node.setdefault("additionalProperties", False)
        if node.pop("nullable", False) and "type" in node:
            node["type"] = [node["type"], "null"]
        if node.get("x-kubernetes-list-type") == "set":
            node["uniqueItems"] = True
    out["properties"]["metadata"] = OBJECT_META
    return out


def normalize(value: Any, schema: dict[str, Any]) -> Any:
    """What the API server validates for a value sent as YAML: timestamps as the strings kubectl sends, null in a
    field that is not nullable dropped (pruned before defaulting), then every missing field with a default set."""
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        items = schema.get("items", {})
        return [normalize(item, items) for item in value]
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    out = {}
    for key, item in value.items():
        sub = properties.get(key, extra if isinstance(extra, dict) else {})
        if item is None and (key in properties or isinstance(extra, dict)) and not sub.get("nullable"):
            continue
        out[key] = normalize(item, sub)
    for key, sub in properties.items():
        if key not in out and "default" in sub:
            out[key] = normalize(copy.deepcopy(sub["default"]), sub)
    return out


class CustomResources:
    """The shipped CRDs by (apiVersion, kind), and the check of an object against the CRD version it names."""

    def __init__(self, crds: list[dict[str, Any]]) -> None:
        self.crds = crds
        self.by_kind = {c["spec"]["names"]["kind"]: c for c in crds}
        self.versions: dict[tuple[str, str], dict[str, Any]] = {
            (f"{c['spec']['group']}/{v['name']}", c["spec"]["names"]["kind"]): v["schema"]["openAPIV3Schema"]
            for c in crds
            for v in c["spec"]["versions"]
            if v["served"]
        }
        self.validators = {
            key: jsonschema.Draft4Validator(as_validated(schema), format_checker=FORMATS)
            for key, schema in self.versions.items()
        }

    def namespaced(self, kind: str) -> bool:
        return bool(self.by_kind[kind]["spec"]["scope"] == "Namespaced")

    def errors(self, obj: dict[str, Any]) -> list[jsonschema.ValidationError]:
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        validator = self.validators[key]
        return list(validator.iter_errors(normalize(obj, self.versions[key])))

    def problems(self, obj: dict[str, Any]) -> list[str]:
        """What the API server would refuse in ``obj`` (a kind with a shipped CRD), as ``path: reason``."""
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        if key not in self.validators:
            served = sorted(v for v, k in self.validators if k == key[1])
            return [f"apiVersion: {key[0]} is not served for {key[1]} (served: {served})"]
        return [f"{'.'.join(map(str, e.path)) or '.'}: {e.message}" for e in self.errors(obj)]


@pytest.fixture(scope="session")
def custom_resources() -> CustomResources:
    return CustomResources(shipped_crds())


@pytest.fixture(scope="session")
def walk_schema() -> Callable[[dict[str, Any]], Iterator[tuple[str, dict[str, Any]]]]:
    return schema_nodes


# -- the Helm chart, rendered offline (allot_testing.helm_chart) ---------------------------------------------------


@pytest.fixture(scope="session")
def render_chart() -> Callable[..., list[dict[str, Any]]]:
    """``render_chart(values, name=, namespace=)``: the chart's objects as `helm template` renders them (no cluster:
    ``lookup`` finds nothing, as on a first install); skips when the helm-python dev dependency is missing."""
    pytest.importorskip("helm_python")
    from allot_testing.helm_chart import render

    return render


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """The Helm chart rendered with every value set of ``allot_testing.helm_chart.CASES``, by case."""
    from allot_testing.helm_chart import render_cases

    return render_cases()


@pytest.fixture(scope="session")
def crds() -> list[dict[str, Any]]:
    """The CRDs the Helm chart installs."""
    from allot_testing.helm_chart import chart_crds

    return chart_crds()
