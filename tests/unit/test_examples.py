"""Every example scenario, run through `allot sim run` (the seven services' decision code over a log), reaches the
outcome its `.expected.yaml` states: placements, device minors, VFs, cpusets, NUMA nodes, reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from allot_sim.scenario import load_config, run
from allot_testing.conformance import decision_facts
from allot_views.decisions import decisions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCENARIOS = sorted(p for p in EXAMPLES.rglob("*.yaml") if p.with_name(p.stem + ".expected.yaml").exists())


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_example_reaches_its_expected_outcome(path: Path) -> None:
    config_file = path.with_name(path.stem + ".config.yaml")
    sim, _, _ = run(str(path), config=load_config(str(config_file)) if config_file.exists() else {})
    final = {d["pod"]: d for d in decisions(sim.store.events)}  # the last decision per pod
    expected = yaml.safe_load(path.with_name(path.stem + ".expected.yaml").read_text())["pods"]
    assert sorted(final) == sorted(expected)
    for pod, want in expected.items():
        got = decision_facts(final[pod])
        assert {k: got.get(k) for k in want} == want, pod


def test_there_are_examples() -> None:
    assert len(SCENARIOS) >= 7
