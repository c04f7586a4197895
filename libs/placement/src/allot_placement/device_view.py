"""The candidate devices of one type on one node, and device scoring.

Responsibility: given a node's inventory and usage, a device hint (selector, exclusive policy) and an optional NUMA
affinity, compute the ``TypeView`` the allocators work on: candidate minors with their capacity and free amount, the
"really used" minors (used, or filtered out) that partition and topology logic avoid, and the scorer.

Semantics:
- Fit is Kubernetes ``LessThanOrEqual(request, free)`` (only dimensions the device lists are compared; quirk #10
  kept) and a device with nothing free is never a candidate.
- ``score_device`` is Koordinator's scorer with correct argument order (our decision 3): MostAllocated prefers the
  device that is most used after placing the request, LeastAllocated the least used.
- ``exclusivePolicy: PCIeLevel`` (our decision 1) keeps only devices on PCIe switches where no pod holds a device of
  this type; ``DeviceLevel`` keeps only completely unused devices.
Pure over its inputs.
"""

from __future__ import annotations

from collections.abc import Mapping

from allot_contracts.objects import names as n
from allot_contracts.objects.annotations import DeviceHint
from allot_contracts.objects.inventory import Device, Inventory
from allot_contracts.objects.pod import GpuFilter
from allot_contracts.objects.selectors import match_label_selector

__all__ = ["Scorer", "TypeView", "complete_gpu", "device_ids", "fits", "make_view"]


class Scorer:
    """Device-level scoring with a strategy and per-resource weights (sorted, deterministic)."""

    __slots__ = ("most", "weights")

    def __init__(self, strategy: str, weights: tuple[tuple[str, int], ...]) -> None:
        self.most = strategy == "MostAllocated"
        self.weights = weights

    def score(self, req: Mapping[str, int], total: Mapping[str, int], free: Mapping[str, int]) -> int:
        num = den = 0
        for r, w in self.weights:
            t = total.get(r, 0)
            if t <= 0:
                continue
            f = free.get(r, 0)
            requested = t - f + req.get(r, 0) if t >= f else t
            if self.most:
                s = min(requested, t) * 100 // t
            else:
                s = (t - requested) * 100 // t if requested <= t else 0
            num += s * w
            den += w
        return num // den if den else 0


def fits(req: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """``LessThanOrEqual(req, free)`` and something is free."""
    any_free = False
    for k, v in free.items():
        if v > 0:
            any_free = True
        r = req.get(k)
        if r is not None and r > v:
            return False
    return any_free


def complete_gpu(per: Mapping[str, int], total: Mapping[str, int]) -> dict[str, int]:
    """Koordinator ``fillGPUTotalMem``: derive gpu-memory from the ratio (or the ratio from memory)."""
    out = dict(per)
    mem_total = total.get(n.GPU_MEMORY, 0)
    if mem_total > 0:
        if n.GPU_MEMORY_RATIO in out and n.GPU_MEMORY not in out:
            out[n.GPU_MEMORY] = out[n.GPU_MEMORY_RATIO] * mem_total // 100
        elif n.GPU_MEMORY in out and n.GPU_MEMORY_RATIO not in out:
            out[n.GPU_MEMORY_RATIO] = out[n.GPU_MEMORY] * 100 // mem_total
    return dict(sorted(out.items()))


class TypeView:
    """Candidate devices of one type (ordered by minor) with capacity and free amounts."""

    __slots__ = ("devices", "dtype", "free", "minors", "total", "used_minors", "vf_used")

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.devices: dict[int, Device] = {}
        self.minors: list[int] = []  # candidates, ascending
        self.total: dict[int, dict[str, int]] = {}
        self.free: dict[int, dict[str, int]] = {}
        self.used_minors: set[int] = set()
        self.vf_used: dict[int, frozenset[str]] = {}


def _hint_keeps(hint: DeviceHint, d: Device, in_use: bool, busy_pcie: set[str]) -> bool:
    if hint.selector and not match_label_selector(hint.selector, d.labels):
        return False
    if hint.exclusive_policy == "PCIeLevel" and d.pcie in busy_pcie:
        return False
    return not (hint.exclusive_policy == "DeviceLevel" and in_use)


def gpu_model(d: Device, inv: Inventory, node_labels: Mapping[str, str]) -> str:
    """A GPU's model as HAMi's type filters read it: the device's own label, else the Device object's or the
    node's ``node.koordinator.sh/gpu-model`` label."""
    return (
        d.labels.get("type")
        or d.labels.get("model")
        or d.labels.get(n.LABEL_GPU_MODEL)
        or inv.labels.get(n.LABEL_GPU_MODEL)
        or node_labels.get(n.LABEL_GPU_MODEL, "")
    )


def device_ids(inv: Inventory | None) -> tuple[str, ...]:
    """The node's device ids, by type and minor: what ``gpu_allowed``'s UUID selectors read of a node, and what the
    inventory's ``content_key`` leaves out (the engine keys results of pods with UUID selectors by them)."""
    if inv is None:
        return ()
    return tuple(d.id for devices in inv.devices.values() for d in devices)


def gpu_allowed(f: GpuFilter, d: Device, model: str) -> bool:
    """HAMi's ``nvidia.com/use-gputype|nouse-gputype`` (case-insensitive substring of the model) and
    ``use-gpuuuid|nouse-gpuuuid`` (the device id) filters."""
    upper = model.upper()
    if f.use_types and not any(t.upper() in upper for t in f.use_types):
        return False
    if any(t.upper() in upper for t in f.nouse_types):
        return False
    if f.use_uuids and d.id not in f.use_uuids:
        return False
    return d.id not in f.nouse_uuids


def make_view(
    inv: Inventory,
    dtype: str,
    used: Mapping[int, Mapping[str, int]],
    vf_used: Mapping[int, frozenset[str]],
    hint: DeviceHint | None,
    numa_mask: frozenset[int] | None,
    gpu_filter: GpuFilter | None = None,
    node_labels: Mapping[str, str] | None = None,
) -> TypeView:
    view = TypeView(dtype)
    devs = inv.devices.get(dtype, ())
    view.vf_used = dict(vf_used)
    busy_pcie: set[str] = set()
    if hint is not None and hint.exclusive_policy == "PCIeLevel":
        busy_pcie = {d.pcie for d in devs if any(v > 0 for v in used.get(d.minor, {}).values())}
    for d in devs:
        u = used.get(d.minor, {})
        in_use = any(v > 0 for v in u.values())
        keep = bool(d.resources) and (hint is None or _hint_keeps(hint, d, in_use, busy_pcie))
        if keep and gpu_filter is not None and dtype == n.GPU:
            keep = gpu_allowed(gpu_filter, d, gpu_model(d, inv, node_labels or {}))
        if keep and numa_mask is not None and d.numa >= 0 and d.numa not in numa_mask:
            keep = False
        if in_use or not keep:
            view.used_minors.add(d.minor)
        if not keep:
            continue
        view.devices[d.minor] = d
        view.minors.append(d.minor)
        view.total[d.minor] = d.resources
        view.free[d.minor] = {k: max(v - u.get(k, 0), 0) for k, v in d.resources.items()}
    return view
