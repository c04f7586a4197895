"""The Helm chart's bundled PostgreSQL and NATS sub-charts, its metrics (ServiceMonitor) and the CRDs it installs.

The chart is rendered offline by Helm's own template engine (:mod:`allot_testing.helm_chart`); the fixtures
``rendered`` (every case of ``CASES``) and ``crds`` are in conftest.py.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from allot_testing.helm_chart import (
    CHART,
    EXTERNAL,
    SUB_CHARTS,
    Obj,
    Values,
    by_kind,
    component,
    env_of,
    pod,
    render,
    render_files,
    workloads,
)

FIXTURES = Path(__file__).parent / "fixtures"


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
