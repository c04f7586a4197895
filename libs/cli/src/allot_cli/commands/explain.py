"""``allot explain pod NS/NAME``: why a pod is where it is (or is not), answered from the event log; ``allot explain
node NAME``: what the node side says about a node. The lines are built by :mod:`allot_stack.explain` and
:mod:`allot_stack.explain_node`; this module reads the arguments and prints them.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from allot_cli.names import namespace, object_name
from allot_intake.errors import InputError
from allot_stack.connect import endpoints

if TYPE_CHECKING:  # imported where used: ``allot explain --help`` loads no log, driver or engine
    pass


def cmd_explain(args: argparse.Namespace) -> int:
    from allot_stack.explain import explain, migrations, pod_history, refusal_lines, refused_about
    from allot_stack.migration_views import migration_lines

    if args.kind == "node":
        return _explain_node(args.name)
    key = args.name if "/" in args.name else f"{args.namespace}/{args.name}"
    own, group, folded = asyncio.run(pod_history(endpoints().database_url, key))
    refused = asyncio.run(refused_about(endpoints().database_url, f"pod:{key}"))
    if not own and refused:
        raise InputError("\n".join([f"no pod {key} in the log", *refusal_lines(refused)]))
    lines = explain(key, own, group, folded) + refusal_lines(refused)
    lines += migration_lines(key, asyncio.run(migrations(endpoints().database_url, key)))
    print("\n".join(lines))
    return 0


def _explain_node(name: str) -> int:
    import time

    from allot_stack.connect import on_log
    from allot_stack.explain_node import explain_node, node_history

    records = asyncio.run(on_log(lambda store: node_history(store, name)))
    if not records:
        raise InputError(f"no node {name} in the log")
    print("\n".join(explain_node(name, records, time.time_ns() // 1000)))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "explain", help="why a pod is where it is (or is not); what the node side says about a node"
    )
    p.add_argument("kind", choices=["pod", "node"])
    p.add_argument("name", type=object_name, help="pod: NAMESPACE/NAME (or NAME with -n); node: its name")
    p.add_argument("-n", "--namespace", type=namespace, default="default")
    p.set_defaults(func=cmd_explain)
