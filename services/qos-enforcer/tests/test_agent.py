"""The node agent over a log: a new plan revision is applied and recorded with every write's outcome, a reconcile
corrects drift and records it, a restart re-checks instead of re-recording, a plan removed takes its CDI specs with
it, dry run prints and records nothing, and usage samples are recorded when they move."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from allot_contracts.envelope import NewEvent, derived_event_id, stream_id
from allot_contracts.events import (
    DevicesReported,
    Event,
    NodeRegistered,
    ObjectRef,
    PodBound,
    PodDeleted,
    PodSubmitted,
)
from allot_contracts.objects.inventory import parse_device_cr, parse_node
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.processor import Host
from allot_testing.builders import a_gpu_device, a_node, a_pod
from qos_enforcer.adapters.agent import Agent, producer_for
from qos_enforcer.cgroups.mode import CgroupLayout, CgroupMode
from qos_enforcer.config import AgentSettings, HamiPaths, parse_config
from qos_enforcer.enforce import Enforcer
from qos_enforcer.processor import QosEnforcer

UID = "0f1e2d3c-1111-2222-3333-444455556666"


def _typed(cls: type, field: str, value: Any) -> dict[str, Any]:
    """The typed object read at the door, when the event contract carries one."""
    return {field: value} if field in cls.__struct_fields__ else {}


def node_registered(manifest: dict[str, Any]) -> NodeRegistered:
    info, _ = parse_node(manifest)
    return NodeRegistered(
        name=manifest["metadata"]["name"],
        manifest=manifest,
        capacity={},
        **_typed(NodeRegistered, "node", info),
    )


def devices_reported(manifest: dict[str, Any]) -> DevicesReported:
    _, inventory, _ = parse_device_cr(manifest)
    return DevicesReported(
        name=manifest["metadata"]["name"],
        manifest=manifest,
        devices={},
        **_typed(DevicesReported, "inventory", inventory),
    )


HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}
POD = f"kubepods/besteffort/pod{UID}"
CONFIG: dict[str, Any] = {
    "scope": {"node": "n1"},
    "cgroupDriver": "cgroupfs",
    "cpusetSharePools": False,
    "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}},
}


class Stack:
    """A log, the n1 instance deciding on it, and what the agent needs from the running service."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = config or CONFIG
        self.store = InMemoryEventStore()
        self.host = Host(QosEnforcer(self.config), name="qos-enforcer@n1")
        self.lock = asyncio.Lock()
        self.ready = asyncio.Event()
        self.ready.set()
        self.position = 0
        self.count = 0

    def processor(self) -> QosEnforcer:
        processor = self.host.processor
        assert isinstance(processor, QosEnforcer)
        return processor

    async def put(self, event: Event, producer: str = "api") -> None:
        self.count += 1
        new = NewEvent(
            stream_id=stream_id("t", str(self.count)),
            event=event,
            event_id=derived_event_id(producer, str(self.count), 0),
        )
        await self.store.append([new], producer=producer)
        await self.pump()

    async def pump(self) -> None:
        """Let the processor consume everything appended since it last looked (the agent's records included)."""
        while True:
            records = await self.store.read(after=self.position)
            if not records:
                return
            for record in records:
                self.position = record.position
                if self.host.wants(record):
                    news = self.host.step(record)
                    if news:
                        await self.store.append(news, producer=self.host.name)

    async def recorded(self, type_: str) -> list[dict[str, Any]]:
        return [r.payload_dict() for r in await self.store.read(types=[type_])]


def v2_tree(root: Path) -> CgroupLayout:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory cpuset")
    pod = root / POD
    pod.mkdir(parents=True)
    for name, value in {
        "cpu.max": "max 100000",
        "cpu.weight": "1",
        "cpu.idle": "0",
        "memory.max": "max",
        "cgroup.procs": "",
    }.items():
        (pod / name).write_text(value)
    return CgroupLayout(mode=CgroupMode.UNIFIED, root=str(root), unified=str(root))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_agent(
    stack: Stack,
    tmp: Path,
    *,
    dry_run: bool = False,
    out: io.StringIO | None = None,
    clock: Clock | None = None,
    settings: AgentSettings | None = None,
) -> Agent:
    config = parse_config(stack.config)
    hami = HamiPaths(
        libvgpu_host_path=str(tmp / "libvgpu.so"),
        cache_host_dir=str(tmp / "cache"),
        lock_host_dir=str(tmp / "lock"),
        container_dir="/usr/local/vgpu",
    )
    layout = (
        v2_tree(tmp / "cgroup")
        if not (tmp / "cgroup").exists()
        else CgroupLayout(mode=CgroupMode.UNIFIED, root=str(tmp / "cgroup"), unified=str(tmp / "cgroup"))
    )
    enforcer = Enforcer(layout=layout, base="kubepods", cdi_dir=str(tmp / "cdi"), hami=hami, dry_run=dry_run)
    return Agent(
        "n1",
        stack,
        config,
        settings or AgentSettings(dry_run=dry_run, reconcile_seconds=30),
        enforcer=enforcer,
        out=out,
        clock=clock or Clock(),
    )


async def bind_be_gpu_pod(stack: Stack) -> None:
    await stack.put(node_registered(a_node("n1", labels=HAMI)), "node-reporter@n1")
    await stack.put(devices_reported(a_gpu_device("n1", gpus=1)), "node-reporter@n1")
    manifest = a_pod(
        "be",
        uid=UID,
        labels={"koordinator.sh/qosClass": "BE", **HAMI},
        extra={"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
    )
    manifest["spec"]["containers"][0]["resources"] = {
        "requests": {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"},
        "limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
    }
    ref = ObjectRef(namespace="default", name="be")
    await stack.put(PodSubmitted(pod=ref, uid=UID, manifest=manifest))
    allocated = {
        "scheduling.koordinator.sh/device-allocated": json.dumps(
            {
                "gpu": [
                    {
                        "minor": 0,
                        "resources": {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "8Gi"},
                    }
                ]
            }
        )
    }
    await stack.put(PodBound(pod=ref, uid=UID, attempt=1, node="n1", annotations=allocated), "binder")


async def test_a_plan_is_applied_recorded_reconciled_and_survives_a_restart(tmp_path: Path):
    stack = Stack()
    await bind_be_gpu_pod(stack)
    clock = Clock()
    agent = make_agent(stack, tmp_path, clock=clock)
    await agent.step()
    await stack.pump()
    [applied] = [a for a in await stack.recorded("qos.applied") if a.get("pod")]
    [node_applied] = [a for a in await stack.recorded("qos.applied") if not a.get("pod")]
    assert node_applied["revision"] == 1
    assert node_applied["results"][0]["target"].endswith("besteffort/cpu.idle")
    assert (
        applied["pod"]["name"] == "be"
        and applied["uid"] == UID
        and applied["revision"] == 1
        and applied["ok"]
    )
    by_target = {r["target"].rsplit("/", 1)[-1]: r["outcome"] for r in applied["results"]}
    assert by_target["cpu.idle"] == by_target["cpu.max"] == by_target["memory.max"] == "applied"
    assert by_target[f"allot.dev-gpu_{UID}_main.json"] == "applied"
    assert (tmp_path / "cgroup" / POD / "cpu.max").read_text() == "50000 100000"
    assert stack.processor().desired("n1")["default/be"][3] == 1  # the processor knows it was applied
    assert {r.producer for r in await stack.store.read(types=["qos.applied"])} == {producer_for("n1")}

    # nothing new: nothing recorded; drift behind its back: corrected at the next reconcile and recorded
    await agent.step()
    assert len(await stack.recorded("qos.applied")) == 2
    (tmp_path / "cgroup" / POD / "cpu.max").write_text("max 100000")
    clock.now += 31
    await agent.step()
    [drift] = await stack.recorded("qos.drift_corrected")
    assert [(c["outcome"], c["found"], c["value"]) for c in drift["corrected"]] == [
        ("applied", "max 100000", "50000 100000")
    ]
    assert (tmp_path / "cgroup" / POD / "cpu.max").read_text() == "50000 100000"
    reconciled = await stack.recorded("qos.reconciled")
    assert reconciled[-1]["drifted"] == 1 and reconciled[-1]["plans"] == 1

    # a restarted agent re-checks what the log says was applied instead of recording it again
    (tmp_path / "cgroup" / POD / "cpu.idle").write_text("0")
    restarted = make_agent(stack, tmp_path, clock=clock)
    await restarted.step()
    assert len(await stack.recorded("qos.applied")) == 2
    drifts = await stack.recorded("qos.drift_corrected")
    assert len(drifts) == 2 and drifts[-1]["corrected"][0]["target"].endswith("cpu.idle")

    # the pod goes: its CDI spec goes with it
    spec = tmp_path / "cdi" / f"allot.dev-gpu_{UID}_main.json"
    assert spec.exists()
    await stack.put(PodDeleted(pod=ObjectRef(namespace="default", name="be"), uid=UID))
    await restarted.step()
    assert not spec.exists()


async def test_dry_run_prints_the_plan_and_records_nothing(tmp_path: Path):
    stack = Stack()
    await bind_be_gpu_pod(stack)
    out = io.StringIO()
    await make_agent(stack, tmp_path, dry_run=True, out=out).step()
    assert await stack.recorded("qos.applied") == [] and await stack.recorded("qos.reconciled") == []
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [pod] = [line for line in lines if line["target"] == "default/be"]
    assert {w["outcome"] for w in pod["writes"]} == {"planned"}
    assert any(w["target"].endswith("cpu.max") and w["value"] == "50000 100000" for w in pod["writes"])
    assert (tmp_path / "cgroup" / POD / "cpu.max").read_text() == "max 100000"
    assert not (tmp_path / "cdi").exists()


async def test_usage_is_sampled_and_recorded_when_it_moves(tmp_path: Path):
    stack = Stack({**CONFIG, "resourceUsedThresholdWithBE": {"enable": True}})
    await bind_be_gpu_pod(stack)
    proc = tmp_path / "proc"
    proc.mkdir()

    def machine(busy: int, idle: int, available_kib: int) -> None:
        (proc / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0\n")
        (proc / "meminfo").write_text(
            f"MemTotal: 8388608 kB\nMemFree: 1 kB\nMemAvailable: {available_kib} kB\n"
        )

    pod = tmp_path / "cgroup" / POD
    clock = Clock()
    settings = AgentSettings(
        proc_root=str(proc), sample_seconds=1, sample_record_seconds=60, sample_change_percent=5
    )
    agent = make_agent(stack, tmp_path, clock=clock, settings=settings)
    agent.sampler.cpus = 4
    (pod / "cpu.stat").write_text("usage_usec 1000000\n")
    (pod / "memory.current").write_text(str(600 << 20))
    (pod / "memory.stat").write_text(f"anon 1\ninactive_file {100 << 20}\n")
    machine(100, 300, 4194304)
    await agent.step()  # the first reading only starts the window
    assert await stack.recorded("qos.usage_sampled") == []
    clock.now += 2
    (pod / "cpu.stat").write_text("usage_usec 2000000\n")
    machine(200, 400, 4194304)  # 100 busy of 200 jiffies on 4 CPUs: 2000m
    await agent.step()
    [sample] = await stack.recorded("qos.usage_sampled")
    assert (sample["cpu_capacity_milli"], sample["cpu_used_milli"]) == (4000, 2000)
    assert sample["memory_used_bytes"] == 4 << 30 and sample["pods"]["default/be"] == {
        "cpu_milli": 500,
        "memory_bytes": 500 << 20,
    }
    clock.now += 2
    (pod / "cpu.stat").write_text("usage_usec 3000000\n")
    machine(300, 500, 4194304)  # the same usage: not recorded again before sampleRecordSeconds
    await agent.step()
    assert len(await stack.recorded("qos.usage_sampled")) == 1
    await stack.pump()
    assert (await stack.recorded("qos.node_plan_recorded"))[-1]["basis"]["non_be_used_milli"] == 0


async def test_a_plan_whose_cgroup_is_not_there_yet_is_retried_and_recorded_when_it_holds(tmp_path: Path):
    stack = Stack()
    await bind_be_gpu_pod(stack)
    clock = Clock()
    agent = make_agent(stack, tmp_path, clock=clock, settings=AgentSettings(retry_seconds=5))
    pod = tmp_path / "cgroup" / POD
    for name in list(pod.iterdir()):
        name.unlink()
    pod.rmdir()  # the kubelet has not created the pod's cgroup yet
    await agent.step()
    [first] = [a for a in await stack.recorded("qos.applied") if a.get("pod")]
    assert not first["ok"] and {r["outcome"] for r in first["results"] if r["kind"] == "cgroup"} == {
        "missing"
    }
    clock.now += 1
    await agent.step()  # not yet due: nothing new
    clock.now += 5
    await agent.step()  # due, still missing: the same outcome is not recorded again
    assert len([a for a in await stack.recorded("qos.applied") if a.get("pod")]) == 1
    v2_tree(tmp_path / "fresh")  # a tree with the pod cgroup, moved into place as the kubelet would create it
    (tmp_path / "fresh" / POD).rename(pod)
    clock.now += 5
    await agent.step()
    retried = [a for a in await stack.recorded("qos.applied") if a.get("pod")]
    assert [(a["trigger"], a["ok"]) for a in retried] == [("plan", False), ("retry", True)]
    clock.now += 5
    await agent.step()
    assert len([a for a in await stack.recorded("qos.applied") if a.get("pod")]) == 2


def test_agent_settings_from_the_config_and_the_environment():
    from allot_contracts.errors import InvalidConfig
    from qos_enforcer.config import agent_settings

    settings = agent_settings({"agent": {"reconcileSeconds": 10, "cdiSpecDir": "/etc/cdi"}}, {})
    assert (settings.enabled, settings.dry_run, settings.reconcile_seconds, settings.cdi_spec_dir) == (
        True,
        False,
        10,
        "/etc/cdi",
    )
    assert agent_settings({}, {"ALLOT_QOS_DRY_RUN": "1"}).dry_run
    assert not agent_settings({"agent": {"enabled": True}}, {"ALLOT_QOS_AGENT": "off"}).enabled
    assert agent_settings({"agent": {"enabled": False}}, {"ALLOT_QOS_AGENT": "on"}).enabled
    for bad in ({"agent": {"reconcileSeconds": "soon"}}, {"agent": {"colour": 1}}):
        try:
            agent_settings(bad, {})
        except InvalidConfig as error:
            assert error.issues[0].path.startswith("agent")
        else:
            raise AssertionError(f"{bad} accepted")
    try:
        agent_settings({}, {"ALLOT_QOS_AGENT": "maybe"})
    except InvalidConfig as error:
        assert [(i.path, i.message) for i in error.issues] == [
            ("ALLOT_QOS_AGENT", "must be on or off, got 'maybe'")
        ]
    else:
        raise AssertionError("ALLOT_QOS_AGENT=maybe accepted")
