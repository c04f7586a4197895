"""``allot replay --verify`` against a running pipeline where one service is behind: what that service has not
decided yet is reported as lag (which service, how many events), never as a failed verification; everything it did
decide is still re-derived."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from allot_bus.names import BusNames
from allot_cli.commands import replay
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_stack.apply import record
from allot_testing.builders import a_gpu_device, a_node, a_pod
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration


def _inputs(*docs: dict) -> list:
    return [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate(docs)]


async def _count(url: str, event_type: str) -> int:
    store = PostgresEventStore.connect(url)
    try:
        return len(await store.read(types=[event_type], limit=10_000))
    finally:
        await store.close()


async def test_a_service_that_is_behind_is_lag_not_a_mismatch(
    database_url, nats_server_url, bus_names, monkeypatch, capsys
):
    monkeypatch.setenv("ALLOT_DATABASE_URL", database_url)
    monkeypatch.delenv("ALLOT_STATE_DIR", raising=False)
    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names)) as stack:
        await record(
            database_url,
            _inputs(a_node("n1", gpus=8), a_gpu_device("n1", gpus=8), a_pod("first", gpus=1)),
            wait=True,
            wait_each=False,
            timeout=60,
        )
        await stack.pause("binder")
        await record(
            database_url,
            _inputs(a_pod("late-1", gpus=1), a_pod("late-2", gpus=1)),
            wait=False,
            wait_each=False,
            timeout=60,
        )
        for _ in range(200):  # the other services go on: both pods get placed, neither is bound
            if await _count(database_url, "pod.placed") == 3:
                break
            await asyncio.sleep(0.05)
        assert await _count(database_url, "pod.bound") == 1
        capsys.readouterr()
        args = argparse.Namespace(
            verify=True, expect_head=None, until=None, config_dir=None, no_live=True, json=True, jobs=2
        )
        code = await replay.run(args)
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"], report
    assert report["behind"] == {"binder": 4}, "the two pods' submissions and placements it has not handled"
    assert report["decisions"]["binder"]["mismatches"] == 0
    assert report["decisions"]["device-allocator"]["behind"] == 0
    assert report["decisions"]["binder"]["triggers"] > 0, "what the binder did decide is still re-derived"
