"""Shell completion scripts generated from the parser, run in the shells themselves where they are installed (bash
always; zsh and fish when present), and ``allot --version``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from allot_cli.completion import nodes, script
from allot_cli.main import COMMANDS, full_parser
from allot_cli.output import FORMATS
from allot_views.kinds import all_words

# Names come from `allot get KIND [-n NS] -o name` at the moment of completion: this `allot` answers as a log holding
# these objects would (the real command over a real log is tested in tests/integration/test_cli_kinds_live.py).
LOG = """#!/bin/sh
case "$*" in
  "get pods -n research -o name") printf 'pod/train-big\\npod/train-llama-0\\n' ;;
  "get pods -o name") printf 'pod/train-big\\npod/web-1\\n' ;;
  "get nodes -o name") printf 'node/gpu-node-a\\n' ;;
  *) exit 1 ;;
esac
"""

# zsh completes only inside a completion widget: outside one, these stand-ins print what would be offered
ZSH_HARNESS = """
compdef() { }
compadd() { [[ "$1" == -- ]] && shift; print -l -- "$@" }
_describe() { local -a items; items=("${(@P)4}"); print -l -- "${items[@]%%:*}" }
_files() { print -- "<files>" }
_message() { print -- "<value>" }
source "$1"
shift
words=("$@")
CURRENT=$#words
PREFIX=${words[CURRENT]}
_allot
"""


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    parser = full_parser()
    out = tmp_path_factory.mktemp("completion")
    written = {}
    for shell in ("bash", "zsh", "fish"):
        written[shell] = out / f"allot.{shell}"
        written[shell].write_text(script(shell, parser))
    (out / "scenario.yaml").write_text("")
    (out / "bin").mkdir()
    (out / "bin" / "allot").write_text(LOG)
    (out / "bin" / "allot").chmod(0o755)
    (out / "harness.zsh").write_text(ZSH_HARNESS)
    return written


def _env(scripts: dict[str, Path]) -> dict[str, str]:
    return {"PATH": f"{scripts['bash'].parent / 'bin'}:/usr/bin:/bin", "HOME": str(scripts["bash"].parent)}


def test_the_tree_has_every_listed_command_and_its_flags() -> None:
    tree = {n.path: n for n in nodes(full_parser())}
    listed = {name for name, (_, help_text) in COMMANDS.items() if help_text is not None}
    assert {name for name, _ in tree[""].subcommands} == listed  # hidden commands are not offered
    get = tree["get"]
    assert set(get.words) == set(all_words())
    output = next(o for o in get.options if "-o" in o.flags)
    assert output.choices == list(FORMATS)
    assert {"-A", "-l", "-w", "-n"} <= {f for o in get.options for f in o.flags}
    assert tree["quota tree"].options and tree["sim run"].files and not get.files


def bash_complete(path: Path, line: list[str], cwd: Path) -> list[str]:
    words = " ".join(f"'{w}'" for w in line)
    code = f'source {path}; COMP_WORDS=({words}); COMP_CWORD={len(line) - 1}; _allot; printf "%s\\n" "${{COMPREPLY[@]}}"'
    env = _env({"bash": path})
    out = subprocess.run(
        ["bash", "-c", code], capture_output=True, text=True, check=True, cwd=cwd, env=env
    ).stdout
    return [w for w in out.splitlines() if w]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (["allot", "ge"], ["get"]),
        (["allot", "get", ""], all_words()),
        (["allot", "get", "-o", ""], list(FORMATS)),
        (["allot", "get", "pods", "--output", "y"], ["yaml"]),
        (["allot", "get", "-n", "ns", "no"], ["nodes", "node", "no", "nodemetrics", "nodemetric"]),
        (["allot", "quota", ""], ["tree"]),
        (["allot", "quota", "tree", "-o", ""], ["table", "json", "yaml"]),
        (["allot", "completion", ""], ["bash", "zsh", "fish"]),
        (["allot", "sim", "run", "scen"], ["scenario.yaml"]),
        (["allot", "get", "-n", ""], []),  # a namespace: no files offered
        (["allot", "get", "pods", ""], ["train-big", "web-1"]),  # names of the kind, from the log
        (["allot", "get", "-n", "research", "pods", "tr"], ["train-big", "train-llama-0"]),
        (["allot", "get", "-o", "name", "pods", "w"], ["web-1"]),
        (["allot", "describe", "nodes", ""], ["gpu-node-a"]),
        (["allot", "get", "secrets", ""], []),  # no log answers: nothing offered, no error shown
    ],
)
def test_bash_completes(scripts: dict[str, Path], line: list[str], expected: list[str]) -> None:
    assert sorted(bash_complete(scripts["bash"], line, scripts["bash"].parent)) == sorted(expected)


def test_bash_completes_options(scripts: dict[str, Path]) -> None:
    offered = bash_complete(scripts["bash"], ["allot", "get", "pods", "-"], scripts["bash"].parent)
    assert {"-A", "--all-namespaces", "-l", "--selector", "-w", "--watch", "-o", "--output"} <= set(offered)
    assert "--atomic" not in offered  # apply's, not get's


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("allot ge", {"get"}),
        ("allot get -o ", set(FORMATS)),
        ("allot quota ", {"tree"}),
        ("allot describe pm", {"pmj"}),
        ("allot completion ", {"bash", "zsh", "fish"}),
        ("allot get pods ", {"train-big", "web-1"}),
        ("allot get -n research pods tr", {"train-big", "train-llama-0"}),
        ("allot describe nodes ", {"gpu-node-a"}),
    ],
)
def test_fish_completes(scripts: dict[str, Path], line: str, expected: set[str]) -> None:
    code = f"source {scripts['fish']}; complete -C '{line}'"
    env = _env(scripts)
    out = subprocess.run(["fish", "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert {row.split("\t")[0] for row in out.splitlines()} == expected


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (["allot", "ge"], {"get"}),  # _describe offers every command; zsh filters by the prefix
        (["allot", "get", "-o", ""], set(FORMATS)),
        (["allot", "quota", ""], {"tree"}),
        (["allot", "get", "pods", ""], {"train-big", "web-1"}),
        (["allot", "get", "-n", "research", "pods", "tr"], {"train-big", "train-llama-0"}),
        (["allot", "get", "-n", ""], {"<value>"}),
        (["allot", "sim", "run", ""], {"<files>"}),
    ],
)
def test_zsh_completes(scripts: dict[str, Path], line: list[str], expected: set[str]) -> None:
    assert scripts["zsh"].read_text().startswith("#compdef allot")
    harness = scripts["zsh"].parent / "harness.zsh"
    out = subprocess.run(
        ["zsh", "-f", str(harness), str(scripts["zsh"]), *line],
        capture_output=True,
        text=True,
        check=True,
        env=_env(scripts),
    ).stdout
    offered = set(out.split())
    assert expected <= offered if line[-1] == "ge" else offered == expected


def test_the_command_prints_the_script_and_the_version() -> None:
    allot = str(Path(sys.executable).with_name("allot"))
    out = subprocess.run([allot, "completion", "bash"], capture_output=True, text=True, check=True).stdout
    assert out.rstrip().endswith("complete -F _allot allot")
    version = subprocess.run([allot, "--version"], capture_output=True, text=True, check=True).stdout
    from importlib.metadata import version as installed

    assert version.strip() == f"allot {installed('allot-cli')}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_stored_scripts_are_what_the_parser_generates(shell: str) -> None:
    from allot_cli.completion import stored

    assert stored(shell) == script(shell, full_parser()), (
        "a command or option changed: write the scripts again with `.venv/bin/python -m allot_cli.completion`"
    )


def test_loading_the_bash_script_runs_no_allot_and_is_quick(tmp_path: Path) -> None:
    import resource

    from allot_cli.completion import STORED

    (tmp_path / "allot").write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    (tmp_path / "allot").chmod(0o755)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        ["bash", "--norc", "-c", f"source {STORED / 'allot.bash'}; complete -p allot"],
        check=True,
        capture_output=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert not (tmp_path / "ran").exists(), "sourcing the script ran allot"
    assert cpu <= 0.05, f"sourcing took {cpu:.3f} CPU-s"


def test_the_completion_command_imports_no_command_module() -> None:
    code = (
        "import sys\n"
        "from allot_cli.main import main\n"
        "try:\n"
        "    main(['completion', 'bash'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = [m for m in sys.modules if m.startswith('allot_cli.commands.') and m != 'allot_cli.commands.completion']\n"
        "print(loaded, file=sys.stderr)\n"
        "assert not loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
