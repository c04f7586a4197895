"""The health, readiness and metrics server of the servers that are not event processors (the relay, kube-sync, the
admission webhooks): ``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP on ``ALLOT_HTTP_HOST`` /
``ALLOT_HTTP_PORT`` (default ``0.0.0.0:8080``, as the services), within the probes' limits (:data:`HEALTH`).

Each server says what its three answers are; the listener, its limits and its address are the same for all.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from allot_runtime.httpserver import HEALTH, application, start

__all__ = ["Handler", "address", "health_app", "serve_health"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def address(environ: Mapping[str, str] = os.environ) -> tuple[str, int]:
    """Where the health server listens: ``ALLOT_HTTP_HOST`` (0.0.0.0) and ``ALLOT_HTTP_PORT`` (8080)."""
    return environ.get("ALLOT_HTTP_HOST", "0.0.0.0"), int(environ.get("ALLOT_HTTP_PORT", "8080"))


def health_app(*, healthz: Handler, readyz: Handler, metrics: Handler) -> web.Application:
    """The application answering ``GET /healthz``, ``/readyz`` and ``/metrics`` with the given handlers."""
    app = application(HEALTH)
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics)])
    return app


async def serve_health(
    app: web.Application, host: str | None = None, port: int | None = None
) -> web.AppRunner:
    """Serve ``app`` (from :func:`health_app`) on ``host:port``, by default :func:`address`; stop it with the
    runner's ``cleanup()``."""
    default_host, default_port = address()
    return await start(app, default_host if host is None else host, default_port if port is None else port)
