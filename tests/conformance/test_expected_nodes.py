"""How an expected file's ``nodes:`` is compared with what the node side recorded: quantities by their amount,
nested maps (``numa``) entry by entry."""

from __future__ import annotations

from pathlib import Path

import yaml

from allot_testing.conformance import Case, Outcome, check_expected


def _problems(tmp_path: Path, nodes: dict[str, object], recorded: dict[str, object]) -> list[str]:
    (tmp_path / "001-x.yaml").write_text("")
    expected = {"source": "s", "upstream": "u", "nodes": nodes}
    (tmp_path / "001-x.expected.yaml").write_text(yaml.safe_dump(expected))
    return check_expected(Case(tmp_path / "001-x.yaml"), Outcome(nodes={"n1": recorded}))


RECORDED = {
    "allocatable": {"kubernetes.io/batch-memory": "35156250Ki", "cpu": "57600m"},
    "numa": {"0": {"kubernetes.io/batch-cpu": "10000"}},
    "cpu_normalization_ratio": "1.20",
    "degraded": False,
}


def test_a_quantity_matches_its_amount_however_written(tmp_path: Path) -> None:
    want = {
        "allocatable": {"kubernetes.io/batch-memory": 36000000000, "cpu": "57.6"},
        "numa": {"0": {"kubernetes.io/batch-cpu": 10000}},
        "cpu_normalization_ratio": "1.20",
        "degraded": False,
    }
    assert _problems(tmp_path, {"n1": want}, RECORDED) == []


def test_a_different_amount_or_value_is_reported_with_its_path(tmp_path: Path) -> None:
    want = {
        "allocatable": {"kubernetes.io/batch-memory": 36000000001},
        "numa": {"0": {"kubernetes.io/batch-cpu": 9999}, "1": {"kubernetes.io/batch-cpu": 1}},
        "degraded": True,
    }
    assert _problems(tmp_path, {"n1": want}, RECORDED) == [
        "node n1: allocatable.kubernetes.io/batch-memory: '35156250Ki' != 36000000001",
        "node n1: degraded: False != True",
        "node n1: numa.0.kubernetes.io/batch-cpu: '10000' != 9999",
        "node n1: numa.1.kubernetes.io/batch-cpu: None != 1",
    ]
