"""A service's HTTP endpoints: liveness (``/healthz``) from the first second, readiness (``/readyz``) as the start-up
phases pass and while the event log and NATS answer (503 with the reason otherwise), Prometheus ``/metrics`` and the
projection's ``/state`` (position and digest, what ``allot replay --verify`` compares with the log)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from allot_runtime.httpserver import HEALTH, application, start
from allot_runtime.metrics import Metrics

if TYPE_CHECKING:
    from allot_runtime.service import ServiceContext

__all__ = ["Liveness", "ServiceState", "not_ready", "serve_http", "state_of"]


class ServiceState(msgspec.Struct, kw_only=True):
    service: str
    position: int
    digest: str
    ready: bool
    consistent: bool


async def state_of(ctx: ServiceContext) -> ServiceState:
    async with ctx.runtime.lock:
        return ServiceState(
            service=ctx.runtime.name,
            position=ctx.host.position,
            digest=ctx.host.digest(),
            ready=bool(ctx.consumer and ctx.consumer.ready.is_set()),
            consistent=ctx.runtime.consistent,
        )


@dataclass
class Liveness:
    """What the HTTP endpoints report while the service starts: they answer from the first second (liveness),
    and readiness follows the phases (schema, connections, catch-up)."""

    service: str
    metrics: Metrics
    phase: str = "starting"
    ctx: ServiceContext | None = None


def not_ready(live: Liveness) -> str | None:
    """Why the service is not ready (None: it is): still starting, the event log unreachable (the last round trip to
    PostgreSQL went unanswered: nothing can be decided or recorded until one is answered), NATS not connected, or
    the consumer catching up."""
    ctx = live.ctx
    if ctx is None:
        return live.phase
    if (unreachable := ctx.store.unreachable.reason) is not None:
        return f"the event log cannot be reached: {unreachable}"
    if not ctx.nc.is_connected:
        return "NATS is not connected"
    if not ctx.consumer.ready.is_set():
        return "catching up with the log"
    return None


async def serve_http(live: Liveness, host: str, port: int) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": live.service, "phase": live.phase})

    async def readyz(_: web.Request) -> web.Response:
        reason = not_ready(live)
        body: dict[str, object] = {"ready": reason is None, "phase": live.phase}
        if reason is not None:
            body["reason"] = reason
        return web.json_response(body, status=200 if reason is None else 503)

    async def metrics(_: web.Request) -> web.Response:
        ctx = live.ctx
        await live.metrics.refresh(ctx.store if ctx else None, ctx.consumer if ctx else None)
        return web.Response(body=live.metrics.render(), content_type="text/plain", charset="utf-8")

    async def state(_: web.Request) -> web.Response:
        if live.ctx is None:
            return web.json_response({"phase": live.phase}, status=503)
        return web.Response(
            body=msgspec.json.encode(await state_of(live.ctx)), content_type="application/json"
        )

    app = application(HEALTH)
    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
            web.get("/metrics", metrics),
            web.get("/state", state),
        ]
    )
    return await start(app, host, port)
