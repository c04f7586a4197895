"""A fold's quick test of its event types answers as ``isinstance`` does, for subclasses too."""

from __future__ import annotations

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
