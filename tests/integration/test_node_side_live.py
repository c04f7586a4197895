"""Heartbeat loss on the running stack, in real time: node-reporter's agent records heartbeats into PostgreSQL, the
device-allocator's timer loop records ``timer.fired`` at the grace deadline read from the wall clock, the node's GPUs
become unschedulable (a GPU pod waits with ``DeviceInventoryStale``), and the agent starting again puts them back (the
pod is requeued and placed). Replay re-derives every decision of the device-allocator from the recorded log.

The in-process stack runs the services' consumers; the test runs the device-allocator's own timer loop
(``allot_runtime.service.timer_loop``, as its process does) and the agent's own heartbeat loop beside them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from allot_bus.names import BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_runtime.service import timer_loop
from allot_stack.apply import record
from allot_stack.pipeline import build
from allot_testing.builders import a_gpu_device, a_node, a_pod
from allot_testing.stack import InProcessStack
from node_reporter.adapters.agent import Agent, AgentConfig

pytestmark = pytest.mark.integration

CONFIG = {"device-allocator": {"nodeSide": {"heartbeatGraceSeconds": 3}}}


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_a_stopped_agent_makes_its_gpus_unschedulable_until_it_beats_again(
    database_url: str, nats_server_url: str, bus_names: dict[str, str]
) -> None:
    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names), CONFIG) as stack:
        store = stack.store

        async def log() -> list[tuple[str, dict[str, Any]]]:
            return [(r.type, r.payload_dict()) async for r in store.iterate()]

        async def has(kind: str, count: int = 1) -> bool:
            return sum(1 for t, _ in await log() if t == kind) >= count

        async def outcome(pod: str) -> list[str]:
            return [
                t
                for t, p in await log()
                if t in ("pod.placed", "pod.unschedulable") and p["pod"]["name"] == pod
            ]

        allocator = stack.runtimes["device-allocator"]
        timer_ctx = SimpleNamespace(
            runtime=allocator,
            consumer=allocator.consumer,
            host=allocator.host,
            store=store,
            settings=SimpleNamespace(service="device-allocator"),
        )
        timer_stop = asyncio.Event()
        timers = asyncio.create_task(timer_loop(timer_ctx, timer_stop))
        agent_ctx = SimpleNamespace(
            store=store,
            settings=SimpleNamespace(instance="gpu-a"),
            runtime=SimpleNamespace(name="node-reporter@gpu-a"),
        )
        agent = Agent(agent_ctx, AgentConfig(heartbeat_interval_s=0.2))
        try:
            docs = [a_node("gpu-a", gpus=2), a_gpu_device("gpu-a", gpus=2)]
            inputs = [to_input(Document(source="test", index=i, body=d)) for i, d in enumerate(docs)]
            await record(database_url, inputs, wait=False, wait_each=True, timeout=60)

            beating = asyncio.Event()
            beats = asyncio.create_task(agent.heartbeat_loop(beating))
            await _until(lambda: has("node.heartbeat", 20), "heartbeats for longer than the grace")
            assert not await has("node.heartbeat_lost")  # 4 s of beats every 0.2 s, grace 3 s
            beating.set()  # the agent stops
            await beats
            await _until(lambda: has("node.heartbeat_lost"), "the heartbeat declared lost")
            assert await has("timer.fired")

            pod = a_pod("train", namespace="ml", gpus=1)
            await record(
                database_url,
                [to_input(Document(source="test", index=9, body=pod))],
                wait=False,
                wait_each=True,
                timeout=60,
            )
            await _until(lambda: _nonempty(outcome("train")), "the GPU pod's first decision")
            unschedulable = [p for t, p in await log() if t == "pod.unschedulable"]
            assert unschedulable and "DeviceInventoryStale" in unschedulable[-1]["codes"]

            resumed = asyncio.Event()
            beats = asyncio.create_task(agent.heartbeat_loop(resumed))  # the agent starts again
            await _until(lambda: has("node.heartbeat_resumed"), "the heartbeat resumed")
            await _until(lambda: _placed(outcome("train")), "the GPU pod placed")
            resumed.set()
            await beats
        finally:
            timer_stop.set()
            await timers
        placed = [p for t, p in await log() if t == "pod.placed"]
        assert placed[-1]["node"] == "gpu-a"

    replayed = PostgresEventStore.connect(database_url)
    try:
        host = Host(build("device-allocator", CONFIG["device-allocator"]))
        checked, mismatches = await verify_decisions(host, replayed)
    finally:
        await replayed.close()
    assert checked > 0 and mismatches == []


async def _nonempty(found: Awaitable[list[str]]) -> bool:
    return bool(await found)


async def _placed(found: Awaitable[list[str]]) -> bool:
    return "pod.placed" in await found
