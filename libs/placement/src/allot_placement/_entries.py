"""The engine's node entries, and the view of them a pod that reads per-node identities gets.

An entry is what the engine's resolver reads of a node: its state, its content signature (shared by identical
machines), its device signature, its label id and whether it carries taints. Most pods read only a node's content, so
identical machines share every cached result; a pod whose filters read the node's device ids (HAMi's UUID selectors)
or whose GPU policy reads its name sees the entries through ``WithIdentity``, where those identities join both
signatures, so its results are kept per node. The common path pays nothing for the rare one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from allot_placement.config import PlacementConfig
from allot_placement.device_view import device_ids
from allot_placement.devices import DeviceMemo
from allot_placement.evaluate import GpuPolicy, NodeResult, evaluate, infeasible_result, static_filter
from allot_placement.pod import PodSpec
from allot_placement.state import NodeState

__all__ = ["Entries", "Entry", "Memos", "WithIdentity", "fresh_resolver", "memo_resolvers"]

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
            return state.version, infeasible_result(reasons)
        stats["evaluations"] += 1
        return state.version, evaluate(config, state, spec, policy)

    return resolve


_PASS = NodeResult(feasible=True)  # static-filter memo marker: the node passes


class Memos(NamedTuple):
    """The engine's memos a resolver reads and fills: static filters by (label id, pod key, name), results by (node
    signature, pod key), the free-resource index's admission by (node signature, pod key) (``False``, or ``True``,
    or once the result of an admitted node that needs no static filter is known, that result: one lookup for both),
    and the device memo."""

    static: dict[Any, NodeResult]
    results: dict[Any, NodeResult]
    admitted: dict[Any, bool | NodeResult]
    devices: DeviceMemo


def memo_resolvers(
    entries: dict[str, Entry],
    spec: PodSpec,
    admits: Callable[[str], bool] | None,
    memos: Memos,
    config: PlacementConfig,
    policy: GpuPolicy | None,
    stats: dict[str, int],
    intern: Callable[[Any], int],
) -> tuple[
    Callable[[str], tuple[int, NodeResult] | None], Callable[[str], tuple[int, NodeResult] | None] | None
]:
    """The engine's memoised resolver of ``spec`` (``name -> (version, result)``: static filters then the resource
    side) and, with ``admits`` (the free-resource index's test of the pod's need), the same resolver for the nodes it
    admits, ``None`` for the others: what a ranking catching up evaluates. The test is memoised by node signature and
    pod key."""
    view: Entries = entries
    static_memo, memo, admit_memo, dev_memo = memos
    key, by_name = spec.key, spec.by_name
    needs_static = (
        bool(spec.node_selector)
        or spec.affinity is not None
        or bool(spec.node_name)
        or spec.required_nodes is not None
    )
    # per-node identities this pod's filters or the policy's choice read join the node's signatures
    ids = spec.reads_device_ids
    named = policy is not None and policy.reads_node_name(spec)
    if ids or named:
        view = WithIdentity(entries, intern, ids=ids, named=named)

    def result(entry: Entry, name: str) -> tuple[int, NodeResult]:
        state, sig, dev_sig, label_id, restrictive = entry
        if needs_static or restrictive:
            skey = (label_id, key, name if by_name else "")
            st = static_memo.get(skey)
            if st is None:
                assert state.info is not None
                reasons = static_filter(state.info, spec)
                st = static_memo[skey] = infeasible_result(reasons) if reasons else _PASS
            if st is not _PASS:
                return state.version, st
        res = memo.get((sig, key))
        if res is None:
            stats["evaluations"] += 1
            res = memo[(sig, key)] = evaluate(config, state, spec, policy, dev_memo, dev_sig)
        return state.version, res

    def resolve(name: str) -> tuple[int, NodeResult] | None:
        entry = view.get(name)
        return None if entry is None else result(entry, name)

    if admits is None:
        return resolve, None

    def admitted(name: str) -> tuple[int, NodeResult] | None:
        entry = view.get(name)
        if entry is None:
            return None
        akey = (entry[1], key)
        ok = admit_memo.get(akey)
        if ok is None:
            ok = admit_memo[akey] = admits(name)
        if ok is False:
            return None
        if needs_static or entry[4]:
            return result(entry, name)
        if ok is True:  # the common path of ``result``, inline, its result kept with the admission
            res = memo.get(akey)
            got = (entry[0].version, res) if res is not None else result(entry, name)
            admit_memo[akey] = got[1]
            return got
        return entry[0].version, ok

    return resolve, admitted
