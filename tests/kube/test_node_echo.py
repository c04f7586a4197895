"""The binder's own Node writes (batch/mid and device resources, koord-manager's annotations on ``nodes/status``)
come back on node-reporter's watch without being recorded again: the fields its field manager owns are Allot's
output, so an echo costs no ``node.applied`` (and no round of the deciders). What someone else writes is input."""

from __future__ import annotations

from typing import Any

import pytest

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import NodeAllocatableUpdated
from allot_testing.builders import a_node
from allot_testing.fake_kube import FakeKube
from binder.adapters.notices import NoticeWorker
from node_reporter.adapters.kube import NodeWatch, producer_for

pytestmark = pytest.mark.integration

BATCH = "kubernetes.io/batch-cpu"
RATIO = "node.koordinator.sh/cpu-normalization-ratio"


async def decide(store: Any, key: str, **allocatable: Any) -> None:
    event = NodeAllocatableUpdated(name="n1", **allocatable)
    new = NewEvent(stream_id=stream_id("node", "n1"), event=event, event_id=derived_event_id("t", key, 0))
    await store.append([new], producer="device-allocator")


async def test_the_binders_own_node_writes_record_nothing_and_anothers_are_input(
    kube: FakeKube, store: Any, client: Any, running: Any, eventually: Any, log_of: Any, settled: Any
) -> None:
    kube.create(a_node("n1"))
    producer = producer_for("n1")

    async def applied() -> list[dict[str, Any]]:
        return [p["manifest"] for t, _, p in await log_of(store, producer=producer) if t == "node.applied"]

    def watch() -> NodeWatch:
        return NodeWatch(store=store, client=client, instance="n1", watch_timeout=2, backoff=(0.05, 0.2))

    first = watch()
    runner = running(first.run)
    await eventually(lambda: first.synced, what="first lists")
    assert len(await settled(applied)) == 1

    # Three decisions written by the binder: each patch reaches the Node and comes back on the watch.
    worker = NoticeWorker(store=store, client=client)
    for index, (amount, ratio) in enumerate((("2000", "1.20"), ("3000", "1.20"), ("3000", "1.30"))):
        await decide(store, f"d{index}", allocatable={BATCH: amount}, cpu_normalization_ratio=ratio)
        await worker.step()
        node = kube.get("Node", "n1")
        assert (
            node["status"]["allocatable"][BATCH] == amount and node["metadata"]["annotations"][RATIO] == ratio
        )
    [manager] = [e for e in node["metadata"]["managedFields"] if e["manager"] == "allot-binder"]
    assert manager["subresource"] == "status"
    assert len(await settled(applied)) == 1  # no node.applied for Allot's own output

    # A label edit is input; the recorded Node leaves out what the binder wrote.
    kube.update("Node", "n1", lambda o: o["metadata"]["labels"].update({"pool": "a"}))
    [_, labelled] = await settled(applied)
    assert labelled["metadata"]["labels"]["pool"] == "a"
    assert BATCH not in labelled["status"]["allocatable"] and RATIO not in labelled["metadata"].get(
        "annotations", {}
    )

    # Someone else sets the same resource (koord-manager, by hand): theirs now, recorded as input.
    kube.update("Node", "n1", lambda o: o["status"]["allocatable"].update({BATCH: "7000"}), manager="kubectl")
    *_, edited = await settled(applied)
    assert len(await applied()) == 3 and edited["status"]["allocatable"][BATCH] == "7000"
    await runner.close()

    # Restarted: the list folds the log and records nothing again.
    again = watch()
    runner = running(again.run)
    await eventually(lambda: again.synced, what="lists after restart")
    assert len(await settled(applied)) == 3
    await runner.close()
