"""``allot describe node``: Allocated resources as ``kubectl describe node`` prints them and the node's GPUs one by
one, each figure the same as the device-allocator's projection holds (what the per-GPU metrics are read from)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from allot_cli.commands.describe import run_describe
from allot_contracts.quantity import format_quantity
from allot_stack.logtools import projection
from allot_testing.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_767_225_600_000_000 + 90 * 1_000_000


@pytest.fixture(scope="module")
def log() -> Scenario:
    s = Scenario()
    for example in ("demo/cluster.yaml", "demo/pods.yaml"):
        s.apply_yaml((ROOT / "examples" / example).read_text())
    return s


def block(lines: list[str], title: str) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 1
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


@pytest.mark.parametrize("node", ["gpu-node-a", "gpu-node-b"])
def test_allocated_resources_and_gpus_agree_with_the_allocators_projection(log: Scenario, node: str) -> None:
    args = argparse.Namespace(what="node", name=node, namespace=None)
    lines = asyncio.run(run_describe(args, log.sim.store, now=NOW))
    allocator = asyncio.run(projection(log.sim.store, "device-allocator"))
    state = allocator.engine.node_state(node)

    allocated = {row.split()[0]: row.split()[1] for row in block(lines, "Allocated resources:")[3:]}
    assert allocated["cpu"] == format_quantity("cpu", state.requested.get("cpu", 0))
    assert allocated["memory"] == format_quantity("memory", state.requested.get("memory", 0))
    assert lines.index("Allocated resources:") < lines.index("Events:")

    gib = 1 << 30
    gpus = block(lines, "GPUs:")
    assert gpus[0].split()[:6] == ["Index", "UUID", "Model", "Health", "Cores", "Memory"]
    used = state.dev_used.get("gpu", {})
    free = 0
    for device, row in zip(state.inventory.devices["gpu"], gpus[1:], strict=True):
        index, uuid, model, health, cores, memory = row.split()[:6]
        got = used.get(device.minor, {})
        assert (int(index), uuid, model, health) == (device.minor, device.id, "A100", "Healthy")
        assert (
            cores == f"{got.get('koordinator.sh/gpu-core', 0)}/{device.resources['koordinator.sh/gpu-core']}%"
        )
        total = device.resources["koordinator.sh/gpu-memory"]
        assert memory == f"{got.get('koordinator.sh/gpu-memory', 0) / gib:g}/{total / gib:g}Gi"
        free += not got
    assert (
        next(line for line in lines if line.startswith("GPUs:")) == f"GPUs:  ({free} of {len(gpus) - 1} free)"
    )


def test_get_nodes_shows_gpus_allocated_beside_those_reported(log: Scenario) -> None:
    from allot_stack.listing import nodes_rows
    from allot_stack.logtools import cluster_view

    rows = {r["node"]: r for r in nodes_rows(asyncio.run(cluster_view(log.sim.store)), NOW)}
    allocator = asyncio.run(projection(log.sim.store, "device-allocator"))
    for node in ("gpu-node-a", "gpu-node-b"):
        state = allocator.engine.node_state(node)
        in_use = sum(1 for used in state.dev_used.get("gpu", {}).values() if used)
        assert rows[node]["devices"] == f"gpu:{in_use}/{len(state.inventory.devices['gpu'])}"
    assert rows["cpu-node-c"]["devices"] == "-"
