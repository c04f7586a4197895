"""Shell completion scripts for ``allot`` (bash, zsh, fish), generated from its argparse parser.

The parser is walked once into :class:`Node` s (one per command path: ``""``, ``"get"``, ``"quota tree"``) holding
the subcommands, the options (with their choices, or whether they take a value) and the choices of the positionals.
Each shell gets the same data written in its own idiom, so a command or flag added to any command module is
completed without touching this file. Every script works out the command path from the words typed so far (the
words that name a subcommand of the path so far), then offers, in order: the choices of the option just typed, the
options when the word starts with ``-``, else the subcommands and positional choices (and files where a positional
takes a path).

Rejected: the ``shtab`` package (bash and zsh only, no fish) and ``argcomplete`` (runs Python on every Tab, so each
completion would pay the CLI's start-up time).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

__all__ = ["SHELLS", "Node", "nodes", "script"]

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
        else:
            node.files = node.files or _is_path(action)
    return out


def _q(text: str) -> str:
    """A single-quoted shell word (bash, zsh and fish agree on ``'…'`` without ``'`` inside)."""
    return "'" + text.replace("'", "") + "'"


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
        '    local path="" i w',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        w="${COMP_WORDS[i]}"',
        '        if [[ " $(_allot_subcommands "$path") " == *" $w "* ]]; then path="${path:+$path }$w"; fi',
        "    done",
        '    local opts="" words="" files=""',
        '    case "$path" in',
    ]
    for node in tree:
        flags = " ".join(f for o in node.options for f in o.flags)
        words = " ".join([n for n, _ in node.subcommands] + node.words)
        lines.append(
            f"        {_q(node.path)}) opts={_q(flags)}; words={_q(words)}; files={_q('1' if node.files else '')} ;;"
        )
    lines += ["    esac", '    case "$path|$prev" in']
    for node in tree:
        for option in node.options:
            if not option.takes_value:
                continue
            keys = "|".join(_q(f"{node.path}|{f}") for f in option.flags)
            if option.choices:
                lines.append(
                    f'        {keys}) COMPREPLY=($(compgen -W {_q(" ".join(option.choices))} -- "$cur")); return ;;'
                )
            else:
                offer = 'COMPREPLY=($(compgen -f -- "$cur"))' if option.files else "COMPREPLY=()"
                lines.append(f"        {keys}) {offer}; return ;;")
    lines += [
        "    esac",
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
            "# load it with: source <(allot completion bash)",
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
        "# load it with: source <(allot completion zsh), or save it as _allot in a directory of $fpath",
        "",
        "_allot() {",
        '    local p="" w i',
        "    for ((i = 2; i < CURRENT; i++)); do",
        "        w=${words[i]}",
        '        case "$p" in',
    ]
    for node in tree:
        if node.subcommands:
            names = "|".join(_q(n) for n, _ in node.subcommands)
            lines.append(f'            {_q(node.path)}) case "$w" in {names}) p="${{p:+$p }}$w" ;; esac ;;')
    lines += [
        "        esac",
        "    done",
        "    local -a subs opts",
        '    local words="" files=""',
        '    case "$p" in',
    ]
    for node in tree:
        subs = " ".join(_q(_colon(n) + ":" + h) for n, h in node.subcommands)
        opts = " ".join(_q(_colon(f) + ":" + o.help) for o in node.options for f in o.flags)
        lines.append(
            f"        {_q(node.path)}) subs=({subs}); opts=({opts}); words={_q(' '.join(node.words))}; "
            f"files={_q('1' if node.files else '')} ;;"
        )
    lines += ["    esac", "    local prev=${words[CURRENT-1]}", '    case "$p|$prev" in']
    for node in tree:
        for option in node.options:
            if option.takes_value:
                keys = "|".join(_q(f"{node.path}|{f}") for f in option.flags)
                action = (
                    f"compadd -- {' '.join(_q(c) for c in option.choices)}" if option.choices else "_files"
                )
                lines.append(f"        {keys}) {action}; return ;;")
    lines += [
        "    esac",
        '    if [[ "$PREFIX" == -* ]]; then',
        "        _describe -t options option opts",
        "    else",
        "        (( ${#subs} )) && _describe -t commands command subs",
        '        [[ -n "$words" ]] && compadd -- ${=words}',
        '        [[ -n "$files" ]] && _files',
        "    fi",
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
        "complete -c allot -f",
    ]
    for node in tree:
        at = f'-n "__allot_at {_q(node.path)}"'
        for name, help_text in node.subcommands:
            lines.append(f"complete -c allot {at} -a {_q(name)} -d {_q(help_text)}")
        if node.words:
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
