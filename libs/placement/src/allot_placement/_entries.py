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

from allot_placement.device_view import device_ids
from allot_placement.state import NodeState

__all__ = ["Entries", "Entry", "WithIdentity"]

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
