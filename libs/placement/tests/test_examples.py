"""Every scenario in examples/placement runs through the engine and matches its expected outcome file.

The tiny driver mirrors ``allot sim run``: Node → upsert_node, Device → upsert_device, NodeResourceTopology →
upsert_topology, a Pod with spec.nodeName → add_bound_pod, any other Pod → schedule, then assume if Scheduled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_contracts.objects import names as n
from allot_placement import Decision, PlacementConfig, PlacementEngine
from allot_placement.testing import admit, load

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "placement"
SCENARIOS = sorted(
    p for p in EXAMPLES.glob("*.yaml") if not p.name.endswith((".expected.yaml", ".config.yaml"))
)


def run_scenario(path: Path) -> dict[str, Decision]:
    config_path = path.with_name(path.stem + ".config.yaml")
    config = (
        PlacementConfig.from_dict(yaml.safe_load(config_path.read_text())) if config_path.exists() else None
    )
    eng = PlacementEngine(config)
    decisions: dict[str, Decision] = {}
    for doc in yaml.safe_load_all(path.read_text()):
        kind = doc["kind"]
        if (
            kind == "Node"
            or kind == "Device"
            or kind == "NodeResourceTopology"
            or kind == "Pod"
            and doc.get("spec", {}).get("nodeName")
        ):
            load(eng, doc)
        elif kind == "Pod":
            d = eng.schedule(admit(doc))
            decisions[d.pod] = d
            if d.outcome == n.SCHEDULED:
                eng.assume(d)
    return decisions


def _facts(d: Decision) -> dict[str, Any]:
    facts: dict[str, Any] = {"outcome": d.outcome}
    if d.node is not None:
        facts["node"] = d.node
    dev = d.annotations.get(n.ANN_DEVICE_ALLOCATED, {})
    for dtype in ("gpu", "rdma"):
        if dtype in dev:
            facts[dtype] = [e["minor"] for e in dev[dtype]]
    vfs = [vf["busID"] for e in dev.get("rdma", []) for vf in e.get("extension", {}).get("vfs", [])]
    if vfs:
        facts["vfs"] = vfs
    if "gpu" in dev:
        facts["gpu_memory"] = dev["gpu"][0]["resources"].get(n.GPU_MEMORY)
    status = d.annotations.get(n.ANN_RESOURCE_STATUS, {})
    if "cpuset" in status:
        facts["cpuset"] = status["cpuset"]
    if "numaNodeResources" in status:
        facts["numa"] = [z["node"] for z in status["numaNodeResources"]]
    if d.outcome != n.SCHEDULED:
        facts["codes"] = d.codes
        facts["message"] = d.message
    return facts


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_example_matches_expected(path: Path) -> None:
    expected = yaml.safe_load(path.with_name(path.stem + ".expected.yaml").read_text())["pods"]
    decisions = run_scenario(path)
    assert sorted(decisions) == sorted(expected)
    for pod, want in expected.items():
        got = _facts(decisions[pod])
        assert {k: got.get(k) for k in want} == want, f"{pod}: {decisions[pod].to_dict()}"


def test_examples_exist() -> None:
    assert len(SCENARIOS) >= 7
