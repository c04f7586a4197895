"""docker-compose.yml: the local stack starts the right processes, wired to the right servers, in the right order.

Structural checks run everywhere (PyYAML). ``docker compose config``, the reference parser, runs too when the compose
plugin is installed; it needs no engine.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from allot_eventstore.urls import async_url

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
SERVERS = {"postgres", "nats"}
ON_DEMAND = {"cli"}  # behind a profile; `docker compose run` only
LONG_RUNNING_RESTART = {"always", "unless-stopped", "on-failure"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict), "compose file has no services"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


@pytest.fixture(scope="module")
def allot_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every service that runs the Allot image (everything but the two servers)."""
    return {name: svc for name, svc in services.items() if name not in SERVERS}


def argv(service: dict[str, Any]) -> list[str]:
    def words(value: Any) -> list[str]:
        if value is None:
            return []
        assert isinstance(value, list), f"use the exec (list) form, not {value!r}: no shell in between"
        return [str(v) for v in value]

    return words(service.get("entrypoint")) + words(service.get("command"))


def environment(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment as compose assembles it: env_file(s) first, then ``environment``."""
    env: dict[str, str] = {}
    env_files = service.get("env_file") or []
    for env_file in [env_files] if isinstance(env_files, str) else env_files:
        path = COMPOSE_FILE.parent / (env_file if isinstance(env_file, str) else env_file["path"])
        assert path.is_file(), f"env_file {path} does not exist"
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                key, sep, value = line.partition("=")
                assert sep, f"{path}: {line!r} is not KEY=VALUE"
                env[key.strip()] = value.strip()
    declared = service.get("environment") or {}
    if isinstance(declared, list):
        declared = dict(item.split("=", 1) for item in declared)
    env.update({k: str(v) for k, v in declared.items()})
    return env


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host source, container target) of every bind mount; named volumes are skipped."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            source, _, rest = volume.partition(":")
            target = rest.split(":")[0]
            if not source.startswith((".", "/")):
                continue  # a named volume
        else:
            if volume.get("type") != "bind":
                continue
            source, target = volume["source"], volume["target"]
        mounts.append(((COMPOSE_FILE.parent / source).resolve(), target))
    return mounts


def test_the_stack_is_the_servers_migration_relay_and_seven_services(
    services: dict[str, Any], service_names: frozenset[str]
) -> None:
    assert set(services) == SERVERS | {"migrate", "relay", "ui"} | service_names | ON_DEMAND
    assert services["postgres"]["image"].startswith("postgres:16")
    assert services["nats"]["image"].startswith("nats:2.11")


def test_every_allot_process_runs_a_real_command(
    allot_services: dict[str, Any], check_argv: Callable[[list[str]], str | None]
) -> None:
    problems = {name: check_argv(argv(svc)) for name, svc in allot_services.items()}
    assert {name: p for name, p in problems.items() if p} == {}


def test_each_service_runs_its_own_process(services: dict[str, Any], service_names: frozenset[str]) -> None:
    assert argv(services["migrate"]) == ["allot", "migrate"]
    assert argv(services["relay"]) == ["allot-relay"]
    assert argv(services["ui"])[:1] == ["allot-ui"]
    for name in service_names:
        assert argv(services[name]) == [f"allot-{name}"], name


def dockerfile_images(path: Path) -> dict[str, tuple[str, list[str]]]:
    """The image targets of a Dockerfile: stage name → (image title, CMD)."""
    images: dict[str, tuple[str, list[str]]] = {}
    for stage in re.split(r"(?m)^FROM ", path.read_text())[1:]:
        name = re.match(r"\S+ AS ([\w.-]+)", stage)
        title = re.search(r'org\.opencontainers\.image\.title="([\w.-]+)"', stage)
        cmd = re.search(r"(?m)^CMD (\[.*\])$", stage)
        if name and title and cmd:
            images[name.group(1)] = (title.group(1), json.loads(cmd.group(1)))
    return images


def test_each_process_is_built_from_its_own_dockerfile_target(allot_services: dict[str, Any]) -> None:
    for name, svc in allot_services.items():
        # Every service names the build, so none of them tries to pull the locally built tag from a registry.
        build = svc.get("build")
        assert isinstance(build, dict), f"{name} has no build section with a target"
        dockerfile = COMPOSE_FILE.parent / build.get("context", ".") / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
        images = dockerfile_images(dockerfile)
        assert build.get("target") in images, (
            f"{name}: target {build.get('target')} is not an image of {dockerfile}"
        )
        title, cmd = images[build["target"]]
        # The tag scripts/build-images gives the target, at the dev version.
        assert svc.get("image") == f"{title}:dev", name
        # A process runs the image built for it (the CLI image runs anything: migrate, the on-demand cli).
        assert title == "allot" or argv(svc) == cmd, f"{name} runs {argv(svc)} on the image of {cmd}"
    # The seven services and the servers each get their own image; only the CLI image is shared.
    shared = [svc["build"]["target"] for svc in allot_services.values()]
    assert len(shared) - len(set(shared)) == shared.count("allot") - 1


def test_only_variables_the_settings_accept(
    allot_services: dict[str, Any], accepted_env: frozenset[str]
) -> None:
    unknown = {
        name: sorted(k for k in environment(svc) if k.startswith("ALLOT_") and k not in accepted_env)
        for name, svc in allot_services.items()
    }
    assert {name: keys for name, keys in unknown.items() if keys} == {}


def test_processes_point_at_the_compose_servers(allot_services: dict[str, Any]) -> None:
    for name, svc in allot_services.items():
        env = environment(svc)
        database, nats = env.get("ALLOT_DATABASE_URL"), env.get("ALLOT_NATS_URL")
        assert database, f"{name}: ALLOT_DATABASE_URL is required"
        async_url(database)  # raises on a URL the event store does not accept
        assert urlsplit(database).hostname == "postgres", f"{name}: {database}"
        assert nats and urlsplit(nats).scheme == "nats" and urlsplit(nats).hostname == "nats", (
            f"{name}: {nats}"
        )


def test_config_files_are_mounted(allot_services: dict[str, Any]) -> None:
    for name, svc in allot_services.items():
        config = environment(svc).get("ALLOT_CONFIG_FILE")
        if not config:
            continue
        sources = [
            source / Path(config).relative_to(target)
            for source, target in bind_mounts(svc)
            if Path(config).is_relative_to(target)
        ]
        assert sources and sources[0].is_file(), f"{name}: {config} is not a mounted file"


def test_service_configs_are_valid_for_their_service(
    allot_services: dict[str, Any], build_processor: Callable[[str, dict[str, Any]], object]
) -> None:
    for name, svc in allot_services.items():
        config = environment(svc).get("ALLOT_CONFIG_FILE")
        if config:
            source = next(
                src / Path(config).relative_to(tgt)
                for src, tgt in bind_mounts(svc)
                if Path(config).is_relative_to(tgt)
            )
            build_processor(name, yaml.safe_load(source.read_text()) or {})


def test_bind_mount_sources_exist(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        for source, _ in bind_mounts(svc):
            assert source.exists(), f"{name}: bind mount source {source} does not exist"


def test_depends_on_targets_exist_and_their_conditions_can_be_met(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        depends = svc.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {target: {"condition": "service_started"} for target in depends}
        for target, spec in depends.items():
            assert target in services, f"{name} depends on unknown service {target}"
            condition = spec.get("condition", "service_started")
            if condition == "service_healthy":
                healthcheck = services[target].get("healthcheck") or {}
                assert healthcheck.get("test") and not healthcheck.get("disable"), (
                    f"{name} waits for {target} to be healthy, but {target} has no healthcheck"
                )
            elif condition == "service_completed_successfully":
                assert services[target].get("restart", "no") == "no", f"{target} must run once to complete"
            else:
                assert condition == "service_started", f"{name}: unknown condition {condition}"


def test_processes_start_after_the_migration_and_nats(
    allot_services: dict[str, Any], services: dict[str, Any]
) -> None:
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name, svc in allot_services.items():
        if name == "migrate":
            continue
        depends = svc.get("depends_on") or {}
        assert depends.get("migrate", {}).get("condition") == "service_completed_successfully", name
        assert "nats" in depends, name


def test_long_running_processes_restart_and_have_a_health_check(
    allot_services: dict[str, Any], services: dict[str, Any]
) -> None:
    for name in [*SERVERS, *(set(allot_services) - {"migrate"} - ON_DEMAND)]:
        svc = services[name]
        assert svc.get("restart") in LONG_RUNNING_RESTART, f"{name}: restart is {svc.get('restart')!r}"
        test = (svc.get("healthcheck") or {}).get("test")
        assert test and not svc["healthcheck"].get("disable"), f"{name} has no healthcheck"
        if name in allot_services:
            port = environment(svc).get("ALLOT_HTTP_PORT", "8080")
            assert any(
                f"127.0.0.1:{port}/healthz" in word or f"127.0.0.1:{port}/readyz" in word for word in test
            ), f"{name}: healthcheck {test} does not probe /healthz or /readyz"
    assert services["migrate"].get("restart") == "no"


def test_the_relay_is_never_scaled(services: dict[str, Any]) -> None:
    relay = services["relay"]
    assert relay.get("scale", 1) == 1
    assert (relay.get("deploy") or {}).get("replicas", 1) == 1


def test_only_the_servers_and_the_audit_view_publish_ports_and_only_on_localhost(
    services: dict[str, Any],
) -> None:
    for name, svc in services.items():
        ports = svc.get("ports") or []
        if name not in SERVERS | {"ui"}:  # the servers for the host's CLI, the audit view for its browser
            assert not ports, f"{name} publishes {ports}"
        for port in ports:
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), (
                f"{name}: {port} is not bound to localhost"
            )


def test_nats_runs_the_shipped_config_on_a_volume(services: dict[str, Any]) -> None:
    nats = services["nats"]
    targets = {target: source for source, target in bind_mounts(nats)}
    config_path = nats["command"][nats["command"].index("--config") + 1]
    assert targets.get(config_path) == (COMPOSE_FILE.parent / "deploy/compose/nats.conf").resolve()
    named_volumes = [
        v for v in nats.get("volumes", []) if isinstance(v, str) and not v.startswith((".", "/"))
    ]
    assert any(v.endswith(":/data") for v in named_volumes), "the JetStream store (/data) must be a volume"


def test_docker_compose_config_accepts_the_file() -> None:
    """The reference parser. `docker compose config` is client-side: it needs the plugin, not an engine."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on PATH")
    version = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    if version.returncode != 0:
        pytest.skip(
            f"the docker compose plugin is not installed ({version.stderr.strip() or version.stdout.strip()})"
        )
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=COMPOSE_FILE.parent,
    )
    assert result.returncode == 0, result.stderr
