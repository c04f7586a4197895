"""Shell completion scripts for ``allot`` (bash, zsh, fish), generated from its argparse parser.

The parser is walked once into :class:`Node` s (one per command path: ``""``, ``"get"``, ``"quota tree"``) holding
the subcommands, the options (with their choices, or whether they take a value) and the choices of the positionals.
Each shell gets the same data written in its own idiom, so a command or flag added to any command module is
completed without touching this file. Every script works out the command path from the words typed so far (the
words that name a subcommand of the path so far), then offers, in order: the choices of the option just typed, the
options when the word starts with ``-``, else the subcommands and positional choices (and files where a positional
takes a path). After ``get KIND`` and ``describe KIND`` they offer the names the log holds, as ``allot get KIND -o
name`` lists them (in the ``-n`` namespace when one is typed; nothing when no log is reachable), as kubectl completes
names from the API server.

Rejected: the ``shtab`` package (bash and zsh only, no fish) and ``argcomplete`` (runs Python on every Tab, so each
completion would pay the CLI's start-up time).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FILES", "SHELLS", "Node", "nodes", "regenerate", "script", "stored"]

SHELLS = ("bash", "zsh", "fish")


@dataclass
class Option:
    flags: list[str]
    help: str
    choices: list[str] | None  # None: no fixed choices
    takes_value: bool
    files: bool = False  # its value is a path


_PATHS = ("file", "path", "dir", "scenario", "config", "out", "state", "trace", "cert", "key")


def _is_path(action: argparse.Action) -> bool:
    """Whether a value is a path (files are offered for it): judged by its name, as nothing else says so."""
    names = [str(action.metavar or ""), action.dest, *action.option_strings]
    return any(word in name.lower() for name in names for word in _PATHS)


@dataclass
class Node:
    path: str
    subcommands: list[tuple[str, str]] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)
    words: list[str] = field(default_factory=list)  # choices of its positionals
    files: bool = False  # a positional takes a path
    names: bool = False  # after the KIND word, the names of that kind (``allot get KIND -o name``)

    @property
    def valued(self) -> list[str]:
        return [f for o in self.options if o.takes_value for f in o.flags]


def _help(text: str | None) -> str:
    return " ".join((text or "").replace("%%", "%").split())


def nodes(parser: argparse.ArgumentParser, path: str = "") -> list[Node]:
    node = Node(path)
    out = [node]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _help(a.help) for a in action._choices_actions}
            for name, sub in action.choices.items():
                if name.startswith("_"):
                    continue
                node.subcommands.append((name, helps.get(name, "")))
                out += nodes(sub, f"{path} {name}".strip())
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            node.options.append(
                Option(
                    flags=list(action.option_strings),
                    help=_help(action.help),
                    choices=[str(c) for c in action.choices] if action.choices else None,
                    takes_value=action.nargs != 0,
                    files=_is_path(action),
                )
            )
        elif action.choices or getattr(action, "completions", None):
            # ``completions``: words to offer for a positional that the command checks itself
            node.words += [str(c) for c in getattr(action, "completions", None) or action.choices or ()]
        elif getattr(action, "complete_names", False):
            node.names = True
        else:
            node.files = node.files or _is_path(action)
    return out


def _q(text: str) -> str:
    """A single-quoted shell word (bash, zsh and fish agree on ``'…'`` without ``'`` inside)."""
    return "'" + text.replace("'", "") + "'"


def _value_cases(tree: list[Node], offer: Callable[[Option], str]) -> list[str]:
    """The ``case "PATH|PREVIOUS WORD"`` branches of the options that take a value: what ``offer`` completes for
    the option, then return."""
    return [
        f"        {'|'.join(_q(f'{node.path}|{f}') for f in option.flags)}) {offer(option)}; return ;;"
        for node in tree
        for option in node.options
        if option.takes_value
    ]


def _bash_value(option: Option) -> str:
    if option.choices:
        return f'COMPREPLY=($(compgen -W {_q(" ".join(option.choices))} -- "$cur"))'
    return 'COMPREPLY=($(compgen -f -- "$cur"))' if option.files else "COMPREPLY=()"


def _zsh_value(option: Option) -> str:
    if option.choices:
        return f"compadd -- {' '.join(_q(c) for c in option.choices)}"
    return "_files" if option.files else "_message value"


def _bash_body(tree: list[Node]) -> list[str]:
    lines = [
        "_allot_subcommands() {",
        '    case "$1" in',
    ]
    for node in tree:
        if node.subcommands:
            lines.append(f"        {_q(node.path)}) echo {_q(' '.join(n for n, _ in node.subcommands))} ;;")
    lines += [
        "    esac",
        "}",
        "",
        "_allot() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
    ]
    lines += [
        '    local path="" i w start=1',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        if [[ " $(_allot_subcommands "$path") " == *" $w "* ]]; then',
        '            path="${path:+$path }$w"',
        "            start=$((i + 1))",
        "        fi",
        "    done",
        '    local opts="" words="" files="" names="" valued=""',
        '    case "$path" in',
    ]
    for node in tree:
        flags = " ".join(f for o in node.options for f in o.flags)
        words = " ".join([n for n, _ in node.subcommands] + node.words)
        lines.append(
            f"        {_q(node.path)}) opts={_q(flags)}; words={_q(words)}; files={_q('1' if node.files else '')}; "
            f"names={_q('1' if node.names else '')}; valued={_q(' '.join(node.valued))} ;;"
        )
    lines += ["    esac", '    case "$path|$prev" in', *_value_cases(tree, _bash_value)]
    lines += [
        "    esac",
        '    if [[ "$cur" != -* && -n "$names" ]]; then',
        '        local kind="" ns=""',
        "        for ((i = start; i < COMP_CWORD; i++)); do",
        '            w="${COMP_WORDS[i]}"',
        '            if [[ "$w" == -n || "$w" == --namespace ]]; then ns="${COMP_WORDS[i+1]}"; fi',
        '            if [[ " $valued " == *" $w "* ]]; then i=$((i + 1)); continue; fi',
        '            if [[ "$w" == -* ]]; then continue; fi',
        '            kind="$w"',
        "            break",
        "        done",
        '        if [[ -n "$kind" ]]; then',
        '            COMPREPLY=($(compgen -W "$(allot get "$kind" ${ns:+-n "$ns"} -o name 2>/dev/null | '
        'sed \'s|^[^/]*/||\')" -- "$cur"))',
        "            return",
        "        fi",
        "    fi",
        '    if [[ "$cur" == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        "    else",
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        '        if [[ -n "$files" ]]; then COMPREPLY+=($(compgen -f -- "$cur")); fi',
        "    fi",
        "}",
    ]
    return lines


def bash(tree: list[Node]) -> str:
    return "\n".join(
        [
            "# bash completion for allot: generated by `allot completion bash`",
            "# save it once: allot completion bash > ~/.local/share/bash-completion/completions/allot",
            *_bash_body(tree),
            "complete -F _allot allot",
            "",
        ]
    )


def _colon(name: str) -> str:
    """``_describe`` splits ``name:description`` at the first unescaped colon."""
    return name.replace(":", "\\:")


def zsh(tree: list[Node]) -> str:
    lines = [
        "#compdef allot",
        "# zsh completion for allot: generated by `allot completion zsh`",
        "# save it once as _allot in a directory of $fpath: allot completion zsh > ~/.zfunc/_allot",
        "",
        "_allot() {",
        '    local p="" w i',
        "    local start=2",
        "    for ((i = 2; i < CURRENT; i++)); do",
        "        w=${words[i]}",
        '        case "$p" in',
    ]
    for node in tree:
        if node.subcommands:
            names = "|".join(_q(n) for n, _ in node.subcommands)
            lines.append(
                f'            {_q(node.path)}) case "$w" in {names}) p="${{p:+$p }}$w"; start=$((i + 1)) ;; esac ;;'
            )
    lines += [
        "        esac",
        "    done",
        "    local -a subs opts",
        '    local offer="" files="" names="" valued=""',
        '    case "$p" in',
    ]
    for node in tree:
        subs = " ".join(_q(_colon(n) + ":" + h) for n, h in node.subcommands)
        opts = " ".join(_q(_colon(f) + ":" + o.help) for o in node.options for f in o.flags)
        lines.append(
            f"        {_q(node.path)}) subs=({subs}); opts=({opts}); offer={_q(' '.join(node.words))}; "
            f"files={_q('1' if node.files else '')}; names={_q('1' if node.names else '')}; "
            f"valued={_q(' '.join(node.valued))} ;;"
        )
    lines += [
        "    esac",
        "    local prev=${words[CURRENT-1]}",
        '    case "$p|$prev" in',
        *_value_cases(tree, _zsh_value),
    ]
    lines += [
        "    esac",
        '    if [[ "$PREFIX" != -* && -n "$names" ]]; then',
        '        local kind="" ns=""',
        "        for ((i = start; i < CURRENT; i++)); do",
        "            w=${words[i]}",
        '            if [[ "$w" == -n || "$w" == --namespace ]]; then ns=${words[i+1]}; fi',
        '            if [[ " $valued " == *" $w "* ]]; then (( i++ )); continue; fi',
        '            [[ "$w" == -* ]] && continue',
        "            kind=$w",
        "            break",
        "        done",
        '        if [[ -n "$kind" ]]; then',
        "            compadd -- ${(f)\"$(allot get $kind ${ns:+-n $ns} -o name 2>/dev/null | sed 's|^[^/]*/||')\"}",
        "            return",
        "        fi",
        "    fi",
        "    local ret=1  # 0 once something is offered, as zsh expects of a completion function",
        '    if [[ "$PREFIX" == -* ]]; then',
        "        _describe -t options option opts && ret=0",
        "    else",
        "        (( ${#subs} )) && _describe -t commands command subs && ret=0",
        '        [[ -n "$offer" ]] && compadd -- ${=offer} && ret=0',
        '        [[ -n "$files" ]] && _files && ret=0',
        "    fi",
        "    return ret",
        "}",
        "",
        'if [[ "$funcstack[1]" == _allot ]]; then _allot "$@"; else compdef _allot allot; fi',
        "",
    ]
    return "\n".join(lines)


def fish(tree: list[Node]) -> str:
    lines = [
        "# fish completion for allot: generated by `allot completion fish`",
        "# load it with: allot completion fish | source, or save it as ~/.config/fish/completions/allot.fish",
        "function __allot_path",
        "    set -l path ''",
        "    for w in (commandline -opc)[2..-1]",
        "        switch $path",
    ]
    for node in tree:
        if node.subcommands:
            names = " ".join(_q(n) for n, _ in node.subcommands)
            joined = f"{node.path} " if node.path else ""
            lines += [
                f"            case {_q(node.path)}",
                f"                contains -- $w {names}; and set path {_q(joined)}$w",
            ]
    lines += [
        "        end",
        "    end",
        "    echo $path",
        "end",
        "function __allot_at",
        "    set -l path (__allot_path)",
        '    test "$path" = "$argv[1]"',
        "end",
        "# the KIND typed after get/describe: the first plain word after the command path ($argv: flags taking values)",
        "function __allot_kind",
        "    set -l words (commandline -opc)",
        "    set -l path (string split ' ' -- (__allot_path))",
        "    set -l skip 0",
        "    for w in $words[(math (count $path) + 2)..-1]",
        "        if test $skip = 1",
        "            set skip 0",
        "        else if contains -- $w $argv",
        "            set skip 1",
        "        else if not string match -q -- '-*' $w",
        "            echo $w",
        "            return 0",
        "        end",
        "    end",
        "    return 1",
        "end",
        "function __allot_names",
        "    set -l words (commandline -opc)",
        "    set -l ns",
        "    if set -l i (contains -i -- -n $words; or contains -i -- --namespace $words)",
        "        set ns -n $words[(math $i + 1)]",
        "    end",
        "    allot get (__allot_kind $argv) $ns -o name 2>/dev/null | string replace -r '^[^/]*/' ''",
        "end",
        "complete -c allot -f",
    ]
    for node in tree:
        at = f'-n "__allot_at {_q(node.path)}"'
        for name, help_text in node.subcommands:
            lines.append(f"complete -c allot {at} -a {_q(name)} -d {_q(help_text)}")
        valued = " ".join(node.valued)
        if node.names:  # KIND first, then names of that kind
            kinds = f'-n "__allot_at {_q(node.path)}; and not __allot_kind {valued} >/dev/null"'
            lines.append(f"complete -c allot {kinds} -a {_q(' '.join(node.words))}")
            has = f'-n "__allot_at {_q(node.path)}; and __allot_kind {valued} >/dev/null"'
            lines.append(f"complete -c allot {has} -a {_q(f'(__allot_names {valued})')}")
        elif node.words:
            lines.append(f"complete -c allot {at} -a {_q(' '.join(node.words))}")
        if node.files:
            lines.append(f"complete -c allot {at} -F")
        for option in node.options:
            parts = []
            for flag in option.flags:
                parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
            if option.choices:
                parts.append(f"-x -a {_q(' '.join(option.choices))}")
            elif option.takes_value:
                parts.append("-r -F" if option.files else "-x")
            lines.append(f"complete -c allot {at} {' '.join(parts)} -d {_q(option.help)}")
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    tree = nodes(parser)
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](tree)


# The scripts as generated from the full parser, kept in the package: ``allot completion SHELL`` prints the stored
# one (building the full parser imports every command module: seconds), a test keeps them equal to what the parser
# generates now, and ``python -m allot_cli.completion`` writes them again after a command or option changes.
STORED = Path(__file__).with_name("completions")
FILES = {"bash": "allot.bash", "zsh": "_allot", "fish": "allot.fish"}


def stored(shell: str) -> str:
    return (STORED / FILES[shell]).read_text()


def regenerate() -> list[Path]:
    from allot_cli.main import full_parser

    parser = full_parser()
    STORED.mkdir(exist_ok=True)
    written = []
    for shell, name in FILES.items():
        (STORED / name).write_text(script(shell, parser))
        written.append(STORED / name)
    return written


if __name__ == "__main__":
    for path in regenerate():
        print(f"wrote {path}")
