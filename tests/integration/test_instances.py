"""Per-node instances (DaemonSet pods): node-reporter and qos-enforcer decide for their own node only, under their
own consumer and producer names, and replay re-derives each instance's decisions."""

from __future__ import annotations

import pytest

from allot_bus.names import BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_stack.apply import record
from allot_stack.pipeline import build_instance, instances
from allot_testing.builders import a_node, a_pod
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration


async def test_each_node_instance_decides_for_its_node(database_url, nats_server_url, bus_names):
    docs = [a_node("n1", cpu="4"), a_node("n2", cpu="4")] + [a_pod(f"p{i}", cpu="3") for i in range(2)]
    inputs = [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate(docs)]
    per_node = {"node-reporter": ["n1", "n2"], "qos-enforcer": ["n1", "n2"]}
    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names), instances=per_node):
        await record(database_url, inputs, wait=False, wait_each=True, timeout=60)
    store = PostgresEventStore.connect(database_url)
    try:
        registered = {
            e.payload_dict()["name"]: e.producer for e in await store.read(types=["node.registered"])
        }
        assert registered == {"n1": "node-reporter@n1", "n2": "node-reporter@n2"}
        bound = {
            e.payload_dict()["pod"]["name"]: e.payload_dict()["node"]
            for e in await store.read(types=["pod.bound"])
        }
        qos = {e.payload_dict()["pod"]["name"]: e.producer for e in await store.read(types=["qos.recorded"])}
        assert qos == {pod: f"qos-enforcer@{node}" for pod, node in bound.items()}
        assert set(bound.values()) == {"n1", "n2"}, "3 CPUs each on 4-CPU nodes: one pod per node"
        producers = await store.producers()
        for service in ("node-reporter", "qos-enforcer"):
            names = instances(service, producers)
            assert names == [f"{service}@n1", f"{service}@n2"]
            for name in names:
                checked, mismatches = await verify_decisions(
                    Host(build_instance(service, name), name=name), store
                )
                assert checked > 0 and not mismatches, (name, mismatches[:1])
    finally:
        await store.close()
