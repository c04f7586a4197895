"""The demo workload (examples/demo: the cluster and its pods) run through the simulator: a recorded log to serve
views and doors from, without servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def demo_store(directory: Path) -> Any:
    """The simulator's event store after the demo workload (its files joined in ``directory``)."""
    from allot_sim.scenario import run

    joined = directory / "demo.yaml"
    joined.write_text(
        "\n---\n".join((EXAMPLES / "demo" / n).read_text() for n in ("cluster.yaml", "pods.yaml"))
    )
    sim, _, _ = run(str(joined), config={})
    return sim.store
