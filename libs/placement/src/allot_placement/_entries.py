"""The engine's node entries, and the view of them a pod that reads per-node identities gets.

An entry is what the engine's resolver reads of a node: its state, its content signature (shared by identical
machines), its device signature, its label id and whether it carries taints. Most pods read only a node's content, so
identical machines share every cached result; a pod whose filters read the node's device ids (HAMi's UUID selectors)
or whose GPU policy reads its name sees the entries through ``WithIdentity``, where those identities join both
signatures, so its results are kept per node. The common path pays nothing for the rare one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from allot_placement.config import PlacementConfig
from allot_placement.device_view import device_ids
from allot_placement.evaluate import GpuPolicy, NodeResult, evaluate, static_filter
from allot_placement.pod import PodSpec
from allot_placement.state import NodeState

__all__ = ["Entries", "Entry", "WithIdentity", "fresh_resolver"]

Entry = tuple[
    NodeState, int, int, int, bool
]  # state, node signature, device signature, label id, restrictive


class Entries(Protocol):
    def get(self, name: str) -> Entry | None: ...


class WithIdentity:
    """The entries with the pod's per-node identities in their signatures (see the module docstring)."""

    __slots__ = ("entries", "ids", "intern", "named")

    def __init__(
        self, entries: dict[str, Entry], intern: Callable[[Any], int], *, ids: bool, named: bool
    ) -> None:
        self.entries, self.intern, self.ids, self.named = entries, intern, ids, named

    def get(self, name: str) -> Entry | None:
        entry = self.entries.get(name)
        if entry is None:
            return None
        state, sig, dev_sig, label_id, restrictive = entry
        ident = (device_ids(state.inventory) if self.ids else None, name if self.named else None)
        return state, self.intern((sig, ident)), self.intern((dev_sig, ident)), label_id, restrictive


def fresh_resolver(
    entries: dict[str, Entry],
    spec: PodSpec,
    config: PlacementConfig,
    policy: GpuPolicy | None,
    stats: dict[str, int],
) -> Callable[[str], tuple[int, NodeResult] | None]:
    """The engine's resolver without any cache: every filter and score runs for every node."""

    def resolve(name: str) -> tuple[int, NodeResult] | None:
        entry = entries.get(name)
        if entry is None:
            return None
        state = entry[0]
        assert state.info is not None
        reasons = static_filter(state.info, spec)
        if reasons:
            return state.version, NodeResult(feasible=False, reasons=reasons)
        stats["evaluations"] += 1
        return state.version, evaluate(config, state, spec, policy)

    return resolve
