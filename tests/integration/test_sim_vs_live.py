"""The same scenario through the simulator and through the running services gives identical decisions.

Live: real PostgreSQL and NATS, the relay and the seven services' runtimes (in one process), documents recorded
with `allot apply --wait-each` semantics. Scenarios that move simulated time (AdvanceClock) are simulator-only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from allot_bus.names import BusNames
from allot_cli.commands.decisions import live_decisions
from allot_intake.documents import load_documents
from allot_intake.manifests import Door, to_input
from allot_sim.scenario import load_config, run
from allot_stack.apply import record
from allot_testing.stack import InProcessStack
from allot_views.decisions import decisions

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def scenarios() -> list[Path]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if path.name.endswith((".expected.yaml", ".config.yaml")) or path.parent.name == "demo":
            continue
        if any(d.kind == "AdvanceClock" for d in load_documents(str(path))):
            continue
        found.append(path)
    return found


def demo_scenario(tmp_path: Path) -> Path:
    demo = EXAMPLES / "demo"
    joined = tmp_path / "demo.yaml"
    joined.write_text(
        "\n---\n".join((demo / n).read_text() for n in ("cluster.yaml", "pods.yaml", "finish-training.yaml"))
    )
    return joined


@pytest.mark.parametrize(
    "scenario", [*scenarios(), "demo"], ids=lambda p: p if isinstance(p, str) else p.stem
)
async def test_live_decisions_equal_simulated_ones(
    scenario, tmp_path, database_url, nats_server_url, bus_names
):
    path = demo_scenario(tmp_path) if scenario == "demo" else scenario
    config_file = path.with_name(path.stem + ".config.yaml")
    configs = load_config(str(config_file)) if config_file.exists() else {}
    sim, _, _ = run(str(path), config=configs)
    simulated = decisions(sim.store.events)
    assert simulated, "a scenario with no decisions proves nothing"

    async with InProcessStack(database_url, nats_server_url, BusNames(**bus_names), configs):
        # admitted in order by one door, as `allot apply` does (a PriorityClass earlier in the file resolves)
        verdicts = Door(quotas=set()).check_all(load_documents(str(path)))
        inputs = [to_input(v.document) for v in verdicts if not v.issues]
        await record(database_url, inputs, wait=False, wait_each=True, timeout=60)
    live = await live_decisions(database_url)
    assert live == simulated
