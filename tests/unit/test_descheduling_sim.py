"""`allot sim run --config` takes Koordinator's DeschedulerConfiguration as it is (reservation-manager's
``descheduler:``) and refuses a bad one with the field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from allot_intake.errors import InputError
from allot_sim.scenario import load_config, run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "descheduling" / "01-hot-and-idle.yaml"


def descheduler(high_cpu: int, dry_run: bool) -> dict:
    args = {
        "lowThresholds": {"cpu": 30, "memory": 30},
        "highThresholds": {"cpu": high_cpu, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 2},
    }
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "dryRun": dry_run,
        "profiles": [{"name": "dry", "pluginConfig": [{"name": "LowNodeLoad", "args": args}]}],
    }


def test_a_descheduler_configuration_file_configures_reservation_manager(tmp_path: Path) -> None:
    path = tmp_path / "descheduler.yaml"
    path.write_text(yaml.safe_dump(descheduler(60, dry_run=True)))
    configs = load_config(str(path))
    assert list(configs) == ["reservation-manager"]
    sim, _, _ = run(str(EXAMPLE), config=configs)
    rounds = [r.payload_dict() for r in sim.store.events if r.type == "descheduler.round"]
    assert rounds and all(r["profile"] == "dry" and r["dry_run"] for r in rounds)
    assert any(c.get("chosen") for r in rounds for c in r["candidates"])
    assert not [r for r in sim.store.events if r.type.startswith("migration.")]


def test_a_bad_descheduler_configuration_is_refused_with_its_field_path(tmp_path: Path) -> None:
    path = tmp_path / "descheduler.yaml"
    path.write_text(yaml.safe_dump(descheduler(20, dry_run=False)))
    with pytest.raises(
        InputError, match=r"descheduler\.profiles\[0\]\.pluginConfig\[0\]\.args\.lowThresholds\.cpu"
    ):
        load_config(str(path))
