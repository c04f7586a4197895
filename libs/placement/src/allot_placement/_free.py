"""An index of the nodes over their free resources: the candidates a pod shape's ranking evaluates.

Design: for every live node the index keeps, per tracked resource (CPU, memory, GPU core, GPU memory ratio, GPU
memory, whole NVIDIA GPUs), the node's free amount ``allocatable - requested`` in a power-of-two bucket, and two
device-shape dimensions: the largest core share free on one GPU, and how many GPUs have a whole card's share free.
A query for a pod picks the dimension whose buckets at or above the pod's need hold the fewest nodes, and walks
only those nodes, checking each with ``fits``: NodeResourcesFit's own test, and for a GPU request of ``count``
GPUs with core share ``s`` each, that ``count`` GPUs have ``s`` free. A node that fails either fails the pod
whatever else holds — NodeResourcesFit is the first resource-side filter (``evaluate._resource_fit``), and every
GPU allocator (``allocators``, the policies' choosers) takes only GPUs on which the request fits
(``device_view.fits`` over free = capacity - used) — so leaving it out changes no feasible set, no score and no
decision: the engine's rankings skip such nodes and evaluate them only when a pod turns out unschedulable, to
explain why (``ShapeIndex.complete``).

Invariants:
- Maintained on every node change (the engine's ``_touch``: allocation, release, Node, Device, overrides, load),
  so it always describes the current state; it is a cache of that state, never an input of a decision.
- ``candidates`` returns a set; the rankings order nodes by (score, name), so the walk order never matters.
- A node that lacks a device resource in its allocatable passes that resource (NodeResourcesFit skips device
  resources the node does not list), so it sits in an unbounded bucket.
"""

from __future__ import annotations

from collections.abc import Callable

from allot_contracts.objects import names as n
from allot_placement.evaluate import insufficient
from allot_placement.pod import PodSpec
from allot_placement.state import NodeState

__all__ = ["DIMENSIONS", "FreeIndex", "Need", "Room", "bucket", "fits", "gpu_free", "need", "room"]

DIMENSIONS = (n.CPU, n.MEMORY, n.GPU_CORE, n.GPU_MEMORY_RATIO, n.GPU_MEMORY, n.NVIDIA_GPU)
_MAX_SHARE = len(DIMENSIONS)  # the dimension of the largest free GPU core share on one GPU
_WHOLE = _MAX_SHARE + 1  # the dimension of the GPUs with a whole card's core share (100) free
_UNBOUNDED = 1 << 16  # the bucket of a resource the node (or GPU) does not list: no limit
_WHOLE_CORE = 100
_TRACKED = tuple((r, r in n.DEVICE_FAMILY_NAMES) for r in DIMENSIONS)
# a pod's requests in NodeResourcesFit order, and (count, core share per GPU) of its GPU request when it has one
Need = tuple[tuple[tuple[str, int], ...], tuple[int, int] | None]
# what ``fits`` reads of a node: the pods it still takes, its free amount per resource, ``gpu_free``
Room = tuple[int, dict[str, int], tuple[int, ...]]


def need(spec: PodSpec) -> Need:
    """What the index checks of a pod: its requests and, for a GPU request of a fixed count with a core share, the
    count and the share each GPU must have free (every GPU allocator takes only GPUs the request fits)."""
    gpu = spec.devices.get(n.GPU)
    share = gpu.per_instance.get(n.GPU_CORE, 0) if gpu is not None else 0
    return spec.fit_order, ((gpu.count, share) if gpu is not None and gpu.count > 0 and share > 0 else None)


def gpu_free(state: NodeState) -> tuple[int, ...]:
    """The free core share of each GPU of the node, largest first (a GPU that lists no core share: unbounded)."""
    inv = state.inventory
    if inv is None:
        return ()
    used = state.dev_used.get(n.GPU, {})
    out = []
    for d in inv.devices.get(n.GPU, ()):
        total = d.resources.get(n.GPU_CORE)
        out.append(_UNBOUNDED if total is None else max(total - used.get(d.minor, {}).get(n.GPU_CORE, 0), 0))
    return tuple(sorted(out, reverse=True))


def room(state: NodeState, gpus: tuple[int, ...]) -> Room:
    """What ``fits`` reads of a node, precomputed: the pods it still takes (a very large number when it sets no
    limit), its free amount ``allocatable - requested`` of every resource it lists or has requested (a device
    resource it does not list is left out: NodeResourcesFit skips it), and ``gpus``."""
    info = state.info
    assert info is not None
    alloc, used = info.allocatable, state.requested
    pods_cap = alloc.get(n.PODS)
    free = {r: cap - used.get(r, 0) for r, cap in alloc.items()}
    for r, v in used.items():
        if r not in alloc and r not in n.DEVICE_FAMILY_NAMES:
            free[r] = -v
    return (1 << 62) if pods_cap is None else pods_cap - len(state.pods), free, gpus


def bucket(free: int) -> int:
    """The power-of-two bucket of a free amount: ``free.bit_length()``, -1 for a negative amount."""
    return free.bit_length() if free >= 0 else -1


def fits(state: NodeState, gpus: tuple[int, ...], want: Need) -> bool:
    """NodeResourcesFit's test (``evaluate._resource_fit`` passes: the pod count and every request fit) and, for a
    GPU request, ``count`` GPUs with the share free among ``gpus`` (``gpu_free``)."""
    fit_order, gpu = want
    if gpu is not None and (len(gpus) < gpu[0] or gpus[gpu[0] - 1] < gpu[1]):
        return False
    info = state.info
    assert info is not None
    return next(insufficient(state, info, fit_order), None) is None


def _free_buckets(alloc: dict[str, int], used: dict[str, int]) -> list[int]:
    """The bucket of the node's free amount of each of ``DIMENSIONS`` (``bucket``, inline: a node change computes
    them all)."""
    out = []
    for r, device in _TRACKED:
        cap = alloc.get(r)
        if cap is None:
            if device:  # a device resource the node does not list: no limit
                out.append(_UNBOUNDED)
                continue
            cap = 0
        free = cap - used.get(r, 0)
        out.append(free.bit_length() if free >= 0 else -1)
    return out


class FreeIndex:
    """Live nodes by free amount per tracked resource (see the module docstring)."""

    __slots__ = ("buckets", "gpus", "room", "states", "where")

    def __init__(self) -> None:
        self.states: dict[str, NodeState] = {}
        self.gpus: dict[str, tuple[int, ...]] = {}  # name -> gpu_free
        self.room: dict[str, Room] = {}  # name -> what ``fits`` reads (``room``), computed when first read
        self.where: dict[str, tuple[int, ...]] = {}  # name -> its bucket per dimension
        self.buckets: tuple[dict[int, set[str]], ...] = tuple({} for _ in range(_WHOLE + 1))

    def __len__(self) -> int:
        return len(self.states)

    def update(self, name: str, state: NodeState | None) -> None:
        """The node changed (``state``) or went (``None``, or a state without a Node)."""
        old = self.where.pop(name, None)
        if state is None or state.info is None:
            if old is not None:
                self._move(name, old, None)
            self.states.pop(name, None)
            self.gpus.pop(name, None)
            self.room.pop(name, None)
            return
        self.states[name] = state
        gpus = self.gpus[name] = gpu_free(state)
        self.room.pop(name, None)  # computed when a test reads it (most tests are remembered by the engine)
        where = self.where[name] = (
            *_free_buckets(state.info.allocatable, state.requested),
            gpus[0] if gpus else -1,
            sum(1 for g in gpus if g >= _WHOLE_CORE),
        )
        if where != old:
            self._move(name, old, where)

    def _move(self, name: str, old: tuple[int, ...] | None, new: tuple[int, ...] | None) -> None:
        """The node leaves its ``old`` buckets and joins its ``new`` ones (only the dimensions that differ)."""
        for dim, per_dim in enumerate(self.buckets):
            was = old[dim] if old is not None else None
            now = new[dim] if new is not None else None
            if was == now:
                continue
            if was is not None:
                names = per_dim[was]
                names.discard(name)
                if not names:
                    del per_dim[was]
            if now is not None:
                per_dim.setdefault(now, set()).add(name)

    def _narrowest(self, want: Need) -> tuple[list[set[str]] | None, int]:
        """The buckets to walk for ``want`` (``None``: every node) and how many nodes they hold."""
        fit_order, gpu = want
        lows = [(DIMENSIONS.index(r), bucket(v)) for r, v in fit_order if v > 0 and r in DIMENSIONS]
        if gpu is not None:  # the largest free share on one GPU; with whole cards asked, how many are free
            lows.append((_MAX_SHARE, gpu[1]))
            if gpu[1] >= _WHOLE_CORE:
                lows.append((_WHOLE, gpu[0]))
        best: list[set[str]] | None = None
        best_size = len(self.states)
        for dim, low in lows:
            sets = [names for b, names in self.buckets[dim].items() if b >= low]
            size = sum(len(s) for s in sets)
            if size < best_size:
                best, best_size = sets, size
        return best, best_size

    def walk(self, want: Need) -> int:
        """How many nodes ``candidates(want)`` checks."""
        return self._narrowest(want)[1]

    def candidates(self, want: Need) -> list[str]:
        """The live nodes that pass ``fits`` for ``want`` (a pod's ``need``)."""
        check = self.admitter(want)
        return [name for name in self.walked(want) if check(name)]

    def walked(self, want: Need) -> list[str]:
        """The nodes ``candidates(want)`` checks: every node that may pass ``fits``, and others."""
        best, _ = self._narrowest(want)
        if best is None:
            return list(self.states)
        return [name for names in best for name in names]

    def admits(self, name: str, want: Need) -> bool:
        """The live node ``name`` passes ``fits`` for ``want``."""
        return self.admitter(want)(name)

    def admitter(self, want: Need) -> Callable[[str], bool]:
        """``name -> bool``: the live node passes ``fits`` for ``want``, read from its ``room``."""
        rooms, states, gpus_of, devices = self.room, self.states, self.gpus, n.DEVICE_FAMILY_NAMES
        fit_order, gpu = want
        count, share = gpu if gpu is not None else (0, 0)

        def check(name: str) -> bool:
            got = rooms.get(name)
            if got is None:
                state = states.get(name)
                if state is None:
                    return False
                got = rooms[name] = room(state, gpus_of[name])
            pods_left, free, gpus = got
            if count and (len(gpus) < count or gpus[count - 1] < share):
                return False
            if pods_left < 1:
                return False
            for r, v in fit_order:
                f = free.get(r)
                if f is None:
                    if r in devices:  # a device resource the node does not list: NodeResourcesFit skips it
                        continue
                    f = 0
                if v > f:
                    return False
            return True

        return check
