"""A CA and a server certificate made with the ``openssl`` command (as the Helm chart's self-signed CA would be), and
the admission webhooks served over TLS on loopback with them, for tests that talk to the webhooks as the API server
does."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from allot_runtime.httpserver import Limits
from allot_webhook.server import Webhook, serve, tls_context

__all__ = ["make_certificates", "serving"]


def make_certificates(directory: Path) -> tuple[str, str, str]:
    """A CA, and a certificate for ``allot-webhook.allot-system.svc`` and 127.0.0.1 signed by it."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=allot-webhook-ca",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "tls.key",
        "-out",
        "tls.csr",
        "-subj",
        "/CN=allot-webhook.allot-system.svc",
    )
    (directory / "san.ext").write_text(
        "subjectAltName=DNS:allot-webhook.allot-system.svc,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    run(
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    )
    return str(directory / "ca.crt"), str(directory / "tls.crt"), str(directory / "tls.key")


@contextlib.asynccontextmanager
async def serving(
    webhook: Webhook, directory: Path, port: int, limits: Limits | None = None
) -> AsyncIterator[tuple[str, ssl.SSLContext]]:
    """``webhook`` served on ``https://127.0.0.1:port`` (with ``limits``, else the webhook's own): (url, the
    context that trusts its CA, as the API server does with the ``caBundle``)."""
    ca, cert, key = make_certificates(directory)
    stop = asyncio.Event()
    context = tls_context(cert, key)
    task = asyncio.create_task(
        serve(webhook, host="127.0.0.1", port=port, context=context, stop=stop, limits=limits)
    )
    trust = ssl.create_default_context(cafile=ca)
    url = f"https://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            try:
                async with session.get(f"{url}/validate", ssl=trust):
                    break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
    try:
        yield url, trust
    finally:
        stop.set()
        await task
