"""The Dockerfile and .dockerignore, read as text: one image that can run every Allot process.

The build itself needs a Docker engine; ``test_the_image_runs_every_process`` (marker ``docker``) does that when one
answers. Everything else is a static reading of the two files against the workspace.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for rest in self.all("ENV"):
            for key, value in re.findall(r"(\w+)=(\S+)", rest):
                env[key] = value.strip('"')
        return env


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined and comments dropped."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        pending, keyword, rest = "", keyword.upper(), rest.strip()
        if keyword == "FROM":
            image, _, name = re.sub(r"--platform=\S+\s+", "", rest).partition(" AS ")
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], image.strip())
            stages.append(Stage(base=image, name=name.strip() or str(len(stages))))
        elif keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            global_args[name] = default.strip('"')
        elif stages:
            stages[-1].instructions.append((keyword, rest))
    return global_args, stages


def exec_form(rest: str) -> list[str]:
    words = json.loads(rest)
    assert isinstance(words, list), f"use the exec (JSON) form: {rest}"
    return [str(w) for w in words]


def copy_args(rest: str) -> tuple[dict[str, str], list[str], str]:
    """(flags, sources, destination) of a COPY instruction."""
    words = rest.split()
    flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
    paths = [w for w in words if not w.startswith("--")]
    return flags, paths[:-1], paths[-1]


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def runtime(dockerfile: tuple[dict[str, str], list[Stage]]) -> Stage:
    return dockerfile[1][-1]


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: a pattern excludes a path it matches or any path below it; ``!`` patterns re-include."""

    def regex(pattern: str) -> re.Pattern[str]:
        out = ""
        segments = pattern.strip("/").split("/")
        for i, segment in enumerate(segments):
            if segment == "**":
                out += ".*" if i == len(segments) - 1 else "(?:[^/]+/)*"
                continue
            out += "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in segment)
            out += "/" if i < len(segments) - 1 else ""
        return re.compile(out)

    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if any(regex(pattern.lstrip("!")).fullmatch(p) for p in prefixes):
            excluded = not negated
    return excluded


@pytest.fixture(scope="module")
def ignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


# -- stages and base -------------------------------------------------------------------------------------------------


def test_multi_stage_on_python_311_slim(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    _, stages = dockerfile
    python_stages = [s for s in stages if s.base.startswith("python:")]
    assert len(python_stages) >= 2, "build and runtime are separate stages"
    assert stages[-1].base.startswith("python:3.11-slim")
    # The venv's interpreter is a link to the build stage's Python: both stages must be the same image.
    assert {s.base for s in python_stages} == {stages[-1].base}


def test_copy_from_names_an_earlier_stage(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    _, stages = dockerfile
    for index, stage in enumerate(stages):
        for rest in stage.all("COPY"):
            source = copy_args(rest)[0].get("from")
            if source is not None:
                assert source in {s.name for s in stages[:index]} or ":" in source, f"COPY --from={source}"


def test_installs_the_locked_workspace_without_dev_dependencies(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    _, stages = dockerfile
    syncs = [run for stage in stages for run in stage.all("RUN") if "uv sync" in run]
    assert syncs, "the workspace is installed with uv sync"
    for run in syncs:
        assert "--no-dev" in run and ("--locked" in run or "--frozen" in run), run
    # The last sync installs the workspace and checks uv.lock against every member's pyproject.toml.
    assert "--locked" in syncs[-1] and "--no-install-workspace" not in syncs[-1]


def test_uv_is_the_version_the_developers_use(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    global_args, _ = dockerfile
    pinned = re.search(r'^UV_VERSION="([^"]+)"', (REPO / "scripts" / "dev").read_text(), flags=re.MULTILINE)
    assert pinned and global_args.get("UV_VERSION") == pinned.group(1)


def test_packages_left_out_of_the_image_are_in_the_lock(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = {package["name"] for package in lock["package"]}
    text = DOCKERFILE.read_text()
    left_out = re.findall(r"--no-install-package\s+([\w.-]+)", text)
    assert set(left_out) <= locked


# -- the runtime stage -----------------------------------------------------------------------------------------------


def test_runs_as_a_created_non_root_user(runtime: Stage) -> None:
    (user,) = runtime.all("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric uid lets Kubernetes check runAsNonRoot"
    assert any(f"--uid {uid}" in run for run in runtime.all("RUN")), f"uid {uid} is not created"


def test_no_entrypoint_so_the_command_names_the_process(runtime: Stage) -> None:
    # With an ENTRYPOINT, `docker run IMAGE allot-device-allocator` would pass the name as an argument.
    assert runtime.all("ENTRYPOINT") == []


def test_default_command_is_a_real_command(
    runtime: Stage, check_argv: Callable[[list[str]], str | None]
) -> None:
    (cmd,) = runtime.all("CMD")
    assert check_argv(exec_form(cmd)) is None, check_argv(exec_form(cmd))


def test_console_scripts_are_on_path(dockerfile: tuple[dict[str, str], list[Stage]], runtime: Stage) -> None:
    _, stages = dockerfile
    venv = next(s.env()["UV_PROJECT_ENVIRONMENT"] for s in stages if "UV_PROJECT_ENVIRONMENT" in s.env())
    copied = [copy_args(rest) for rest in runtime.all("COPY")]
    assert any(flags.get("from") and sources == [venv] and dest == venv for flags, sources, dest in copied)
    assert runtime.env()["PATH"].split(":")[0] == f"{venv}/bin"


def test_migrations_are_where_allot_migrate_looks(runtime: Stage) -> None:
    destinations = {
        sources[0]: dest
        for flags, sources, dest in map(copy_args, runtime.all("COPY"))
        if "from" not in flags
    }
    migrations_dir = runtime.env()["ALLOT_MIGRATIONS_DIR"]
    assert destinations["migrations"].rstrip("/") == migrations_dir
    # alembic.ini says script_location = %(here)s/migrations: it must sit next to the migrations directory.
    assert Path(destinations["alembic.ini"]).parent == Path(migrations_dir).parent
    assert "%(here)s/migrations" in (REPO / "alembic.ini").read_text()


def test_exposes_the_http_port_and_checks_healthz(runtime: Stage) -> None:
    from allot_runtime.settings import ServiceSettings

    default_port = ServiceSettings(service="x", database_url="postgresql://x").http_port
    assert runtime.all("EXPOSE") == [str(default_port)]
    assert runtime.env()["ALLOT_HTTP_PORT"] == str(default_port)
    (healthcheck,) = runtime.all("HEALTHCHECK")
    command = exec_form(healthcheck.split(" CMD ", 1)[1])
    assert command[0] == "python" and any("/healthz" in word for word in command)


# -- the build context -----------------------------------------------------------------------------------------------


def test_everything_the_build_reads_is_in_the_context(
    dockerfile: tuple[dict[str, str], list[Stage]], ignore_patterns: list[str]
) -> None:
    _, stages = dockerfile
    sources = [
        s
        for stage in stages
        for flags, srcs, _ in map(copy_args, stage.all("COPY"))
        if "from" not in flags
        for s in srcs
    ]
    sources += re.findall(r"--mount=type=bind,source=([^,\s]+)", DOCKERFILE.read_text())
    for source in sources:
        assert (REPO / source).exists(), f"{source} does not exist"
        assert not dockerignored(source, ignore_patterns), f"{source} is excluded by .dockerignore"
    # Every workspace member is copied (a new top-level member directory needs its own COPY).
    members = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    for member in members:
        assert member.split("/")[0] in sources, f"workspace member {member} is not copied into the image"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        "libs/runtime/.venv/bin/python",
        ".tools/bin/uv",
        ".allot/stack.json",
        "libs/runtime/src/allot_runtime/__pycache__/settings.cpython-311.pyc",
        ".pytest_cache/v/cache",
        ".mypy_cache/3.11/x.json",
        ".ruff_cache/x",
        ".hypothesis/examples/x",
        ".git/HEAD",
    ],
)
def test_local_state_stays_out_of_the_context(path: str, ignore_patterns: list[str]) -> None:
    assert dockerignored(path, ignore_patterns)


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "uv.lock",
        "alembic.ini",
        "migrations/env.py",
        "libs/runtime/pyproject.toml",
        "libs/runtime/src/allot_runtime/settings.py",
        "services/binder/src/binder/main.py",
    ],
)
def test_sources_are_in_the_context(path: str, ignore_patterns: list[str]) -> None:
    assert not dockerignored(path, ignore_patterns)


# -- with a Docker engine --------------------------------------------------------------------------------------------


@pytest.mark.docker
def test_the_image_runs_every_process(console_scripts: dict[str, str]) -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no Docker engine answers")
    tag = "allot:test-deploy"
    build = subprocess.run(
        [docker, "build", "-t", tag, str(REPO)], capture_output=True, text=True, timeout=1800
    )
    assert build.returncode == 0, build.stderr[-4000:]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [docker, "run", "--rm", tag, *argv], capture_output=True, text=True, timeout=120
        )

    assert run("allot", "--help").returncode == 0
    assert run("id", "-u").stdout.strip() == "10001"
    where = run(
        "python", "-c", "from allot_eventstore.migrate import migrations_dir; print(migrations_dir())"
    )
    assert where.stdout.strip() == "/app/migrations", where.stderr
    for script in console_scripts:
        if script != "allot":
            # Without ALLOT_DATABASE_URL a service stops at its settings with exit code 2: it is installed and runs.
            result = run(script)
            assert result.returncode == 2 and "ALLOT_DATABASE_URL" in result.stderr, (script, result.stderr)
