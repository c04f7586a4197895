"""A fold's quick test of its event types answers as ``isinstance`` does, for subclasses too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import device_allocator
from allot_contracts.events import ObjectRef, PodDeleted, PodPlaced, PodSubmitted
from device_allocator.folding import folds_any


class _Base:
    pass


class _Derived(_Base):
    pass


def test_folds_any_is_isinstance_remembered_by_type() -> None:
    test = folds_any(PodDeleted, _Base)
    deleted = PodDeleted(pod=ObjectRef(namespace="a", name="b"))
    assert test(deleted) and test(deleted)  # the second answer is the remembered one
    assert test(_Derived()) and test(_Base())
    assert not test(object()) and not test(1)
    assert not folds_any(PodPlaced, PodSubmitted)(deleted)


_SRC = Path(device_allocator.__file__).parent
# (module, function, the module defining its quick test, the test's name)
_FOLDS = [
    ("inventory.py", "fold_inventory", "inventory.py", "_FOLDED"),
    ("nodes.py", "evolve", "nodes.py", "_FOLDED"),
    ("nominations.py", "evolve", "nominations.py", "_FOLDED"),
    ("reservations.py", "evolve", "reservations.py", "_FOLDED"),
    ("processor.py", "_evolve_pod", "folding.py", "POD_FOLDS"),
    ("processor.py", "_evolve_group", "folding.py", "GROUP_FOLDS"),
    ("processor.py", "_evolve_outcome", "folding.py", "OUTCOME_FOLDS"),
    ("processor.py", "decide", "folding.py", "DECIDES"),
]


@pytest.mark.parametrize(("module", "function", "defined_in", "test_name"), _FOLDS)
def test_a_folds_quick_test_names_exactly_the_classes_of_its_patterns(
    module: str, function: str, defined_in: str, test_name: str
) -> None:
    tree = ast.parse((_SRC / module).read_text())
    (func,) = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == function]
    patterns = {ast.unparse(m.cls) for m in ast.walk(func) if isinstance(m, ast.MatchClass)}
    (call,) = [
        a.value
        for a in ast.parse((_SRC / defined_in).read_text()).body
        if isinstance(a, ast.Assign)
        and ast.unparse(a.targets[0]) == test_name
        and isinstance(a.value, ast.Call)
    ]
    assert {arg.attr if isinstance(arg, ast.Attribute) else ast.unparse(arg) for arg in call.args} == patterns
    assert test_name in ast.unparse(func.body[:3])  # the function asks it before its match
