"""``allot quota tree``: every ElasticQuota with min / max / runtime / used / request per dimension, as a tree.

Folded from the log by the quota-manager's own decision code, so it shows exactly what admission used.
Built-in quotas (koordinator-root/system/default) are shown only when they hold pods, or with ``--all``. Tables
show quantities in human units (``16Gi``) and Koordinator's no-limit values as ``unlimited``; ``-o json|yaml`` print
an ``allot.dev/v1alpha1`` ``QuotaTree`` with the exact quantities.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from allot_cli._groups import subcommands

BUILT_IN = {"koordinator-system-quota", "koordinator-default-quota"}


async def tree_rows() -> list[dict[str, Any]]:
    from allot_stack.connect import on_log
    from allot_stack.logtools import quota_tree

    return await on_log(quota_tree)


def _fmt(values: dict[str, str], dims: list[str]) -> str:
    from allot_views.units import human

    return " ".join(f"{d}={human(d, values[d])}" for d in dims if d in values) or "-"


def render(rows: list[dict[str, Any]], *, show_all: bool) -> list[str]:
    lines = []
    for row in rows:
        if row["name"] in BUILT_IN and not row["pods"] and not show_all:
            continue
        if row["name"] == "koordinator-root-quota" and row["children"] == 0 and not show_all:
            continue
        dims = [d for d in row["dimensions"] if d != "pods"]
        indent = "  " * row["depth"]
        lines.append(
            f"{indent}{row['name']}  ({row['namespace']}, {row['pods']} pods"
            f"{', parent' if row['is_parent'] else ''}{'' if row['allow_lent'] else ', not lending'})"
        )
        for field in ("min", "max", "runtime", "used", "request"):
            # no max at all (the root, an unlimited quota) limits nothing
            shown = "unlimited" if field == "max" and not row[field] else _fmt(row[field], dims)
            lines.append(f"{indent}  {field:<8} {shown}")
    return lines


def cmd_quota(args: argparse.Namespace) -> int:
    from allot_views.objects import tree_object

    rows = asyncio.run(tree_rows())
    if args.output == "json":
        print(json.dumps(tree_object(rows), indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(tree_object(rows), sort_keys=False), end="")
    else:
        print("\n".join(render(rows, show_all=args.all)))
    return 0


def register(subparsers: Any) -> None:
    sub = subcommands(subparsers, "quota", help_text="elastic quota views")
    tree = sub.add_parser("tree", help="the quota tree with min/max/runtime/used/request per dimension")
    tree.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml"],
        default="table",
        help="json/yaml: an allot.dev/v1alpha1 QuotaTree with the exact quantities",
    )
    tree.add_argument("--all", action="store_true", help="also show empty built-in quotas")
    tree.set_defaults(func=cmd_quota)
