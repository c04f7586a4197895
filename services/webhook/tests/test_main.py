"""The webhook's process surface: ``allot-webhook``, ``python -m allot_webhook`` and ``allot webhook`` (the CLI's
wrapper) take the same flags and refuse a certificate they cannot serve with one line and exit code 2; the health
server answers ``/healthz``, ``/readyz`` and ``/metrics`` (the reviews by result)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import ClientSession

from allot_runtime.health import serve_health
from allot_webhook.main import health_app, parser
from allot_webhook.server import Webhook

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        ([str(BIN / "allot-webhook")], "allot-webhook"),
        ([sys.executable, "-m", "allot_webhook"], "allot-webhook"),
        ([str(BIN / "allot"), "webhook"], "allot webhook"),
    ],
)
def test_a_certificate_that_cannot_be_read_stops_it_with_exit_code_2(
    argv: list[str], prog: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.pem"
    result = subprocess.run(
        [*argv, f"--tls-cert-file={missing}", f"--tls-private-key-file={missing}", "--no-quota-tree"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"{prog}: cannot serve TLS: "), result.stderr


def test_the_certificate_flags_are_required() -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--port", "9443"])
    assert exited.value.code == 2
    args = parser().parse_args(["--tls-cert-file=c", "--tls-private-key-file=k"])
    assert (args.host, args.port, args.no_quota_tree) == ("0.0.0.0", 9443, False)


async def test_the_health_server_counts_the_reviews_by_result() -> None:
    webhook = Webhook()
    webhook.counts.update({"allowed": 3, "denied": 1})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    runner = await serve_health(health_app(webhook), "127.0.0.1", port)
    try:
        async with ClientSession() as http:
            for path in ("/healthz", "/readyz"):
                async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                    assert response.status == 200
                    assert await response.json() == {"status": "ok", "service": "webhook"}
            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                text = await response.text()
    finally:
        await runner.cleanup()
    assert 'allot_webhook_reviews_total{result="allowed"} 3' in text
    assert 'allot_webhook_reviews_total{result="denied"} 1' in text
