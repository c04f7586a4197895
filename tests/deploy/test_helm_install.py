"""The chart's install surface: where its images come from, names, ServiceAccount annotations, upgradable CRDs and
the opt-in node agent. Each value is rendered offline (`helm template`, through the Helm SDK) and every object it
yields is validated against the Kubernetes OpenAPI schemas, as test_helm_chart.py validates the other values.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "allot"
EXTERNAL = {"postgresql": {"enabled": False, "url": "postgresql://allot:pw@db.example:6543/allot"}}
EXTERNAL_NATS = {"nats": {"enabled": False, "url": "nats://nats.example:4333"}}

Obj = dict[str, Any]
Render = Callable[..., list[Obj]]


def of_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def workloads(objects: list[Obj]) -> dict[str, Obj]:
    """Allot component → its Deployment, DaemonSet or Job (the bundled servers' StatefulSets left out)."""
    return {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: o
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet", "Job")
    }


def pod_spec(workload: Obj) -> Obj:
    return dict(workload["spec"]["template"]["spec"])


def env(container: Obj) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def invalid(objects: list[Obj], kube_version: str) -> list[str]:
    found = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            found.append(
                f"{obj['kind']}/{obj['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}"
            )
    return found


def run_script(name: str, *args: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / name), *args], capture_output=True, text=True, timeout=300
    )


def workspace_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


# -- images: what scripts/build-images tags is what the chart runs ---------------------------------------------------


def built_images(*args: str) -> dict[str, str]:
    """Dockerfile target → image, from `scripts/build-images --dry-run`."""
    result = run_script("build-images", "--dry-run", *args)
    assert result.returncode == 0, result.stderr
    builds = [line.split() for line in result.stdout.splitlines() if line.startswith("docker build ")]
    return {words[words.index("--target") + 1]: words[words.index("--tag") + 1] for words in builds}


def test_the_default_image_is_the_cli_image_the_release_path_builds(
    render_chart: Render, kube_version: str
) -> None:
    objects = render_chart({})
    images = {c["image"] for w in workloads(objects).values() for c in pod_spec(w)["containers"]}
    assert images == {built_images()["allot"]} == {f"allot:{workspace_version()}"}
    assert invalid(objects, kube_version) == []


def test_per_process_images_are_the_dockerfile_targets_of_each_process(render_chart: Render) -> None:
    objects = render_chart(
        {"image": {"repository": "ghcr.io/acme/allot", "perProcess": True, "tag": "1.2.3"}}
    )
    built = built_images("--registry", "ghcr.io/acme", "--tag", "1.2.3")
    dockerfile = (REPO / "Dockerfile").read_text()
    for component, workload in workloads(objects).items():
        (container,) = pod_spec(workload)["containers"]
        # The migration runs `allot migrate`, which only the CLI image has.
        target = "allot" if component == "migrate" else component
        assert container["image"] == built[target], component
        (cmd,) = re.findall(rf"(?ms)^FROM runtime AS {re.escape(target)}\n.*?^CMD (\[.*?\])$", dockerfile)
        # Each image's own command is the one the chart runs in it (the CLI image runs any: `allot migrate`).
        assert target == "allot" or container["command"][:2] == yaml.safe_load(cmd)[:2], component


def test_build_images_tags_every_target_with_the_workspace_version_and_pushes_on_request() -> None:
    result = run_script("build-images", "--dry-run", "--registry", "registry.example/team/", "--push")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 2 * 12, result.stdout
    for build, push in zip(lines[::2], lines[1::2], strict=True):
        tag = build.split("--tag ")[1].split()[0]
        assert re.fullmatch(rf"registry\.example/team/allot(-[a-z-]+)?:{re.escape(workspace_version())}", tag)
        assert push == f"docker push {tag}"
    only = run_script("build-images", "--dry-run", "--only", "binder", "relay").stdout.splitlines()
    assert [line.split("--target ")[1].split()[0] for line in only] == ["binder", "relay"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "scheduler"], "--only: no image target scheduler (targets: node-reporter,"),
        (["--tag", "v 1"], "--tag: 'v 1' is not a valid image tag"),
    ],
)
def test_build_images_refuses_bad_arguments_with_the_reason(args: list[str], message: str) -> None:
    result = run_script("build-images", "--dry-run", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_the_scripts_refuse_a_chart_whose_version_is_not_the_workspace_version(tmp_path: Path) -> None:
    for path in ("pyproject.toml", "Dockerfile", "scripts/build-images", "scripts/package-chart"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((REPO / path).read_text())
    chart = tmp_path / "deploy" / "helm" / "allot" / "Chart.yaml"
    chart.parent.mkdir(parents=True)
    chart.write_text((CHART / "Chart.yaml").read_text().replace('appVersion: "', 'appVersion: "9'))
    for script in ("build-images", "package-chart"):
        result = run_script(script, *(["--dry-run"] if script == "build-images" else []), root=tmp_path)
        assert result.returncode == 2, result.stderr
        assert f"both must be the workspace version {workspace_version()}" in result.stderr


def test_package_chart_packages_the_chart_with_the_workspace_version(tmp_path: Path) -> None:
    helm = pytest.importorskip("helm_python")
    result = run_script("package-chart", "--destination", str(tmp_path))
    assert result.returncode == 0, result.stderr
    archive = Path(result.stdout.strip())
    assert archive == tmp_path / f"allot-{workspace_version()}.tgz"
    with helm.Chart.load(archive) as chart:
        assert chart.metadata["version"] == chart.metadata["appVersion"] == workspace_version()
        assert len(chart.crds) == len(list((CHART / "crds").glob("*.yaml")))
        manifests = chart.render({}, name="allot", namespace="allot-system", is_install=True)
    assert f"image: allot:{workspace_version()}" in manifests["allot/templates/components.yaml"]


# -- names -----------------------------------------------------------------------------------------------------------


def allot_objects(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] not in ("CustomResourceDefinition", "PriorityClass")]


@pytest.mark.parametrize(
    ("values", "fullname", "name"),
    [
        ({"global": {"fullnameOverride": "gpu-sched"}}, "gpu-sched", "allot"),
        ({"global": {"nameOverride": "scheduler"}}, "team-scheduler", "scheduler"),
        ({"fullnameOverride": "gpu-sched", **EXTERNAL, **EXTERNAL_NATS}, "gpu-sched", "allot"),
        ({"nameOverride": "scheduler", **EXTERNAL, **EXTERNAL_NATS}, "team-scheduler", "scheduler"),
    ],
    ids=["global-fullname", "global-name", "fullname", "name"],
)
def test_name_overrides_rename_every_object_and_keep_the_wiring(
    render_chart: Render, kube_version: str, values: Obj, fullname: str, name: str
) -> None:
    objects = render_chart(values, name="team")
    for obj in allot_objects(objects):
        assert obj["metadata"]["name"].startswith(f"{fullname}-") or obj["metadata"]["name"] == fullname, obj
        labels = obj["metadata"]["labels"]
        assert labels.get("app.kubernetes.io/name", name) == name, obj["metadata"]["name"]
    for workload in [*workloads(objects).values(), *of_kind(objects, "StatefulSet").values()]:
        assert workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == name
    # The components still reach the servers: the database Secret, the NATS Service, the policies admitting them.
    (relay,) = pod_spec(workloads(objects)["relay"])["containers"]
    database = next(e for e in relay["env"] if e["name"] == "ALLOT_DATABASE_URL")["valueFrom"]["secretKeyRef"]
    assert database["name"] in of_kind(objects, "Secret")
    services = of_kind(objects, "Service")
    if "nats" not in values:
        (config,) = [c for c in of_kind(objects, "ConfigMap").values() if "ALLOT_NATS_URL" in c["data"]]
        host = config["data"]["ALLOT_NATS_URL"].split("://")[1].split(":")[0]
        assert host == f"{fullname}-nats" and host in services
        for policy in of_kind(objects, "NetworkPolicy").values():
            (rule,) = policy["spec"]["ingress"]
            assert rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == name
    assert invalid(objects, kube_version) == []


def test_a_top_level_name_override_with_the_bundled_servers_says_to_set_the_global_one(
    render_chart: Render,
) -> None:
    helm = pytest.importorskip("helm_python")
    with pytest.raises(helm.HelmError) as failure:
        render_chart({"fullnameOverride": "gpu-sched", "nameOverride": "scheduler"})
    message = str(failure.value)
    assert "set global.fullnameOverride=gpu-sched instead" in message
    assert "set global.nameOverride=scheduler instead" in message


# -- ServiceAccount annotations --------------------------------------------------------------------------------------


def test_service_account_annotations_reach_every_account_with_per_process_ones_on_top(
    render_chart: Render, kube_version: str
) -> None:
    objects = render_chart(
        {
            "serviceAccount": {
                "annotations": {"iam.gke.io/gcp-service-account": "allot@p.iam", "team": "gpu"}
            },
            "components": {
                "binder": {"serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": "binder@p.iam"}},
                "migrate": {"serviceAccountAnnotations": {"migrations": "yes"}},
            },
        }
    )
    accounts = {
        a["metadata"]["labels"]["app.kubernetes.io/component"]: a["metadata"].get("annotations")
        for a in of_kind(objects, "ServiceAccount").values()
    }
    assert set(accounts) >= {"relay", "binder", "migrate", "webhook", "qos-enforcer", "kube-sync", "ui"}
    for component, given in accounts.items():
        expected = {"iam.gke.io/gcp-service-account": "allot@p.iam", "team": "gpu"}
        if component == "binder":
            expected["iam.gke.io/gcp-service-account"] = "binder@p.iam"
        if component == "migrate":
            expected["migrations"] = "yes"
        assert given == expected, component
    assert invalid(objects, kube_version) == []
    # None given: no annotations at all.
    assert all(
        "annotations" not in a["metadata"] for a in of_kind(render_chart({}), "ServiceAccount").values()
    )


# -- CRDs ------------------------------------------------------------------------------------------------------------


def test_managed_crds_are_the_shipped_ones_upgraded_with_the_release_and_kept_on_uninstall(
    render_chart: Render, kube_version: str
) -> None:
    # By default the CRDs are Helm's crds/ directory only (installed once; docs/install.md has the upgrade step).
    assert of_kind(render_chart({}), "CustomResourceDefinition") == {}
    rendered = of_kind(render_chart({"crds": {"managed": True}}), "CustomResourceDefinition")
    shipped = {
        doc["metadata"]["name"]: doc
        for path in sorted((CHART / "crds").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    }
    assert set(rendered) == set(shipped)
    for name, crd in rendered.items():
        assert crd["spec"] == shipped[name]["spec"], name
        annotations = crd["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert shipped[name]["metadata"].get("annotations", {}).items() <= annotations.items()
        labels = crd["metadata"]["labels"]
        assert (
            labels["app.kubernetes.io/managed-by"] == "Helm"
            and labels["app.kubernetes.io/part-of"] == "allot"
        )
    assert invalid(list(rendered.values()), kube_version) == []
