"""The feasible-node budget: how many feasible nodes a pod's placement looks for, and where it starts looking.

kube-scheduler's ``percentageOfNodesToScore``: the scheduler stops filtering once it has found that share of the
cluster's nodes feasible and scores only those. ``100`` scores every node (Allot's default, the exhaustive
ranking of ``_index``); ``0`` is upstream's adaptive share, ``50 % - nodes/125`` with a floor of 5 %; a cluster of
fewer than 100 nodes, or a budget below 100 nodes, is searched for at least 100 (``nodes_to_find``).

Determinism: kube-scheduler rotates its start index through the node list from one cycle to the next. Here the start
is derived from the pod's identity and the config's seed (``start_index``) and the nodes are walked in name order,
so which nodes a pod examines depends only on the cluster's nodes and the pod, never on what was scheduled before,
on time or on randomness: a rebuilt or replaying engine examines the same nodes and re-derives the same choice.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable

from allot_placement._index import Entry, ShapeIndex
from allot_placement.config import PlacementConfig
from allot_placement.evaluate import NodeResult

__all__ = ["MIN_FEASIBLE_NODES", "budgeted_index", "nodes_to_find", "start_index"]

MIN_FEASIBLE_NODES = 100  # kube-scheduler's minFeasibleNodesToFind
MIN_PERCENTAGE = 5  # the adaptive share's floor (minFeasibleNodesPercentageToFind)
ADAPTIVE_BASE = 50
ADAPTIVE_NODES_PER_POINT = 125


def nodes_to_find(percentage: int, total: int) -> int:
    """How many feasible nodes to find among ``total`` (kube-scheduler's ``numFeasibleNodesToFind``)."""
    if total < MIN_FEASIBLE_NODES or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(ADAPTIVE_BASE - total // ADAPTIVE_NODES_PER_POINT, MIN_PERCENTAGE)
    return max(total * percentage // 100, MIN_FEASIBLE_NODES)


def start_index(pod: str, seed: int, total: int) -> int:
    """Where the walk over the name-ordered nodes starts for ``pod`` (a pure function of its key and the seed)."""
    if total <= 0:
        return 0
    h = hashlib.blake2b(f"{seed}\x00{pod}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") % total


def budgeted_index(
    order: list[str],
    pod: str,
    config: PlacementConfig,
    result_of: Callable[[str], tuple[int, NodeResult] | None],
) -> ShapeIndex:
    """A ranking of the nodes ``pod`` examines: ``order`` (the live nodes in name order) walked from its start until
    the budget of feasible nodes is found, or every node when fewer are feasible (so an unschedulable pod's
    explanation still covers every node)."""
    total = len(order)
    want = nodes_to_find(config.percentage_of_nodes_to_score, total)
    start = start_index(pod, config.seed, total)
    feasible: dict[str, Entry] = {}
    infeasible: dict[str, tuple[int, NodeResult]] = {}
    for name in order[start:] + order[:start]:
        got = result_of(name)
        if got is None:
            continue
        version, res = got
        if not res.feasible:
            infeasible[name] = got
        else:
            feasible[name] = (-res.score, name, version)
            if len(feasible) >= want:
                break
    idx = ShapeIndex(0)
    idx.feasible = feasible
    idx.heap = list(feasible.values())
    heapq.heapify(idx.heap)
    if not feasible:  # the explanation of an unschedulable pod: every node's reasons
        idx.update(infeasible, infeasible.get)
    return idx
