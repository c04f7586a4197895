"""``allot webhook``: the validating and mutating admission webhooks over HTTPS (see ``allot_cli.webhook`` and
docs/kubernetes.md#admission-webhooks)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import ssl
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from allot_cli.webhook import Webhook


def health_app(webhook: Webhook) -> web.Application:
    """``/healthz``, ``/readyz`` and ``/metrics`` (the reviews by result), over plain HTTP on ``ALLOT_HTTP_PORT``."""
    from aiohttp import web

    from allot_runtime.httpserver import HEALTH, application

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": "webhook"})

    async def metrics(_: web.Request) -> web.Response:
        lines = ["# TYPE allot_webhook_reviews_total counter"] + [
            f'allot_webhook_reviews_total{{result="{k}"}} {v}' for k, v in sorted(webhook.counts.items())
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    health = application(HEALTH)
    health.add_routes(
        [web.get("/healthz", healthz), web.get("/readyz", healthz), web.get("/metrics", metrics)]
    )
    return health


async def _run(args: argparse.Namespace) -> None:
    from allot_cli.webhook import Webhook, cluster_profiles, cluster_quotas, serve, tls_context
    from allot_runtime.httpserver import start
    from allot_runtime.kube.client import api_client

    context = tls_context(args.tls_cert_file, args.tls_private_key_file)
    client = None if args.no_quota_tree else await api_client(args.kubeconfig)
    webhook = Webhook(
        scheduler=args.scheduler_name or os.environ.get("ALLOT_SCHEDULER_NAME") or "allot-scheduler",
        quotas=None if client is None else cluster_quotas(client),
        profiles=None if client is None else cluster_profiles(client),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    runner = await start(
        health_app(webhook),
        os.environ.get("ALLOT_HTTP_HOST", "0.0.0.0"),
        int(os.environ.get("ALLOT_HTTP_PORT", "8080")),
    )
    try:
        await serve(webhook, host=args.host, port=args.port, context=context, stop=stop)
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()
        if client is not None:
            await client.close()


def cmd_webhook(args: argparse.Namespace) -> int:
    from allot_contracts.errors import InvalidInput

    try:
        asyncio.run(_run(args))
    except (OSError, ssl.SSLError) as exc:
        print(f"allot webhook: cannot serve TLS: {exc}", file=sys.stderr)
        return 2
    except InvalidInput as exc:  # no Kubernetes client configuration to list ElasticQuotas with
        print(f"allot webhook: {exc} (or run with --no-quota-tree)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("webhook", help="serve the validating and mutating admission webhooks (HTTPS)")
    p.add_argument("--tls-cert-file", required=True, help="PEM certificate (chain) served to the API server")
    p.add_argument("--tls-private-key-file", required=True, help="PEM private key of the certificate")
    p.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    p.add_argument(
        "--scheduler-name",
        help="the schedulerName pods are routed to and validated for (default: ALLOT_SCHEDULER_NAME or allot-scheduler)",
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig for listing ElasticQuotas, ClusterColocationProfiles, Namespaces and PriorityClasses (default: ALLOT_KUBECONFIG, KUBECONFIG, the in-cluster service "
        "account, ~/.kube/config)",
    )
    p.add_argument(
        "--no-quota-tree",
        action="store_true",
        help="run without the API server: ElasticQuota trees are not checked against the cluster's quotas (each "
        "quota is still checked alone) and no ClusterColocationProfile is applied to pods",
    )
    p.set_defaults(func=cmd_webhook)
