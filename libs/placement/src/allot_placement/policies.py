"""Cluster-level GPU placement policies: FGD and the baselines of the FGD paper, as engine score plugins.

Each policy scores every node that passed the filters (for every pod, GPU or not) and, for a pod sharing one GPU,
chooses which GPU (``chooser``). They replace the DeviceShare score; NodeResourcesFit/NUMA weights default to 0
under these presets, so a policy decides alone, as in the paper's simulator (one score plugin). Definitions follow
the paper's simulator (milli-GPU, ``MaxSpecCpu`` 128 cores, ``MaxSpecGpu`` 8 GPUs); every score is computed in
integers (or exact fractions) so decisions are identical on every platform:

- ``fgd``: ``int(100 * sigmoid(ΔF / 1000))`` with ΔF the fall of the node's fragmentation (``fragmentation``);
  shared GPU: the GPU with the best score, lowest minor on ties.
- ``bestfit``: ``int(100 * (1 - (½·cpu_left'/128000 + ½·gpu_left'/8000)))`` after placement.
- ``dotproduct``: ``int(100 * (1 - ½·(cpu_left·cpu_req/128000² + gpu_left·gpu_req/8000²)))``.
- ``gpupacking``: shared GPUs first (100 − left/10), then free GPUs on used nodes (50 − GPUs), then idle nodes.
- ``gpuclustering``: nodes already running pods of the same GPU shape first, then by GPU used.
- ``random``: a uniformly random feasible node and GPU, from a hash of (seed, pod, node) — history independent.
Baselines pick the best-fit GPU (least leftover that fits) for shared requests, ``random`` a random one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from allot_contracts.objects import names as n
from allot_placement.config import PlacementConfig
from allot_placement.device_view import TypeView, fits
from allot_placement.devices import DeviceResult, GpuChooser
from allot_placement.fragmentation import MILLI, FragModel
from allot_placement.pod import PodSpec
from allot_placement.state import NodeState

__all__ = ["BasePolicy", "KeyedChoice", "keyed_hash", "make_policy", "node_gpu_state"]

MAX_CPU, MAX_GPU = 128_000, 8_000
_CACHE_LIMIT = 200_000


def _left_milli(total: dict[str, int], used: dict[str, int]) -> int:
    vals = [max(total[r] - used.get(r, 0), 0) * 10 for r in (n.GPU_MEMORY_RATIO, n.GPU_CORE) if total.get(r)]
    return min(vals) if vals else 0


def node_gpu_state(state: NodeState) -> tuple[str, int, tuple[int, ...], tuple[int, ...]]:
    """(GPU model, cpu left in milli, per-GPU milli left by minor, minors) of a node."""
    info, inv = state.info, state.inventory
    labels = info.labels if info is not None else {}
    model = labels.get(n.LABEL_GPU_MODEL) or (
        inv.labels.get(n.LABEL_GPU_MODEL, "") if inv is not None else ""
    )
    cpu_left = (info.allocatable.get(n.CPU, 0) if info is not None else 0) - state.requested.get(n.CPU, 0)
    gpus = inv.devices.get(n.GPU, ()) if inv is not None else ()
    used = state.dev_used.get(n.GPU, {})
    lefts = tuple(_left_milli(d.resources, used.get(d.minor, {})) for d in gpus)
    return model, cpu_left, lefts, tuple(d.minor for d in gpus)


def _pod_milli(pod: PodSpec) -> tuple[int, int]:
    """(GPU count, milli per GPU) of a pod (0, 0 for CPU-only pods)."""
    req = pod.devices.get(n.GPU)
    if req is None:
        return 0, 0
    per = req.per_instance
    pct = per.get(n.GPU_MEMORY_RATIO, per.get(n.GPU_CORE, 100))
    return req.count, pct * 10


def _after(lefts: tuple[int, ...], minors: tuple[int, ...], devices: DeviceResult) -> tuple[int, ...]:
    out = list(lefts)
    index = {m: i for i, m in enumerate(minors)}
    for minor, res, _ in devices.get(n.GPU, []):
        i = index.get(minor)
        if i is not None:
            pct = res.get(n.GPU_MEMORY_RATIO, res.get(n.GPU_CORE, 100))
            out[i] = max(out[i] - pct * 10, 0)
    return tuple(out)


class BasePolicy:
    """Shared plumbing: per-node GPU state cache and the best-fit GPU choice.

    What the engine's caches need to know (they key node results by the node's content, shared by identical nodes):
    ``reads_node_name(pod)`` says the policy's choice for ``pod`` reads the node's name, ``state_key(state)`` gives
    what its score reads of the node beyond the allocation totals (``NodeState.dyn_key``). ``caches=False`` turns the
    policy's own memo tables off (tests compare decisions with and without them)."""

    name = "Policy"
    device_cacheable = True  # the GPU choice reads only the node's devices (and the pod's device request)

    def __init__(self, cfg: PlacementConfig, caches: bool = True) -> None:
        self.cfg = cfg
        self.caches = caches
        self._states: dict[tuple[str, int], tuple[str, int, tuple[int, ...], tuple[int, ...]]] = {}

    def reads_node_name(self, pod: PodSpec) -> bool:
        return False

    def state_key(self, state: NodeState) -> object:
        return None

    def node(self, state: NodeState) -> tuple[str, int, tuple[int, ...], tuple[int, ...]]:
        if (
            not self.caches or state.version < 0
        ):  # a copy the engine does not track (reservations) is not kept
            return node_gpu_state(state)
        key = (state.name, state.version)
        got = self._states.get(key)
        if got is None:
            if len(self._states) > _CACHE_LIMIT:
                self._states.clear()
            got = self._states[key] = node_gpu_state(state)
        return got

    def gpu_score(self, state: NodeState, pod: PodSpec, index: int, lefts: tuple[int, ...]) -> Any:
        """Preference of GPU ``index`` for a shared request (higher is better); default best fit."""
        return -lefts[index]

    def chooser(self, state: NodeState, pod: PodSpec) -> GpuChooser | None:
        def choose(view: TypeView, per: dict[str, int]) -> int | None:
            _, _, lefts, minors = self.node(state)
            best: tuple[Any, int] | None = None
            for i, minor in enumerate(minors):
                if minor not in view.free or not fits(per, view.free[minor]):
                    continue
                s = self.gpu_score(state, pod, i, lefts)
                if best is None or s > best[0]:
                    best = (s, minor)
            return best[1] if best is not None else None

        return choose

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        raise NotImplementedError


class FGD(BasePolicy):
    name = "FGD"
    device_cacheable = False  # the GPU choice also reads the node's free CPU

    def __init__(self, cfg: PlacementConfig, caches: bool = True) -> None:
        super().__init__(cfg, caches)
        self.model = FragModel(cfg.typical_pods)
        self._frag: dict[tuple[str, int, tuple[int, ...]], int] = {}

    def frag(self, model: str, cpu_left: int, lefts: Sequence[int]) -> int:
        key = (model, cpu_left, tuple(sorted(lefts)))
        if not self.caches:
            return self.model.frag(model, cpu_left, key[2])
        got = self._frag.get(key)
        if got is None:
            if len(self._frag) > _CACHE_LIMIT:
                self._frag.clear()
            got = self._frag[key] = self.model.frag(model, cpu_left, key[2])
        return got

    def _delta(self, state: NodeState, pod: PodSpec, lefts_after: tuple[int, ...]) -> int:
        model, cpu_left, lefts, _ = self.node(state)
        cpu = pod.requests.get(n.CPU, 0)
        return self.frag(model, cpu_left, lefts) - self.frag(model, cpu_left - cpu, lefts_after)

    def gpu_score(self, state: NodeState, pod: PodSpec, index: int, lefts: tuple[int, ...]) -> Any:
        _, milli = _pod_milli(pod)
        after = list(lefts)
        after[index] -= milli
        return self.model.score(self._delta(state, pod, tuple(after)))

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        _, _, lefts, minors = self.node(state)
        return self.model.score(self._delta(state, pod, _after(lefts, minors, devices)))


class BestFit(BasePolicy):
    name = "BestFit"

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        _, cpu_left, lefts, _ = self.node(state)
        count, milli = _pod_milli(pod)
        frac = Fraction(cpu_left - pod.requests.get(n.CPU, 0), 2 * MAX_CPU) + Fraction(
            sum(lefts) - count * milli, 2 * MAX_GPU
        )
        return int(100 * (1 - frac))


class DotProduct(BasePolicy):
    name = "DotProduct"

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        _, cpu_left, lefts, _ = self.node(state)
        count, milli = _pod_milli(pod)
        dot = Fraction(cpu_left * pod.requests.get(n.CPU, 0), MAX_CPU * MAX_CPU) + Fraction(
            sum(lefts) * count * milli, MAX_GPU * MAX_GPU
        )
        return int(100 * (1 - dot / 2))


class GpuPacking(BasePolicy):
    name = "GpuPacking"

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        count, milli = _pod_milli(pod)
        if not count:
            return 0
        _, _, lefts, _ = self.node(state)
        free = sum(1 for left in lefts if left == MILLI)
        if free == len(lefts):
            return max(100 // 3 - free, free)
        need, free_used, used_lefts = count, 0, []
        for left in sorted(lefts):
            if need and milli <= left:
                need -= 1
                used_lefts.append(left)
                free_used += left == MILLI
        if need:
            return 0
        if free_used:
            return max(100 // 2 - free_used, 100 // 3)
        return max(100 - sum(left * 100 // MILLI for left in used_lefts) // 10, 100 // 2)


def _affinity(count: int, milli: int) -> str:
    if count == 0:
        return ""
    return "share" if count == 1 and milli < MILLI else f"{count}-gpu"


def _tags(state: NodeState) -> frozenset[str]:
    """The GPU shapes of the pods on a node."""
    tags: set[str] = set()
    for alloc in state.pods.values():
        gpus = alloc.devices.get(n.GPU, ())
        if gpus:
            pct = gpus[0].resources.get(n.GPU_MEMORY_RATIO, gpus[0].resources.get(n.GPU_CORE, 100))
            tags.add(_affinity(len(gpus), pct * 10))
    return frozenset(tags)


class GpuClustering(BasePolicy):
    name = "GpuClustering"

    def state_key(self, state: NodeState) -> object:
        return tuple(sorted(_tags(state)))  # the score reads the GPU shapes of the pods on the node

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        tag = _affinity(*_pod_milli(pod))
        if not tag:
            return 0
        _, _, lefts, _ = self.node(state)
        tags = _tags(state)
        base = 100 // 4 * (MAX_GPU - sum(lefts)) // MAX_GPU
        if tag in tags:
            return base + (100 * 3 // 4 if len(tags) == 1 else 100 * 2 // 4)
        return base + (100 // 4 if not tags else 0)


_M64 = (1 << 64) - 1


def keyed_hash(*parts: object) -> int:
    """A 64-bit hash of ``parts`` (blake2b): stable across processes and platforms."""
    data = "/".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class KeyedChoice:
    """Pick one of many names uniformly at random, keyed by (seed, pod): pure, history independent, fast."""

    __slots__ = ("_names", "caches", "seed")

    def __init__(self, seed: int, caches: bool = True) -> None:
        self.seed = seed
        self.caches = caches  # keep each node's hash (pure: keyed by the name alone)
        self._names: dict[str, int] = {}

    def pick(self, pod: str, names: Sequence[str]) -> str:
        pk = keyed_hash(self.seed, "pod", pod)
        best: tuple[int, str] | None = None
        for name in names:
            nk = self._names.get(name)
            if nk is None:
                nk = keyed_hash(self.seed, "node", name)
                if self.caches:
                    self._names[name] = nk
            x = ((nk ^ pk) * 0x9E3779B97F4A7C15) & _M64
            x ^= x >> 29
            x = (x * 0xBF58476D1CE4E5B9) & _M64
            x ^= x >> 32
            if best is None or (x, name) < best:
                best = (x, name)
        assert best is not None
        return best[1]


class Random(BasePolicy):
    """Uniform random choices from a keyed hash: the same inputs always give the same choice."""

    name = "Random"

    def __init__(self, cfg: PlacementConfig, caches: bool = True) -> None:
        super().__init__(cfg, caches)
        self.keyed = KeyedChoice(cfg.seed, caches)

    def _h(self, *parts: object) -> int:
        return keyed_hash(self.cfg.seed, *parts)

    def reads_node_name(self, pod: PodSpec) -> bool:
        return pod.gpu_shared  # the GPU of a shared request is keyed by the node's name (gpu_score)

    def gpu_score(self, state: NodeState, pod: PodSpec, index: int, lefts: tuple[int, ...]) -> Any:
        return -self._h("gpu", state.name, lefts, pod.dev_key, index)

    def score(self, state: NodeState, pod: PodSpec, devices: DeviceResult) -> int | None:
        return 0

    def pick(self, pod: str, candidates: list[str]) -> str | None:
        """The node for ``pod`` among the feasible ``candidates``."""
        return self.keyed.pick(pod, candidates) if candidates else None


_POLICIES: dict[str, type[BasePolicy]] = {
    "fgd": FGD,
    "bestfit": BestFit,
    "dotproduct": DotProduct,
    "gpupacking": GpuPacking,
    "gpuclustering": GpuClustering,
    "random": Random,
}


def make_policy(cfg: PlacementConfig, caches: bool = True) -> BasePolicy:
    return _POLICIES[cfg.gpu_policy](cfg, caches)
