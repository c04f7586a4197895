"""Incremental per-pod-shape node rankings (the engine's speed-up; never a source of decisions).

Design: a pod's placement is ``argmax (score, -name)`` over feasible nodes, and a node's result depends only on the
node's state and the pod's decision-relevant fields (``PodSpec.key``). So for each pod key we keep a ``ShapeIndex``:
a max-heap of ``(-score, name, version)`` over feasible nodes (stale entries are dropped lazily by version), the
reasons of infeasible nodes with a histogram for the "0/N nodes are available" summary, and a position in the
engine's change log. Querying it re-evaluates only the nodes that changed since the last query of that key, or
rebuilds it from the free-resource index's candidates when more nodes changed than that rebuild checks (a shape
that recurs rarely would otherwise re-check up to every node). ``Rankings`` keeps them, least recently used first,
within a budget of entries held (nodes, heap entries and infeasible names, counted as they change).

Invariants:
- The ranking is a total order (score descending, then node name ascending), so the answer never depends on the
  order in which nodes were added, changed or re-evaluated: an index built from scratch and one maintained
  incrementally give the same best node. A test checks this against a naive full scan.
- Indexes are caches: dropping or rebuilding any of them (LRU eviction, change-log compaction, a rebuild that is
  cheaper than catching up) changes speed, never results. They hold node names, versions and scores, no
  signature, so they outlive the engine's memo resets.
- Once ``complete`` ran (an unschedulable pod's explanation), a ranking evaluates every changed node, so it stays
  complete: later explanations read its histogram and its name-ordered heap of infeasible nodes without visiting
  the cluster again.
- Nodes the free-resource index (``_free``) rejects fail NodeResourcesFit, so they are left out of the ranking
  unevaluated: the feasible set, and so every decision, is the same as with every node evaluated. Only an
  unschedulable pod's explanation reads the infeasible side; ``complete`` evaluates the left-out nodes first.

Rejected alternatives: scoring every node per pod (too slow for thousands of nodes in Python); normalising scores
across nodes like kube-scheduler (makes a node's score depend on all others, defeating incremental updates);
sampling a percentage of nodes (non-exhaustive, so explanations and results would depend on sampling).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator

from allot_placement._free import FreeIndex, Need
from allot_placement.evaluate import NodeResult
from allot_placement.reasons import Reason

__all__ = ["Entry", "Rankings", "ShapeIndex"]

Entry = tuple[int, str, int]  # (-score, name, version): a heap entry, ordered best first
_REBUILD_FLOOR = 64  # below this many changed nodes a ranking is always caught up


class ShapeIndex:
    __slots__ = ("codes", "counts", "feasible", "heap", "infeasible", "names", "pos", "whole")

    def __init__(self, pos: int) -> None:
        self.pos = pos
        self.heap: list[Entry] = []
        # name -> ``(-score, name, version)``: the node's score and its version when its current heap entry was
        # pushed (kept while its score holds or falls). Usually that heap entry itself, one tuple for both (the
        # rankings' largest part). The entry ranks the node at its score or higher: a score that falls gets a tuple
        # of its own here, leaving the entry in place, and ``top`` moves the node down to it when the entry surfaces
        # (a node changes many times between its visits to the top); a score that rises pushes a new entry at once.
        self.feasible: dict[str, Entry] = {}
        self.infeasible: dict[str, tuple[Reason, ...]] = {}
        self.names: list[str] = []  # min-heap of the infeasible names (stale entries dropped lazily)
        self.counts: dict[str, int] = {}
        self.codes: dict[str, str] = {}
        self.whole = False  # every live node is ranked (``complete`` ran): changes are evaluated unfiltered

    def __len__(self) -> int:
        return len(self.feasible) + len(self.infeasible)

    def held(self) -> int:
        """Entries this ranking holds (nodes, heap entries, infeasible names): what ``Rankings`` budgets."""
        return len(self.feasible) + len(self.infeasible) + len(self.heap) + len(self.names)

    def update(
        self,
        names: Iterable[str],
        result_of: Callable[[str], tuple[int, NodeResult] | None],
        admits: Callable[[str], bool] | None = None,
    ) -> None:
        """Re-evaluate ``names``; ``result_of`` gives ``(version, result)`` or ``None`` for a node that is gone.
        ``admits`` (the free-resource index, ``_free``): a node it rejects cannot fit, so it is left unevaluated
        (``complete`` evaluates such nodes when an explanation needs them; after it, every node is evaluated)."""
        if self.whole:
            admits = None
        feasible, infeasible, counts, codes = self.feasible, self.infeasible, self.counts, self.codes
        heap, push = self.heap, heapq.heappush
        for name in names:
            old = infeasible.pop(name, None) if infeasible else None
            got = None if admits is not None and not admits(name) else result_of(name)
            if got is not None and got[1].feasible:  # the common case first
                version, res = got
                score = res.score
                if old is None:  # then it may be ranked already
                    cur = feasible.get(name)
                    if cur is not None and -cur[0] >= score:
                        if -cur[0] != score:  # its heap entry, pushed at ``cur[2]``, ranks it too high
                            feasible[name] = (-score, name, cur[2])  # ``top`` moves it down when it surfaces
                        continue
                entry = feasible[name] = (-score, name, version)
                push(heap, entry)
            else:
                if old is None:
                    feasible.pop(name, None)
                if got is not None:
                    reasons = infeasible[name] = got[1].reasons
                    if old is not None:
                        if old == reasons:  # counted already, and the name is in ``names`` already
                            continue
                    else:
                        push(self.names, name)
                    for msg, code in reasons:
                        counts[msg] = counts.get(msg, 0) + 1
                        codes[msg] = code
            if old is not None:
                for msg, _ in old:
                    c = counts[msg] - 1
                    if c:
                        counts[msg] = c
                    else:
                        del counts[msg]
        if len(self.heap) > 2 * len(self.feasible) + 64:
            self.heap = list(self.feasible.values())
            heapq.heapify(self.heap)
        if len(self.names) > 2 * len(self.infeasible) + 64:
            self.names = list(self.infeasible)
            heapq.heapify(self.names)

    def build(self, names: Iterable[str], result_of: Callable[[str], tuple[int, NodeResult] | None]) -> None:
        """Rank ``names`` into this new, empty ranking: ``update`` with its heaps made once at the end."""
        feasible, infeasible, counts, codes = self.feasible, self.infeasible, self.counts, self.codes
        for name in names:
            got = result_of(name)
            if got is None:
                continue
            version, res = got
            if res.feasible:
                feasible[name] = (-res.score, name, version)
            elif name not in infeasible:
                reasons = infeasible[name] = res.reasons
                for msg, code in reasons:
                    counts[msg] = counts.get(msg, 0) + 1
                    codes[msg] = code
        self.heap = list(feasible.values())
        heapq.heapify(self.heap)
        self.names = list(infeasible)
        heapq.heapify(self.names)

    def pending(self, changes: list[str], start: int, walk: Callable[[], int] | None) -> list[str] | None:
        """The distinct nodes of ``changes[start:]`` (the change log since this ranking's position), or ``None``
        when rebuilding the ranking from the free-resource index is cheaper: more nodes changed than the
        ``walk()`` nodes a rebuild checks (a ranking that ranks every node, ``whole``, is always caught up)."""
        names = list(dict.fromkeys(changes[start:]))
        if walk is not None and not self.whole and len(names) > _REBUILD_FLOOR and len(names) >= walk():
            return None
        return names

    def complete(
        self, live: Iterable[str], result_of: Callable[[str], tuple[int, NodeResult] | None]
    ) -> None:
        """Evaluate the ``live`` nodes left unevaluated (those the free-resource index rejected), so that the
        reasons and their histogram cover every node, as a ranking without that index has them."""
        if self.whole:  # kept complete by ``update`` since
            return
        feasible, infeasible = self.feasible, self.infeasible
        self.update([name for name in live if name not in infeasible and name not in feasible], result_of)
        self.whole = True

    def top(self, k: int) -> list[tuple[str, int]]:
        """The ``k`` best feasible nodes as ``(name, score)``, best first."""
        heap, feasible, pop = self.heap, self.feasible, heapq.heappop
        out: list[Entry] = []
        while heap and len(out) < k:
            entry = heap[0]
            cur = feasible.get(entry[1])
            if cur is None or cur[2] != entry[2]:
                pop(heap)  # stale
            elif cur is not entry and cur[0] != entry[0]:  # its score fell since the entry was pushed
                heapq.heapreplace(heap, cur)
            elif len(out) == k - 1:  # the last one wanted stays in place
                out.append(entry)
                break
            else:
                out.append(pop(heap))
        for entry in out[: k - 1]:
            heapq.heappush(heap, entry)
        return [(name, -neg) for neg, name, _ in out]

    def score(self, name: str) -> int:
        """A feasible node's score."""
        return -self.feasible[name][0]

    def scores(self) -> Iterator[tuple[str, int]]:
        """Every feasible node with its score, in no particular order."""
        for neg, name, _ in self.feasible.values():
            yield name, -neg

    def first_infeasible(self, k: int) -> list[tuple[str, tuple[Reason, ...]]]:
        """The ``k`` first infeasible nodes in name order, with their reasons."""
        names, infeasible = self.names, self.infeasible
        out: list[str] = []
        while names and len(out) < k:
            name = heapq.heappop(names)
            if name in infeasible and (not out or out[-1] != name):  # copies of a name pop one after another
                out.append(name)
        for name in out:
            heapq.heappush(names, name)
        return [(name, infeasible[name]) for name in out]


class Rankings:
    """The engine's rankings by pod key, least recently used first, within ``budget`` entries held in all.
    ``held`` is kept as rankings are built, caught up and dropped, so the bound costs nothing per pod."""

    __slots__ = ("budget", "by_key", "held")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.by_key: OrderedDict[bytes, ShapeIndex] = OrderedDict()
        self.held = 0

    def __len__(self) -> int:
        return len(self.by_key)

    def clear(self) -> None:
        self.by_key.clear()
        self.held = 0

    def complete(
        self,
        key: bytes,
        idx: ShapeIndex,
        live: Iterable[str],
        result_of: Callable[[str], tuple[int, NodeResult] | None],
    ) -> None:
        """``idx.complete`` (the explanation of an unschedulable pod), counting what it adds when it is ours."""
        before = idx.held()
        idx.complete(live, result_of)
        if self.by_key.get(key) is idx:
            self.held += idx.held() - before

    def ranking(
        self,
        key: bytes,
        log: tuple[list[str], int],
        free: tuple[FreeIndex, Need] | None,
        result_of: Callable[[str], tuple[int, NodeResult] | None],
        live: Callable[[], list[str]],
        admitted: Callable[[str], tuple[int, NodeResult] | None] | None = None,
    ) -> ShapeIndex:
        """The ranking of pod key ``key``, current with the change ``log`` (its entries and the position of its
        first one): caught up on the nodes changed since its last use, or (re)built from ``free``'s candidates
        for the pod's need (``live()``, every live node, without that index) when it has none, its position was
        compacted away or more nodes changed than a rebuild checks. ``admitted``: ``result_of`` for the nodes
        ``free`` admits for the pod's need, ``None`` for the others (the caller may memoise that test); without
        it, the ranking asks ``free`` itself."""
        changes, base = log
        end = base + len(changes)
        idx, names, admits, walk = self.by_key.pop(key, None), None, None, None
        if free is not None:
            index, want = free
            admits, walk = index.admitter(want) if admitted is None else None, lambda: index.walk(want)
        if idx is not None:
            self.held -= idx.held()
            if idx.pos >= base:
                names = idx.pending(changes, idx.pos - base, walk)
        if idx is None or names is None:
            idx = ShapeIndex(end)
            if free is not None and admitted is not None:  # the nodes it may admit, tested when evaluated
                idx.build(free[0].walked(free[1]), admitted)
            else:  # the candidates need no further check
                idx.build(free[0].candidates(free[1]) if free is not None else live(), result_of)
        elif free is not None and admitted is not None and not idx.whole:
            idx.update(names, admitted)
        else:
            idx.update(names, result_of, admits)
        idx.pos = end
        self.by_key[key] = idx
        self.held += idx.held()
        while self.held > self.budget and len(self.by_key) > 1:
            self.held -= self.by_key.popitem(last=False)[1].held()
        return idx
