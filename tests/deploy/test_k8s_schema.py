"""The Kubernetes manifests are valid objects: each file on its own, and the kustomize output of every directory.

Validation is strict (unknown fields are errors, as the API server's field validation would report them) against
the OpenAPI schemas of Kubernetes KUBE_VERSION shipped in the kubernetes-validate package. Rendering needs kubectl
(with its built-in kustomize); without it, those checks are skipped and the per-file ones still run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from allot_eventstore.urls import async_url

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
KUSTOMIZATIONS = sorted(p.parent for p in K8S.rglob("kustomization.yaml"))
SECRET_TEMPLATE = K8S / "database-secret.example.yaml"

Objects = list[dict[str, Any]]


def kustomization(directory: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((directory / "kustomization.yaml").read_text()))


def resource_files() -> list[Path]:
    """Every file a kustomization lists as a resource (directories are other kustomizations)."""
    files = []
    for directory in KUSTOMIZATIONS:
        for entry in kustomization(directory).get("resources", []):
            path = (directory / entry).resolve()
            if path.is_file():
                files.append(path)
    return files


def invalid(objects: Objects, version: str) -> list[str]:
    problems = []
    for obj in objects:
        name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{name}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{name}: {exc.message}")
    return problems


def test_there_is_a_base_and_a_dev_overlay() -> None:
    assert K8S / "base" in KUSTOMIZATIONS
    assert K8S / "overlays" / "dev" in KUSTOMIZATIONS


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def test_everything_a_kustomization_refers_to_exists(directory: Path) -> None:
    spec = kustomization(directory)
    missing = [entry for entry in spec.get("resources", []) if not (directory / entry).exists()]
    for generator in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
        for entry in generator.get("files", []) + generator.get("envs", []):
            source = entry.split("=", 1)[-1]
            if not (directory / source).is_file():
                missing.append(source)
    assert missing == []


@pytest.mark.parametrize(
    "path",
    [*resource_files(), *sorted(K8S.glob("*-secret.example.yaml"))],
    ids=lambda p: str(p.relative_to(K8S)),
)
def test_manifest_file_validates(
    path: Path, read_yaml_documents: Callable[[Path], Objects], kube_version: str
) -> None:
    objects = read_yaml_documents(path)
    assert objects, f"{path} holds no objects"
    assert invalid(objects, kube_version) == []


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def test_kustomize_output_validates(
    directory: Path, kustomize: Callable[[Path], Objects], kube_version: str
) -> None:
    assert invalid(kustomize(directory), kube_version) == []


def test_the_validator_rejects_what_the_api_server_would(kube_version: str) -> None:
    """Guards the guard: a misplaced field and a wrong type must not pass."""
    deployment = next(
        d
        for d in yaml.safe_load_all((K8S / "base" / "relay.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    misplaced = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    wrong_type = {**deployment, "spec": {**deployment["spec"], "replicas": "one"}}
    assert invalid([deployment], kube_version) == []
    assert invalid([misplaced], kube_version) and invalid([wrong_type], kube_version)


def test_the_database_secret_is_a_template_the_base_never_applies(
    kustomize: Callable[[Path], Objects],
) -> None:
    """Applying the base must not overwrite the user's real credentials, yet the template must fit the refs."""
    for directory in KUSTOMIZATIONS:
        assert SECRET_TEMPLATE.name not in str(kustomization(directory).get("resources", []))
        assert not [o for o in kustomize(directory) if o["kind"] == "Secret"], f"{directory} ships a Secret"
    (secret,) = yaml.safe_load_all(SECRET_TEMPLATE.read_text())
    async_url(secret["stringData"]["url"])  # the placeholder has the shape the event store accepts
    refs = {
        (env["valueFrom"]["secretKeyRef"]["name"], env["valueFrom"]["secretKeyRef"]["key"])
        for obj in kustomize(K8S / "base")
        if "template" in obj.get("spec", {})
        for container in obj["spec"]["template"]["spec"]["containers"]
        for env in container.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }
    assert refs == {(secret["metadata"]["name"], key) for key in secret["stringData"]}
    assert secret["metadata"]["namespace"] == kustomization(K8S / "base")["namespace"]
