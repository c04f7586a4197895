"""Job-level preemption on the running stack (real PostgreSQL and NATS, the relay and the seven services): the
example's priority-1000 gang evicts the lower-priority batch gang whole, in one recorded decision, the binder deletes
the victims and the trainers start; every service's decisions re-derive from the PostgreSQL log (the check
``allot replay --verify`` makes), the device-allocator's victim choice included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from allot_bus.names import BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import load_documents
from allot_intake.manifests import Door, to_input
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_stack.apply import record
from allot_stack.pipeline import PROCESSORS, build
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gangs" / "02-gang-preemption.yaml"


async def test_a_gang_preempts_a_lower_priority_gang_live_and_replay_verifies_it(
    database_url: str, nats_server_url: str, bus_names: dict[str, str]
) -> None:
    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names), {}):
        verdicts = Door(quotas=set()).check_all(load_documents(str(EXAMPLE)))
        await record(
            database_url,
            [to_input(v.document) for v in verdicts if not v.issues],
            wait=False,
            wait_each=True,
            timeout=60,
        )
    store = PostgresEventStore.connect(database_url)
    try:
        log: list[tuple[str, str, dict[str, Any]]] = [
            (r.type, r.producer, r.payload_dict()) async for r in store.iterate()
        ]
        [decided] = [p for t, _, p in log if t == "preemption.decided"]
        assert decided["job"] == "default/train" and decided["gang"] is True
        assert sorted(v["pod"]["name"] for v in decided["victims"]) == ["batch-0", "batch-1"]
        assert {v["gang"] for v in decided["victims"]} == {"default/batch"}
        deleted = {p["pod"]["name"] for t, producer, p in log if t == "pod.deleted" and producer == "binder"}
        assert deleted == {"batch-0", "batch-1"}
        [placed] = [p for t, _, p in log if t == "gang.group_placed" and p["group"] == "default/train"]
        assert {m: d["node"] for m, d in placed["decisions"].items()} == decided["nominated"]
        bound = {p["pod"]["name"] for t, _, p in log if t == "pod.bound"}
        assert {"train-0", "train-1", "web", "protected"} <= bound
        for name, _ in PROCESSORS:
            checked, mismatches = await verify_decisions(Host(build(name, {})), store)
            assert mismatches == [], (name, mismatches[0].describe())
            if name == "device-allocator":
                assert checked > 0
    finally:
        await store.close()
