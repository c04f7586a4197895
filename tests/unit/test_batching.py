"""A batch decides exactly what the same events decide one by one.

The live services fold a fetched batch event by event and commit all its decisions in one transaction. Here every
scenario of ``examples/`` (and a churn workload with quotas, gangs, deletions and timers) runs through the
simulator, which hands each processor one event at a time; then, for every service, the same triggers are fed to a
:class:`~allot_runtime.service.ProcessorRuntime` in batches of random sizes (and of one), and every output is compared
with the simulator's, field by field: stream, type, event id, causation and payload. The final projections must be
equal too.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from allot_bus.names import BusNames
from allot_contracts.envelope import RecordedEvent
from allot_eventstore.memory import InMemoryEventStore
from allot_runtime.replay import first_difference
from allot_runtime.service import ProcessorRuntime
from allot_sim.scenario import load_config, run
from allot_stack.pipeline import PROCESSORS, build_instance, instances
from allot_testing.builders import a_gpu_device, a_node, a_pod, a_quota
from allot_testing.scenario import Scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SEED = 20261124


def _example_logs() -> dict[str, tuple[list[RecordedEvent], dict[str, dict[str, Any]]]]:
    logs = {}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if path.name.endswith((".expected.yaml", ".config.yaml")) or path.parent.name == "demo":
            continue
        config_file = path.with_name(path.stem + ".config.yaml")
        configs = load_config(str(config_file)) if config_file.exists() else {}
        sim, _, _ = run(str(path), config=configs)
        logs[path.stem] = (list(sim.store.events), configs)
    return logs


def _churn_log() -> tuple[list[RecordedEvent], dict[str, dict[str, Any]]]:
    """Quota waits and admissions, a gang, deletions that free capacity (requeues), and time passing."""
    s = Scenario()
    s.apply(*[d for i in range(3) for d in (a_node(f"n{i}", gpus=4), a_gpu_device(f"n{i}", gpus=4))])
    s.apply(a_quota("team", namespace="team", max={"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "6"}))
    gang = {"gang.scheduling.koordinator.sh/name": "job", "gang.scheduling.koordinator.sh/min-available": "3"}
    for i in range(10):
        s.apply(a_pod(f"p{i}", namespace="team", gpus=1 + i % 2))
    s.apply(*[a_pod(f"g{i}", gpus=1, annotations=gang) for i in range(3)])
    for i in range(0, 10, 3):
        s.delete("Pod", f"p{i}", "team")
    s.advance(30)
    s.apply(*[a_pod(f"late{i}", namespace="team", gpus=2) for i in range(4)])
    s.delete("Pod", "g0")
    s.advance(120)
    return list(s.events), {}


LOGS = {**_example_logs(), "churn": _churn_log()}


def _view(records: list[RecordedEvent]) -> list[dict[str, Any]]:
    return [
        {
            "stream": r.stream_id,
            "type": r.type,
            "id": r.event_id,
            "cause": r.causation_id,
            "payload": r.payload_dict(),
        }
        for r in records
    ]


def _batches(items: list[RecordedEvent], rng: random.Random | None) -> list[list[RecordedEvent]]:
    out, start = [], 0
    while start < len(items):
        size = 1 if rng is None else rng.choice([1, 2, 3, 5, 8, 13, 40, 500])
        out.append(items[start : start + size])
        start += size
    return out


async def _fold_in_batches(
    service: str, name: str, config: dict[str, Any], triggers: list[RecordedEvent], rng: random.Random | None
) -> tuple[list[RecordedEvent], str]:
    store = InMemoryEventStore()
    nc = SimpleNamespace(jetstream=lambda: None)  # the runtime's consumer is never started here
    runtime = ProcessorRuntime(
        name=name, factory=lambda: build_instance(service, name, config), store=store, nc=nc, names=BusNames()
    )
    for batch in _batches(triggers, rng):
        await runtime.handle(batch)
    return list(store.events), runtime.host.digest()


@pytest.mark.parametrize("log", sorted(LOGS))
def test_batches_decide_exactly_what_one_event_at_a_time_decides(log: str) -> None:
    events, configs = LOGS[log]
    producers = {e.producer for e in events}
    compared = 0
    for service, _ in PROCESSORS:
        for name in instances(service, producers):
            config = configs.get(service, {})
            probe = build_instance(service, name, config)
            triggers = [e for e in events if e.type in probe.interests and e.producer != name]
            recorded = [e for e in events if e.producer == name and e.causation_id is not None]
            one_by_one, digest_one = asyncio.run(_fold_in_batches(service, name, config, triggers, None))
            batched, digest_batched = asyncio.run(
                _fold_in_batches(service, name, config, triggers, random.Random(f"{SEED}/{log}/{name}"))
            )
            assert first_difference(_view(recorded), _view(one_by_one), "outputs") is None, (
                f"{name}: the runtime one event at a time differs from the simulator"
            )
            difference = first_difference(_view(one_by_one), _view(batched), "outputs")
            assert difference is None, f"{name}: batched decisions differ at {difference}"
            assert digest_one == digest_batched, f"{name}: the projections differ after batching"
            compared += len(recorded)
    assert compared > 0, "a log without decisions proves nothing"
