"""``allot kube-sync``: record the cluster's pods (for Allot's scheduler), ElasticQuotas, ElasticQuotaProfiles and
PodGroups in the event log, as a long-running process (one per installation). See docs/kubernetes.md."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from allot_intake.errors import UsageError


def cmd_kube_sync(args: argparse.Namespace) -> int:
    from allot_cli.kube.process import run_kube_sync
    from allot_contracts.errors import InvalidInput

    if not os.environ.get("ALLOT_DATABASE_URL"):
        raise UsageError("ALLOT_DATABASE_URL is required")
    try:
        asyncio.run(run_kube_sync(scheduler_name=args.scheduler_name, kubeconfig=args.kubeconfig))
    except InvalidInput as exc:
        print(f"allot kube-sync: {exc}", file=sys.stderr)
        return 1  # refused input (kubeconfig, scheduler name)
    except KeyboardInterrupt:
        return 130
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kube-sync", help="record Kubernetes pods, quotas and PodGroups in the event log"
    )
    p.add_argument(
        "--scheduler-name",
        help="pods with this spec.schedulerName are Allot's "
        "(default: ALLOT_SCHEDULER_NAME or allot-scheduler)",
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: ALLOT_KUBECONFIG, KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    p.set_defaults(func=cmd_kube_sync)
