"""The web audit view's HTTP server (aiohttp): GET only, pages rendered from ``UiModel``; a background task folds
newly recorded events every ``poll`` seconds and rebuilds the services' projections when the log moved.

Routes: ``/`` overview, ``/gpus`` GPUs (filter ``node``), ``/pods`` (filters ``phase``, ``namespace``, ``node``, ``q``, ``limit``),
``/pods/<ns>/<name>`` a pod's decision timeline (the ``allot explain`` content, with the nearest miss and the queue place), ``/quotas`` tree and borrow ledger,
``/gangs``, ``/reservations`` (and migrations), ``/usage`` quota chargeback (``by``, ``since``, ``until``, ``metric``), ``/events`` with a live stream (server-sent events from
``/api/stream?after=<position>``), ``/verify`` chain and per-service lag, ``/api/summary`` (JSON), ``/healthz``, ``/readyz`` and ``/metrics`` (the process's own figures).

Every query parameter is checked (``allot_ui.query``: 400 naming the parameter), a pod's path is a namespace and a
name as Kubernetes spells them (400 otherwise, before the log is read), and the view is served with the limits every
Allot HTTP server has (``allot_runtime.httpserver``: timeouts, connections, ``nosniff``). Live streams have a cap of
their own (:data:`MAX_STREAMS`, 503 beyond it), below the connection cap, so open pages never take every connection;
``/healthz``, ``/readyz`` and ``/metrics`` are answered on connections held in reserve when every other one is busy.
``/readyz`` says not ready while the log cannot be read (the background reader's last read failed or timed out).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from allot_contracts.errors import TransientError
from allot_contracts.objects.meta import is_dns_label, is_dns_subdomain
from allot_eventstore.clock import iso
from allot_intake.errors import UsageError
from allot_runtime.httpserver import Limits, application, refuse, start
from allot_ui import gpus, pages, usage
from allot_ui.model import UiModel
from allot_ui.query import QueryError, checked
from allot_ui.usage import Busy, Reports, WindowRefused

MODEL: web.AppKey[UiModel] = web.AppKey("model", UiModel)
POLL: web.AppKey[float] = web.AppKey("poll", float)
REPORTS: web.AppKey[Reports] = web.AppKey("reports", Reports)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("allot.ui")
QUERY: web.RequestKey[dict[str, str]] = web.RequestKey("allot_ui_query", dict)  # the checked query
# A read-only view for a few people (docs/limits.md#http-servers): GET only, each open page's live stream holds one
# connection, at most MAX_STREAMS of them; probes and scrapes get connections of their own when the rest are busy.
LIMITS = Limits(
    max_connections=64, max_body=64 * 1024, reserve=8, reserved_paths=("/healthz", "/readyz", "/metrics")
)
MAX_STREAMS = 32


class Streams:
    """The live streams open now, at most ``most`` (the rest of the connections are left to pages)."""

    def __init__(self, most: int = MAX_STREAMS) -> None:
        self.most, self.open = most, 0


STREAMS: web.AppKey[Streams] = web.AppKey("streams", Streams)


def _html(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html", charset="utf-8")


def _page(title: str, path: str, render: Callable[[UiModel], str], *, script: str = "") -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        model = request.app[MODEL]
        return _html(pages.layout(title, path, render(model), model, script=script))

    return handler


async def pods(request: web.Request) -> web.StreamResponse:
    model = request.app[MODEL]
    query: dict[str, str] = request[QUERY]
    return _html(pages.layout("Pods", "/pods", pages.pods_page(model, query), model))


async def gpu_page(request: web.Request) -> web.StreamResponse:
    model = request.app[MODEL]
    query: dict[str, str] = request[QUERY]
    return _html(pages.layout("GPUs", "/gpus", gpus.gpus_page(model, query), model))


async def usage_page(request: web.Request) -> web.StreamResponse:
    model = request.app[MODEL]
    try:
        body = await usage.usage_page(request.app[REPORTS], model, request[QUERY])
    except WindowRefused as exc:
        raise refuse(str(exc)) from None
    except Busy as exc:
        refusal = refuse(str(exc), 503)
        refusal.headers["Retry-After"] = str(exc.retry_after)
        raise refusal from None
    return _html(pages.layout("Usage", "/usage", body, model))


def _pod_key(request: web.Request) -> str:
    """The pod a path names, refused (400, before the log is read) unless its namespace is an RFC 1123 label and its
    name an RFC 1123 subdomain, as Kubernetes names them."""
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    if not is_dns_label(namespace):
        raise refuse(
            f"path.namespace: {namespace[:64]!r} is not a valid namespace (an RFC 1123 label: a-z, 0-9, '-'; at "
            "most 63 characters)"
        )
    if not is_dns_subdomain(name):
        raise refuse(
            f"path.name: {name[:64]!r} is not a valid pod name (an RFC 1123 subdomain: a-z, 0-9, '-', '.'; at "
            "most 253 characters)"
        )
    return f"{namespace}/{name}"


async def pod(request: web.Request) -> web.StreamResponse:
    from allot_stack.explain import explain, history

    model = request.app[MODEL]
    key = _pod_key(request)
    try:
        lines = explain(key, *await history(model.store, key), model.cluster())
    except UsageError as exc:
        raise web.HTTPNotFound(text=str(exc)) from exc
    return _html(pages.layout(f"Pod {key}", "/pods", pages.pod_page(key, lines), model))


async def summary(request: web.Request) -> web.StreamResponse:
    model = request.app[MODEL]
    body = {
        "position": model.position,
        "head": model.head,
        "chain": {"verified_to": model.chain.verified_to, "problem": model.chain.problem},
        "lag": model.lag(),
        "pods": len(model.view.pods),
        "nodes": len(model.view.nodes),
        "gpus": gpus.gpu_summary(model),
        "projections_at": model.projections.position,
    }
    return web.json_response(body)


_STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


async def stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: every event recorded after ``after``, as it is folded, until the reader goes away (HEAD:
    the headers alone); 503 when :data:`MAX_STREAMS` are open."""
    if request.method == "HEAD":
        return web.Response(headers=_STREAM_HEADERS)
    streams = request.app[STREAMS]
    if streams.open >= streams.most:
        refusal = refuse(f"too many live streams open (at most {streams.most}); try again later", 503)
        refusal.headers["Retry-After"] = "10"
        raise refusal
    streams.open += 1
    try:
        return await _stream(request)
    finally:
        streams.open -= 1


async def _stream(request: web.Request) -> web.StreamResponse:
    model = request.app[MODEL]
    after = int(request[QUERY].get("after") or 0)
    response = web.StreamResponse(headers=_STREAM_HEADERS)
    await response.prepare(request)
    poll = request.app[POLL]
    try:
        while request.transport is not None and not request.transport.is_closing():
            fresh = [r for r in model.recent if r.position > after]
            for record in fresh:
                data = {
                    "position": record.position,
                    "time": iso(record.recorded_at),
                    "type": record.type,
                    "stream": record.stream_id,
                    "producer": record.producer,
                }
                await response.write(f"id: {record.position}\ndata: {json.dumps(data)}\n\n".encode())
                after = record.position
            await asyncio.sleep(poll)
    except ConnectionResetError:  # the reader went away while events were written: the stream is over
        pass
    return response


async def healthz(request: web.Request) -> web.StreamResponse:
    """Alive, and the log position the view has read (the same shape as the services' and the relay's answer)."""
    return web.json_response({"status": "ok", "service": "ui", "position": request.app[MODEL].position})


async def readyz(request: web.Request) -> web.StreamResponse:
    """Ready once the first read of the log is done (before the server listens) and for as long as the log can be
    read: 503 with the reason while the background reader's reads fail or time out."""
    outage = request.app[MODEL].outage
    if outage:
        return web.json_response(
            {"ready": False, "reason": f"the event log cannot be read: {outage}"}, status=503
        )
    return web.json_response({"ready": True})


_REGISTRY: list[Any] = []  # the web view's registry, built at the first scrape


async def metrics(_: web.Request) -> web.StreamResponse:
    """The process's own figures (``allot_build_info``, ``process_*``, ``python_gc_*``) for the scrape every Allot
    pod gets."""
    from prometheus_client import CollectorRegistry, generate_latest

    from allot_runtime.metrics import standard_collectors

    if not _REGISTRY:
        registry = CollectorRegistry()
        standard_collectors(registry, "ui")
        _REGISTRY.append(registry)
    return web.Response(body=generate_latest(_REGISTRY[0]), content_type="text/plain", charset="utf-8")


async def follow(model: UiModel, poll: float) -> None:
    """Fold what the log records every ``poll`` seconds, for as long as the view runs: while the log cannot be read
    (the server restarting, the network down) the pages show what was read before, and reading goes on when it is
    back; the outage is logged once as it begins and once as it ends."""
    while True:
        try:
            await model.refresh()
            await model.refresh_projections()
        except TransientError as exc:
            if not model.outage:
                log.warning(
                    "the event log cannot be read (%s); the view shows position %d until it can",
                    exc,
                    model.position,
                )
            model.outage = str(exc) or type(exc).__name__
        else:
            if model.outage:
                log.info("the event log can be read again; the view is at position %d", model.position)
            model.outage = ""
        await asyncio.sleep(poll)


@web.middleware
async def checked_query(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every query parameter checked against what the page takes (``allot_ui.query``), before the page."""
    resource = request.match_info.route.resource
    if resource is not None:
        try:
            request[QUERY] = checked(resource.canonical, request.query)
        except QueryError as exc:
            raise refuse(str(exc)) from None
    return await handler(request)


@web.middleware
async def log_unreachable(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page that reads the log while it cannot be read: 503 with the reason (the client may try again), never a
    500."""
    try:
        return await handler(request)
    except TransientError as exc:
        raise refuse(f"the event log cannot be read right now: {exc}", 503) from None


async def serve(
    model: UiModel,
    host: str,
    port: int,
    *,
    poll: float = 0.5,
    header_timeout: float | None = None,
    limits: Limits | None = None,
    max_streams: int = MAX_STREAMS,
) -> web.AppRunner:
    """The view of ``model`` served on ``host:port`` with ``limits`` (:data:`LIMITS`; ``header_timeout`` replacing
    its own)."""
    limits = limits or LIMITS
    if header_timeout is not None:
        limits = replace(limits, header_timeout=header_timeout)
    return await start(make_app(model, poll=poll, limits=limits, max_streams=max_streams), host, port)


def make_app(
    model: UiModel,
    *,
    poll: float = 0.5,
    limits: Limits | None = None,
    max_streams: int = MAX_STREAMS,
    reports: Reports | None = None,
) -> web.Application:
    app = application(limits or LIMITS)
    app.middlewares.extend((checked_query, log_unreachable))
    app[MODEL] = model
    app[POLL] = poll
    app[STREAMS] = Streams(max_streams)
    app[REPORTS] = reports or Reports()

    async def background(app: web.Application) -> AsyncIterator[None]:
        await model.refresh()
        await model.refresh_projections(force=True)
        task = asyncio.create_task(follow(model, poll), name="allot-ui follow the log")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await app[REPORTS].close()

    app.cleanup_ctx.append(background)
    app.router.add_get("/", _page("Overview", "/", pages.overview_page))
    app.router.add_get("/gpus", gpu_page)
    app.router.add_get("/pods", pods)
    app.router.add_get("/pods/{namespace}/{name}", pod)
    app.router.add_get("/quotas", _page("Quota tree", "/quotas", pages.quotas_page))
    app.router.add_get("/gangs", _page("Gangs", "/gangs", pages.gangs_page))
    app.router.add_get(
        "/reservations", _page("Reservations and migrations", "/reservations", pages.reservations_page)
    )
    app.router.add_get(
        "/events", _page("Event stream", "/events", pages.events_page, script=pages.LIVE_SCRIPT)
    )
    app.router.add_get("/usage", usage_page)
    app.router.add_get("/verify", _page("Verify", "/verify", pages.verify_page))
    app.router.add_get("/api/summary", summary)
    app.router.add_get("/api/stream", stream)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
