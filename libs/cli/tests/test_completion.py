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
from allot_cli.output import FORMATS, all_words


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    parser = full_parser()
    out = tmp_path_factory.mktemp("completion")
    written = {}
    for shell in ("bash", "zsh", "fish"):
        written[shell] = out / f"allot.{shell}"
        written[shell].write_text(script(shell, parser))
    (out / "scenario.yaml").write_text("")
    return written


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
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True, cwd=cwd).stdout
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
    ],
)
def test_fish_completes(scripts: dict[str, Path], line: str, expected: set[str]) -> None:
    code = f"source {scripts['fish']}; complete -C '{line}'"
    out = subprocess.run(["fish", "-c", code], capture_output=True, text=True, check=True).stdout
    assert {row.split("\t")[0] for row in out.splitlines()} == expected


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_parses_and_offers_the_same_words(scripts: dict[str, Path]) -> None:
    subprocess.run(["zsh", "-n", str(scripts["zsh"])], check=True)
    text = scripts["zsh"].read_text()
    assert text.startswith("#compdef allot")
    assert "'get|-o'|'get|--output') compadd -- 'table' 'wide' 'json' 'yaml' 'name'; return ;;" in text
    assert "'get:list any kind the log holds, as kubectl does'" in text


def test_the_command_prints_the_script_and_the_version() -> None:
    allot = str(Path(sys.executable).with_name("allot"))
    out = subprocess.run([allot, "completion", "bash"], capture_output=True, text=True, check=True).stdout
    assert out.rstrip().endswith("complete -F _allot allot")
    version = subprocess.run([allot, "--version"], capture_output=True, text=True, check=True).stdout
    from importlib.metadata import version as installed

    assert version.strip() == f"allot {installed('allot-cli')}"
