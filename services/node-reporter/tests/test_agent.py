"""node-reporter's agent over an in-memory log: discovery recorded once and again only on change (a GPU's XID marks
that GPU alone unhealthy), heartbeats, sampled NodeMetrics the processor accepts, this machine's own /sys, and the
configuration's field paths."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from allot_contracts.errors import InvalidInput
from allot_contracts.events.nodeside import NodeMetricReported
from allot_eventstore.memory import InMemoryEventStore
from node_reporter.adapters.agent import (
    Agent,
    AgentConfig,
    is_critical_xid,
    mark_unhealthy,
    parse_agent_config,
    xid_watch,
)
from node_reporter.discovery import decode_answer
from node_reporter.metrics.report import nodemetric_decision
from node_reporter.metrics.testing import write_cgroups
from node_reporter.processor import NodeReporter

MACHINES = Path(__file__).parent / "fixtures" / "machines"
GiB = 1024**3
PODS = {"aaaa-1": ("guaranteed", 10**9, 2 * GiB, 0), "bbbb-2": ("besteffort", 10**8, GiB, 0)}


def ctx(node: str) -> Any:
    return SimpleNamespace(
        store=InMemoryEventStore(),
        settings=SimpleNamespace(instance=node),
        runtime=SimpleNamespace(name=f"node-reporter@{node}"),
    )


async def run_for(coro: Any, stop: asyncio.Event, seconds: float) -> None:
    task = asyncio.create_task(coro)
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(task, timeout=5)


def decide_all(node: str, records: list[Any]) -> list[Any]:
    processor = NodeReporter({"scope": {"node": node}})
    out = []
    for r in records:
        event = r.decode()
        processor.evolve(event, at=r.recorded_at, own=False)
        for emit in processor.decide(event, at=r.recorded_at):
            processor.evolve(emit.event, at=r.recorded_at, own=True)
            out.append(emit.event)
    return out


async def test_discovery_records_the_machine_once_and_a_critical_xid_marks_one_gpu() -> None:
    c = ctx("workstation")
    root = str(MACHINES / "workstation")
    answer = decode_answer((MACHINES / "workstation" / "nvml.json").read_bytes())
    agent = Agent(
        c, AgentConfig(sys_root=root, proc_root=root, discovery_interval_s=0.05), nvml=lambda: answer
    )
    stop = asyncio.Event()
    await run_for(agent.discovery_loop(stop), stop, 0.3)
    types = [r.type for r in c.store.events]
    assert types == ["device.applied", "topology.applied"]  # several passes, one recording each
    assert {r.producer for r in c.store.events} == {"node-reporter@workstation.agent"}
    decided = decide_all("workstation", c.store.events)
    assert [type(e).__name__ for e in decided] == ["DevicesReported", "TopologyReported"]
    gpus = [d for d in c.store.events[0].payload_dict()["manifest"]["spec"]["devices"] if d["type"] == "gpu"]
    target = gpus[1]["id"]
    # a critical XID on one GPU: recorded again at once with that GPU (only) unhealthy
    agent2 = Agent(
        c, AgentConfig(sys_root=root, proc_root=root, discovery_interval_s=60), nvml=lambda: answer
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent2.discovery_loop(stop))
    await asyncio.sleep(0.2)
    assert len(c.store.events) == 2  # read back from the log: nothing new to record after a restart
    agent2.on_xid(target, 13)  # an application's fault: ignored
    agent2.on_xid(target, 79)  # fell off the bus
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(task, timeout=5)
    assert [r.type for r in c.store.events] == ["device.applied", "topology.applied", "device.applied"]

    def health(record: Any) -> dict[str, bool]:
        return {
            d["id"]: d["health"]
            for d in record.payload_dict()["manifest"]["spec"]["devices"]
            if d["type"] == "gpu"
        }

    before, after = health(c.store.events[0]), health(c.store.events[-1])
    assert before[target] is True and after[target] is False
    assert {k for k in before if before[k] != after[k]} == {target}  # that GPU alone changed
    assert sum(1 for h in before.values() if not h) == 1  # NVML's own verdict (rows pending a reset) stands


async def test_heartbeats_are_recorded_at_the_interval() -> None:
    c = ctx("n1")
    stop = asyncio.Event()
    await run_for(Agent(c, AgentConfig(heartbeat_interval_s=0.05)).heartbeat_loop(stop), stop, 0.28)
    beats = [r for r in c.store.events if r.type == "node.heartbeat"]
    assert 4 <= len(beats) <= 7
    assert beats[0].payload_dict()["name"] == "n1" and beats[0].stream_id == "node:n1"


async def test_sampled_metrics_are_recorded_and_accepted(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    write_cgroups(cg, PODS, version=1)
    c = ctx("n1")
    config = AgentConfig(
        cgroup_root=str(cg),
        sample_interval_s=0.02,
        report_interval_s=0.15,
        aggregate_duration_s=1,
        aggregate_durations_s=(1,),
    )
    stop = asyncio.Event()
    await run_for(Agent(c, config).metrics_loop(stop), stop, 0.5)
    reports = [r for r in c.store.events if r.type == "nodemetric.applied"]
    assert 2 <= len(reports) <= 4
    got = nodemetric_decision("n1", reports[-1].payload_dict()["manifest"], reports[-1].recorded_at)
    assert isinstance(got, NodeMetricReported) and got.metric is not None
    assert {p.uid for p in got.metric.pods} == set(PODS)
    assert got.metric.node_usage["memory"] > 0


async def test_this_machine_is_discovered_into_a_valid_topology() -> None:
    c = ctx("this-machine")
    stop = asyncio.Event()
    await run_for(Agent(c, AgentConfig(discovery_interval_s=60)).discovery_loop(stop), stop, 1.0)
    decided = decide_all("this-machine", c.store.events)
    kinds = {type(e).__name__ for e in decided}
    assert "TopologyReported" in kinds, decided
    assert "DevicesReported" in kinds


def test_xid_classification_and_marking() -> None:
    assert not is_critical_xid(13) and not is_critical_xid(43) and is_critical_xid(48) and is_critical_xid(79)
    device = {
        "spec": {
            "devices": [
                {"type": "gpu", "id": "a", "health": True},
                {"type": "rdma", "id": "a", "health": True},
            ]
        }
    }
    marked = mark_unhealthy(device, {"a"})
    assert [d["health"] for d in marked["spec"]["devices"]] == [False, True]
    assert device["spec"]["devices"][0]["health"] is True


def test_the_xid_watcher_maps_nvml_events_to_gpus() -> None:
    import threading

    class Err(Exception):
        pass

    class Timeout(Err):
        pass

    events = [SimpleNamespace(eventType=8, device="h1", eventData=79), None]
    stop = threading.Event()
    seen: list[tuple[str, int]] = []

    def wait(_: Any, __: int) -> Any:
        if events:
            e = events.pop(0)
            if e is not None:
                return e
        stop.set()
        raise Timeout()

    fake = SimpleNamespace(
        NVMLError=Err,
        NVMLError_Timeout=Timeout,
        nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlEventSetCreate=lambda: "set",
        nvmlEventSetFree=lambda _: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}".encode(),
        nvmlDeviceRegisterEvents=lambda *_: None,
        nvmlEventSetWait=wait,
    )
    assert xid_watch(lambda u, x: seen.append((u, x)), stop, fake) == "stopped"
    assert seen == [("GPU-h1", 79)]


def test_real_nvml_xid_watch_or_a_clear_reason() -> None:
    import threading

    stop = threading.Event()
    stop.set()
    why = xid_watch(lambda u, x: None, stop)
    if why == "stopped":
        return  # a GPU machine: the watcher ran
    assert "NVML" in why or "nvidia-ml-py" in why, why


def test_agent_configuration_errors_name_their_field() -> None:
    config = parse_agent_config(
        {"sampleIntervalSeconds": 5, "aggregateDurations": ["1m", "5m"]},
        environ={"ALLOT_AGENT_SYS_ROOT": "/host"},
    )
    assert (
        config.sample_interval_s == 5
        and config.aggregate_durations_s == (60, 300)
        and config.sys_root == "/host"
    )
    with pytest.raises(InvalidInput) as err:
        parse_agent_config({"sampleInterval": 1, "heartbeatIntervalSeconds": 0, "metrics": "yes"}, environ={})
    assert "agent.sampleInterval" in str(err.value) and "agent.heartbeatIntervalSeconds" in str(err.value)
    assert "agent.metrics" in str(err.value)
