"""The node agent on the real stack and this machine's real cgroups: a BE pod bound to n1 gets its plan from
qos-enforcer@n1, the agent writes it into a pod cgroup created for the test (cgroup v1, under a dedicated
``--cgroup-root``), records the read-back outcome in PostgreSQL, restores a value changed behind its back and records
the drift; replay re-derives every decision of the instance."""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from allot_bus.names import BusNames
from allot_cli.commands.apply import record
from allot_cli.manifests import Document, to_input
from allot_cli.pipeline import build_instance
from allot_eventstore.postgres import PostgresEventStore
from allot_runtime.processor import Host
from allot_runtime.replay import verify_decisions
from allot_testing.builders import a_node, a_pod
from allot_testing.stack import InProcessStack
from qos_enforcer.adapters.agent import Agent
from qos_enforcer.cgroups.mode import CgroupError, detect
from qos_enforcer.config import AgentSettings, parse_config
from qos_enforcer.processor import QosEnforcer

pytestmark = pytest.mark.integration


def _v1_layout() -> Any:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    try:
        layout = detect()
    except CgroupError as error:
        pytest.skip(f"no cgroup hierarchy: {error}")
    if layout.version != 1 or not {"cpu", "cpuset", "memory"} <= set(layout.v1):
        pytest.skip(f"needs cgroup v1 cpu, cpuset and memory (this machine: {layout.mode})")
    return layout


def _read(path: Path) -> str:
    return path.read_text().strip()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class _Context:
    def __init__(self, stack: InProcessStack, name: str) -> None:
        self.runtime = stack.runtimes[name]
        self.lock = self.runtime.lock
        self.ready = self.runtime.consumer.ready
        self.store = stack.store

    def processor(self) -> QosEnforcer:
        processor = self.runtime.host.processor
        assert isinstance(processor, QosEnforcer)
        return processor


async def _wait_for(
    store: PostgresEventStore, type_: str, count: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = [r.payload_dict() for r in await store.read(types=[type_])]
        if len(found) >= count or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.2)


async def test_the_agent_enforces_on_real_cgroups_and_restores_drift(
    database_url, nats_server_url, bus_names
):
    layout = _v1_layout()
    root = f"allot-test-{uuid.uuid4().hex[:10]}"
    uid = str(uuid.uuid4())
    pod_dir = f"{root}/kubepods/besteffort/pod{uid}"
    created: list[Path] = []
    config: dict[str, Any] = {
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": root,
        "cpusetSharePools": False,
        "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}},
    }
    try:
        for controller in ("cpu", "cpuset", "memory"):
            base = Path(layout.v1[controller])
            for part in Path(pod_dir).parts:
                base = base / part
                base.mkdir()
                created.append(base)
                if controller == "cpuset":
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (base / knob).write_text((base.parent / knob).read_text().strip() or "0")
        node = a_node("n1", cpu="8", memory="32Gi")
        node["status"]["allocatable"]["kubernetes.io/batch-cpu"] = "8000"
        pod = a_pod("batch", uid=uid, labels={"koordinator.sh/qosClass": "BE"})
        pod["spec"]["containers"][0]["resources"] = {"limits": {"kubernetes.io/batch-cpu": "500"}}
        inputs = [to_input(Document(source="t", index=i, body=d)) for i, d in enumerate([node, pod])]
        stack = InProcessStack(
            database_url,
            nats_server_url,
            BusNames(**bus_names),
            configs={"qos-enforcer": config},
            instances={"qos-enforcer": ["n1"]},
        )
        async with stack:
            with tempfile.TemporaryDirectory() as tmp:
                settings = AgentSettings(
                    cdi_spec_dir=f"{tmp}/cdi",
                    poll_seconds=0.1,
                    reconcile_seconds=0.5,
                    resctrl_root=f"{tmp}/no-resctrl",
                )
                agent = Agent("n1", _Context(stack, "qos-enforcer@n1"), parse_config(config), settings)
                stop = asyncio.Event()
                task = asyncio.create_task(agent.run(stop))
                try:
                    await record(database_url, inputs, wait=False, wait_each=True, timeout=60)
                    applied = [a for a in await _wait_for(stack.store, "qos.applied", 2) if a.get("pod")]
                    assert applied and applied[0]["ok"] and applied[0]["revision"] == 1, applied
                    quota = Path(layout.v1["cpu"], pod_dir, "cpu.cfs_quota_us")
                    assert _read(quota) == "50000"
                    assert _read(Path(layout.v1["cpu"], pod_dir, "cpu.idle")) == "1"
                    _write(quota, "-1")  # behind the agent's back
                    [drift] = await _wait_for(stack.store, "qos.drift_corrected")
                    assert [(c["outcome"], c["found"]) for c in drift["corrected"]] == [("applied", "-1")]
                    assert _read(quota) == "50000"
                finally:
                    stop.set()
                    await task
        store = PostgresEventStore.connect(database_url)
        try:
            host = Host(build_instance("qos-enforcer", "qos-enforcer@n1", config), name="qos-enforcer@n1")
            checked, mismatches = await verify_decisions(host, store)
            assert checked > 0 and not mismatches, mismatches[:1]
        finally:
            await store.close()
    finally:
        for path in reversed(created):
            if path.exists():
                path.rmdir()
    assert not any(p.exists() for p in created)
