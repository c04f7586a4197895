"""``allot bench`` subcommands: one module each, exporting ``register(subparsers)``."""

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from allot_cli.files import path
from allot_runtime.flags import replicas


def benchmark_parser(
    subparsers: Any, benchmark: ModuleType, *, help: str, with_json: bool = True
) -> argparse.ArgumentParser:
    """The subcommand of the ``benchmark`` module (``allot_sim.bench.append``: ``append``): ``help`` in the list of
    commands, the module's docstring as its description, and (unless ``with_json`` is False) ``--json``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        benchmark.__name__.rpartition(".")[2],
        help=help,
        description=benchmark.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if with_json:
        p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def node_count_argument(p: argparse.ArgumentParser, *, also: str = "") -> None:
    """``--node-count``: the trace's node list replicated with new names to N nodes (0, the default: as read);
    ``also`` says what else the benchmark replicates."""
    p.add_argument(
        "--node-count",
        type=replicas,
        default=0,
        help=f"replicate the node list with new names to N nodes{also} (0 = as read)",
    )


def policy_argument(p: argparse.ArgumentParser, *, default: str, what: str) -> None:
    """``--policy``: a placement preset for ``what``, checked when the command runs (:func:`checked_policy`), so
    that the help loads no engine."""
    p.add_argument(
        "--policy",
        default=default,
        help=f"placement policy {what}: a preset of the placement config (koordinator, binpack, spread, ...; "
        f"default {default})",
    )


def checked_policy(policy: str) -> str:
    """``policy`` when the placement config takes it alone, else a :class:`UsageError` naming ``--policy`` and why
    (an unknown preset; fgd, which needs a typical-pod distribution)."""
    from allot_intake.errors import UsageError
    from allot_placement import ConfigError, PlacementConfig

    try:
        PlacementConfig.from_dict({"policy": policy})
    except ConfigError as exc:
        raise UsageError(f"--policy {policy}: {exc}") from exc
    return policy


def trace_arguments(
    p: argparse.ArgumentParser, *, nodes: Path, pods: Path, pods_flag: str = "--pods", label: str = "openb "
) -> None:
    """``--nodes`` and ``--pods`` (or ``pods_flag``): the node and pod list CSVs of the trace, ``nodes`` and
    ``pods`` (beside the checkout) unless given."""
    beside = "../shared/traces/openb/{} beside the checkout"
    p.add_argument(
        "--nodes",
        type=path,
        default=nodes,
        help=f"{label}node list CSV (default: {beside.format(nodes.name)})",
    )
    p.add_argument(
        pods_flag, type=path, default=pods, help=f"{label}pod list CSV (default: {beside.format(pods.name)})"
    )


def report(result: Mapping[str, object], *, as_json: bool, sort_keys: bool = False) -> None:
    """Print a benchmark's result: one JSON object (keys sorted), or aligned ``key  value`` lines in the result's
    order (sorted with ``sort_keys``)."""
    if as_json:
        print(json.dumps(result, sort_keys=True))
        return
    width = max(len(k) for k in result)
    for key, value in sorted(result.items()) if sort_keys else result.items():
        print(f"{key:<{width}}  {value}")
