"""Trying pods off their nodes: the dry runs of preemption (reservation preemption, job-level preemption).

A :class:`Lift` takes placed or bound pods off the engine's nodes and puts them back exactly: their allocations only.
What load-aware scheduling tracks about them stays, as upstream's dry run leaves a victim's usage in its node's
metrics until it is gone. The engine is changed while a lift is in force; ``with lifted(engine) as lift:`` puts back
every pod still lifted when the block ends, so a dry run never leaks into the engine. Pure and single-threaded, like
the engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from allot_contracts.objects import names as n
from allot_placement.decision import Decision
from allot_placement.reserved import allocate, unallocate
from allot_placement.state import Allocation

if TYPE_CHECKING:
    from allot_placement.engine import PlacementEngine

__all__ = ["Lift", "lifted"]


class Lift:
    """Pods taken off their nodes (``remove``), each with the reservation it was placed in, until ``restore``."""

    def __init__(self, engine: PlacementEngine) -> None:
        self.engine = engine
        self._saved: dict[str, tuple[Allocation, str | None]] = {}

    def remove(self, pod: str) -> bool:
        """Take ``pod`` off its node; False when it holds nothing (or is lifted already)."""
        engine = self.engine
        node = engine._pod_node.get(pod)  # noqa: SLF001 - the engine's own bookkeeping, restored exactly
        state = engine.node_state(node) if node is not None else None
        if state is None or pod not in state.pods:
            return False
        held = engine._held_by.get(pod)  # noqa: SLF001
        if held is not None:
            unallocate(engine, pod)
        self._saved[pod] = (state.pods[pod], held)
        engine._pod_node.pop(pod, None)  # noqa: SLF001
        state.remove(pod)
        engine._touch(state.name)  # noqa: SLF001
        return True

    def restore(self, pod: str) -> None:
        """Put a lifted pod back where it was (in its reservation, if it was placed in one)."""
        alloc, held = self._saved.pop(pod)
        self.engine._apply(pod, alloc)  # noqa: SLF001
        if held is not None:
            allocate(
                self.engine,
                Decision(pod=pod, outcome=n.SCHEDULED, allocation=alloc, reservation={"name": held}),
            )

    def node_of(self, pod: str) -> str | None:
        saved = self._saved.get(pod)
        return saved[0].node if saved is not None else None

    def holds(self, pod: str) -> bool:
        return pod in self._saved

    @property
    def pods(self) -> list[str]:
        """The pods lifted now, sorted."""
        return sorted(self._saved)

    def restore_all(self) -> None:
        for pod in list(self._saved):
            self.restore(pod)


@contextmanager
def lifted(engine: PlacementEngine) -> Iterator[Lift]:
    """A :class:`Lift` whose pods are all put back when the block ends, however it ends."""
    lift = Lift(engine)
    try:
        yield lift
    finally:
        lift.restore_all()
