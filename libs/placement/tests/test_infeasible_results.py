"""Infeasible node results are shared by their reasons: the memo of a large cluster holds hundreds of thousands of
them, nearly all alike, and sharing one object per distinct reasons changes what they say in no way."""

from __future__ import annotations

import pytest

from allot_placement import evaluate
from allot_placement.evaluate import NodeResult, infeasible_result

CPU = ("Insufficient cpu", "InsufficientResource")
MEMORY = ("Insufficient memory", "InsufficientResource")


def test_equal_reasons_give_one_shared_result_equal_to_a_new_one() -> None:
    first = infeasible_result((CPU, MEMORY))
    again = infeasible_result(tuple([CPU, MEMORY]))
    assert again is first
    assert first == NodeResult(feasible=False, reasons=(CPU, MEMORY))
    assert not first.feasible and first.devices == {} and first.score == 0
    assert infeasible_result((MEMORY, CPU)) is not first  # the order of reasons is part of what a result says


def test_the_shared_results_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evaluate, "_INFEASIBLE", {})
    monkeypatch.setattr(evaluate, "_INFEASIBLE_KEPT", 3)
    taints = [(f"node(s) had untolerated taint {{t{i}: x}}", "TaintToleration") for i in range(10)]
    results = [infeasible_result((t,)) for t in taints]
    assert len(evaluate._INFEASIBLE) <= 3
    assert [r.reasons for r in results] == [(t,) for t in taints]
