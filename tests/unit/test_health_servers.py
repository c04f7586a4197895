"""The health, readiness and metrics servers of every process (the services', the relay's, kube-sync's, the
webhook's) have the limits every Allot HTTP server has: they are guarded sites with ``HEALTH`` limits, and their
answers say ``nosniff`` (the limits themselves: tests/unit/test_http_limits.py)."""

from __future__ import annotations

import socket
from typing import Any

from aiohttp import ClientSession, web
from prometheus_client import CollectorRegistry

from allot_kube_sync.process import Progress
from allot_kube_sync.process import health as kube_sync_health
from allot_relay.main import Publishing
from allot_relay.main import _serve as relay_serve
from allot_runtime.health import address, serve_health
from allot_runtime.httpserver import HEALTH, GuardedSite
from allot_runtime.metrics import Metrics
from allot_runtime.service_http import Liveness, serve_http
from allot_webhook.main import health_app
from allot_webhook.server import Webhook


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def check(runner: web.AppRunner, port: int) -> None:
    try:
        [site] = runner.sites
        assert isinstance(site, GuardedSite) and site.limits == HEALTH
        async with ClientSession() as http:
            for path in ("/healthz", "/missing"):
                async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                    assert response.headers.get("X-Content-Type-Options") == "nosniff", path
                    assert response.status in (200, 404)
    finally:
        await runner.cleanup()


async def test_a_services_server(monkeypatch: Any) -> None:
    port = free_port()
    await check(
        await serve_http(Liveness("binder", Metrics("binder", process=False)), "127.0.0.1", port), port
    )


async def test_the_relays_server(monkeypatch: Any) -> None:
    port = free_port()
    monkeypatch.setenv("ALLOT_HTTP_HOST", "127.0.0.1")
    monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
    await check(await relay_serve(Publishing()), port)


async def test_kube_syncs_server() -> None:
    port = free_port()
    await check(
        await serve_health(kube_sync_health(Progress(), CollectorRegistry()), "127.0.0.1", port), port
    )


async def test_the_webhooks_health_server() -> None:
    port = free_port()
    await check(await serve_health(health_app(Webhook()), "127.0.0.1", port), port)


def test_the_health_server_listens_where_the_settings_say() -> None:
    assert address({}) == ("0.0.0.0", 8080)
    assert address({"ALLOT_HTTP_HOST": "127.0.0.1", "ALLOT_HTTP_PORT": "9090"}) == ("127.0.0.1", 9090)


async def test_the_health_server_reads_its_address_from_the_environment(monkeypatch: Any) -> None:
    port = free_port()
    monkeypatch.setenv("ALLOT_HTTP_HOST", "127.0.0.1")
    monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
    await check(await serve_health(kube_sync_health(Progress(), CollectorRegistry())), port)
