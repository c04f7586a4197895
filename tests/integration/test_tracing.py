"""OpenTelemetry: a pod's trace follows it across the services — context stored with each event, carried in NATS
headers by the relay, continued by the next service."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from allot_bus.names import BusNames
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import Document
from allot_intake.manifests import to_input
from allot_stack.apply import record
from allot_testing.builders import a_node, a_pod
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration


async def test_one_trace_follows_a_pod_through_the_services(database_url, nats_server_url, bus_names):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    names = BusNames(**bus_names)
    docs = [a_node("n1"), a_pod("traced")]
    async with InProcessStack(database_url, nats_server_url, names, tracer=provider.get_tracer("test")):
        await record(
            database_url,
            [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate(docs)],
            wait=False,
            wait_each=True,
            timeout=60,
        )
    spans = {
        (s.name, s.attributes["messaging.consumer.group.name"]): s for s in exporter.get_finished_spans()
    }
    chain = [
        ("pod.submitted", "quota-manager"),
        ("quota.admitted", "reservation-manager"),
        ("reservation.resolved", "device-allocator"),
        ("pod.placed", "binder"),
        ("pod.bound", "qos-enforcer"),
    ]
    hops = [spans[(f"process {names.subject(t)}", consumer)] for t, consumer in chain]
    assert len({span.context.trace_id for span in hops}) == 1, "one trace from admission to binding"
    for parent, child in zip(hops, hops[1:]):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
    first = hops[1]
    assert first.attributes["messaging.system"] == "nats"
    assert first.attributes["messaging.consumer.group.name"] == "reservation-manager"
    store = PostgresEventStore.connect(database_url)
    try:
        placed = (await store.read(types=["pod.placed"]))[0]
        assert placed.metadata["traceparent"].split("-")[1] == format(hops[0].context.trace_id, "032x")
    finally:
        await store.close()
