"""The metric families issue 25 asks for: per-GPU allocation (node, index, model, uuid labels) agreeing with the
device-allocator's projection and the web view, GPU cores in a unit, a quota min sample when min is unset, a unit
label on the quota families, ``allot_build_info`` and the process collectors on every process (the relay too), no
``*_created`` series, gang placements counted as scheduling attempts; and every name of a full scrape passes
``promtool check metrics`` (skipped without promtool) and the Prometheus client's own parser."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import ClientSession
from prometheus_client.parser import text_string_to_metric_families

from allot_contracts.envelope import NewEvent
from allot_contracts.events import GangGroupPlaced
from allot_relay.main import Publishing, _serve
from allot_runtime.metrics import Metrics
from allot_runtime.service import Handled
from allot_stack.logtools import cluster_view
from allot_testing.builders import a_quota
from allot_testing.scenario import Scenario
from allot_views.cluster import gpu_rows
from device_allocator.observe import observe_scheduling, placement_metrics
from gang_coordinator.observe import gang_metrics
from quota_manager.observe import quota_metrics

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")


@pytest.fixture(scope="module")
def demo() -> Scenario:
    s = Scenario()
    for example in ("demo/cluster.yaml", "demo/pods.yaml"):
        s.apply_yaml((ROOT / "examples" / example).read_text())
    return s


def scrape(demo: Scenario) -> dict[str, str]:
    """What the three deciding services' /metrics answer after the demo (one registry each)."""
    out = {}
    for service, factory in (
        ("device-allocator", placement_metrics),
        ("quota-manager", quota_metrics),
        ("gang-coordinator", gang_metrics),
    ):
        metrics = Metrics(service, scheduler=service == "device-allocator")
        processor = demo.sim.host(service).processor
        metrics.add(factory, lambda processor=processor: processor)
        metrics.consumed.labels(service, "pod.submitted").inc()
        out[service] = metrics.render().decode()
    return out


def samples(text: str, name: str) -> list[Any]:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_per_gpu_families_agree_with_the_allocator_and_the_web_view(demo: Scenario) -> None:
    text = scrape(demo)["device-allocator"]
    rows = {
        (g.node, str(g.index)): g
        for node in gpu_rows(asyncio.run(cluster_view(demo.sim.store))).values()
        for g in node
    }
    ratio = {
        (s.labels["node"], s.labels["index"]): s for s in samples(text, "allot_gpu_core_allocated_ratio")
    }
    assert set(ratio) == set(rows) and len(rows) == 12
    memory = {
        (s.labels["node"], s.labels["index"]): s.value
        for s in samples(text, "allot_gpu_memory_allocated_bytes")
    }
    for key, g in rows.items():
        sample = ratio[key]
        assert (sample.labels["uuid"], sample.labels["model"]) == (g.uuid, g.model)
        assert sample.value == pytest.approx(g.cores_used / g.cores)
        assert 0 <= sample.value <= 1
        assert memory[key] == g.memory_used
    assert ratio[("gpu-node-a", "2")].value == 0.5  # the HAMi-shared half GPU
    node = {s.labels["node"]: s.value for s in samples(text, "allot_node_gpu_cores_allocated_gpus")}
    assert node["gpu-node-a"] == pytest.approx(sum(ratio[k].value for k in ratio if k[0] == "gpu-node-a"))


def test_a_quota_without_min_has_a_min_of_zero_and_every_quota_sample_names_its_unit() -> None:
    s = Scenario()
    s.apply(a_quota("capped", namespace="capped", max={"cpu": "4", "memory": "8Gi"}))
    metrics = Metrics("quota-manager")
    metrics.add(quota_metrics, lambda: s.sim.host("quota-manager").processor)
    text = metrics.render().decode()
    mins = {
        (x.labels["resource"], x.labels["unit"]): x.value
        for x in samples(text, "allot_quota_min")
        if x.labels["quota"] == "capped"
    }
    assert mins[("cpu", "cores")] == 0 and mins[("memory", "bytes")] == 0
    for family in text_string_to_metric_families(text):
        if family.name.startswith("allot_quota_") and family.name != "allot_quota_pods":
            assert all(x.labels.get("unit") for x in family.samples), family.name


def test_no_created_series_and_build_info_on_every_service() -> None:
    metrics = Metrics("binder")
    metrics.consumed.labels("binder", "pod.placed").inc()
    metrics.processing.labels("binder").observe(0.01)
    text = metrics.render().decode()
    assert "_created" not in text
    (info,) = samples(text, "allot_build_info")
    assert info.value == 1 and info.labels["component"] == "binder" and info.labels["version"]


async def test_the_relay_exports_process_metrics_and_build_info(monkeypatch: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    monkeypatch.setenv("ALLOT_HTTP_PORT", str(port))
    runner = await _serve(Publishing())
    try:
        async with ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    finally:
        await runner.cleanup()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_gc_collections"} <= names
    (info,) = samples(text, "allot_build_info")
    assert info.labels["component"] == "relay"


def test_a_gang_placement_counts_a_scheduling_attempt_per_member(demo: Scenario) -> None:
    metrics = Metrics("device-allocator", scheduler=True, process=False)
    record = next(r for r in demo.sim.store.events if r.type == "reservation.group_resolved")
    placed = next(r for r in demo.sim.store.events if r.type == "gang.group_placed").decode()
    assert isinstance(placed, GangGroupPlaced) and len(placed.members) == 2
    news = [NewEvent(stream_id="gang:x", event=placed, event_id="e1")]
    ctx = SimpleNamespace(metrics=metrics, host=SimpleNamespace(processor=SimpleNamespace(unschedulable={})))
    observe_scheduling(ctx, [Handled(record=record, news=news, seconds=0.01)])  # type: ignore[arg-type]
    value = metrics.registry.get_sample_value(
        "allot_scheduler_schedule_attempts_total", {"result": "scheduled", "profile": "default"}
    )
    assert value == 2


def test_every_name_of_a_full_scrape_is_valid(demo: Scenario) -> None:
    texts = scrape(demo)
    for text in texts.values():  # the client's parser refuses a malformed exposition
        for family in text_string_to_metric_families(text):
            assert family.name.isidentifier() and family.documentation, family.name
    assert "allot_gpu_core_allocated_ratio" in texts["device-allocator"]
    if PROMTOOL is None:
        pytest.skip(
            "promtool not installed (Debian: apt-get install -y prometheus); names checked by the parser only"
        )
    for service, text in texts.items():
        result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        assert result.returncode == 0, f"{service}: {result.stdout}{result.stderr}"
