"""``allot get KIND [NAME …]``: every kind the log's projections hold, as kubectl lists objects.

Formats (``-o table|wide|json|yaml|name``) and human units are in :mod:`allot_cli.output`, kinds and label
selectors in :mod:`allot_views.kinds`; the rows of every kind are loaded by :mod:`allot_stack.listing`. ``-n NS`` keeps one namespace and ``-A`` (the default: Allot has no current-namespace
context) lists all of them with a NAMESPACE column; ``-w`` prints the list, then every row that changes as the log
grows (polling the log head), until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from allot_cli.names import namespace, object_name
from allot_cli.output import FORMATS, columns_of, limit_for, render, table_lines
from allot_views.kinds import KINDS, Kind, all_words, kind_named, missing, parse_selector, select

if TYPE_CHECKING:  # imported when a command runs: ``allot get --help`` loads no log or view code
    from allot_eventstore.protocol import EventStore


def print_table(rows: Sequence[Mapping[str, object]], columns: list[str]) -> None:
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip())


# --- the command -----------------------------------------------------------------------------------------------------


def _now() -> int:
    return time.time_ns() // 1000


async def watch(
    store: EventStore,
    kind: Kind,
    pick: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    output: str,
    *,
    namespaces: bool,
    write: Callable[[str], None],
    interval: float = 1.0,
    now: Callable[[], int] = _now,
    rounds: int | None = None,
) -> None:
    """Print the rows, then each row that appears or changes (and the last state of one that goes) as the log head
    moves (:func:`allot_stack.watch.changes`). ``rounds`` bounds the polls (tests); otherwise it runs until
    interrupted."""
    from allot_stack.watch import changes

    widths: dict[str, int] = {}
    columns = columns_of(kind, output, namespaces=namespaces) if output in ("table", "wide") else None
    header = True  # the table's header is still to be printed: with no rows yet, it comes with the first ones
    async for rows in changes(store, kind, pick, now=now, interval=interval, rounds=rounds):
        if not rows:
            continue
        if columns is not None:
            lines = table_lines(rows, columns, widths, dict(kind.units), limit_for(output))
            write("\n".join(lines if header else lines[1:]))
            header = False
        else:
            write(_documents(kind, rows, output))


def _documents(kind: Kind, rows: list[dict[str, Any]], output: str) -> str:
    """Rows one object at a time, as ``kubectl get -w -o json|yaml|name`` prints them."""
    if output == "yaml":
        return "\n".join(f"---\n{render(kind, [row], output, single=True)}" for row in rows)
    return "\n".join(render(kind, [row], output, single=True) for row in rows)


async def run_get(
    args: argparse.Namespace,
    store: EventStore,
    *,
    write: Callable[[str], None],
    now: Callable[[], int] = _now,
) -> int:
    """``allot get`` over ``store``: 1 when a NAME asked for is not there (kubectl's NotFound), else 0."""
    kind = kind_named(args.what)
    if args.show_labels:  # a LABELS column last, as kubectl --show-labels
        kind = dataclasses.replace(
            kind, columns=(*kind.columns, "labels"), wide=tuple(c for c in kind.wide if c != "labels")
        )
    selector = parse_selector(args.selector)
    names: list[str] = list(args.names)
    namespace = None if args.all_namespaces else args.namespace
    namespaces = kind.namespaced and namespace is None

    def pick(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return select(kind, rows, namespace=namespace, selector=selector, names=names)

    if args.watch:
        await watch(store, kind, pick, args.output, namespaces=namespaces, write=write, now=now)
        return 0
    from allot_stack.listing import loader

    rows = pick(await loader(kind)(store, now()))
    structured = args.output in ("json", "yaml")
    if rows or (structured and len(names) != 1):  # json/yaml: an empty List, as kubectl prints it
        write(render(kind, rows, args.output, namespaces=namespaces, single=len(names) == 1))
    absent = missing(kind, rows, names)
    for name in absent:
        print(f'Error from server (NotFound): {kind.plural} "{name}" not found', file=sys.stderr)
    if not rows and not names and not structured:
        where = f" in {namespace} namespace" if kind.namespaced and namespace else ""
        print(f"No resources found{where}.", file=sys.stderr)
    return 1 if absent else 0


def cmd_get(args: argparse.Namespace) -> int:
    kind_named(args.what)  # refused before connecting
    parse_selector(args.selector)
    from allot_stack.connect import on_log

    return asyncio.run(on_log(lambda store: run_get(args, store, write=_print)))


def _print(text: str) -> None:
    print(text, flush=True)


class _Intermixed(argparse.ArgumentParser):
    """Options and names in any order, as kubectl takes them (``get pods -n ns a b``): plain argparse stops reading
    positionals at the first option. A command line without a KIND is refused before it is parsed, asking for KIND
    alone (NAME is optional) with the kinds there are (:func:`names_kind`)."""

    _inner = False
    options: Mapping[str, bool] = {}  # each option string: whether it takes a value (set by register)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inner:
            return super().parse_known_args(args, namespace)
        if args is not None and not names_kind(list(args), self.options):
            kinds = ", ".join(kind.plural for kind in KINDS)
            self.error(f"the following arguments are required: KIND (one of: {kinds})")
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def names_kind(args: Sequence[str], options: Mapping[str, bool]) -> bool:
    """Whether the arguments after ``get`` hold a KIND, or ask for help (which needs none): an argument that is not an
    option nor the value of one given apart (``-n NS``, ``-An NS``, ``--namespace NS`` or a prefix of it that is
    unambiguous, not ``-nNS`` or ``--namespace=NS``), or one after ``--``. ``options``: each option string, and
    whether it takes a value."""
    value_next = False
    for index, arg in enumerate(args):
        if value_next:
            value_next = False
        elif arg == "--":
            return index + 1 < len(args)
        elif arg.startswith("--"):
            named = [option for option in options if option.startswith("--") and option.startswith(arg)]
            option = arg if arg in options else named[0] if len(named) == 1 else ""
            if option == "--help":
                return True
            value_next = options.get(option, False)
        elif arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit():  # "-5" and "-" are arguments
            for at, letter in enumerate(arg[1:], start=1):
                if f"-{letter}" == "-h":
                    return True
                if options.get(
                    f"-{letter}", False
                ):  # the rest of the word is its value, or the next argument
                    value_next = at == len(arg) - 1
                    break
        else:
            return True
    return False


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("get", help="list any kind the log holds, as kubectl does")
    p.__class__ = _Intermixed
    kind = p.add_argument(
        "what",
        metavar="KIND",
        help="pods, nodes, gangs (podgroups), quotas (elasticquotas), reservations, migrations (podmigrationjobs), "
        "devices, nodemetrics",
    )
    kind.completions = all_words()  # type: ignore[attr-defined]  # checked by kind_named: an unknown kind exits 1
    names = p.add_argument(
        "names", nargs="*", default=[], type=object_name, metavar="NAME", help="only these (NAME, or NS/NAME)"
    )  # a default: argparse counts a "*" positional without one as required, and would ask for a NAME
    names.complete_names = True  # type: ignore[attr-defined]  # completion offers the names of the kind
    namespaced = p.add_argument("-n", "--namespace", type=namespace, help="only this namespace")
    all_namespaces = p.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="every namespace (the default when -n is not given)",
    )
    selector = p.add_argument(
        "-l", "--selector", help="label selector: key=value, key!=value, key in (a,b), key, !key"
    )
    show_labels = p.add_argument("--show-labels", action="store_true", help="a LABELS column in tables")
    watch = p.add_argument(
        "-w", "--watch", action="store_true", help="after the list, print rows as they change"
    )
    output = p.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="wide: more columns (pods: what qos-enforcer enforces on their node and whether it holds); "
        "json/yaml: every field; name: KIND/NAME",
    )
    p.options = {"-h": False, "--help": False} | {
        option: action.nargs != 0
        for action in (namespaced, all_namespaces, selector, show_labels, watch, output)
        for option in action.option_strings
    }
    p.set_defaults(func=cmd_get)
