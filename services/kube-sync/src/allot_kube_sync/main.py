"""kube-sync as a command: ``allot-kube-sync`` (also ``python -m allot_kube_sync``; ``allot kube-sync`` runs the same
code). The settings are environment variables (:mod:`allot_kube_sync.process`); the two flags override two of them.

Exit codes: 0 when stopped (SIGTERM, SIGINT), 1 for refused input (the kubeconfig, the scheduler name) or a lost
lease, 2 for a setting it cannot use (no ``ALLOT_DATABASE_URL``), 130 when interrupted before it started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from allot_runtime.flags import process_parser

PROG = "allot-kube-sync"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``allot-kube-sync`` and ``allot kube-sync``."""
    parser.add_argument(
        "--scheduler-name",
        help="pods with this spec.schedulerName are Allot's "
        "(default: ALLOT_SCHEDULER_NAME or allot-scheduler)",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: ALLOT_KUBECONFIG, KUBECONFIG, in-cluster, ~/.kube/config)",
    )


def run(args: argparse.Namespace, prog: str = PROG) -> int:
    """Run kube-sync until it is stopped; the exit code. ``ALLOT_DATABASE_URL`` is checked by the caller."""
    from allot_contracts.errors import InvalidInput
    from allot_kube_sync.process import run_kube_sync

    try:
        asyncio.run(run_kube_sync(scheduler_name=args.scheduler_name, kubeconfig=args.kubeconfig))
    except InvalidInput as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1  # refused input (kubeconfig, scheduler name)
    except KeyboardInterrupt:
        return 130
    return 0


def parser() -> argparse.ArgumentParser:
    """The command line of ``allot-kube-sync``."""
    return process_parser(
        PROG, "Record Kubernetes pods, quotas and PodGroups in the event log.", add_arguments
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not os.environ.get("ALLOT_DATABASE_URL"):
        print(
            f"{PROG}: invalid configuration: ALLOT_DATABASE_URL: is required (e.g. postgresql://user@host:5432/allot)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(run(args))
