"""`allot report usage` over a live log: the demo workload through the running services (real PostgreSQL and NATS);
the report's totals equal what the recorded placements and releases add up to."""

from __future__ import annotations

import json
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import pytest

from allot_bus.names import BusNames
from allot_cli.commands.report import render
from allot_eventstore.postgres import PostgresEventStore
from allot_intake.documents import load_documents
from allot_intake.manifests import Door, to_input
from allot_stack.apply import record
from allot_stack.usage_window import usage_rows
from allot_testing.stack import InProcessStack

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"
H = 3_600_000_000


async def recorded_gpu_hours(url: str) -> tuple[dict[str, Fraction], int]:
    """GPU-hours per pod straight from the raw placement, deletion and release records, and the last time."""
    store = PostgresEventStore.connect(url)
    try:
        records = [r async for r in store.iterate()]
    finally:
        await store.close()
    until = records[-1].recorded_at
    start: dict[str, tuple[int, Fraction]] = {}
    hours: dict[str, Fraction] = defaultdict(Fraction)

    def stop(pod: str, at: int) -> None:
        if pod in start:
            began, gpus = start.pop(pod)
            hours[pod] += gpus * Fraction(at - began, H)

    for r in records:
        payload = json.loads(r.payload)
        decisions = {}
        if r.type == "pod.placed":
            decisions = {payload["decision"]["pod"]: payload["decision"]}
        elif r.type == "gang.group_placed":
            decisions = payload["decisions"]
        elif r.type in ("pod.deleted", "pod.released"):
            stop(f"{payload['pod']['namespace']}/{payload['pod']['name']}", r.recorded_at)
        for pod, decision in decisions.items():
            devices = decision["allocation"]["devices"].get("gpu", [])
            gpus = sum(Fraction(d["resources"]["koordinator.sh/gpu-core"], 100) for d in devices)
            start[pod] = (r.recorded_at, gpus)
    for pod in list(start):
        stop(pod, until)
    return {pod: h for pod, h in hours.items() if h}, until


async def test_report_totals_equal_the_recorded_placements(
    tmp_path, database_url, nats_server_url, bus_names
):
    scenario = tmp_path / "demo.yaml"
    scenario.write_text(
        "\n---\n".join((DEMO / n).read_text() for n in ("cluster.yaml", "pods.yaml", "finish-training.yaml"))
    )
    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names), {}):
        verdicts = Door(quotas=set()).check_all(load_documents(str(scenario)))
        inputs = [to_input(v.document) for v in verdicts if not v.issues]
        await record(database_url, inputs, wait=False, wait_each=True, timeout=60)

    per_pod, until = await recorded_gpu_hours(database_url)
    expected: dict[str, Fraction] = defaultdict(Fraction)
    for pod, hours in per_pod.items():
        expected[pod.split("/")[0]] += hours
    assert set(expected) == {"research", "serving", "eval"}  # the demo's GPU pods, notebook share included

    window, by_namespace = await usage_rows(database_url, "1d", None, "namespace")
    assert window.until_us == until
    assert {r.key: r.gpu_hours for r in by_namespace if r.gpu_hours} == expected

    _, by_quota = await usage_rows(database_url, "1d", None, "quota")
    quotas = {r.key: r for r in by_quota}
    # research has no min: every whole GPU it used was borrowed; it does not govern the notebook's GPU share
    # (koordinator.sh/gpu-core is not in its max), nor does the default quota govern GPUs: those are own
    research = quotas["research"]
    assert research.gpu_hours == expected["research"]
    assert research.gpu_hours_borrowed == expected["research"] - per_pod["research/notebook-alice"] > 0
    assert quotas["koordinator-default-quota"].gpu_hours_borrowed == 0
    assert quotas["koordinator-default-quota"].gpu_hours == expected["serving"] + expected["eval"]
    assert sum(r.pods for r in by_quota) == 8

    doc = json.loads(render(window, by_quota, "quota", "json"))
    assert [row["quota"] for row in doc["rows"]] == ["koordinator-default-quota", "research"]
