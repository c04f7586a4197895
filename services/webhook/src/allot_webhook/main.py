"""The admission webhooks as a process: ``allot-webhook`` (also ``python -m allot_webhook``; ``allot webhook`` runs the
same code). HTTPS on ``--port`` for the API server (:mod:`allot_webhook.server`), and ``/healthz``, ``/readyz`` and
``/metrics`` (the reviews by result) over plain HTTP on ``ALLOT_HTTP_PORT``, on the servers' shared health server
(:mod:`allot_runtime.health`). See docs/kubernetes.md#admission-webhooks.

Exit codes: 0 when stopped (SIGTERM, SIGINT), 2 when the certificate cannot be served or there is no Kubernetes
client configuration to list ElasticQuotas with, 130 when interrupted before it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import ssl
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from allot_runtime.flags import port, process_parser

if TYPE_CHECKING:
    from aiohttp import web

    from allot_webhook.server import Webhook

PROG = "allot-webhook"


def health_app(webhook: Webhook) -> web.Application:
    """The webhook's answers: alive and ready as soon as it serves, the reviews by result."""
    from aiohttp import web

    from allot_runtime.health import health_app as app

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": "webhook"})

    async def metrics(_: web.Request) -> web.Response:
        lines = ["# TYPE allot_webhook_reviews_total counter"] + [
            f'allot_webhook_reviews_total{{result="{k}"}} {v}' for k, v in sorted(webhook.counts.items())
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    return app(healthz=healthz, readyz=healthz, metrics=metrics)


async def _run(args: argparse.Namespace) -> None:
    from allot_runtime.health import serve_health
    from allot_runtime.kube.client import api_client
    from allot_runtime.signals import stop_on_signals
    from allot_webhook.server import Webhook, cluster_profiles, cluster_quotas, serve, tls_context

    context = tls_context(args.tls_cert_file, args.tls_private_key_file)
    client = None if args.no_quota_tree else await api_client(args.kubeconfig)
    webhook = Webhook(
        scheduler=args.scheduler_name or os.environ.get("ALLOT_SCHEDULER_NAME") or "allot-scheduler",
        quotas=None if client is None else cluster_quotas(client),
        profiles=None if client is None else cluster_profiles(client),
    )
    stop = stop_on_signals()

    runner = await serve_health(health_app(webhook))
    try:
        await serve(webhook, host=args.host, port=args.port, context=context, stop=stop)
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
        if client is not None:
            await client.close()


def run(args: argparse.Namespace, prog: str = PROG) -> int:
    """Serve the webhooks until stopped; the exit code."""
    from allot_contracts.errors import InvalidInput

    try:
        asyncio.run(_run(args))
    except (OSError, ssl.SSLError) as exc:
        print(f"{prog}: cannot serve TLS: {exc}", file=sys.stderr)
        return 2
    except InvalidInput as exc:  # no Kubernetes client configuration to list ElasticQuotas with
        print(f"{prog}: {exc} (or run with --no-quota-tree)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``allot-webhook`` and ``allot webhook``."""
    parser.add_argument(
        "--tls-cert-file", required=True, help="PEM certificate (chain) served to the API server"
    )
    parser.add_argument("--tls-private-key-file", required=True, help="PEM private key of the certificate")
    parser.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    parser.add_argument("--port", type=port, default=9443, help="HTTPS port (default 9443)")
    parser.add_argument(
        "--scheduler-name",
        help="the schedulerName pods are routed to and validated for (default: ALLOT_SCHEDULER_NAME or allot-scheduler)",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig for listing ElasticQuotas, ClusterColocationProfiles, Namespaces and PriorityClasses (default: ALLOT_KUBECONFIG, KUBECONFIG, the in-cluster service "
        "account, ~/.kube/config)",
    )
    parser.add_argument(
        "--no-quota-tree",
        action="store_true",
        help="run without the API server: ElasticQuota trees are not checked against the cluster's quotas (each "
        "quota is still checked alone) and no ClusterColocationProfile is applied to pods",
    )


def parser() -> argparse.ArgumentParser:
    """The command line of ``allot-webhook``."""
    return process_parser(
        PROG, "Serve the validating and mutating admission webhooks (HTTPS).", add_arguments
    )


def main(argv: Sequence[str] | None = None) -> None:
    sys.exit(run(parser().parse_args(argv)))
