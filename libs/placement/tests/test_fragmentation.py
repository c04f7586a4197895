"""The fragmentation measure and FGD's score: hand-computed cases, exact sigmoid thresholds, typical pods."""

from __future__ import annotations

import math

import pytest

from allot_placement.config import TypicalPod
from allot_placement.fragmentation import FragModel, typical_pods


def tp(cpu: int, count: int, milli: int, weight: int, models: tuple[str, ...] = ()) -> TypicalPod:
    return TypicalPod(cpu_milli=cpu, gpu_count=count, gpu_milli=milli, gpu_models=models, weight=weight)


# A distribution: 2 x (4 cores, 1 x 500m), 1 x (4 cores, 1 GPU), 1 x (8 cores, CPU only).
PODS = (tp(4000, 1, 500, 2), tp(4000, 1, 1000, 1), tp(8000, 0, 0, 1))


@pytest.mark.parametrize(
    ("model", "cpu", "lefts", "expected"),
    [
        (
            "T4",
            32000,
            (1000, 1000),
            2 * 0 + 1 * 0 + 1 * 2000,
        ),  # everything fits: only the CPU-only pod sees frag
        ("T4", 32000, (300, 1000), 2 * 300 + 1 * 300 + 1 * 1300),  # the 300m leftover is too small for both
        ("T4", 32000, (600, 0), 2 * 0 + 1 * 600 + 1 * 600),  # half pods fit; no whole GPU left
        (
            "T4",
            2000,
            (1000, 1000),
            2 * 2000 + 1 * 2000 + 1 * 2000,
        ),  # lack of CPU: every idle GPU is a fragment
        ("T4", 32000, (0, 0), 0),  # no idle GPU, no fragmentation
    ],
    ids=["all-fit", "small-leftover", "no-whole-gpu", "lack-cpu", "full"],
)
def test_node_fragmentation(model: str, cpu: int, lefts: tuple[int, ...], expected: int) -> None:
    assert FragModel(PODS).frag(model, cpu, lefts) == expected


def test_model_constraints_make_gpus_inaccessible() -> None:
    pods = (tp(1000, 1, 1000, 1, ("V100",)),)
    m = FragModel(pods)
    assert m.frag("T4", 8000, (1000,)) == 1000
    assert m.frag("V100", 8000, (1000,)) == 0


@pytest.mark.parametrize("weight", [1, 7, 7766])
def test_sigmoid_score_is_exact(weight: int) -> None:
    m = FragModel((tp(1000, 1, 1000, weight),))
    for delta in range(-9000 * weight, 9000 * weight, 37 * weight + 1):
        x = delta / weight / 1000
        expected = int(100 / (1 + math.exp(-x)))
        got = m.score(delta)
        # floats may disagree only within one ulp of a threshold; the integer thresholds are the exact answer
        if got != expected:
            k = max(got, expected)
            assert abs(x - math.log(k / (100 - k))) < 1e-9
        assert 0 <= got <= 99


def test_typical_pods_cover_the_threshold() -> None:
    shapes = (
        [(4000, 1, 500, ())] * 60
        + [(8000, 0, 0, ())] * 30
        + [(2000, 2, 1000, ())] * 6
        + [(1000, 8, 1000, ())] * 4
    )
    got = typical_pods(shapes, threshold_pct=95)
    assert [(t.cpu_milli, t.gpu_count, t.weight) for t in got] == [(4000, 1, 60), (8000, 0, 30), (2000, 2, 6)]
    assert len(typical_pods(shapes, threshold_pct=100)) == 4
