"""The web audit view against a running stack with the demo workload, in headless Chromium: the pages render as the
committed screenshots show (compared pixel by pixel with a small tolerance for font rendering and the log position in
the header). Set ALLOT_UPDATE_SCREENSHOTS=1 to rewrite the screenshots after a deliberate change, and look at them.

Skipped when no Chromium is installed (Debian: ``apt-get install chromium``)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import ClientSession, web

from allot_bus.names import BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import load_documents
from allot_intake.manifests import to_input
from allot_runtime.metrics import LogCollector
from allot_stack.apply import record
from allot_stack.pipeline import interests
from allot_testing.browser import SKIP_NO_CHROMIUM, differing_fraction, screenshot
from allot_testing.stack import InProcessStack
from allot_ui.model import UiModel
from allot_ui.server import make_app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(__file__).with_name("ui_screenshots")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def apply(database_url: str, nats_server_url: str, bus_names: dict[str, str], *names: str) -> None:
    """The demo's files applied to a running stack, each waited for (the stack is caught up when this returns)."""
    demo = ROOT / "examples" / "demo"
    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names)):
        docs = [d for name in names for d in load_documents(str(demo / name))]
        await record(database_url, [to_input(d) for d in docs], wait=False, wait_each=True, timeout=60)


@contextlib.asynccontextmanager
async def served(database_url: str) -> AsyncIterator[tuple[PostgresEventStore, int]]:
    """The view of the stack's log served on a free loopback port: (its store, the port)."""
    store = PostgresEventStore.connect(database_url)
    port = free_port()
    runner = web.AppRunner(make_app(UiModel(store), poll=0.2))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield store, port
    finally:
        await runner.cleanup()
        await store.close()


async def pages(port: int, *paths: str) -> dict[str, str]:
    async with ClientSession() as http:
        out = {}
        for path in paths:
            async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                out[path] = await response.text()
        return out


def lags(verify: str) -> dict[str, int]:
    """consumer -> events behind, as the Verify page states them."""
    return {
        name: int(lag)
        for name, lag in re.findall(r"<tr><td>([\w@.-]+)</td><td>\d+</td><td>(\d+)</td>", verify)
    }


async def caught_up(store: PostgresEventStore) -> dict[str, int]:
    """What allot_consumer_lag_events says for each consumer of the stack: the services' own lag collector."""
    consumed = interests()
    out = {}
    for name, position in (await store.checkpoints()).items():
        collector = LogCollector(name)
        types = consumed.get(name.split("@", 1)[0])  # a consumer that is no service reads every event
        await collector.refresh(store, SimpleNamespace(name=name, position=position, types=types, stats=None))
        family = next(f for f in collector.collect() if f.name == "allot_consumer_lag_events")
        out[name] = int(family.samples[0].value)
    return out


@SKIP_NO_CHROMIUM
async def test_the_audit_view_of_a_running_stack_renders_as_its_screenshots(
    tmp_path: Path, database_url: str, nats_server_url: str, bus_names: dict[str, str]
) -> None:
    """The demo workload: research/train-big waits for quota. The overview says so (with quota-manager's reason),
    the GPU page shows every GPU; each as its committed screenshot; every service is caught up and the Verify page
    says 0 behind, as the lag metric does."""
    await apply(database_url, nats_server_url, bus_names, "cluster.yaml", "pods.yaml")
    async with served(database_url) as (store, port):
        got = await pages(port, "/", "/gpus", "/verify")
        assert 'title="GPU 2: research/notebook-alice (50%)"' in got["/gpus"]
        assert "No pod is held back" not in got["/"]
        assert re.search(r">research/train-big</a></td><td>Waiting</td><td>InsufficientQuota</td>", got["/"])
        metric = await caught_up(store)
        assert metric and set(metric.values()) == {0}, metric
        assert lags(got["/verify"]) == metric
        update = os.environ.get("ALLOT_UPDATE_SCREENSHOTS") == "1"
        for name, path in (("overview", "/"), ("gpus", "/gpus"), ("quotas", "/quotas")):
            shot = await screenshot(f"http://127.0.0.1:{port}{path}", tmp_path / f"{name}.png")
            golden = SHOTS / f"{name}.png"
            if update:
                SHOTS.mkdir(exist_ok=True)
                golden.write_bytes(shot)
                continue
            fraction = differing_fraction(golden.read_bytes(), shot)
            assert fraction < 0.02, f"{name}: {fraction:.1%} of the pixels differ (see {tmp_path / name}.png)"


async def test_a_returned_borrow_and_a_deleted_pod_on_a_running_stack(
    database_url: str, nats_server_url: str, bus_names: dict[str, str]
) -> None:
    """research/train-llama-1 finishes (deleted): its borrows are listed as returned, not current; it holds no GPU
    and is no longer listed; train-big is admitted and the overview no longer holds it back."""
    await apply(database_url, nats_server_url, bus_names, "cluster.yaml", "pods.yaml", "finish-training.yaml")
    async with served(database_url) as (store, port):
        got = await pages(port, "/", "/quotas", "/gpus", "/pods", "/verify")
        current = got["/quotas"].split("Borrow ledger: returned")[0].split("Borrow ledger: current")[1]
        returned = got["/quotas"].split("Borrow ledger: returned")[1]
        assert "research/train-llama-1" not in current and "research/train-llama-1" in returned
        assert "train-llama-1" not in got["/gpus"] and "train-llama-1" not in got["/pods"]
        assert "research/train-big" not in got["/"].split("Why pods are pending")[1]
        assert lags(got["/verify"]) == await caught_up(store)
