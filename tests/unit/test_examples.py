"""Every example scenario, run through `allot sim run` (the seven services' decision code over a log), reaches the
outcome its `.expected.yaml` states: placements, device minors, VFs, cpusets, NUMA nodes, reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from allot_cli.decisions import decisions
from allot_cli.sim.run import load_config, run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCENARIOS = sorted(p for p in EXAMPLES.rglob("*.yaml") if p.with_name(p.stem + ".expected.yaml").exists())


def facts(decision: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"outcome": decision["outcome"]}
    if decision["node"] is not None:
        out["node"] = decision["node"]
    allocated = decision["annotations"].get("scheduling.koordinator.sh/device-allocated", {})
    for kind in ("gpu", "rdma"):
        if kind in allocated:
            out[kind] = [entry["minor"] for entry in allocated[kind]]
    vfs = [
        vf["busID"] for entry in allocated.get("rdma", []) for vf in entry.get("extension", {}).get("vfs", [])
    ]
    if vfs:
        out["vfs"] = vfs
    if "gpu" in allocated:
        out["gpu_memory"] = allocated["gpu"][0]["resources"].get("koordinator.sh/gpu-memory")
    status = decision["annotations"].get("scheduling.koordinator.sh/resource-status", {})
    if "cpuset" in status:
        out["cpuset"] = status["cpuset"]
    if "numaNodeResources" in status:
        out["numa"] = [zone["node"] for zone in status["numaNodeResources"]]
    reservation = decision["annotations"].get("scheduling.koordinator.sh/reservation-allocated")
    if reservation:
        out["reservation"] = reservation["name"]
    if decision["outcome"] != "Scheduled":
        out["codes"] = decision["codes"]
        out["message"] = decision["message"]
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_example_reaches_its_expected_outcome(path: Path) -> None:
    config_file = path.with_name(path.stem + ".config.yaml")
    sim, _, _ = run(str(path), config=load_config(str(config_file)) if config_file.exists() else {})
    final = {d["pod"]: d for d in decisions(sim.store.events)}  # the last decision per pod
    expected = yaml.safe_load(path.with_name(path.stem + ".expected.yaml").read_text())["pods"]
    assert sorted(final) == sorted(expected)
    for pod, want in expected.items():
        got = facts(final[pod])
        assert {k: got.get(k) for k in want} == want, pod


def test_there_are_examples() -> None:
    assert len(SCENARIOS) >= 7
