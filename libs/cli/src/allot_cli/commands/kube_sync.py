"""``allot kube-sync``: record the cluster's pods (for Allot's scheduler), ElasticQuotas, ElasticQuotaProfiles and
PodGroups in the event log, as a long-running process (one per installation): the process of
:mod:`allot_kube_sync.main` (``allot-kube-sync``). See docs/kubernetes.md."""

from __future__ import annotations

import argparse
import os
from typing import Any

from allot_intake.errors import UsageError
from allot_kube_sync.main import add_arguments, run


def cmd_kube_sync(args: argparse.Namespace) -> int:
    if not os.environ.get("ALLOT_DATABASE_URL"):
        raise UsageError("ALLOT_DATABASE_URL is required")
    return run(args, "allot kube-sync")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kube-sync", help="record Kubernetes pods, quotas and PodGroups in the event log"
    )
    add_arguments(p)
    p.set_defaults(func=cmd_kube_sync)
