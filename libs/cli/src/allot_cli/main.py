"""Entry point of the ``allot`` command line.

Only the invoked command's module is imported: the table below names every command, its module in
:mod:`allot_cli.commands` and its one-line help, so ``allot --help`` imports no command at all and ``allot get pods``
imports ``get`` alone (each module's ``register(subparsers)`` adds its commands with their arguments; a test keeps
this table equal to what the modules register). Errors that a user can fix are raised as
:class:`allot_intake.errors.UsageError` and printed as one line without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from allot_intake.errors import UsageError

# name → (module in allot_cli.commands, help); help None = not listed
COMMANDS: dict[str, tuple[str, str | None]] = {
    "_supervise": ("stack", None),
    "apply": ("apply", "record objects from YAML files in the event log"),
    "bench": ("bench", "run a benchmark and print its figures"),
    "completion": ("completion", "print the shell completion script (bash, zsh, fish)"),
    "decisions": ("decisions", "export the scheduling decisions of the log as JSON lines"),
    "demo": ("demo", "run the dev stack with a demo workload end to end, then stop it"),
    "describe": ("describe", "one object with its conditions, events and why it stands where it does"),
    "down": ("stack", "stop the dev stack"),
    "events": ("events", "read or subscribe to the event log"),
    "explain": ("explain", "why a pod is where it is (or is not); what the node side says about a node"),
    "get": ("get", "list any kind the log holds, as kubectl does"),
    "kube-sync": ("kube_sync", "record Kubernetes pods, quotas and PodGroups in the event log"),
    "log": ("log", "archive older log segments and verify them on their own"),
    "migrate": ("stack", "upgrade the event-log schema (safe to run concurrently)"),
    "quota": ("quota", "elastic quota views"),
    "relay": ("stack", "run the log → JetStream relay process"),
    "replay": ("replay", "rebuild projections from the log; --verify proves every decision"),
    "report": ("report", "usage reports from the log (quota chargeback)"),
    "schema": ("schema", "print (or write) the JSON Schemas of all events"),
    "sim": ("sim", "what would the scheduler do: offline simulation"),
    "status": ("stack", "show the dev stack's processes, readiness and checkpoints"),
    "ui": ("ui", "serve the web audit view (read-only) of the event log"),
    "up": ("stack", "start the dev stack (PostgreSQL, NATS, relay, seven services)"),
    "webhook": ("webhook", "serve the validating and mutating admission webhooks (HTTPS)"),
    "what-if": (
        "whatif",
        "would these pods fit now, or what a config change would decide differently (writes nothing)",
    ),
}

# Options whose value may start with '-' (a signed duration, then refused by the command saying why a duration needs
# no sign), by command. argparse reads ``--since -5m`` as an option of its own and says only "expected one argument";
# written ``--since=-5m``, its documented form for such a value, the value reaches the command's check.
SIGNED_VALUES: dict[str, tuple[str, ...]] = {"report": ("--since", "--until")}


def _invoked(argv: Sequence[str]) -> str | None:
    """The command named on the command line (the first argument that is not an option), if it is one of ours."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def signed_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with each option of :data:`SIGNED_VALUES` (of the command invoked) joined to a next argument that is a
    value starting with '-' (``--since -5m`` as ``--since=-5m``): a '-' then neither a letter nor another '-', so that
    ``--since --by quota`` or ``--since -o json`` is still refused as an option missing its value. Nothing after
    ``--`` is changed."""
    options = SIGNED_VALUES.get(_invoked(argv) or "", ())
    out: list[str] = []
    joined = False
    for index, arg in enumerate(argv):
        if joined:
            joined = False
            continue
        if arg == "--":
            return [*out, *argv[index:]]
        after = argv[index + 1] if index + 1 < len(argv) else ""
        if arg in options and after[:1] == "-" and after[1:2] not in ("", "-") and not after[1].isalpha():
            out.append(f"{arg}={after}")
            joined = True
        else:
            out.append(arg)
    return out


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: the full arguments of the commands of ``command``'s module, one line of help for the others."""
    parser = argparse.ArgumentParser(
        prog="allot",
        description="Allot: an event-sourced control plane for GPU, RDMA, NUMA and quota scheduling.",
    )
    parser.add_argument("--version", action=_Version, help="print the version of allot and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    if command is not None:
        load(sub, COMMANDS[command][0])
    for name, (_, help_text) in COMMANDS.items():
        if name not in sub.choices:
            if help_text is None:  # hidden: given no help, argparse does not list it
                sub.add_parser(name, add_help=False)
            else:
                sub.add_parser(name, add_help=False, help=help_text)
    describe(parser)
    return parser


def describe(parser: argparse.ArgumentParser) -> None:
    """Give every subcommand that has none a description: its one line of help (shown by ``allot X --help``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if sub.description is None and helps.get(name):
                    sub.description = helps[name]
                describe(sub)


class _Version(argparse.Action):
    """``--version``, looked up only when asked for (argparse's own action needs the text up front)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"allot {version()}")
        parser.exit()


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("allot-cli")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def full_parser() -> argparse.ArgumentParser:
    """The parser with every command's full arguments (what the completion scripts are generated from)."""
    from allot_cli import _groups

    _groups.invoked = None
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        for name in [n for n, (m, _) in COMMANDS.items() if m == module]:
            sub._name_parser_map.pop(name, None)
            sub._choices_actions[:] = [a for a in sub._choices_actions if a.dest != name]
        load(sub, module)
    describe(parser)
    return parser


def parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser that ``allot`` builds for this command line (of a group, ``allot bench X``, only X is imported)."""
    from allot_cli import _groups

    _groups.invoked = list(argv)
    return build_parser(_invoked(argv))


def load(sub: argparse._SubParsersAction, module: str) -> None:  # type: ignore[type-arg]
    importlib.import_module(f"allot_cli.commands.{module}").register(sub)


def main(argv: Sequence[str] | None = None) -> None:
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = parser_for(args_in)
    args = parser.parse_args(signed_values(args_in))
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, so that a closed pipe is handled below rather than at exit
    except UsageError as exc:
        print(f"allot: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # the reader went away (``allot get pods -o json | head``): stop quietly, as kubectl does
        _quiet_stdout()
        code = 0
    except Exception as exc:
        if _refused_setting(exc):
            print(f"allot: error: {exc}", file=sys.stderr)
            code = 2
        elif (unreachable := _log_unreachable(exc)) is not None:
            print(f"allot: error: {unreachable}", file=sys.stderr)
            code = 1
        else:
            raise
    sys.exit(code)


def _refused_setting(exc: Exception) -> bool:
    """A setting a server refused (e.g. NATS credentials): fix it, then run again. Looked up only when something
    failed: importing the contracts (msgspec) costs every command's start-up otherwise."""
    from allot_contracts.errors import InvalidInput

    return isinstance(exc, InvalidInput)


def _log_unreachable(exc: Exception) -> str | None:
    """What to say when the event log, NATS or another server could not be used (the server down, a wrong
    database, user or password), naming where the URL of the one that failed came from (its variable, or the dev
    stack's ``stack.json``), or None for any other error. Looked up only when something failed: the event store
    imports the driver."""
    from allot_bus.adapters.natsauth import NatsUnavailable
    from allot_contracts.errors import Unavailable
    from allot_eventstore.pg_errors import connection_refusal
    from allot_stack.connect import DATABASE_VARIABLE, NATS_VARIABLE, check_hint, origin

    if isinstance(exc, NatsUnavailable):
        return f"{exc} ({check_hint(origin(NATS_VARIABLE))}, or start the dev stack with `allot up`)"
    refusal = connection_refusal(exc)
    if refusal is not None:
        return f"{refusal} ({check_hint(origin(DATABASE_VARIABLE))}, or start the dev stack with `allot up`)"
    # another server that cannot be used just now (an embedded server that did not start, the Kubernetes API): its
    # own message names it
    return str(exc) if isinstance(exc, Unavailable) else None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not raise BrokenPipeError again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
